package loader_test

import (
	"context"
	"math"
	"slices"
	"testing"

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
