package loader_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/croupier-data/croupier/internal/seedtest"
	"github.com/croupier-data/croupier/loader"
)

// TestMixtureOfFollowerAndTable checks a learner's mix: fresh rows of a
// growing table that a Follower deals, 70/30 with a pinned table. The steps
// dealt while versions are appended are the first of those dealt once the
// appends are done; those are the same at world sizes 1 to 4 with 0 to 3
// workers; each slot holds its source's own step (the follow stream's
// global step, the loader's step of its epoch); and a checkpoint taken
// after any step, through JSON, resumes at another world size and worker
// count with exactly the steps that follow.
func TestMixtureOfFollowerAndTable(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seedtest.Seed(t), 31))
	const g = 12 // divides among 1 to 4 ranks
	sizes := []int64{rng.Int64N(40)}
	var more []int64
	for range 6 + rng.IntN(6) {
		more = append(more, 1+rng.Int64N(50))
	}
	uri := growingTable(t, sizes)
	pinned := mixTables(t, 1, 5*g)[1] // ids from 100,000: apart from the followed table's
	fo := loader.FollowOptions{RowsPerRound: rng.Int64N(40), ReplayCount: rng.Int64N(4),
		WaitTimeout: 20 * time.Millisecond, PollInterval: time.Millisecond}
	opts := loader.MixtureOptions{Seed: rng.Uint64(), Weights: []float64{0.7, 0.3},
		OnExhausted: loader.ExhaustedCycle, Slots: 1 + rng.Int64N(3)}
	mix := func(fo loader.FollowOptions, w int64) func(r int64) *loader.Mixture {
		return func(r int64) *loader.Mixture {
			f := newFollower(t, uri, loader.Options{GlobalBatchSize: g, WorldSize: w, Rank: r, Columns: []string{"id"},
				ShuffleSeed: 5, MemoryBudget: 1 << 20}, fo)
			l := newLoader(t, pinned, loader.Options{GlobalBatchSize: g, WorldSize: w, Rank: r, Columns: []string{"id"},
				ShuffleSeed: 6, DropLast: true})
			t.Cleanup(func() { l.Close() })
			m, err := loader.NewMixture([]loader.Source{f, l}, opts)
			if err != nil {
				t.Fatal(err)
			}
			return m
		}
	}
	start := mix(fo, 1)(0).Start()

	want := dealWhileAppending(t, mix, fo, start, func() { appendRows(t, uri, sizes[0], more) })

	// Each slot is its source's own step.
	followed := sortedSteps(follow(t, uri, loader.Options{GlobalBatchSize: g, Columns: []string{"id"}, ShuffleSeed: 5,
		MemoryBudget: 1 << 20}, fo, 1, 1, nil, 0))
	table := newLoader(t, pinned, loader.Options{GlobalBatchSize: g, Columns: []string{"id"}, ShuffleSeed: 6, DropLast: true})
	defer table.Close()
	var fromFollower int
	for i, slots := range want.slots {
		for j, sl := range slots {
			var ids []int64
			if sl.Source == 0 {
				fromFollower++
				if sl.Step < int64(len(followed)) {
					ids = followed[sl.Step]
				}
			} else {
				rows, err := table.RowIDs(ctx, sl.Epoch, sl.Step)
				if err != nil {
					t.Fatal(err)
				}
				for _, id := range rows {
					ids = append(ids, int64(id)+100_000)
				}
				slices.Sort(ids)
			}
			if !slices.Equal(want.rows[i][j], ids) {
				t.Fatalf("step %d slot %d (%+v): rows %v, its source's step holds %v", i, j, sl, want.rows[i][j], ids)
			}
		}
	}
	if fromFollower == 0 {
		t.Fatal("no slot drew the followed table")
	}

	checkWorldSizes(t, func(w int64) func(int64) *loader.Mixture { return mix(fo, w) }, start, want, rng)
}

// TestMixtureProportionsWithFollower checks that over 10,000 steps a
// followed table drawn at weight 0.7 and a pinned table at 0.3 fill their
// shares of the slots within 1 % (absolute), for several seeds: the
// follower's steps come as the draws ask, and a source that waits changes
// no draw.
func TestMixtureProportionsWithFollower(t *testing.T) {
	ctx := context.Background()
	const steps = 10_000
	uri := growingTable(t, []int64{2_000, 2_000, 2_000, 2_000})
	pinned := mixTables(t, 1, 500)[1]
	for seed := range uint64(3) {
		f := newFollower(t, uri, loader.Options{GlobalBatchSize: 1, Columns: []string{"id"}},
			loader.FollowOptions{WaitTimeout: time.Millisecond, PollInterval: time.Millisecond})
		l := newLoader(t, pinned, loader.Options{GlobalBatchSize: 1, Columns: []string{"id"}})
		t.Cleanup(func() { l.Close() })
		m, err := loader.NewMixture([]loader.Source{f, l}, loader.MixtureOptions{Seed: seed, Weights: []float64{0.7, 0.3},
			OnExhausted: loader.ExhaustedCycle})
		if err != nil {
			t.Fatal(err)
		}
		var followed int
		pos := m.Start()
		for range steps {
			slots, next, ok, err := m.Next(ctx, pos)
			if err != nil || !ok {
				t.Fatalf("seed %d, step %d: ok %v, %v", seed, pos.Step, ok, err)
			}
			if slots[0].Source == 0 {
				followed++
			}
			pos = next
		}
		if share := float64(followed) / steps; share < 0.69 || share > 0.71 {
			t.Errorf("seed %d: the followed table filled %.4f of %d slots, want 0.7 ± 0.01", seed, share, steps)
		}
	}
}

