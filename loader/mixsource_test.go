package loader_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/internal/seedtest"
	"github.com/croupier-data/croupier/loader"
)

// leafSlots returns the slots of a step that no mixture fills, depth first
// (the order of MixtureBatch.Records), each with its path of sources.
func leafSlots(prefix string, slots []loader.MixtureSlot) (paths []string, leaves []loader.MixtureSlot) {
	for _, s := range slots {
		path := fmt.Sprintf("%s%d", prefix, s.Source)
		if s.Slots != nil {
			p, l := leafSlots(path+"/", s.Slots)
			paths, leaves = append(paths, p...), append(leaves, l...)
			continue
		}
		paths, leaves = append(paths, path), append(leaves, s)
	}
	return paths, leaves
}

// TestNestedMixture checks a mixture whose source is a mixture, for random
// weights, policies and slots of both: every step holds the same slots and
// rows at world sizes 1 to 8 with 0 to 3 workers; the slots the inner
// mixture fills are its own steps, in its order, each holding what the
// inner mixture's plan gives at that step; no row of a source comes twice
// in one of its epochs; and a checkpoint after a random step, through JSON,
// resumes at another world size and worker count with the same steps.
func TestNestedMixture(t *testing.T) {
	const g, limit = 840, 40
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seedtest.Seed(t), 0))
	sizes := []int64{6 * g, 9 * g, 15 * g}
	tables := mixTables(t, sizes...)
	for range 4 {
		randomOptions := func(n int) loader.MixtureOptions {
			o := loader.MixtureOptions{Seed: rng.Uint64(), Weights: make([]float64, n),
				OnExhausted: loader.ExhaustedPolicies[rng.IntN(3)], Slots: 1 + rng.Int64N(3)}
			for i := range o.Weights {
				o.Weights[i] = 0.1 + rng.Float64()
			}
			return o
		}
		outerOpts, innerOpts := randomOptions(2), randomOptions(2)
		type pair struct{ outer, inner *loader.Mixture }
		mixtures := map[int64][]pair{}
		mix := func(w int64) func(r int64) *loader.Mixture {
			if mixtures[w] == nil {
				for r := range w {
					ls := mixLoaders(t, tables, g, w, r)
					inner, err := loader.NewMixture(ls[1:], innerOpts)
					if err != nil {
						t.Fatal(err)
					}
					outer, err := loader.NewMixture([]loader.Source{ls[0], inner}, outerOpts)
					if err != nil {
						t.Fatal(err)
					}
					mixtures[w] = append(mixtures[w], pair{outer, inner})
				}
			}
			return func(r int64) *loader.Mixture { return mixtures[w][r].outer }
		}
		outer := mix(1)(0)
		inner := mixtures[1][0].inner
		want := dealMixture(t, mix(1), outer.Start(), 1, 0, limit)
		if len(want.slots) == 0 { // a source of 6 steps drawn into 3 slots 7 times under "stop"
			continue
		}

		// The inner mixture's steps, in its order, from its start (its
		// iterations renewed as the outer mixture renews them), its step
		// numbers running on across them.
		innerPos := inner.Start()
		seen := map[string]bool{} // rows by source path, epoch and row
		for i, slots := range want.slots {
			for _, s := range slots {
				if s.Source != 1 {
					continue
				}
				planned, next, ok, err := inner.Next(ctx, innerPos)
				if err == nil && !ok { // the iteration ended: the outer mixture renewed it
					planned, next, ok, err = inner.Next(ctx, next)
				}
				if err != nil || !ok || s.Step != next.Step-1 || !reflect.DeepEqual(planned, s.Slots) || s.Epoch != 0 {
					t.Fatalf("outer step %d: inner step %d with slots %+v; its plan at %d: %+v (%v, %v)", i, s.Step, s.Slots, innerPos.Step, planned, ok, err)
				}
				innerPos = next
			}
			paths, leaves := leafSlots("", slots)
			if len(paths) != len(want.rows[i]) {
				t.Fatalf("step %d: %d leaves, %d records", i, len(paths), len(want.rows[i]))
			}
			for j, l := range leaves {
				for _, id := range want.rows[i][j] {
					key := fmt.Sprintf("%s@%d#%d", paths[j], l.Epoch, id)
					if seen[key] {
						t.Fatalf("row %d twice in epoch %d of source %s", id, l.Epoch, paths[j])
					}
					seen[key] = true
				}
			}
		}

		w, k := 1+rng.Int64N(8), rng.IntN(4)
		if got := dealMixture(t, mix(w), outer.Start(), w, k, limit); !equalRuns(got, want) {
			t.Fatalf("outer %+v, inner %+v: at world size %d with %d workers the steps differ", outerOpts, innerOpts, w, k)
		}
		c := rng.IntN(len(want.slots))
		w, k = 1+rng.Int64N(8), rng.IntN(4)
		pos := resumeThroughJSON(t, outer, mix(w)(0), want.next[c])
		got := dealMixture(t, mix(w), pos, w, k, limit-c-1)
		rest := mixRun{slots: want.slots[c+1:], rows: want.rows[c+1:], next: want.next[c+1:]}
		if !equalRuns(got, rest) {
			t.Fatalf("outer %+v, inner %+v: resumed after step %d at world size %d with %d workers, the steps differ", outerOpts, innerOpts, c, w, k)
		}
	}
}

