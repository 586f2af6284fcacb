package loader_test

import (
	"context"
	"math"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/arrow/memory/mallocator"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/loader"
)

// TestWorkersDealRuns checks that with runs of R steps, worker w of K deals
// exactly the steps t of [t0, end) with ⌊(t − t0)/R⌋ mod K = w, in order, each
// with the rows one worker deals at that step: the workers' steps partition
// the rest of the epoch into runs taken in turns. It also checks that
// coalescing changes only how the worker's steps are cut into batches.
func TestWorkersDealRuns(t *testing.T) {
	tb := openTable(t, 300, 77)
	mem := memory.NewCheckedAllocator(mallocator.NewMallocator())
	defer mem.AssertSize(t, 0)
	l := newLoader(t, tb, loader.Options{GlobalBatchSize: 8, NumSplits: 4, DropLast: false,
		Columns: []string{"id"}, Allocator: mem, MemoryBudget: 1 << 20})
	end := l.StepsPerEpoch()
	_, want := collect(t, l, loader.StreamOptions{})
	for _, k := range []int{1, 2, 3, 5} {
		for _, run := range []int{0, 1, 2, 4, 7, math.MaxInt} {
			for _, start := range []int64{0, 3, end - 5, end} {
				r := int64(max(run, 1))
				var dealt []int64
				for w := range k {
					so := loader.StreamOptions{StartStep: start, Worker: w, NumWorkers: k, Run: run}
					steps, ids := collect(t, l, so)
					var spec []int64
					for s := start; s < end; s++ {
						if (s-start)/r%int64(k) == int64(w) {
							spec = append(spec, s)
						}
					}
					if !slices.Equal(steps, spec) {
						t.Fatalf("K=%d R=%d t0=%d worker %d: steps %v, want %v", k, run, start, w, steps, spec)
					}
					for i, s := range steps {
						if !slices.Equal(ids[i], want[s]) {
							t.Fatalf("K=%d R=%d t0=%d worker %d: step %d has rows %v, want %v", k, run, start, w, s, ids[i], want[s])
						}
					}
					so.CoalesceBytes = 1 << 30
					if _, coalesced := collect(t, l, so); !slices.Equal(slices.Concat(coalesced...), slices.Concat(ids...)) {
						t.Fatalf("K=%d R=%d t0=%d worker %d: coalesced batches hold other rows", k, run, start, w)
					}
					dealt = append(dealt, steps...)
				}
				slices.Sort(dealt)
				for i, s := range dealt {
					if s != start+int64(i) {
						t.Fatalf("K=%d R=%d t0=%d: the workers dealt steps %v, want each of [%d, %d) once", k, run, start, dealt, start, end)
					}
				}
				if int64(len(dealt)) != end-start {
					t.Fatalf("K=%d R=%d t0=%d: the workers dealt %d steps, want %d", k, run, start, len(dealt), end-start)
				}
			}
		}
	}
	if _, err := l.Stream(context.Background(), loader.StreamOptions{Run: -1}); errcode.Of(err) != errcode.InvalidArgument {
		t.Fatalf("Stream with run -1 = %v, want InvalidArgument", err)
	}
}

