package loader_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/internal/seedtest"
	"github.com/croupier-data/croupier/internal/tabletest"
	"github.com/croupier-data/croupier/loader"
)

// mixTables writes one table per size, the ids of table i starting at
// 100,000·i, and opens them.
func mixTables(t *testing.T, sizes ...int64) []*table.Table {
	t.Helper()
	var out []*table.Table
	for i, n := range sizes {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "part-000.parquet"), tabletest.Encode(t, 100_000*int64(i), n, 64), 0o644); err != nil {
			t.Fatal(err)
		}
		out = append(out, openURI(t, "file://"+dir))
	}
	return out
}

func openURI(t *testing.T, uri string) *table.Table {
	t.Helper()
	tb, err := table.Open(context.Background(), uri)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tb.Close() })
	return tb
}

// mixLoaders opens a loader of every table for rank r of w.
func mixLoaders(t *testing.T, tables []*table.Table, g, w, r int64) []loader.Source {
	t.Helper()
	var out []loader.Source
	for _, tb := range tables {
		l := newLoader(t, tb, loader.Options{GlobalBatchSize: g, WorldSize: w, Rank: r, Columns: []string{"id"}, DropLast: true})
		t.Cleanup(func() { l.Close() })
		out = append(out, l)
	}
	return out
}

// TestMixtureGolden checks the slots of a scheduled mixture of sources of
// 6, 12 and 25 steps against golden values, which
// python/tests/test_mixture.py checks too (test_golden_plan): the sources
// of the slots of its steps, under each policy, until its iteration ends.
func TestMixtureGolden(t *testing.T) {
	ctx := context.Background()
	sources := mixLoaders(t, mixTables(t, 48, 96, 200), 8, 1, 0)
	for _, c := range []struct {
		policy, want string
		last         []loader.MixtureSlot
	}{
		{loader.ExhaustedStop, "010200012112222210", []loader.MixtureSlot{{2, 0, 6, nil}, {1, 0, 4, nil}, {0, 0, 5, nil}}},
		{loader.ExhaustedCycle, "01020001211222221020122001022000022202002022222100202202000000022202000222020002",
			[]loader.MixtureSlot{{0, 5, 5, nil}, {0, 6, 0, nil}, {2, 1, 9, nil}}},
		{loader.ExhaustedRenormalize, "010200012112222210211221121221122222222222", []loader.MixtureSlot{{2, 0, 21, nil}, {2, 0, 22, nil}, {2, 0, 23, nil}}},
	} {
		m, err := loader.NewMixture(sources, loader.MixtureOptions{Seed: 11, Weights: []float64{0.7, 0.2, 0.1},
			Schedule:    []loader.MixturePoint{{Step: 10, Weights: []float64{0.1, 0.2, 0.7}}, {Step: 30, Weights: []float64{1, 0, 1}}},
			OnExhausted: c.policy, Slots: 2})
		if err != nil {
			t.Fatal(err)
		}
		var got strings.Builder
		var all []loader.MixtureSlot
		for pos := m.Start(); pos.Step < 40; {
			slots, next, ok, err := m.Next(ctx, pos)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
			for _, s := range slots {
				fmt.Fprint(&got, s.Source)
			}
			all, pos = append(all, slots...), next
		}
		if got.String() != c.want || !reflect.DeepEqual(all[len(all)-3:], c.last) {
			t.Errorf("%s: sources %s, last slots %v; want %s, %v", c.policy, got.String(), all[len(all)-3:], c.want, c.last)
		}
	}
}

// TestMixtureWeightsAt checks the schedule: linear between points, the last
// point's after it.
func TestMixtureWeightsAt(t *testing.T) {
	m, err := loader.NewMixture(mixLoaders(t, mixTables(t, 16, 16), 8, 1, 0), loader.MixtureOptions{Weights: []float64{1, 0},
		Schedule: []loader.MixturePoint{{Step: 10, Weights: []float64{0, 1}}, {Step: 20, Weights: []float64{1, 1}}}})
	if err != nil {
		t.Fatal(err)
	}
	for step, want := range map[int64][]float64{0: {1, 0}, 5: {0.5, 0.5}, 15: {0.5, 1}, 99: {1, 1}} {
		if got := m.WeightsAt(step); !slices.Equal(got, want) {
			t.Errorf("weights at %d: %v, want %v", step, got, want)
		}
	}
}

