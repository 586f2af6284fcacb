package loader_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/internal/tabletest"
	"github.com/croupier-data/croupier/loader"
	"github.com/croupier-data/croupier/permutation"
)

// groupedSplit writes a table of groups of 1 to maxSize rows, scattered over
// the table, and returns the shuffled split of a permutation grouped by
// problem_id.
func groupedSplit(t *testing.T, seed uint64, groups, maxSize int) *permutation.Split {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 2))
	var keys []int64
	for g := range groups {
		for range 1 + rng.IntN(maxSize) {
			keys = append(keys, int64(g))
		}
	}
	rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	dir := t.TempDir()
	tabletest.WriteGroups(t, dir, keys, 256)
	tb, err := table.Open(context.Background(), "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	p, err := permutation.Build(context.Background(), tb, permutation.Spec{GroupBy: []string{"problem_id"},
		Shuffle: &permutation.ShuffleSpec{Seed: seed}}, "file://"+t.TempDir(), permutation.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p.Splits()[0]
}

// dealt is where a row went: its global step, rank and worker.
type dealt struct{ step, rank, worker int64 }

// dealGroups streams one epoch from step start for every rank of w and every
// worker of k, and returns where each row went, keyed by row id, and each
// row's key. It fails on a row dealt twice.
func dealGroups(t *testing.T, s *permutation.Split, g, w int64, k int, dropLast bool, epoch, start int64) (map[int64]dealt, map[int64]int64) {
	t.Helper()
	where, keys := map[int64]dealt{}, map[int64]int64{}
	for r := range w {
		l, err := loader.New(s.Permutations().Table(), s, loader.Options{GlobalBatchSize: g, WorldSize: w, Rank: r,
			ShuffleSeed: 3, DropLast: dropLast, Columns: []string{"id", "problem_id"}})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		for worker := range max(k, 1) {
			st, err := l.Stream(context.Background(), loader.StreamOptions{Epoch: epoch, StartStep: start, Worker: worker, NumWorkers: k, CoalesceBytes: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			for b, err := range st.All(context.Background()) {
				if err != nil {
					t.Fatal(err)
				}
				if b.Steps != 1 {
					t.Fatalf("a batch of a grouped deal holds %d steps", b.Steps)
				}
				ids := b.Record.Column(0).(*array.Int64).Int64Values()
				problems := b.Record.Column(1).(*array.Int64).Int64Values()
				for i, id := range ids {
					if d, ok := where[id]; ok {
						t.Fatalf("W=%d K=%d: row %d dealt at %+v and at step %d rank %d", w, k, id, d, b.Step, r)
					}
					where[id], keys[id] = dealt{b.Step, r, int64(worker)}, problems[i]
				}
				b.Record.Release()
			}
			st.Close()
		}
	}
	return where, keys
}

// TestGroupedDeal deals a permutation grouped by problem_id, groups of 1 to
// 6 rows, at world sizes 1 to 8 and 0 to 3 workers: every group lies in one
// step, on one rank, in one worker; each step holds the same rows at every
// world size; the ranks' shares differ by at most the largest group; every
// row is dealt once per epoch (with drop_last=false), and a run resumed at
// another world size deals the same steps.
func TestGroupedDeal(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	s := groupedSplit(t, seed, 1500, 6)
	const g = 840 // a multiple of every world size from 1 to 8
	for _, dropLast := range []bool{false, true} {
		for _, epoch := range []int64{0, 1} {
			var ref map[int64][]int64 // each step's rows, sorted, at W = 1
			for w := int64(1); w <= 8; w++ {
				k := int(w % 4)
				where, keys := dealGroups(t, s, g, w, k, dropLast, epoch, 0)
				what := fmt.Sprintf("drop_last=%t epoch %d W=%d K=%d", dropLast, epoch, w, k)
				// One group, one place.
				place := map[int64]dealt{}
				for id, d := range where {
					if p, ok := place[keys[id]]; ok && p != d {
						t.Fatalf("%s: group %d dealt at %+v and %+v", what, keys[id], p, d)
					}
					place[keys[id]] = d
				}
				steps := map[int64][]int64{}
				loads := map[[2]int64]int64{}
				for id, d := range where {
					steps[d.step] = append(steps[d.step], id)
					loads[[2]int64{d.step, d.rank}]++
				}
				for t0, ids := range steps {
					slices.Sort(ids)
					var lo, hi int64 = 1 << 62, 0
					for r := range w {
						lo, hi = min(lo, loads[[2]int64{t0, r}]), max(hi, loads[[2]int64{t0, r}])
					}
					if hi-lo > 6 {
						t.Errorf("%s: step %d's ranks hold %d to %d rows", what, t0, lo, hi)
					}
				}
				if !dropLast && int64(len(where)) != s.Len() {
					t.Fatalf("%s: %d rows dealt of %d", what, len(where), s.Len())
				}
				if ref == nil {
					ref = steps
					continue
				}
				if !maps.EqualFunc(ref, steps, slices.Equal) {
					t.Fatalf("%s: the steps hold other rows than at W=1", what)
				}
			}
			// Resume at step 3 at another world size: the same steps.
			where, _ := dealGroups(t, s, g, 5, 2, dropLast, epoch, 3)
			steps := map[int64][]int64{}
			for id, d := range where {
				steps[d.step] = append(steps[d.step], id)
			}
			for t0 := range ref {
				slices.Sort(steps[t0])
				if want := ref[t0]; t0 >= 3 && !slices.Equal(steps[t0], want) || t0 < 3 && steps[t0] != nil {
					t.Fatalf("drop_last=%t epoch %d: resumed step %d holds %d rows, want %d", dropLast, epoch, t0, len(steps[t0]), len(want))
				}
			}
		}
	}
}

// TestGroupedSteps: a grouped deal's step t holds the groups starting at
// positions [t·G, (t+1)·G) of the epoch order: ⌊M/G⌋ steps, one more for the
// rest without drop_last.
func TestGroupedSteps(t *testing.T) {
	s := groupedSplit(t, 4, 200, 5)
	ctx := context.Background()
	for _, dropLast := range []bool{true, false} {
		l, err := loader.New(s.Permutations().Table(), s, loader.Options{GlobalBatchSize: 60, WorldSize: 3, ShuffleSeed: 1, DropLast: dropLast})
		if err != nil {
			t.Fatal(err)
		}
		want := s.Len() / 60
		if !dropLast && s.Len()%60 != 0 {
			want++
		}
		if l.StepsPerEpoch() != want {
			t.Errorf("drop_last=%t: %d steps, want %d", dropLast, l.StepsPerEpoch(), want)
		}
		order := l.EpochOrder(1)
		all, err := order.RowIDs(ctx, 0, order.Len())
		if err != nil {
			t.Fatal(err)
		}
		bounds, err := order.(permutation.GroupedOrder).Groups(ctx, 0, order.Len())
		if err != nil {
			t.Fatal(err)
		}
		for step := range l.StepsPerEpoch() {
			var want []uint64
			for i := range len(bounds) - 1 {
				if bounds[i] >= step*60 && bounds[i] < (step+1)*60 {
					want = append(want, all[bounds[i]:bounds[i+1]]...)
				}
			}
			ids, err := l.RowIDs(ctx, 1, step) // rank 0 alone is not the step: gather the others
			if err != nil {
				t.Fatal(err)
			}
			for r := int64(1); r < 3; r++ {
				more, err := l.Deal().Batch(ctx, order, step, r)
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, more...)
			}
			slices.Sort(ids)
			if slices.Sort(want); !slices.Equal(ids, want) {
				t.Fatalf("drop_last=%t: step %d holds %v, want %v", dropLast, step, ids, want)
			}
		}
		l.Close()
	}
}

// TestPlace: Deal.Place names the step and rank whose batch holds each
// position, for the streams of a plain deal and the groups of a grouped one,
// and no step for the positions an epoch does not deal.
func TestPlace(t *testing.T) {
	ctx := context.Background()
	s := groupedSplit(t, 5, 150, 5)
	check := func(what string, d loader.Deal, order permutation.Order) {
		t.Helper()
		all, err := order.RowIDs(ctx, 0, order.Len())
		if err != nil {
			t.Fatal(err)
		}
		at := map[uint64][2]int64{}
		for step := range d.Steps() {
			for r := range d.W {
				ids, err := d.Batch(ctx, order, step, r)
				if err != nil {
					t.Fatal(err)
				}
				for _, id := range ids {
					at[id] = [2]int64{step, r}
				}
			}
		}
		for p, id := range all {
			step, rank, ok, err := d.Place(ctx, order, int64(p))
			if err != nil {
				t.Fatal(err)
			}
			want, dealt := at[id]
			if ok != dealt || ok && [2]int64{step, rank} != want {
				t.Fatalf("%s: position %d placed at step %d rank %d (%t), dealt at %v (%t)", what, p, step, rank, ok, want, dealt)
			}
		}
	}
	for _, dropLast := range []bool{true, false} {
		d, err := loader.NewDeal(203, 8, 16, 4, dropLast)
		if err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprintf("plain drop_last=%t", dropLast), d, permutation.Identity{N: 203})
		l, err := loader.New(s.Permutations().Table(), s, loader.Options{GlobalBatchSize: 36, WorldSize: 3, ShuffleSeed: 2, DropLast: dropLast})
		if err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprintf("grouped drop_last=%t", dropLast), l.Deal(), l.EpochOrder(1))
		l.Close()
	}
}