// TestWorkersShareSteps checks that workers sharing steps deal, between
// them, each step's rows once, each where its place says: merged by place,
// their batches are the rank's batches of one stream, from any start step
// and however batches are coalesced. A table many times the budget, each
// worker holding 1/K of it, shows why they share: together they decode
// about the row groups one stream does, where workers taking turns at runs
// each decode about as many.
func TestWorkersShareSteps(t *testing.T) {
	ctx := context.Background()
	tb, perms := shuffledTable(t, 9) // 26 row groups of 64 rows
	newLoader := func(budget int64) *loader.Loader {
		l, err := loader.New(tb, perms.Splits()[0], loader.Options{GlobalBatchSize: 16, NumSplits: 8, WorldSize: 2, Rank: 1,
			DropLast: false, Columns: []string{"id"}, MemoryBudget: budget})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}
	l := newLoader(64 << 10)
	end := l.StepsPerEpoch()
	_, want := collect(t, l, loader.StreamOptions{})
	for _, k := range []int{1, 2, 3} {
		for _, start := range []int64{0, 5, end - 1, end} {
			for _, coalesce := range []int64{0, 1 << 30} {
				got := make([][]int64, end)
				for s := start; s < end; s++ {
					got[s] = slices.Repeat([]int64{-1}, len(want[s]))
				}
				var pieces []piece // of every worker's batches, for Merge
				for w := range k {
					so := loader.StreamOptions{StartStep: start, Worker: w, NumWorkers: k, ShareSteps: true, CoalesceBytes: coalesce}
					for b := range shared(t, l, so) {
						pieces = append(pieces, piecesOf(b)...)
						vals := b.Record.Column(0).(*array.Int64).Int64Values()
						for i, p := range b.Places {
							step, at := b.Step+int64(p.Step), int(p.Index)
							if step < start || step >= end || p.Step >= int32(b.Steps) || at >= len(got[step]) || got[step][at] != -1 {
								t.Fatalf("K=%d t0=%d worker %d: batch of steps %d+%d places a row at %+v", k, start, w, b.Step, b.Steps, p)
							}
							if i > 0 && (p.Step < b.Places[i-1].Step || p.Step == b.Places[i-1].Step && p.Index <= b.Places[i-1].Index) {
								t.Fatalf("K=%d t0=%d worker %d: places %+v then %+v, out of order", k, start, w, b.Places[i-1], p)
							}
							got[step][at] = vals[i]
						}
					}
				}
				for s := start; s < end; s++ {
					if !slices.Equal(got[s], want[s]) {
						t.Fatalf("K=%d t0=%d coalesce %d: the workers' rows of step %d merge to %v, want %v", k, start, coalesce, s, got[s], want[s])
					}
				}
				dealt := slices.Clone(want)
				clear(dealt[:start])
				checkMerge(t, pieces, dealt, 3)
			}
		}
	}

	// Row groups decoded by k workers dealing with so, each with budget/k.
	const budget = 12 << 10
	decoded := func(so loader.StreamOptions, k int) int64 {
		var n int64
		for w := range k {
			so.Worker, so.NumWorkers = w, k
			s, err := newLoader(budget/int64(k)).Stream(ctx, so)
			if err != nil {
				t.Fatal(err)
			}
			for b, err := range s.All(ctx) {
				if err != nil {
					t.Fatal(err)
				}
				b.Record.Release()
			}
			n += s.Stats().RowGroups
			s.Close()
		}
		return n
	}
	one := decoded(loader.StreamOptions{}, 1)
	share := decoded(loader.StreamOptions{ShareSteps: true}, 3)
	turns := decoded(loader.StreamOptions{Run: 4}, 3)
	if one < 2*26 {
		t.Fatalf("one stream decoded %d row groups, 26 in all: not a table larger than the budget", one)
	}
	if share > one*5/4 || share*2 > turns {
		t.Errorf("sharing workers decoded %d row groups, workers taking turns %d, one stream %d", share, turns, one)
	}
}

// shared iterates over the batches of a stream with so, checking that each
// row has a place, and releases each after the loop body.
func shared(t *testing.T, l *loader.Loader, so loader.StreamOptions) func(func(loader.Batch) bool) {
	return func(yield func(loader.Batch) bool) {
		s, err := l.Stream(context.Background(), so)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		for b, err := range s.All(context.Background()) {
			if err != nil {
				t.Fatal(err)
			}
			if int64(len(b.Places)) != b.Record.NumRows() {
				t.Fatalf("batch of steps %d+%d: %d rows, %d places", b.Step, b.Steps, b.Record.NumRows(), len(b.Places))
			}
			ok := yield(b)
			b.Record.Release()
			if !ok {
				return
			}
		}
	}
}

