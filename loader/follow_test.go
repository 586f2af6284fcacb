package loader_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/arrow/memory/mallocator"

	"github.com/croupier-data/croupier/core/catalog"
	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/internal/s3test"
	"github.com/croupier-data/croupier/internal/seedtest"
	"github.com/croupier-data/croupier/internal/tabletest"
	"github.com/croupier-data/croupier/loader"
)

// growingTable creates a croupier table at a new folder whose versions add
// sizes[i] rows each (version 1 holds sizes[0]); row ids are the id column.
func growingTable(t testing.TB, sizes []int64) string {
	t.Helper()
	ctx := context.Background()
	uri := "file://" + t.TempDir()
	tb, err := table.Create(ctx, uri, tabletest.Reader(0, sizes[0]), table.WriteOptions{RowGroupRows: 16})
	if err != nil {
		t.Fatal(err)
	}
	tb.Close()
	appendRows(t, uri, sizes[0], sizes[1:])
	return uri
}

// appendRows appends versions of sizes rows each, row ids from start on.
func appendRows(t testing.TB, uri string, start int64, sizes []int64) {
	t.Helper()
	for _, n := range sizes {
		if _, err := table.Append(context.Background(), uri, tabletest.Reader(start, n), table.WriteOptions{RowGroupRows: 16}); err != nil {
			t.Error(err)
			return
		}
		start += n
	}
}

// followed is what a follow stream dealt: each global step's row ids and
// their versions, rank by rank in the order of the ranks' batches, and the
// round of each step.
type followed struct {
	ids      map[int64][]int64
	versions map[int64][]int64
	rounds   map[int64]loader.Round
	stats    loader.FollowStats
}