// TestMixtureAsSource checks a Mixture through the source protocol: its
// steps and renewal, its checkpoint, its reader of the leaves of its steps,
// and the refusals of positions and checkpoints of other kinds.
func TestMixtureAsSource(t *testing.T) {
	ctx := context.Background()
	tables := mixTables(t, 16, 24)
	ls := mixLoaders(t, tables, 8, 1, 0)
	m, err := loader.NewMixture(ls, loader.MixtureOptions{Seed: 3, Weights: []float64{1, 1}, Slots: 2})
	if err != nil {
		t.Fatal(err)
	}
	var src loader.Source = m
	if info := src.Describe(); info.Kind != loader.KindMixture || info.WorldSize != 1 {
		t.Fatalf("Describe = %+v", info)
	}
	var steps []loader.SourceStep
	var plans [][]loader.MixtureSlot
	pos := src.Begin()
	for {
		st, next, ok, err := src.StepAt(ctx, pos, true)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		slots, _, _, err := m.Next(ctx, *pos.Mixture)
		if err != nil || st.Step != pos.Mixture.Step || st.Epoch != 0 {
			t.Fatalf("step %+v at mixture step %d (%v)", st, pos.Mixture.Step, err)
		}
		if _, ok, err := src.Renew(ctx, pos); ok || err != nil {
			t.Fatalf("renewed with a step left: %v, %v", ok, err)
		}
		steps, plans, pos = append(steps, st), append(plans, slots), next
	}
	if len(steps) == 0 {
		t.Fatal("no step")
	}
	renewed, ok, err := src.Renew(ctx, pos)
	if end, endErr := m.End(ctx, *pos.Mixture); err != nil || !ok || endErr != nil || !reflect.DeepEqual(*renewed.Mixture, end) {
		t.Fatalf("Renew at the end = %+v, %v, %v; End = %+v", renewed, ok, err, end)
	}
	saved, err := src.Save(pos)
	if err != nil {
		t.Fatal(err)
	}
	back, err := src.Restore(ctx, saved, loader.RestoreOptions{})
	if err != nil || !reflect.DeepEqual(back, pos) {
		t.Fatalf("Restore(Save) = %+v, %v; want %+v", back, err, pos)
	}

	r, err := src.OpenSteps(ctx, steps)
	if err != nil {
		t.Fatal(err)
	}
	for i, slots := range plans {
		for j, sl := range slots {
			b, err := r.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			ids, err := ls[sl.Source].(*loader.Loader).RowIDs(ctx, sl.Epoch, sl.Step)
			if err != nil {
				t.Fatal(err)
			}
			got := b.Record.Column(0).(*array.Int64).Int64Values()
			for k, id := range ids {
				if got[k] != 100_000*int64(sl.Source)+int64(id) {
					t.Fatalf("step %d slot %d: rows %v, want ids %v of source %d", i, j, got, ids, sl.Source)
				}
			}
			b.Record.Release()
		}
	}
	if _, err := r.Next(ctx); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last leaf: %v", err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"a loader's position", second(src.StepAt(ctx, loader.SourcePosition{Epoch: 1}, true)), "under \"mixture\""},
		{"a mixture position with a step", second(src.StepAt(ctx, loader.SourcePosition{StepsConsumed: 2, Mixture: pos.Mixture}, true)), "epoch and step 0"},
		{"a mixture position to a loader", second(ls[0].StepAt(ctx, pos, true)), "a loader's position"},
		{"a loader's checkpoint to a mixture", errOf(src.Restore(ctx, mustSave(t, ls[0], ls[0].Begin()), loader.RestoreOptions{})), "unknown"},
		{"a mixture's checkpoint to a loader", errOf(ls[0].Restore(ctx, saved, loader.RestoreOptions{})), "a mixture's"},
		{"a step of a loader to a mixture", errOf(src.OpenSteps(ctx, []loader.SourceStep{{Step: 1}})), "not a mixture's"},
	} {
		if errcode.Of(c.err) != errcode.InvalidArgument || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: %v, want InvalidArgument naming %q", c.name, c.err, c.want)
		}
	}
}

// second returns the error of StepAt's answer.
func second(_ loader.SourceStep, _ loader.SourcePosition, _ bool, err error) error { return err }

// errOf returns the error of a call's answer.
func errOf[T any](_ T, err error) error { return err }

func mustSave(t *testing.T, src loader.Source, pos loader.SourcePosition) json.RawMessage {
	t.Helper()
	data, err := src.Save(pos)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