// piece is one worker's rows of one step, and their places.
type piece struct {
	step   int64
	ids    []int64
	places []loader.Place // Step 0
}

// piecesOf cuts a shared stream's batch into its steps' pieces.
func piecesOf(b loader.Batch) []piece {
	vals := b.Record.Column(0).(*array.Int64).Int64Values()
	var out []piece
	for i, p := range b.Places {
		if step := b.Step + int64(p.Step); len(out) == 0 || out[len(out)-1].step != step {
			out = append(out, piece{step: step})
		}
		last := &out[len(out)-1]
		last.ids = append(last.ids, vals[i])
		last.places = append(last.places, loader.Place{Index: p.Index})
	}
	return out
}

// checkMerge merges pieces, every worker's rows of the steps, in runs of
// run steps, as many record batches (one a piece) in an order that is not
// the steps', and checks that each run holds the rows of want's steps, in
// order (none for a step not dealt). Pieces repeated, missing a row or out of order fail to merge.
func checkMerge(t *testing.T, pieces []piece, want [][]int64, run int64) {
	t.Helper()
	ctx := context.Background()
	mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
	defer mem.AssertSize(t, 0)
	runs := map[int64][]piece{}
	for _, p := range pieces {
		runs[p.step/run] = append(runs[p.step/run], p)
	}
	for r, ps := range runs {
		slices.Reverse(ps)
		recs := make([]arrow.RecordBatch, len(ps))
		places := make([][]loader.Place, len(ps))
		for i, p := range ps {
			b := array.NewInt64Builder(mem)
			b.AppendValues(p.ids, nil)
			col := b.NewArray()
			recs[i] = array.NewRecordBatch(arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}}, nil), []arrow.Array{col}, int64(len(p.ids)))
			col.Release()
			b.Release()
			for _, pl := range p.places {
				places[i] = append(places[i], loader.Place{Step: int32(p.step - r*run), Index: pl.Index})
			}
		}
		first, last := r*run, min(r*run+run, int64(len(want)))
		rec, sizes, err := loader.Merge(ctx, mem, recs, places, int(last-first))
		if err != nil {
			t.Fatal(err)
		}
		var wantIDs, wantSizes []int64
		for s := first; s < last; s++ {
			wantIDs = append(wantIDs, want[s]...)
			wantSizes = append(wantSizes, int64(len(want[s])))
		}
		if got := rec.Column(0).(*array.Int64).Int64Values(); !slices.Equal(got, wantIDs) || !slices.Equal(sizes, wantSizes) {
			t.Fatalf("run %d merges to %v in steps of %v, want %v in steps of %v", r, got, sizes, wantIDs, wantSizes)
		}
		rec.Release()
		if len(ps) > 0 && len(places[0]) > 1 {
			bad := [][][]loader.Place{
				append(slices.Clone(places), places[0]),                                                                       // a piece twice
				append([][]loader.Place{places[0][1:]}, places[1:]...),                                                        // a row missing
				append([][]loader.Place{append([]loader.Place{places[0][1], places[0][0]}, places[0][2:]...)}, places[1:]...), // out of order
			}
			badRecs := [][]arrow.RecordBatch{append(slices.Clone(recs), recs[0]), append([]arrow.RecordBatch{recs[0].NewSlice(1, recs[0].NumRows())}, recs[1:]...), recs}
			for i := range bad {
				if _, _, err := loader.Merge(ctx, mem, badRecs[i], bad[i], int(last-first)); errcode.Of(err) != errcode.InvalidArgument {
					t.Fatalf("run %d, bad places %d: Merge = %v, want InvalidArgument", r, i, err)
				}
			}
			badRecs[1][0].Release()
		}
		for _, rec := range recs {
			rec.Release()
		}
	}
}
