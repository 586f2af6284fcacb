package loader_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/loader"
	"github.com/croupier-data/croupier/permutation"
)

// exampleTable creates a croupier table at uri whose column id holds 0..n-1,
// so that each row's id is also its row id.
func exampleTable(ctx context.Context, uri string, n int64) *table.Table {
	schema := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	for i := range n {
		b.Field(0).(*array.Int64Builder).Append(i)
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	r, err := array.NewRecordReader(schema, []arrow.RecordBatch{rec})
	if err != nil {
		log.Fatal(err)
	}
	t, err := table.Create(ctx, uri, r, table.WriteOptions{})
	if err != nil {
		log.Fatal(err)
	}
	return t
}

// The same global step holds the same rows at every world size: here 12 rows
// dealt from S = 4 streams of 3 rows, 4 rows per global step.
func ExampleNew() {
	ctx := context.Background()
	t := exampleTable(ctx, "mem://example-new/rows", 12)
	defer t.Close()
	order := permutation.Identity{N: t.NumRows()}

	for _, world := range []int64{1, 2, 4} {
		fmt.Printf("world size %d, step 1:", world)
		for rank := range world {
			l, err := loader.New(t, order, loader.Options{
				GlobalBatchSize: 4, NumSplits: 4, WorldSize: world, Rank: rank, DropLast: true,
			})
			if err != nil {
				log.Fatal(err)
			}
			ids, err := l.RowIDs(ctx, 0, 1)
			if err != nil {
				log.Fatal(err)
			}
			fmt.Printf(" rank %d %v", rank, ids)
			l.Close()
		}
		fmt.Println()
	}
	// Output:
	// world size 1, step 1: rank 0 [1 4 7 10]
	// world size 2, step 1: rank 0 [1 4] rank 1 [7 10]
	// world size 4, step 1: rank 0 [1] rank 1 [4] rank 2 [7] rank 3 [10]
}

// Two streams of 6 rows, 4 rows per global step: each step takes two cycles of
// both streams. Worker k of K makes steps t0+k, t0+k+K, …, so taking the
// workers' batches in turn gives the steps in order, as one stream would.
func ExampleLoader_Stream() {
	ctx := context.Background()
	t := exampleTable(ctx, "mem://example-stream/rows", 12)
	defer t.Close()

	l, err := loader.New(t, permutation.Identity{N: t.NumRows()}, loader.Options{
		GlobalBatchSize: 4, NumSplits: 2, Columns: []string{"id"}, DropLast: true,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	fmt.Println("steps per epoch:", l.StepsPerEpoch())

	// Resume at step 1 with two workers.
	for worker := range 2 {
		s, err := l.Stream(ctx, loader.StreamOptions{Epoch: 0, StartStep: 1, Worker: worker, NumWorkers: 2})
		if err != nil {
			log.Fatal(err)
		}
		for b, err := range s.All(ctx) {
			if err != nil {
				log.Fatal(err)
			}
			fmt.Printf("worker %d: step %d ids %v\n", worker, b.Step, b.Record.Column(0))
			b.Record.Release()
		}
		s.Close()
	}
	// Output:
	// steps per epoch: 3
	// worker 0: step 1 ids [2 8 3 9]
	// worker 1: step 2 ids [4 10 5 11]
}

// Open a table by URI and range over one epoch's batches; the loader owns
// the table it opened. Errors carry codes to branch on with errors.Is.
func ExampleOpen() {
	ctx := context.Background()
	exampleTable(ctx, "mem://example-open/rows", 6).Close()
	l, err := loader.Open(ctx, "mem://example-open/rows", loader.Options{GlobalBatchSize: 2, NumSplits: 1, DropLast: true})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	for b, err := range l.Batches(ctx, loader.StreamOptions{StartStep: 1}) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("step", b.Step, b.Record.Column(0))
		b.Record.Release()
	}
	_, err = loader.Open(ctx, "mem://example-open/missing", loader.Options{GlobalBatchSize: 2})
	fmt.Println("missing table is ErrNotFound:", errors.Is(err, errcode.ErrNotFound))
	// Output:
	// step 1 [2 3]
	// step 2 [4 5]
	// missing table is ErrNotFound: true
}

// A mixture of two tables, 3 to 1 at step 0 and 1 to 1 from step 4: each
// step names the source step that fills its slot, and a checkpoint taken
// after step 2 resumes with the same steps.
func ExampleMixture() {
	ctx := context.Background()
	var sources []loader.Source
	for _, name := range []string{"web", "code"} {
		t := exampleTable(ctx, "mem://example-mixture/"+name, 8)
		l, err := loader.New(t, permutation.Identity{N: t.NumRows()}, loader.Options{GlobalBatchSize: 2, DropLast: true})
		t.Close() // the loader holds the table
		if err != nil {
			log.Fatal(err)
		}
		defer l.Close()
		sources = append(sources, l)
	}
	m, err := loader.NewMixture(sources, loader.MixtureOptions{Seed: 7, Weights: []float64{3, 1},
		Schedule: []loader.MixturePoint{{Step: 4, Weights: []float64{1, 1}}}, OnExhausted: loader.ExhaustedCycle})
	if err != nil {
		log.Fatal(err)
	}
	deal := func(pos loader.MixturePosition, steps int) loader.MixturePosition {
		s, err := m.Stream(ctx, pos, loader.MixtureStreamOptions{})
		if err != nil {
			log.Fatal(err)
		}
		defer s.Close()
		for range steps {
			b, err := s.Next(ctx)
			if err != nil {
				log.Fatal(err)
			}
			sl := b.Slots[0]
			fmt.Printf("step %d: source %d epoch %d step %d, ids %v\n", b.Step, sl.Source, sl.Epoch, sl.Step, b.Records[0].Column(0))
			b.Records[0].Release()
			pos = b.Next
		}
		return pos
	}
	after := deal(m.Start(), 3)
	c, err := m.Checkpoint(after) // json.Marshal(c) is what Python's mix.state_dict() holds
	if err != nil {
		log.Fatal(err)
	}
	pos, err := m.Resume(ctx, c)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("resumed")
	deal(pos, 3)
	// Output:
	// step 0: source 0 epoch 0 step 0, ids [0 4]
	// step 1: source 0 epoch 0 step 1, ids [1 5]
	// step 2: source 0 epoch 0 step 2, ids [2 6]
	// resumed
	// step 3: source 1 epoch 0 step 0, ids [0 4]
	// step 4: source 0 epoch 0 step 3, ids [3 7]
	// step 5: source 0 epoch 1 step 0, ids [0 4]
}

// A follower deals a table that grows, round by round: here one version a
// round, steps of 4 rows, and the rows a round leaves past its last full
// step carried into the next. The stream ends once no version has landed
// for WaitTimeout.
func ExampleFollower() {
	ctx := context.Background()
	t := exampleTable(ctx, "mem://example-follow/rows", 6) // version 1: rows 0..5
	defer t.Close()
	f, err := loader.NewFollower(t, loader.Options{GlobalBatchSize: 4}, loader.FollowOptions{WaitTimeout: time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	s, err := f.Stream(ctx, f.Start(), 0, loader.StreamOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	for {
		b, err := s.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			log.Fatal(err)
		}
		r := s.Round()
		fmt.Printf("step %d: round %d of versions (%d, %d], %d rows of version %v, %d carried on\n",
			b.Step, r.Round, r.After, r.Version, b.Record.NumRows(), b.Record.Column(1).(*array.Int64).Value(0), len(r.Next().Carry))
		b.Record.Release()
	}
	fmt.Println("waited out:", s.FollowStats().WaitedOut)
	// Output:
	// step 0: round 0 of versions (0, 1], 4 rows of version 1, 2 carried on
	// waited out: true
}