// TestMixtureEnd checks where the iteration after an ended one starts: a
// source whose epoch ended renews to its next epoch, one at the last epoch
// there is stays where it is, and a position that is not its source's is
// refused, naming the source.
func TestMixtureEnd(t *testing.T) {
	ctx := context.Background()
	sources := mixLoaders(t, mixTables(t, 16, 16), 8, 1, 0)
	m, err := loader.NewMixture(sources, loader.MixtureOptions{Weights: []float64{1, 1}})
	if err != nil {
		t.Fatal(err)
	}
	steps := sources[0].(*loader.Loader).StepsPerEpoch()
	last := loader.SourcePosition{Epoch: math.MaxInt64, StepsConsumed: steps}
	pos := loader.MixturePosition{Step: 9, Sources: []loader.SourcePosition{{Epoch: 2, StepsConsumed: steps}, last},
		OutOfDraw: []bool{true, true}}
	next, err := m.End(ctx, pos)
	if err != nil {
		t.Fatal(err)
	}
	want := []loader.SourcePosition{{Epoch: 3}, last}
	if !slices.Equal(next.Sources, want) || next.Step != 9 || slices.Contains(next.OutOfDraw, true) {
		t.Fatalf("End = %+v, want sources %+v at step 9, all in the draw", next, want)
	}
	pos.Sources[1] = loader.SourcePosition{Epoch: 1, Round: &loader.FollowPosition{}}
	if _, err := m.End(ctx, pos); errcode.Of(err) != errcode.InvalidArgument || !strings.Contains(err.Error(), "source 1") {
		t.Fatalf("End of a follower's position in a loader's place = %v, want InvalidArgument naming source 1", err)
	}
}

// mixRun is what a mixture deals: each step's slots, each slot's rows
// (every rank's and worker's together, sorted), and the position after each
// step.
type mixRun struct {
	slots [][]loader.MixtureSlot
	rows  [][][]int64
	next  []loader.MixturePosition
}