func newFollower(t testing.TB, uri string, opts loader.Options, fo loader.FollowOptions) *loader.Follower {
	t.Helper()
	tb, err := table.Open(context.Background(), uri)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	f, err := loader.NewFollower(tb, opts, fo)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// follow runs every rank of world and worker of workers from pos and
// startStep until the streams end, and merges their steps.
func follow(t testing.TB, uri string, opts loader.Options, fo loader.FollowOptions, world, workers int, pos *loader.FollowPosition, startStep int64) followed {
	t.Helper()
	out := followed{ids: map[int64][]int64{}, versions: map[int64][]int64{}, rounds: map[int64]loader.Round{}}
	for rank := range world {
		opts.Rank, opts.WorldSize = int64(rank), int64(world)
		f := newFollower(t, uri, opts, fo)
		p := f.Start()
		if pos != nil {
			p = *pos
		}
		for w := range workers {
			s, err := f.Stream(context.Background(), p, startStep, loader.StreamOptions{Worker: w, NumWorkers: workers, CoalesceBytes: int64(w) * 256})
			if err != nil {
				t.Fatal(err)
			}
			for b, err := range s.All(context.Background()) {
				if err != nil {
					t.Fatal(err)
				}
				ids := b.Record.Column(0).(*array.Int64).Int64Values()
				checkRowIDs(t, b, ids)
				vcol := b.Record.Schema().FieldIndices(loader.VersionColumn)
				versions := b.Record.Column(vcol[0]).(*array.Int64).Int64Values()
				per := int64(len(ids)) / int64(b.Steps)
				for i := range int64(b.Steps) {
					step := b.Step + i*int64(workers)
					out.ids[step] = append(out.ids[step], ids[i*per:(i+1)*per]...)
					out.versions[step] = append(out.versions[step], versions[i*per:(i+1)*per]...)
					out.rounds[step] = s.Round()
				}
				b.Record.Release()
			}
			out.stats = s.FollowStats()
			if !out.stats.WaitedOut {
				t.Fatalf("rank %d worker %d: the stream ended but did not wait out", rank, w)
			}
			s.Close()
		}
	}
	return out
}

// sortedSteps returns the row ids of each step, ascending, from step 0 to
// the last; a step not dealt is nil.
func sortedSteps(f followed) [][]int64 {
	var out [][]int64
	for step, ids := range f.ids {
		for int64(len(out)) <= step {
			out = append(out, nil)
		}
		ids = slices.Clone(ids)
		slices.Sort(ids)
		out[step] = ids
	}
	return out
}

// randomFollow draws version sizes and options of following.
func randomFollow(rng *rand.Rand) (sizes []int64, opts loader.Options, fo loader.FollowOptions) {
	sizes = append(sizes, rng.Int64N(60)) // version 1 may hold no rows
	for range 1 + rng.IntN(10) {
		sizes = append(sizes, 1+rng.Int64N(60)) // an append holds at least one
	}
	g := []int64{8, 16, 24}[rng.IntN(3)]
	opts = loader.Options{GlobalBatchSize: g, NumSplits: g, Columns: []string{"id", "text"}, ShuffleSeed: rng.Uint64(),
		MemoryBudget: 1 << 20}
	fo = loader.FollowOptions{WaitTimeout: time.Millisecond, PollInterval: time.Millisecond}
	if rng.IntN(2) == 0 {
		fo.RowsPerRound = 1 + rng.Int64N(100)
	}
	switch rng.IntN(3) {
	case 1:
		fo.ReplayCount = rng.Int64N(10)
	case 2:
		fo.ReplayFraction = rng.Float64()
	}
	if rng.IntN(2) == 0 {
		k := rng.Int64N(4)
		fo.MaxVersionsBehind = &k
	}
	return sizes, opts, fo
}

// TestFollowSameStepsAnyWorldSize checks, on random version sizes and
// options, that following a table deals the same global steps at every
// world size of 1 to 8 that divides G, with 1 to 3 workers; that every row
// carries its version; and that a run resumed at every step, from the round
// of that step, deals exactly the steps after it.
func TestFollowSameStepsAnyWorldSize(t *testing.T) {
	rng := rand.New(rand.NewPCG(seedtest.Seed(t), 3))
	for iter := range 4 {
		sizes, opts, fo := randomFollow(rng)
		uri := growingTable(t, sizes)
		want := follow(t, uri, opts, fo, 1, 1, nil, 0)
		ref := sortedSteps(want)
		starts := []int64{0}
		for v, n := range sizes {
			starts = append(starts, starts[v]+n)
		}
		for step, ids := range want.ids {
			for i, id := range ids {
				if v := want.versions[step][i]; id < starts[v-1] || id >= starts[v] {
					t.Fatalf("iter %d step %d: row %d has version %d, which added rows [%d, %d)", iter, step, id, v, starts[v-1], starts[v])
				}
			}
		}
		// Every world size of 1 to 8 that divides S = G, with 1 to 3 workers.
		for world := 1; world <= 8; world++ {
			if opts.GlobalBatchSize%int64(world) != 0 {
				continue
			}
			got := sortedSteps(follow(t, uri, opts, fo, world, 1+rng.IntN(3), nil, 0))
			if !slices.EqualFunc(got, ref, slices.Equal) {
				t.Fatalf("iter %d: world size %d deals %d steps other than world size 1's %d", iter, world, len(got), len(ref))
			}
		}
		// Resumed at every step, from the round of that step, at a random world size.
		for at := range int64(len(ref)) {
			world := []int{1, 2, 4, 8}[rng.IntN(4)]
			r := want.rounds[at]
			resumed := sortedSteps(follow(t, uri, opts, fo, world, 1, &r.FollowPosition, at))
			if !slices.EqualFunc(resumed[at:], ref[at:], slices.Equal) || slices.ContainsFunc(resumed[:at], func(s []int64) bool { return s != nil }) {
				t.Fatalf("iter %d: resumed at step %d (round %d) at world size %d, the steps after differ", iter, at, r.Round, world)
			}
		}
	}
}

// TestFollowReadAheadKeepsBatches checks, on random version sizes, options,
// memory budgets and read-ahead, that a follow stream, which opens a round's
// stream while the round before is dealt, sharing its budget, deals the
// batches of each round's stream opened alone after the one before, in the
// same order; and that a stream closed after any number of batches frees
// everything, the stream it opened ahead included.
func TestFollowReadAheadKeepsBatches(t *testing.T) {
	rng := rand.New(rand.NewPCG(seedtest.Seed(t), 6))
	ctx := context.Background()
	type dealt struct {
		step int64
		ids  []int64
	}
	ids := func(b loader.Batch) []int64 {
		return slices.Clone(b.Record.Column(0).(*array.Int64).Int64Values())
	}
	for iter := range 6 {
		sizes, opts, fo := randomFollow(rng)
		opts.MemoryBudget = []int64{64 << 10, 256 << 10, 1 << 20}[rng.IntN(3)]
		opts.ReadAhead = 1 + rng.IntN(3)
		mem := memory.NewCheckedAllocator(mallocator.NewMallocator())
		opts.Allocator = mem
		uri := growingTable(t, sizes)
		f := newFollower(t, uri, opts, fo)

		var want []dealt
		for pos := f.Start(); ; {
			r, _, err := f.Round(ctx, pos)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if pos = r.Next(); r.Steps == 0 {
				continue
			}
			l, err := f.Loader(ctx, &r)
			if err != nil {
				t.Fatal(err)
			}
			st, err := l.Stream(ctx, loader.StreamOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for b, err := range st.All(ctx) {
				if err != nil {
					t.Fatal(err)
				}
				want = append(want, dealt{r.Step + b.Step, ids(b)})
				b.Record.Release()
			}
			st.Close()
			l.Close()
		}

		stop := rng.IntN(len(want) + 1)
		for _, n := range []int{len(want), stop} {
			s, err := f.Stream(ctx, f.Start(), 0, loader.StreamOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var got []dealt
			for len(got) < n {
				b, err := s.Next(ctx)
				if err != nil {
					t.Fatalf("iter %d: batch %d of %d: %v", iter, len(got), n, err)
				}
				got = append(got, dealt{b.Step, ids(b)})
				b.Record.Release()
			}
			if !slices.EqualFunc(got, want[:n], func(a, b dealt) bool { return a.step == b.step && slices.Equal(a.ids, b.ids) }) {
				t.Fatalf("iter %d: the follow stream's %d batches differ from those of the rounds' streams", iter, n)
			}
			if n == len(want) {
				if _, err := s.Next(ctx); err != io.EOF {
					t.Fatalf("iter %d: after the last batch, Next returned %v, not io.EOF", iter, err)
				}
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			mem.AssertSize(t, 0)
		}
	}
}

// TestFollowWhileAppending checks that steps dealt while writers append
// are those of following the table once they are done: which versions a
// round takes depends on the versions alone, not on when they landed.
func TestFollowWhileAppending(t *testing.T) {
	rng := rand.New(rand.NewPCG(seedtest.Seed(t), 4))
	sizes, opts, fo := randomFollow(rng)
	more := []int64{}
	for range 10 {
		more = append(more, 1+rng.Int64N(40))
	}
	uri := growingTable(t, sizes)
	quick := fo
	fo.WaitTimeout = time.Second // the appends land well within it
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var start int64
		for _, n := range sizes {
			start += n
		}
		appendRows(t, uri, start, more)
	}()
	mem := memory.NewCheckedAllocator(mallocator.NewMallocator())
	defer mem.AssertSize(t, 0)
	opts.Allocator = mem
	live := follow(t, uri, opts, fo, 1, 2, nil, 0)
	wg.Wait()
	after := follow(t, uri, opts, quick, 1, 1, nil, 0)
	// The live run may have waited out before the last appends: it is a prefix.
	got, want := sortedSteps(live), sortedSteps(after)
	if len(got) > len(want) || !slices.EqualFunc(got, want[:len(got)], slices.Equal) {
		t.Fatalf("%d steps dealt while appending differ from the first of the %d dealt after", len(got), len(want))
	}
}

// TestFollowRefusesRewrittenTable checks that a position taken on one table
// does not resume on another written at the same place, with as many
// versions or fewer, and that following needs no manifest but the latest's.
func TestFollowRefusesRewrittenTable(t *testing.T) {
	sizes := []int64{20, 30, 10}
	uri := growingTable(t, sizes)
	opts := loader.Options{GlobalBatchSize: 8, Columns: []string{"id"}}
	fo := loader.FollowOptions{WaitTimeout: time.Millisecond, PollInterval: time.Millisecond}
	got := follow(t, uri, opts, fo, 1, 1, nil, 0)
	pos := got.rounds[int64(len(got.ids)-1)].Next()
	if err := os.RemoveAll(strings.TrimPrefix(uri, "file://")); err != nil {
		t.Fatal(err)
	}
	tb, err := table.Create(context.Background(), uri, tabletest.Reader(0, 25), table.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tb.Close()
	appendRows(t, uri, 25, []int64{30, 10, 5})
	f := newFollower(t, uri, opts, fo)
	s, err := f.Stream(context.Background(), pos, pos.Step, loader.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = s.Next(context.Background())
	if !errors.Is(err, errcode.ErrChanged) || !strings.Contains(err.Error(), "version 3") {
		t.Fatalf("resuming on a rewritten table: %v, want Changed naming version 3", err)
	}

	// Fewer versions than the position saw.
	if err := os.RemoveAll(strings.TrimPrefix(uri, "file://")); err != nil {
		t.Fatal(err)
	}
	if tb, err = table.Create(context.Background(), uri, tabletest.Reader(0, 25), table.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	tb.Close()
	s1, err := newFollower(t, uri, opts, fo).Stream(context.Background(), pos, pos.Step, loader.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s1.Close()
	if _, err := s1.Next(context.Background()); !errors.Is(err, errcode.ErrChanged) || !strings.Contains(err.Error(), "latest version is 1") {
		t.Fatalf("resuming on a table of fewer versions: %v", err)
	}
	appendRows(t, uri, 25, []int64{30, 10, 5})

	// The manifests of versions 1 to 3 gone: the latest's files say which
	// version added each, and following from version 1 deals every row of
	// the four versions but those carried past the last round.
	if _, err := table.Cleanup(context.Background(), uri, table.CleanupOptions{KeepLast: 1, Grace: time.Nanosecond}); err != nil {
		t.Fatal(err)
	}
	all := follow(t, uri, opts, fo, 1, 1, nil, 0)
	seen := map[int64]bool{}
	for step, ids := range all.ids {
		for i, id := range ids {
			if seen[id] || id < 0 || id >= 70 {
				t.Fatalf("step %d deals row %d again, or one not in the table", step, id)
			}
			seen[id] = true
			// Versions 1 to 4 added rows [0, 25), [25, 55), [55, 65), [65, 70).
			want := int64(1 + slices.IndexFunc([]int64{25, 55, 65, 70}, func(end int64) bool { return id < end }))
			if got := all.versions[step][i]; got != want {
				t.Fatalf("row %d: version %d, want %d", id, got, want)
			}
		}
	}
	if n := len(seen); n != 8*len(all.ids) || 70-n >= 8 {
		t.Errorf("following after the cleanup dealt %d rows in %d steps, of 70", n, len(all.ids))
	}
}

// promptRows yields rows [start, start+n) of a table of rollouts: id, and
// prompt = id / 3, so that rows come in runs of three samples of a prompt
// (shorter where a version starts or ends inside one).
func promptRows(t testing.TB, start, n int64) array.RecordReader {
	t.Helper()
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "prompt", Type: arrow.PrimitiveTypes.Int64}}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	for id := start; id < start+n; id++ {
		b.Field(0).(*array.Int64Builder).Append(id)
		b.Field(1).(*array.Int64Builder).Append(id / 3)
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	r, err := array.NewRecordReader(schema, []arrow.RecordBatch{rec})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestFollowDealsGroupsWhole checks, on random version sizes, that
// following with GroupBy deals each group (a run of one version's rows of
// one prompt) whole, in one step and on one rank, the same steps at world
// sizes 1, 2 and 4, and from a resume at every step.
func TestFollowDealsGroupsWhole(t *testing.T) {
	rng := rand.New(rand.NewPCG(seedtest.Seed(t), 5))
	ctx := context.Background()
	uri := "file://" + t.TempDir()
	sizes := []int64{1 + rng.Int64N(30)}
	tb, err := table.Create(ctx, uri, promptRows(t, 0, sizes[0]), table.WriteOptions{RowGroupRows: 16})
	if err != nil {
		t.Fatal(err)
	}
	tb.Close()
	start := sizes[0]
	for range 8 {
		n := 1 + rng.Int64N(30)
		if _, err := table.Append(ctx, uri, promptRows(t, start, n), table.WriteOptions{RowGroupRows: 16}); err != nil {
			t.Fatal(err)
		}
		sizes, start = append(sizes, n), start+n
	}
	var ends []int64 // of each version's rows
	for i, n := range sizes {
		ends = append(ends, n)
		if i > 0 {
			ends[i] += ends[i-1]
		}
	}
	group := func(id int64) [2]int64 { // the version and prompt of a row
		v, _ := slices.BinarySearch(ends, id+1)
		return [2]int64{int64(v), id / 3}
	}
	opts := loader.Options{GlobalBatchSize: 8, NumSplits: 4, Columns: []string{"id"}, ShuffleSeed: rng.Uint64()}
	fo := loader.FollowOptions{GroupBy: []string{"prompt"}, RowsPerRound: 20, ReplayFraction: 0.5,
		WaitTimeout: time.Millisecond, PollInterval: time.Millisecond}
	want := follow(t, uri, opts, fo, 1, 1, nil, 0)
	ref := sortedSteps(want)
	if len(ref) == 0 {
		t.Fatal("no step")
	}
	for _, world := range []int{1, 2, 4} {
		got := follow(t, uri, opts, fo, world, 1+rng.IntN(2), nil, 0)
		if steps := sortedSteps(got); !slices.EqualFunc(steps, ref, slices.Equal) {
			t.Fatalf("world size %d deals other steps than world size 1", world)
		}
		// Whole groups: a group's rows in a step are all of the rows of it
		// the round holds, on one rank; the batches of the step are rank by
		// rank, so a group's rows are adjacent.
		stepOf := map[[3]int64]int64{} // (round, version, prompt): the step of the group in the round
		for step, ids := range got.ids {
			seen := map[[2]int64]int{}
			for i, id := range ids {
				g := group(id)
				if j, ok := seen[g]; ok && j != i-1 {
					t.Fatalf("world size %d step %d: the rows of group %v are split", world, step, g)
				}
				seen[g] = i
				key := [3]int64{got.rounds[step].Round, g[0], g[1]}
				if s, ok := stepOf[key]; ok && s != step {
					t.Fatalf("world size %d: group %v is in steps %d and %d of round %d", world, g, s, step, key[0])
				}
				stepOf[key] = step
			}
		}
	}
	for at := range int64(len(ref)) {
		r := want.rounds[at]
		resumed := sortedSteps(follow(t, uri, opts, fo, 2, 1, &r.FollowPosition, at))
		if !slices.EqualFunc(resumed[at:], ref[at:], slices.Equal) {
			t.Fatalf("resumed at step %d (round %d), the steps after differ", at, r.Round)
		}
	}
}

// TestFollowerUsesTheTablesCatalog follows an S3 table twice from its
// second version with a catalog: the second follower reads no manifest from
// the store, not even the latest's, which the first version opened does not
// hold the rows of.
func TestFollowerUsesTheTablesCatalog(t *testing.T) {
	ctx := context.Background()
	s, err := s3test.Start("bkt")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	uri := s.URI("bkt", "grows")
	cat := catalog.Open(catalog.Options{Path: filepath.Join(t.TempDir(), "catalog.db")})
	for i := range int64(4) {
		if i == 0 {
			tb, err := table.Create(ctx, uri, tabletest.Reader(0, 30), table.WriteOptions{RowGroupRows: 16})
			if err != nil {
				t.Fatal(err)
			}
			tb.Close()
		} else if _, err := table.Append(ctx, uri, tabletest.Reader(i*30, 30), table.WriteOptions{RowGroupRows: 16}); err != nil {
			t.Fatal(err)
		}
	}
	opts := loader.Options{GlobalBatchSize: 8}
	fo := loader.FollowOptions{RowsPerRound: 40, WaitTimeout: time.Millisecond, PollInterval: time.Millisecond}
	var reads [2]int64
	for run := range reads {
		tb, err := table.OpenWith(ctx, uri, table.OpenOptions{Version: 2, Catalog: cat})
		if err != nil {
			t.Fatal(err)
		}
		s.ResetCounts()
		f, err := loader.NewFollower(tb, opts, fo)
		tb.Close()
		if err != nil {
			t.Fatal(err)
		}
		st, err := f.Stream(ctx, f.Start(), 0, loader.StreamOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rows := int64(0)
		for {
			b, err := st.Next(ctx)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			rows += b.Record.NumRows()
			b.Record.Release()
		}
		st.Close()
		f.Close()
		if rows != 120 {
			t.Fatalf("run %d dealt %d rows, want 120", run, rows)
		}
		reads[run] = s.Count("GET", ".json")
	}
	if reads[0] == 0 || reads[1] != 0 {
		t.Errorf("manifest reads: %d by the first follower, %d by the second; want some, then none", reads[0], reads[1])
	}
}

// TestFollowCheckpointIsPythons reads a state dict as Python's
// FollowingDataset writes it, resumes from it, and checks that the
// checkpoints Go writes have Python's keys, and that one of another rule is
// refused with the field named.
func TestFollowCheckpointIsPythons(t *testing.T) {
	uri := growingTable(t, []int64{30, 30})
	opts := loader.Options{GlobalBatchSize: 8, NumSplits: 4, ShuffleSeed: 3}
	fo := loader.FollowOptions{RowsPerRound: 30, ReplayCount: 4}
	f := newFollower(t, uri, opts, fo)
	python := `{"format": 1, "kind": "follow", "table_uri": "` + uri + `", "global_batch_size": 8, "num_splits": 4,
		"shuffle_seed": 3, "follow": {"rows_per_round": 30, "group_by": null, "replay_count": 4, "replay_fraction": 0.0,
		"max_versions_behind": null, "start_version": 1},
		"position": {"round": 1, "step": 3, "after": 1, "head": "h", "carry": [6, 29]}, "steps_consumed": 4}`
	c, err := loader.ParseFollowCheckpoint([]byte(python), "state.json")
	if err != nil {
		t.Fatal(err)
	}
	pos, step, err := f.Resume(c)
	if err != nil {
		t.Fatal(err)
	}
	want := loader.FollowPosition{Round: 1, Step: 3, After: 1, Head: "h", Carry: []uint64{6, 29}}
	if step != 4 || pos.Round != want.Round || pos.Step != want.Step || pos.After != want.After || pos.Head != want.Head || !slices.Equal(pos.Carry, want.Carry) {
		t.Errorf("resumed at %+v, step %d; want %+v, step 4", pos, step, want)
	}
	var got, keys map[string]any
	data, err := json.Marshal(f.Checkpoint(pos, step))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(python), &keys); err != nil {
		t.Fatal(err)
	}
	for _, m := range []map[string]any{got, keys} {
		for _, k := range []string{"follow", "position"} {
			inner := m[k].(map[string]any)
			for ik := range inner {
				m[k+"."+ik] = true
			}
			delete(m, k)
		}
	}
	if !slices.Equal(slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(keys))) {
		t.Errorf("Go writes the keys %v, Python %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(keys)))
	}
	other := strings.Replace(python, `"replay_count": 4`, `"replay_count": 5`, 1)
	if c, err = loader.ParseFollowCheckpoint([]byte(other), "state.json"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.Resume(c); errcode.Of(err) != errcode.InvalidArgument || !strings.Contains(err.Error(), "checkpoint follow.replay_count is 5 but this follower's is 4") {
		t.Errorf("a checkpoint of another replay: %v", err)
	}
	for _, bad := range []string{`{"format": 2, "kind": "follow"}`, `{"format": 1, "kind": "mixture"}`,
		`{"format": 1, "kind": "follow", "position": {"step": 5}, "steps_consumed": 4}`, `[`} {
		if _, err := loader.ParseFollowCheckpoint([]byte(bad), "state.json"); errcode.Of(err) != errcode.InvalidArgument {
			t.Errorf("%s: %v", bad, err)
		}
	}
}
