package loader_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/arrow/memory/mallocator"
	"github.com/apache/arrow-go/v18/parquet"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/internal/tabletest"
	"github.com/croupier-data/croupier/loader"
	"github.com/croupier-data/croupier/permutation"
)

func openTable(t *testing.T, sizes ...int64) *table.Table {
	t.Helper()
	dir := t.TempDir()
	tabletest.Write(t, dir, sizes, 64)
	tb, err := table.Open(context.Background(), "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tb.Close() })
	return tb
}

func newLoader(t *testing.T, tb *table.Table, opts loader.Options) *loader.Loader {
	t.Helper()
	l, err := loader.New(tb, permutation.Identity{N: tb.NumRows()}, opts)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// shuffledTable opens a table of 26 row groups of 64 rows and builds a
// shuffle of it with seed, closed when the test ends.
func shuffledTable(t *testing.T, seed uint64) (*table.Table, *permutation.Permutations) {
	t.Helper()
	tb := openTable(t, 900, 700)
	perms, err := permutation.Build(context.Background(), tb, permutation.Spec{Shuffle: &permutation.ShuffleSpec{Seed: seed}},
		"file://"+t.TempDir()+"/perm", permutation.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { perms.Close() })
	return tb, perms
}

// collect runs a stream to the end and returns each step's number and ids,
// splitting batches that hold several steps.
func collect(t *testing.T, l *loader.Loader, so loader.StreamOptions) (steps []int64, ids [][]int64) {
	t.Helper()
	steps, ids, _ = collectBatches(t, l, so)
	return steps, ids
}

// collectBatches is collect that also returns the steps each batch held.
func collectBatches(t *testing.T, l *loader.Loader, so loader.StreamOptions) (steps []int64, ids [][]int64, batches []int) {
	t.Helper()
	s, err := l.Stream(context.Background(), so)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	stride, rows := int64(max(so.NumWorkers, 1)), l.RankBatchSize()
	for b, err := range s.All(context.Background()) {
		if err != nil {
			t.Fatal(err)
		}
		vals := b.Record.Column(0).(*array.Int64).Int64Values()
		checkRowIDs(t, b, vals)
		for i := range int64(b.Steps) {
			steps = append(steps, b.Step+i*stride)
			ids = append(ids, slices.Clone(vals[min(i*rows, int64(len(vals))):min((i+1)*rows, int64(len(vals)))]))
		}
		if last := int64(len(vals)) - int64(b.Steps-1)*rows; last <= 0 || last > rows {
			t.Fatalf("batch of steps %d+%d has %d rows", b.Step, b.Steps, len(vals))
		}
		batches = append(batches, b.Steps)
		b.Record.Release()
	}
	return steps, ids, batches
}

// checkRowIDs checks that a batch's RowIDs are its rows', whose ids are
// the row ids.
func checkRowIDs(t testing.TB, b loader.Batch, ids []int64) {
	t.Helper()
	if len(b.RowIDs) != len(ids) {
		t.Fatalf("step %d: %d row ids for %d rows", b.Step, len(b.RowIDs), len(ids))
	}
	for i, id := range ids {
		if b.RowIDs[i] != uint64(id) {
			t.Fatalf("step %d: row %d has id %d, RowIDs says %d", b.Step, i, id, b.RowIDs[i])
		}
	}
}

// TestCoalescedStepsAreTheSame checks that a stream coalescing small steps
// deals exactly the steps of one that does not, for any worker and start
// step, a partial last step included, and that it coalesces within bounds.
func TestCoalescedStepsAreTheSame(t *testing.T) {
	tb := openTable(t, 700, 123, 377)
	mem := memory.NewCheckedAllocator(mallocator.NewMallocator())
	defer mem.AssertSize(t, 0)
	l := newLoader(t, tb, loader.Options{GlobalBatchSize: 12, NumSplits: 4, DropLast: false,
		Columns: []string{"id", "tokens"}, Allocator: mem, MemoryBudget: 1 << 20})
	for _, k := range []int{1, 3} {
		for _, start := range []int64{0, 5, l.StepsPerEpoch() - 2} {
			so := loader.StreamOptions{StartStep: start, NumWorkers: k, Worker: k - 1}
			wantSteps, want := collect(t, l, so)
			for _, bytes := range []int64{1, 4 << 10, 1 << 30} {
				so.CoalesceBytes = bytes
				steps, ids, batches := collectBatches(t, l, so)
				if !slices.Equal(steps, wantSteps) || !slices.EqualFunc(ids, want, slices.Equal) {
					t.Fatalf("K=%d start=%d coalesce=%d: steps %v, want %v (or their rows differ)", k, start, bytes, steps, wantSteps)
				}
				most := slices.Max(append(batches, 1))
				switch {
				case most > loader.MaxCoalescedSteps:
					t.Fatalf("coalesce=%d: a batch of %d steps", bytes, most)
				case bytes == 1 && most != 1:
					t.Fatalf("coalesce=1 byte: a batch of %d steps", most)
				case bytes > 1 && len(wantSteps) > 2 && most == 1:
					t.Fatalf("coalesce=%d: no batch of %d steps held more than one", bytes, len(wantSteps))
				}
			}
		}
	}
}

// TestWorkersInterleave checks that K workers, read round robin as torch's
// DataLoader does, give exactly the batches of one worker, for every start step.
func TestWorkersInterleave(t *testing.T) {
	tb := openTable(t, 500, 123, 377)
	mem := memory.NewCheckedAllocator(mallocator.NewMallocator())
	defer mem.AssertSize(t, 0)
	l := newLoader(t, tb, loader.Options{GlobalBatchSize: 24, NumSplits: 12, WorldSize: 3, Rank: 1, DropLast: true,
		Columns: []string{"id", "tokens"}, Allocator: mem, MemoryBudget: 1 << 20})
	if l.StepsPerEpoch() != 1000/12/2 {
		t.Fatalf("steps per epoch = %d, want %d", l.StepsPerEpoch(), 1000/12/2)
	}
	wantSteps, want := collect(t, l, loader.StreamOptions{})
	if int64(len(want)) != l.StepsPerEpoch() {
		t.Fatalf("one worker made %d batches, want %d", len(want), l.StepsPerEpoch())
	}
	for i, ids := range want {
		if wantSteps[i] != int64(i) || len(ids) != 8 {
			t.Fatalf("batch %d: step %d with %d rows", i, wantSteps[i], len(ids))
		}
	}
	for _, k := range []int{2, 3, 5} {
		for _, start := range []int64{0, 7, l.StepsPerEpoch() - 1} {
			perWorker := make([][][]int64, k)
			for w := range k {
				_, perWorker[w] = collect(t, l, loader.StreamOptions{StartStep: start, Worker: w, NumWorkers: k})
			}
			var got [][]int64
			for i := 0; ; i++ {
				w, j := i%k, i/k
				if j >= len(perWorker[w]) {
					break
				}
				got = append(got, perWorker[w][j])
			}
			if !slices.EqualFunc(got, want[start:], slices.Equal) {
				t.Fatalf("K=%d start=%d: round robin of workers differs from one worker", k, start)
			}
		}
	}
}

// TestEveryRowOnce deals a whole epoch on every rank and checks each row id
// appears once, the remainder excepted.
func TestEveryRowOnce(t *testing.T) {
	tb := openTable(t, 333, 100)
	const s, g, w = 8, 16, 4
	seen := map[int64]int{}
	for r := range int64(w) {
		l := newLoader(t, tb, loader.Options{GlobalBatchSize: g, NumSplits: s, WorldSize: w, Rank: r, DropLast: true})
		_, ids := collect(t, l, loader.StreamOptions{Epoch: 1})
		for _, b := range ids {
			for _, id := range b {
				seen[id]++
			}
		}
	}
	l := int64(433 / s)
	want := s * (l / (g / s)) * (g / s)
	if int64(len(seen)) != want {
		t.Fatalf("dealt %d distinct rows, want %d", len(seen), want)
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("row %d dealt %d times", id, n)
		}
	}
}

func TestDropLastFalse(t *testing.T) {
	tb := openTable(t, 100)
	l := newLoader(t, tb, loader.Options{GlobalBatchSize: 12, NumSplits: 4})
	// L = 25 cycles, 3 per step: 8 full steps and one of 1 cycle.
	if l.StepsPerEpoch() != 9 {
		t.Fatalf("steps = %d, want 9", l.StepsPerEpoch())
	}
	_, ids := collect(t, l, loader.StreamOptions{})
	if got := ids[8]; !slices.Equal(got, []int64{24, 49, 74, 99}) {
		t.Fatalf("partial step = %v", got)
	}
}

func TestEarlyCloseFreesEverything(t *testing.T) {
	tb := openTable(t, 2000)
	mem := memory.NewCheckedAllocator(mallocator.NewMallocator())
	l := newLoader(t, tb, loader.Options{GlobalBatchSize: 32, Allocator: mem, ReadAhead: 8})
	before := runtime.NumGoroutine()
	s, err := l.Stream(context.Background(), loader.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Next(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	b.Record.Release()
	time.Sleep(20 * time.Millisecond) // let read-ahead fill
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Next(context.Background()); errcode.Of(err) != errcode.Closed {
		t.Fatalf("Next after Close = %v, want Closed", err)
	}
	mem.AssertSize(t, 0)
	for range 50 {
		if runtime.NumGoroutine() <= before {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("goroutines: %d before the stream, %d after Close", before, runtime.NumGoroutine())
}

func TestStreamErrors(t *testing.T) {
	tb := openTable(t, 100)
	_, err := loader.New(tb, permutation.Identity{N: 100}, loader.Options{GlobalBatchSize: 8, WorldSize: 2, Rank: 2})
	if errcode.Of(err) != errcode.InvalidArgument || !strings.Contains(err.Error(), "rank 2 out of range [0, 2)") {
		t.Fatalf("rank error = %v", err)
	}
	_, err = loader.New(tb, permutation.Identity{N: 100}, loader.Options{GlobalBatchSize: 8, Columns: []string{"bogus"}})
	if errcode.Of(err) != errcode.InvalidArgument || !strings.Contains(err.Error(), `"bogus"`) {
		t.Fatalf("column error = %v", err)
	}
	_, err = loader.New(tb, permutation.Identity{N: 100}, loader.Options{GlobalBatchSize: 128, NumSplits: 4, DropLast: true})
	if errcode.Of(err) != errcode.InvalidArgument || !strings.Contains(err.Error(), "no full step") {
		t.Fatalf("empty epoch error = %v", err)
	}
	_, err = loader.New(tb, permutation.Identity{N: 0}, loader.Options{GlobalBatchSize: 8})
	if errcode.Of(err) != errcode.InvalidArgument || !strings.Contains(err.Error(), "has 0 rows") {
		t.Fatalf("empty order error = %v", err)
	}
	l := newLoader(t, tb, loader.Options{GlobalBatchSize: 8})
	for _, so := range []loader.StreamOptions{{StartStep: 99}, {Worker: 2, NumWorkers: 2}, {Epoch: -1}} {
		if _, err := l.Stream(context.Background(), so); errcode.Of(err) != errcode.InvalidArgument {
			t.Errorf("Stream(%+v) = %v, want InvalidArgument", so, err)
		}
	}
}

// TestFileTruncatedMidEpoch: the stream ends with an error naming the file.
// (A file removed instead is still read through the descriptor the table's
// location holds open: the pinned bytes, as TestLocalFilesHeldOpen shows.)
func TestFileTruncatedMidEpoch(t *testing.T) {
	dir := t.TempDir()
	tabletest.Write(t, dir, []int64{100, 100}, 64)
	tb, err := table.Open(context.Background(), "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	// A budget that keeps rows for a few steps: part-001 (from step 12 on)
	// is read after the first step.
	l := newLoader(t, tb, loader.Options{GlobalBatchSize: 8, ReadAhead: 1, MemoryBudget: 5 << 10})
	s, err := l.Stream(context.Background(), loader.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	b, err := s.Next(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	b.Record.Release()
	if h := s.Stats().HorizonSteps; h > 4 {
		t.Fatalf("horizons of %d steps; the test needs a smaller budget", h)
	}
	if err := os.Truncate(filepath.Join(dir, "part-001.parquet"), 0); err != nil {
		t.Fatal(err)
	}
	for {
		b, err := s.Next(context.Background())
		if errors.Is(err, io.EOF) {
			t.Fatal("stream ended without noticing the missing file")
		}
		if err != nil {
			if errcode.Of(err) != errcode.Changed || !strings.Contains(err.Error(), "part-001.parquet") {
				t.Fatalf("error = %v, want Changed naming part-001.parquet", err)
			}
			return
		}
		b.Record.Release()
	}
}

// TestFirstHorizonsOnARemoteStore: on a remote store the first horizon is
// one step and the next ones grow, so that the first batch waits for the
// pages of one step, not of all the budget holds; on local files a budget
// that holds the epoch deals it in one horizon. The rows dealt are the
// dealing order's either way.
func TestFirstHorizonsOnARemoteStore(t *testing.T) {
	ctx := context.Background()
	_, uri := s3Permutation(t)
	perms, err := permutation.Open(ctx, uri)
	if err != nil {
		t.Fatal(err)
	}
	defer perms.Close()
	local, _ := shuffledTable(t, 3)
	localOrder := permutation.Identity{N: local.NumRows()}
	for _, c := range []struct {
		name  string
		tb    *table.Table
		order permutation.Order
	}{{"remote", perms.Table(), perms.Splits()[0]}, {"local", local, localOrder}} {
		l, err := loader.New(c.tb, c.order, loader.Options{GlobalBatchSize: 8})
		if err != nil {
			t.Fatal(err)
		}
		s, err := l.Stream(ctx, loader.StreamOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for step := int64(0); ; step++ {
			b, err := s.Next(ctx)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			want, err := l.RowIDs(ctx, 0, step)
			if err != nil {
				t.Fatal(err)
			}
			if b.Step != step || !slices.Equal(b.RowIDs, want) {
				t.Fatalf("%s: batch of step %d holds rows %v, step %d of the dealing order %v", c.name, b.Step, b.RowIDs, step, want)
			}
			b.Record.Release()
		}
		st := s.Stats()
		s.Close()
		l.Close()
		if c.name == "remote" && st.Horizons < 2 || c.name == "local" && st.Horizons != 1 {
			t.Errorf("%s: an epoch of %d steps in %d horizons with a budget that holds it", c.name, st.Steps, st.Horizons)
		}
	}
}

// TestNextInterruptedThenClose: a Next whose context ends while a step is
// being read leaves that step to the next call, and Close frees it.
func TestNextInterruptedThenClose(t *testing.T) {
	tb := openTable(t, 500)
	mem := memory.NewCheckedAllocator(mallocator.NewMallocator())
	defer mem.AssertSize(t, 0)
	l := newLoader(t, tb, loader.Options{GlobalBatchSize: 10, Allocator: mem})
	s, err := l.Stream(context.Background(), loader.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	for range 3 {
		if _, err := s.Next(canceled); !errors.Is(err, context.Canceled) {
			t.Fatalf("Next with a canceled context = %v", err)
		}
	}
	b, err := s.Next(context.Background())
	if err != nil || b.Step != 0 {
		t.Fatalf("Next after interruptions: step %d, %v", b.Step, err)
	}
	b.Record.Release()
	if _, err := s.Next(canceled); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next with a canceled context = %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestStreamStats checks a stream's counters after a whole epoch: every step
// and row delivered, each row group fetched and decoded once (the budget holds
// them all), nothing read ahead left over.
func TestStreamStats(t *testing.T) {
	tb := openTable(t, 300, 200) // row groups of 64 rows: 5 + 4
	l := newLoader(t, tb, loader.Options{GlobalBatchSize: 20, NumSplits: 5, DropLast: true, Columns: []string{"id", "tokens"}})
	s, err := l.Stream(context.Background(), loader.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for b, err := range s.All(context.Background()) {
		if err != nil {
			t.Fatal(err)
		}
		b.Record.Release()
	}
	st := s.Stats()
	if st.Steps != l.StepsPerEpoch() || st.Rows != l.StepsPerEpoch()*20 {
		t.Errorf("steps = %d, rows = %d; want %d and %d", st.Steps, st.Rows, l.StepsPerEpoch(), l.StepsPerEpoch()*20)
	}
	if st.RowGroups != 9 || st.Requests != 9 || st.BytesRead == 0 || st.DecodedBytes == 0 {
		t.Errorf("decoded %d row groups with %d requests of %d bytes in all (%d decoded); want 9 and 9",
			st.RowGroups, st.Requests, st.BytesRead, st.DecodedBytes)
	}
	if st.Ready != 0 {
		t.Errorf("ready = %d after the last step", st.Ready)
	}
}

// TestOpenSplit opens a persisted split by URI: every row of the split is
// dealt once, the loader owns (and closes) what it opened, and an unknown
// split is an InvalidArgument error.
func TestOpenSplit(t *testing.T) {
	ctx := context.Background()
	tb := openTable(t, 300)
	uri := "file://" + t.TempDir() + "/perm"
	perms, err := permutation.Build(ctx, tb, permutation.Spec{
		Split:   &permutation.SplitSpec{Kind: permutation.SplitSequential, Counts: []int64{200, 100}, Names: []string{"train", "val"}},
		Shuffle: &permutation.ShuffleSpec{Seed: 7},
	}, uri, permutation.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	perms.Close()
	if _, err := loader.OpenSplit(ctx, uri, "test", loader.Options{GlobalBatchSize: 10}); !errors.Is(err, errcode.ErrInvalidArgument) {
		t.Fatalf("unknown split: %v, want an InvalidArgument error", err)
	}
	l, err := loader.OpenSplit(ctx, uri, "val", loader.Options{GlobalBatchSize: 10, NumSplits: 2, Columns: []string{"id"}})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int64]bool{}
	for b, err := range l.Batches(ctx, loader.StreamOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range b.Record.Column(0).(*array.Int64).Int64Values() {
			if seen[id] || id < 200 {
				t.Fatalf("row %d dealt twice or from outside the val split", id)
			}
			seen[id] = true
		}
		b.Record.Release()
	}
	if len(seen) != 100 {
		t.Fatalf("dealt %d rows of the val split, want 100", len(seen))
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, err := range l.Batches(ctx, loader.StreamOptions{}) {
		if !errors.Is(err, errcode.ErrClosed) {
			t.Fatalf("after Close: %v, want a Closed error", err)
		}
	}
}

func TestOptionBounds(t *testing.T) {
	tb := openTable(t, 100)
	for opts, want := range map[*loader.Options]string{
		{GlobalBatchSize: 10, ReadAhead: 1 << 40}:    "read_ahead 1099511627776 or max_reads 16 too large",
		{GlobalBatchSize: 10, MaxReads: 1 << 20}:     "max_reads 1048576 too large",
		{GlobalBatchSize: 10, ReadAhead: -1}:         "read_ahead is -1; it must be positive",
		{GlobalBatchSize: 10, MemoryBudget: -5}:      "memory_budget is -5; it must be positive",
		{GlobalBatchSize: 10, MaxReads: -1}:          "max_reads is -1",
		{GlobalBatchSize: 10, NumSplits: -2}:         "num_splits is -2",
		{GlobalBatchSize: 10, WorldSize: -1}:         "world_size is -1",
		{GlobalBatchSize: 10, WorldSize: 2, Rank: 2}: "rank 2 out of range [0, 2)",
	} {
		_, err := loader.New(tb, permutation.Identity{N: tb.NumRows()}, *opts)
		if !errors.Is(err, errcode.ErrInvalidArgument) || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: %v, want an InvalidArgument error with %q", *opts, err, want)
		}
	}
}

// dealWithBudget streams order over tb with opts to the end and returns each
// batch's ids and the stream's counters.
func dealWithBudget(t *testing.T, tb *table.Table, order permutation.Order, opts loader.Options, checks ...func(arrow.RecordBatch)) ([][]int64, loader.Stats) {
	t.Helper()
	ctx := context.Background()
	l, err := loader.New(tb, order, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s, err := l.Stream(ctx, loader.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var steps [][]int64
	for b, err := range s.All(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		for _, check := range checks {
			check(b.Record)
		}
		steps = append(steps, slices.Clone(b.Record.Column(0).(*array.Int64).Int64Values()))
		b.Record.Release()
	}
	return steps, s.Stats()
}

// TestBudgetSmallerThanTheTable deals a full shuffle of a table many times
// larger than the memory budget's share for kept rows: the batches are those
// of a budget that holds the whole table, the rows kept never exceed the share
// by more than the error of its size guesses (a quarter here), and row groups
// are decoded once per horizon that needs them, not once per row. A budget
// that cannot hold one step is an error that names it.
func TestBudgetSmallerThanTheTable(t *testing.T) {
	ctx := context.Background()
	tb, perms := shuffledTable(t, 3)
	deal := func(budget int64) ([][]int64, loader.Stats) {
		return dealWithBudget(t, tb, perms.Splits()[0], loader.Options{GlobalBatchSize: 16, NumSplits: 8,
			ReadAhead: 2, MemoryBudget: budget})
	}
	want, whole := deal(256 << 20)
	if whole.RowGroups != 26 {
		t.Fatalf("an ample budget decoded %d row groups, want each of the 26 once", whole.RowGroups)
	}
	got, small := deal(14 << 10)
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatal("a small budget dealt other batches than an ample one")
	}
	if small.HeldLimit*8 > whole.KeptBytes {
		t.Fatalf("the share for kept rows is %d bytes, the epoch's rows %d: not a table many times the budget",
			small.HeldLimit, whole.KeptBytes)
	}
	if small.HeldPeak > small.HeldLimit*5/4 {
		t.Errorf("kept rows peaked at %d bytes, the share is %d", small.HeldPeak, small.HeldLimit)
	}
	// Horizons are planned from guessed row sizes: up to a quarter too large.
	horizons := (whole.KeptBytes + small.HeldLimit*3/4 - 1) / (small.HeldLimit * 3 / 4)
	if small.RowGroups < 2*26 || small.RowGroups > 26*(horizons+1) {
		t.Errorf("decoded %d row groups in at most %d horizons of 26 row groups", small.RowGroups, horizons)
	}
	l, err := loader.New(tb, perms.Splits()[0], loader.Options{GlobalBatchSize: 16, NumSplits: 8, MemoryBudget: 2 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := l.Stream(ctx, loader.StreamOptions{}); !errors.Is(err, errcode.ErrInvalidArgument) ||
		!strings.Contains(err.Error(), "memory_budget 2048 bytes cannot hold one step") {
		t.Fatalf("a budget too small for a step: %v", err)
	}
}

// TestBudgetSmallerThanAPlainTable deals files without an offset index (as
// pyarrow writes them) in small pages, V2 pages in one file and V1 pages
// (which may start inside a list) in the other, in order with several
// splits, in a window shuffle and in a full shuffle, with budgets that hold
// a sliver of the table up to one that holds it all: reading each chunk
// only as far as a horizon needs, and the page locations learnt as horizons
// read on, change no batch.
func TestBudgetSmallerThanAPlainTable(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for i, version := range []parquet.DataPageVersion{parquet.DataPageV2, parquet.DataPageV1} {
		rec := tabletest.Record(int64(i)*600, 600)
		data := tabletest.EncodeRecord(t, rec, parquet.WithMaxRowGroupLength(200), parquet.WithDataPageSize(256),
			parquet.WithBatchSize(16), parquet.WithDictionaryDefault(false), parquet.WithDataPageVersion(version))
		rec.Release()
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("part-%d.parquet", i)), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tb, err := table.Open(ctx, "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	orders := map[string]permutation.Order{"sequential": permutation.Identity{N: tb.NumRows()}}
	for name, sh := range map[string]*permutation.ShuffleSpec{"window": {Seed: 3, Window: 150}, "full": {Seed: 4}} {
		perms, err := permutation.Build(ctx, tb, permutation.Spec{Shuffle: sh}, "file://"+t.TempDir()+"/perm", permutation.BuildOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer perms.Close()
		orders[name] = perms.Splits()[0]
	}
	for name, order := range orders {
		deal := func(budget int64) [][]int64 { // each step's ids, every row's tokens and text checked
			steps, _ := dealWithBudget(t, tb, order, loader.Options{GlobalBatchSize: 8, NumSplits: 4, ReadAhead: 2,
				MemoryBudget: budget, Columns: []string{"id", "tokens", "text"}}, func(rec arrow.RecordBatch) {
				tokens, text := rec.Column(1).(*array.List), rec.Column(2).(*array.String)
				for j, id := range rec.Column(0).(*array.Int64).Int64Values() {
					from, to := tokens.ValueOffsets(j)
					got := tokens.ListValues().(*array.Int32).Int32Values()[from:to]
					if !slices.Equal(got, tabletest.Tokens(id)) || text.Value(j) != tabletest.Text(id) {
						t.Fatalf("%s, budget %d: row %d holds tokens %v, text %q", name, budget, id, got, text.Value(j))
					}
				}
			})
			return steps
		}
		want := deal(256 << 20)
		for _, budget := range []int64{48 << 10, 96 << 10, 192 << 10} {
			if got := deal(budget); !slices.EqualFunc(got, want, slices.Equal) {
				t.Fatalf("%s, budget %d: other batches than an ample budget's", name, budget)
			}
		}
	}
}

// TestWindowHorizons deals a window shuffle of a table larger than the
// budget, with budgets whose horizons hold between one and two windows of
// each stream (a window is a row group): a horizon ends where its windows
// do, so each row group is decoded once, not again by the next horizon for
// the rows it left; the batches are those of an ample budget.
func TestWindowHorizons(t *testing.T) {
	ctx := context.Background()
	tb := openTable(t, 1024) // 16 row groups of 64 rows
	perms, err := permutation.Build(ctx, tb, permutation.Spec{Shuffle: &permutation.ShuffleSpec{Seed: 5, Window: 64}},
		"file://"+t.TempDir()+"/perm", permutation.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer perms.Close()
	const splits, window = 4, 64
	deal := func(budget int64) ([][]int64, loader.Stats) {
		return dealWithBudget(t, tb, perms.Splits()[0], loader.Options{GlobalBatchSize: 8, NumSplits: splits,
			ReadAhead: 2, MemoryBudget: budget})
	}
	want, whole := deal(256 << 20)
	if whole.RowGroups != 16 {
		t.Fatalf("an ample budget decoded %d row groups, want each of the 16 once", whole.RowGroups)
	}
	rowBytes := whole.KeptBytes / tb.NumRows()
	tried := 0
	for budget := int64(8 << 10); budget < 1<<20; budget += budget / 8 {
		got, st := deal(budget)
		if !slices.EqualFunc(got, want, slices.Equal) {
			t.Fatalf("budget %d dealt other batches than an ample one", budget)
		}
		// Horizons are planned from guessed row sizes, up to a quarter too
		// large: between 1.4 and 1.9 windows a stream, each holds one.
		if per := st.HeldLimit / rowBytes / splits; per < window*14/10 || per > window*19/10 {
			continue
		}
		tried++
		if st.RowGroups != 16 {
			t.Errorf("budget %d (%d bytes for kept rows, %d rows a stream): decoded %d row groups, want each of the 16 once",
				budget, st.HeldLimit, st.HeldLimit/rowBytes/splits, st.RowGroups)
		}
	}
	if tried == 0 {
		t.Fatal("no budget tried held between one and two windows a stream")
	}
}

// TestStepLargerThanTheBudget deals a table in its order whose step 43 holds
// 16 cells of 192 KiB, row 700's of 256 KiB, among rows of 100 bytes, with a
// budget of 2 MiB that the first row groups' sizes allow: each cell's page
// fits the budget, but the step does not. The steps before it are dealt,
// and its step is an error naming the step, its largest row (its 256 KiB and
// its 8-byte id) and their sizes, not a batch larger than the budget.
func TestStepLargerThanTheBudget(t *testing.T) {
	ctx := context.Background()
	const rows, wide, huge, at, budget = 1024, 192 << 10, 256 << 10, 700, 2 << 20
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "blob", Type: arrow.BinaryTypes.Binary},
	}, nil)
	b := array.NewRecordBuilder(memory.NewGoAllocator(), schema)
	defer b.Release()
	for i := range rows {
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		n := 100
		switch {
		case i == at:
			n = huge
		case i/16 == at/16:
			n = wide
		}
		b.Field(1).(*array.BinaryBuilder).Append(make([]byte, n))
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	rr, err := array.NewRecordReader(schema, []arrow.RecordBatch{rec})
	if err != nil {
		t.Fatal(err)
	}
	tb, err := table.Create(ctx, "file://"+t.TempDir(), rr, table.WriteOptions{RowGroupRows: 128})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	l := newLoader(t, tb, loader.Options{GlobalBatchSize: 16, NumSplits: 1, MemoryBudget: budget, ReadAhead: 1})
	s, err := l.Stream(ctx, loader.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var dealt int64
	for {
		b, err := s.Next(ctx)
		if err != nil {
			want := fmt.Sprintf("step %d holds", at/16)
			if errcode.Of(err) != errcode.InvalidArgument || !strings.Contains(err.Error(), want) ||
				!strings.Contains(err.Error(), fmt.Sprintf("row id %d, holds %d", at, huge+8)) {
				t.Fatalf("after %d steps: %v; want InvalidArgument naming %q and row %d", dealt, err, want, at)
			}
			break
		}
		if b.Step != dealt {
			t.Fatalf("step %d after %d steps", b.Step, dealt)
		}
		b.Record.Release()
		dealt++
	}
	if dealt != at/16 {
		t.Fatalf("%d steps dealt before the error; want %d", dealt, at/16)
	}
}

// TestLayoutHint deals a full shuffle of a plain Parquet table in 1 MiB
// pages without a page index, beyond its budget: the stream's stats say to
// rewrite it, naming the table and the column. The same rows rewritten in
// croupier's layout, and the plain table with a budget that holds it (each
// page decoded once), get no hint.
func TestLayoutHint(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	rec := tabletest.Record(0, 8192)
	data := tabletest.EncodeRecord(t, rec, parquet.WithMaxRowGroupLength(8192), parquet.WithDataPageSize(1<<20))
	rec.Release()
	if err := os.WriteFile(filepath.Join(dir, "part-0.parquet"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	plain, err := table.Open(ctx, "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	rewritten, err := table.Rewrite(ctx, plain, "file://"+t.TempDir()+"/tbl", table.RewriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer rewritten.Close()
	shuffled := func(tb *table.Table) permutation.Order {
		perms, err := permutation.Build(ctx, tb, permutation.Spec{Shuffle: &permutation.ShuffleSpec{Seed: 5}},
			"file://"+t.TempDir()+"/perm", permutation.BuildOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { perms.Close() })
		return perms.Splits()[0]
	}
	opts := loader.Options{GlobalBatchSize: 32, NumSplits: 8}
	for _, c := range []struct {
		name   string
		tb     *table.Table
		order  permutation.Order
		budget int64
		hint   bool
	}{
		{"plain", plain, shuffled(plain), 256 << 10, true},
		{"plain, an ample budget", plain, shuffled(plain), 256 << 20, false},
		{"rewritten", rewritten, shuffled(rewritten), 256 << 10, false},
	} {
		opts.MemoryBudget = c.budget
		_, st := dealWithBudget(t, c.tb, c.order, opts)
		ratio := float64(st.DecodedBytes) / float64(st.KeptBytes)
		switch {
		case c.hint && (!strings.Contains(st.LayoutHint, "croupier rewrite") || !strings.Contains(st.LayoutHint, c.tb.URI())):
			t.Errorf("%s: decoded ÷ kept %.1f, hint %q", c.name, ratio, st.LayoutHint)
		case !c.hint && st.LayoutHint != "":
			t.Errorf("%s: decoded ÷ kept %.1f, hint %q", c.name, ratio, st.LayoutHint)
		}
		t.Logf("%s: decoded ÷ kept %.1f, hint %q", c.name, ratio, st.LayoutHint)
	}
}