// dealMixture deals the mixture mix(r) makes for each rank r of w from pos
// with k workers, up to limit steps, every rank's and worker's share joined.
func dealMixture(t *testing.T, mix func(r int64) *loader.Mixture, pos loader.MixturePosition, w int64, k, limit int) mixRun {
	t.Helper()
	ctx := context.Background()
	var run mixRun
	for r := range w {
		for worker := range max(k, 1) {
			s, err := mix(r).Stream(ctx, pos, loader.MixtureStreamOptions{Worker: worker, NumWorkers: k})
			if err != nil {
				t.Fatal(err)
			}
			for {
				b, err := s.Next(ctx)
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				i := int(b.Step - pos.Step)
				if i%max(k, 1) != worker {
					t.Fatalf("worker %d of %d dealt step %d from %d", worker, k, b.Step, pos.Step)
				}
				if i >= limit {
					releaseAll(b)
					break
				}
				for len(run.slots) <= i {
					run.slots, run.rows, run.next = append(run.slots, nil), append(run.rows, nil), append(run.next, loader.MixturePosition{})
				}
				if run.slots[i] == nil {
					run.slots[i], run.rows[i], run.next[i] = b.Slots, make([][]int64, len(b.Records)), b.Next
				} else if !reflect.DeepEqual(run.slots[i], b.Slots) {
					t.Fatalf("rank %d: step %d slots %v, another rank's %v", r, b.Step, b.Slots, run.slots[i])
				}
				for j, rec := range b.Records {
					run.rows[i][j] = append(run.rows[i][j], rec.Column(0).(*array.Int64).Int64Values()...)
				}
				releaseAll(b)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, step := range run.rows {
		for _, rows := range step {
			slices.Sort(rows)
		}
	}
	return run
}

func releaseAll(b loader.MixtureBatch) {
	for _, rec := range b.Records {
		rec.Release()
	}
}

// TestMixtureProperties checks, for random weights, policies and slots,
// that every mixture step holds the same sources' steps and the same rows
// at world sizes 1 to 8 with 0 to 3 workers; that no row of a source comes
// twice in one of its epochs, and an epoch dealt whole deals every row;
// and that a checkpoint taken after a random step (through JSON) resumes at
// another world size and worker count with exactly the steps that follow.
func TestMixtureProperties(t *testing.T) {
	const g, limit = 840, 30 // 840 divides among 1 to 8 ranks
	rng := rand.New(rand.NewPCG(seedtest.Seed(t), 0))
	sizes := []int64{2 * g, 3 * g, 5 * g}
	tables := mixTables(t, sizes...)
	for range 4 {
		opts := loader.MixtureOptions{Seed: rng.Uint64(), Weights: make([]float64, 3),
			OnExhausted: loader.ExhaustedPolicies[rng.IntN(3)], Slots: 1 + rng.Int64N(3)}
		for i := range opts.Weights {
			opts.Weights[i] = float64(rng.IntN(4)) * rng.Float64()
		}
		opts.Weights[rng.IntN(3)] = 1 + rng.Float64()
		if rng.IntN(2) == 0 {
			opts.Schedule = []loader.MixturePoint{{Step: 1 + rng.Int64N(20), Weights: []float64{rng.Float64(), rng.Float64(), 1}}}
		}
		mixtures := map[int64][]*loader.Mixture{}
		mix := func(w int64) func(r int64) *loader.Mixture {
			if mixtures[w] == nil {
				for r := range w {
					m, err := loader.NewMixture(mixLoaders(t, tables, g, w, r), opts)
					if err != nil {
						t.Fatal(err)
					}
					mixtures[w] = append(mixtures[w], m)
				}
			}
			return func(r int64) *loader.Mixture { return mixtures[w][r] }
		}
		start := mix(1)(0).Start()
		want := dealMixture(t, mix(1), start, 1, 0, limit)

		seen := map[loader.SourcePosition]map[int64]bool{} // rows by source (in Epoch) and epoch
		steps := map[loader.SourcePosition]int64{}
		for i, slots := range want.slots {
			for j, sl := range slots {
				key := loader.SourcePosition{Epoch: int64(sl.Source), StepsConsumed: sl.Epoch}
				if seen[key] == nil {
					seen[key] = map[int64]bool{}
				}
				for _, id := range want.rows[i][j] {
					if seen[key][id] {
						t.Fatalf("%+v: row %d twice in epoch %d of source %d", opts, id, sl.Epoch, sl.Source)
					}
					seen[key][id] = true
				}
				steps[key]++
			}
		}
		for key, n := range steps {
			if whole := sizes[key.Epoch] / g; n == whole && int64(len(seen[key])) != sizes[key.Epoch] {
				t.Fatalf("%+v: epoch %d of source %d dealt whole holds %d rows of %d", opts, key.StepsConsumed, key.Epoch, len(seen[key]), sizes[key.Epoch])
			}
		}

		w, k := 1+rng.Int64N(8), rng.IntN(4)
		if got := dealMixture(t, mix(w), start, w, k, limit); !equalRuns(got, want) {
			t.Fatalf("%+v: at world size %d with %d workers the steps differ", opts, w, k)
		}
		if len(want.slots) == 0 {
			continue
		}
		c := rng.IntN(len(want.slots))
		w, k = 1+rng.Int64N(8), rng.IntN(4)
		pos := resumeThroughJSON(t, mix(1)(0), mix(w)(0), want.next[c])
		got := dealMixture(t, mix(w), pos, w, k, limit-c-1)
		rest := mixRun{slots: want.slots[c+1:], rows: want.rows[c+1:], next: want.next[c+1:]}
		if !equalRuns(got, rest) {
			t.Fatalf("%+v: resumed after step %d at world size %d with %d workers, the steps differ", opts, c, w, k)
		}
	}
}

func equalRuns(a, b mixRun) bool {
	if len(a.slots) != len(b.slots) {
		return false
	}
	for i := range a.slots {
		if !reflect.DeepEqual(a.slots[i], b.slots[i]) || !slices.EqualFunc(a.rows[i], b.rows[i], slices.Equal) {
			return false
		}
	}
	return true
}

// TestMixtureRefusals checks that bad options, positions and checkpoints
// are refused naming what is wrong.
func TestMixtureRefusals(t *testing.T) {
	ctx := context.Background()
	tables := mixTables(t, 16, 16)
	sources := mixLoaders(t, tables, 8, 1, 0)
	good := loader.MixtureOptions{Seed: 7, Weights: []float64{1, 2}, Schedule: []loader.MixturePoint{{Step: 4, Weights: []float64{1, 1}}}}
	for _, c := range []struct {
		change func(o *loader.MixtureOptions)
		want   string
	}{
		{func(o *loader.MixtureOptions) { o.OnExhausted = "drop" }, "on_exhausted"},
		{func(o *loader.MixtureOptions) { o.Schedule[0].Step = 0 }, "increase"},
		{func(o *loader.MixtureOptions) { o.Schedule[0].Weights = []float64{1} }, "for 2 sources"},
		{func(o *loader.MixtureOptions) { o.Weights = []float64{0, 0} }, "all 0"},
		{func(o *loader.MixtureOptions) { o.Weights = []float64{1, -1} }, ">= 0"},
		{func(o *loader.MixtureOptions) { o.Slots = -1 }, "slots"},
	} {
		o := good
		o.Weights, o.Schedule = slices.Clone(o.Weights), []loader.MixturePoint{{Step: 4, Weights: []float64{1, 1}}}
		c.change(&o)
		if _, err := loader.NewMixture(sources, o); errcode.Of(err) != errcode.InvalidArgument || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: got %v, want InvalidArgument naming %q", o, err, c.want)
		}
	}
	other := mixLoaders(t, tables, 8, 2, 0)
	if _, err := loader.NewMixture([]loader.Source{sources[0], other[1]}, good); err == nil || !strings.Contains(err.Error(), "one rank") {
		t.Errorf("sources of two world sizes: %v", err)
	}
	m, err := loader.NewMixture(sources, good)
	if err != nil {
		t.Fatal(err)
	}
	ckpt := mustCheckpoint(t, m, m.Start())
	for _, c := range []struct {
		change func(o *loader.MixtureOptions)
		want   string
	}{
		{func(o *loader.MixtureOptions) { o.Seed = 8 }, "seed"},
		{func(o *loader.MixtureOptions) { o.Schedule = nil }, "schedule"},
		{func(o *loader.MixtureOptions) { o.OnExhausted = loader.ExhaustedCycle }, "on_exhausted"},
		{func(o *loader.MixtureOptions) { o.Slots = 2 }, "slots"},
	} {
		o := good
		c.change(&o)
		m2, err := loader.NewMixture(sources, o)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m2.Resume(ctx, ckpt); errcode.Of(err) != errcode.InvalidArgument || !strings.Contains(err.Error(), c.want) {
			t.Errorf("resume with %s changed: %v", c.want, err)
		}
	}
	swapped, err := loader.NewMixture([]loader.Source{sources[1], sources[0]}, good)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := swapped.Resume(ctx, ckpt); err == nil || !strings.Contains(err.Error(), "mixture source 0") || !strings.Contains(err.Error(), "table_id") {
		t.Errorf("sources swapped: %v", err)
	}
	if _, _, _, err := m.Next(ctx, loader.MixturePosition{}); errcode.Of(err) != errcode.InvalidArgument {
		t.Errorf("a position of no sources: %v", err)
	}
	if _, err := loader.ParseMixtureCheckpoint([]byte(`{"format": 9}`), "x.json"); err == nil || !strings.Contains(err.Error(), "format") {
		t.Errorf("format 9: %v", err)
	}
}

// TestMixtureStreamAcrossWindows checks a stream of more mixture steps than
// it plans at a time: every rank's and worker's steps hold the slots the
// plan names and each slot the rank's rows of that source step, to the end
// of the iteration, where every row of every source has been dealt once.
func TestMixtureStreamAcrossWindows(t *testing.T) {
	ctx := context.Background()
	sizes := []int64{3000, 4000, 5000}
	tables := mixTables(t, sizes...)
	opts := loader.MixtureOptions{Seed: 9, Weights: []float64{1, 1, 1}, OnExhausted: loader.ExhaustedRenormalize}
	mix := func(w int64) func(int64) *loader.Mixture {
		return func(r int64) *loader.Mixture {
			m, err := loader.NewMixture(mixLoaders(t, tables, 2, w, r), opts)
			if err != nil {
				t.Fatal(err)
			}
			return m
		}
	}
	run := dealMixture(t, mix(2), mix(2)(0).Start(), 2, 2, math.MaxInt)
	if len(run.slots) != 6000 {
		t.Fatalf("%d steps, want 6,000: every source's epoch of 2-row steps", len(run.slots))
	}
	m := mix(1)(0)
	pos := m.Start()
	seen := map[int64]bool{}
	for i, slots := range run.slots {
		want, next, ok, err := m.Next(ctx, pos)
		if err != nil || !ok || !reflect.DeepEqual(slots, want) {
			t.Fatalf("step %d: slots %v, plan %v (%v, %v)", i, slots, want, ok, err)
		}
		for j, sl := range slots {
			ids, err := m.Sources()[sl.Source].(*loader.Loader).RowIDs(ctx, sl.Epoch, sl.Step)
			if err != nil {
				t.Fatal(err)
			}
			rows := make([]int64, len(ids))
			for k, id := range ids {
				rows[k] = 100_000*int64(sl.Source) + int64(id)
				seen[rows[k]] = true
			}
			slices.Sort(rows)
			if !slices.Equal(run.rows[i][j], rows) {
				t.Fatalf("step %d slot %d: rows %v, want %v", i, j, run.rows[i][j], rows)
			}
		}
		pos = next
	}
	if len(seen) != 12000 {
		t.Fatalf("%d rows dealt, want 12,000", len(seen))
	}
}

// resumeThroughJSON returns the position where to resumes the checkpoint
// of from's run at pos, taken through JSON.
func resumeThroughJSON(t *testing.T, from, to *loader.Mixture, pos loader.MixturePosition) loader.MixturePosition {
	t.Helper()
	data, err := json.Marshal(mustCheckpoint(t, from, pos))
	if err != nil {
		t.Fatal(err)
	}
	ckpt, err := loader.ParseMixtureCheckpoint(data, "state.json")
	if err != nil {
		t.Fatal(err)
	}
	resumed, err := to.Resume(context.Background(), ckpt)
	if err != nil {
		t.Fatal(err)
	}
	return resumed
}

// mustCheckpoint returns m's checkpoint at pos.
func mustCheckpoint(t *testing.T, m *loader.Mixture, pos loader.MixturePosition) loader.MixtureCheckpoint {
	t.Helper()
	c, err := m.Checkpoint(pos)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