// TestNestedMixtureWithFollower checks a learner's mix whose replay part is
// a mixture of its own: fresh rows a Follower deals, 70/30 with a mixture
// of two pinned tables. The steps dealt while versions are appended are the
// first of those dealt once the appends are done; those are the same at
// world sizes 1 to 4 with 0 to 3 workers; and a checkpoint taken after any
// step, through JSON, resumes at another world size and worker count with
// exactly the steps that follow.
func TestNestedMixtureWithFollower(t *testing.T) {
	rng := rand.New(rand.NewPCG(seedtest.Seed(t), 37))
	const g = 12
	var more []int64
	// At least 160 rows appended: 13 steps or more, whose 39 slots all
	// miss the replay mixture (drawn at 0.3) once in a million runs.
	for range 8 + rng.IntN(6) {
		more = append(more, 20+rng.Int64N(50))
	}
	first := rng.Int64N(40)
	uri := growingTable(t, []int64{first})
	pinned := mixTables(t, 1, 5*g, 3*g)[1:]
	fo := loader.FollowOptions{RowsPerRound: rng.Int64N(40), ReplayCount: rng.Int64N(4),
		WaitTimeout: 20 * time.Millisecond, PollInterval: time.Millisecond}
	opts := loader.MixtureOptions{Seed: rng.Uint64(), Weights: []float64{0.7, 0.3},
		OnExhausted: loader.ExhaustedCycle, Slots: 3}
	replayOpts := loader.MixtureOptions{Seed: rng.Uint64(), Weights: []float64{1, 1},
		OnExhausted: loader.ExhaustedCycle, Slots: 1 + rng.Int64N(2)}
	mix := func(fo loader.FollowOptions, w int64) func(r int64) *loader.Mixture {
		return func(r int64) *loader.Mixture {
			f := newFollower(t, uri, loader.Options{GlobalBatchSize: g, WorldSize: w, Rank: r, Columns: []string{"id"},
				ShuffleSeed: 5, MemoryBudget: 1 << 20}, fo)
			replay, err := loader.NewMixture(mixLoaders(t, pinned, g, w, r), replayOpts)
			if err != nil {
				t.Fatal(err)
			}
			m, err := loader.NewMixture([]loader.Source{f, replay}, opts)
			if err != nil {
				t.Fatal(err)
			}
			return m
		}
	}
	start := mix(fo, 1)(0).Start()

	want := dealWhileAppending(t, mix, fo, start, func() { appendRows(t, uri, first, more) })
	nested := 0
	for _, slots := range want.slots {
		for _, sl := range slots {
			if sl.Slots != nil {
				nested++
			}
		}
	}
	if nested == 0 {
		t.Fatalf("no slot of %d steps drew the replay mixture", len(want.slots))
	}

	checkWorldSizes(t, func(w int64) func(int64) *loader.Mixture { return mix(fo, w) }, start, want, rng)
}

// checkWorldSizes checks that the mixtures mix(w) makes deal want from start
// at world sizes 1 to 4 with 0 to 3 workers, and that a checkpoint after a
// random step of want, through JSON, resumes there with exactly the steps
// that follow.
func checkWorldSizes(t *testing.T, mix func(w int64) func(r int64) *loader.Mixture, start loader.MixturePosition, want mixRun, rng *rand.Rand) {
	t.Helper()
	for w := int64(1); w <= 4; w++ {
		k := rng.IntN(4)
		if got := dealMixture(t, mix(w), start, w, k, 1<<30); !equalRuns(got, want) {
			t.Fatalf("at world size %d with %d workers the steps differ", w, k)
		}
		c := rng.IntN(len(want.slots))
		pos := resumeThroughJSON(t, mix(1)(0), mix(w)(0), want.next[c])
		rest := mixRun{slots: want.slots[c+1:], rows: want.rows[c+1:]}
		if got := dealMixture(t, mix(w), pos, w, k, 1<<30); !equalRuns(got, rest) {
			t.Fatalf("resumed after step %d at world size %d with %d workers: %d steps differ from the %d after it",
				c, w, k, len(got.slots), len(rest.slots))
		}
	}
}

// dealWhileAppending deals the mixture mix(fo, 1) makes from start while
// appending runs, its follower waiting up to a second for the versions of
// a round, then again once they are all committed, and checks that the
// steps dealt while appending are the first of those after; it returns
// those after.
func dealWhileAppending(t *testing.T, mix func(loader.FollowOptions, int64) func(int64) *loader.Mixture, fo loader.FollowOptions,
	start loader.MixturePosition, appending func()) mixRun {
	t.Helper()
	live := fo
	live.WaitTimeout = time.Second
	var wg sync.WaitGroup
	wg.Go(appending)
	during := dealMixture(t, mix(live, 1), start, 1, 0, 1<<30)
	wg.Wait()
	want := dealMixture(t, mix(fo, 1), start, 1, 0, 1<<30)
	if len(want.slots) == 0 || len(during.slots) > len(want.slots) ||
		!equalRuns(during, mixRun{slots: want.slots[:len(during.slots)], rows: want.rows[:len(during.slots)]}) {
		t.Fatalf("%d steps dealt while appending are not the first of the %d dealt after", len(during.slots), len(want.slots))
	}
	return want
}
