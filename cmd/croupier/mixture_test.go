package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/loader"
	"github.com/croupier-data/croupier/permutation"
)

// TestDealMixture checks that deal --checkpoint, given a mixture's state
// dict, names the source step of each slot of a mixture step, before the
// checkpoint (replayed from the start), at it and after it, and each rank's
// rows of it: at world size 2 the ranks' rows are those of the source's
// step at world size 1; --steps gives a range of steps, before and after it.
func TestDealMixture(t *testing.T) {
	ctx := context.Background()
	sources := tableLoaders(t, 64, 160)
	m, err := loader.NewMixture([]loader.Source{sources[0], sources[1]}, loader.MixtureOptions{Seed: 4, Weights: []float64{1, 3},
		Schedule: []loader.MixturePoint{{Step: 6, Weights: []float64{3, 1}}}, OnExhausted: loader.ExhaustedCycle, Slots: 2})
	if err != nil {
		t.Fatal(err)
	}
	plan, ckpt, state := planMixture(t, m, 12, 5)
	for _, c := range []struct {
		args []string
		step int64
	}{{nil, 5}, {[]string{"--step", "2"}, 2}, {[]string{"--step", "11"}, 11}} {
		var got mixtureOutput
		okJSON(t, &got, append([]string{"deal", "--checkpoint", state, "--world-size", "2"}, c.args...)...)
		if got.Step != c.step || len(got.Slots) != 2 || !slices.Equal(got.Weights, m.WeightsAt(c.step)) {
			t.Fatalf("%v: %+v", c.args, got)
		}
		for j, s := range got.Slots {
			want := plan[c.step][j]
			if s.Source != want.Source || s.Epoch != want.Epoch || s.Step != want.Step || len(s.Ranks) != 2 {
				t.Fatalf("%v: slot %d is %+v, want %+v", c.args, j, s, want)
			}
			rows, err := sources[s.Source].Step(ctx, s.Epoch, s.Step)
			if err != nil {
				t.Fatal(err)
			}
			if joined := append(slices.Clone(s.Ranks[0].RowIDs), s.Ranks[1].RowIDs...); !slices.Equal(joined, rows[0]) {
				t.Fatalf("%v: slot %d rows %v, want %v", c.args, j, joined, rows[0])
			}
		}
	}
	if out := ok(t, "deal", "--checkpoint", state, "--rank", "0", "--world-size", "2"); !strings.Contains(out, "step 5 (weights") || !strings.Contains(out, "slot 1: source") {
		t.Fatalf("text output:\n%s", out)
	}
	// --steps: the steps before the checkpoint (replayed) and after it at once.
	for _, c := range []struct {
		arg      string
		from, to int64
	}{{":", 0, 5}, {"3:12", 3, 12}} {
		var got mixtureStepsOutput
		okJSON(t, &got, "deal", "--checkpoint", state, "--steps", c.arg)
		if int64(len(got.Steps)) != c.to-c.from {
			t.Fatalf("--steps %s: %d steps", c.arg, len(got.Steps))
		}
		for i, st := range got.Steps {
			step := c.from + int64(i)
			if st.Step != step || len(st.Slots) != 2 || !slices.Equal(st.Weights, m.WeightsAt(step)) {
				t.Fatalf("--steps %s: step %d is %+v", c.arg, step, st)
			}
			for j, s := range st.Slots {
				if want := plan[step][j]; s.Source != want.Source || s.Epoch != want.Epoch || s.Step != want.Step {
					t.Fatalf("--steps %s: step %d slot %d is %+v, want %+v", c.arg, step, j, s, want)
				}
			}
		}
	}

	// A checkpoint whose sources did not start at step 0 of epoch 0 cannot be
	// replayed to an earlier step.
	var moved0 loader.Checkpoint
	if err := json.Unmarshal(ckpt.Sources[0], &moved0); err != nil {
		t.Fatal(err)
	}
	moved0.Epoch = 7
	moved := ckpt
	moved.Sources = slices.Clone(ckpt.Sources)
	if moved.Sources[0], err = json.Marshal(moved0); err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(moved)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(state, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if r := croupier(t, "deal", "--checkpoint", state, "--step", "1"); r.code != 1 || !strings.Contains(r.stderr, "cannot be replayed") {
		t.Fatalf("moved sources: exit %d: %s", r.code, r.stderr)
	}
}

// TestDealNestedMixture checks deal --checkpoint for a mixture whose second
// source is a mixture of two tables: each slot the inner mixture fills names
// its step and holds its slots, each with its source step's rows at world
// size 2, those of the step at world size 1; before the checkpoint
// (replayed) and after it.
func TestDealNestedMixture(t *testing.T) {
	ctx := context.Background()
	loaders := tableLoaders(t, 64, 96, 160)
	inner, err := loader.NewMixture([]loader.Source{loaders[1], loaders[2]}, loader.MixtureOptions{Seed: 2, Weights: []float64{1, 1},
		OnExhausted: loader.ExhaustedCycle, Slots: 2})
	if err != nil {
		t.Fatal(err)
	}
	m, err := loader.NewMixture([]loader.Source{loaders[0], inner}, loader.MixtureOptions{Seed: 4, Weights: []float64{1, 2},
		OnExhausted: loader.ExhaustedCycle, Slots: 2})
	if err != nil {
		t.Fatal(err)
	}
	plan, _, state := planMixture(t, m, 12, 5)
	var got mixtureStepsOutput
	okJSON(t, &got, "deal", "--checkpoint", state, "--world-size", "2", "--steps", "0:12")
	if len(got.Steps) != 12 {
		t.Fatalf("%d steps, want 12", len(got.Steps))
	}
	nested := 0
	var check func(step int64, slots []mixtureSlotOutput, want []loader.MixtureSlot, sources []*loader.Loader)
	check = func(step int64, slots []mixtureSlotOutput, want []loader.MixtureSlot, sources []*loader.Loader) {
		if len(slots) != len(want) {
			t.Fatalf("step %d: slots %+v, want %+v", step, slots, want)
		}
		for j, s := range slots {
			w := want[j]
			if s.Source != w.Source || s.Epoch != w.Epoch || s.Step != w.Step || (s.Slots == nil) != (w.Slots == nil) {
				t.Fatalf("step %d: slot %d is %+v, want %+v", step, j, s, w)
			}
			if w.Slots != nil {
				nested++
				check(step, s.Slots, w.Slots, loaders[1:])
				continue
			}
			rows, err := sources[s.Source].Step(ctx, s.Epoch, s.Step)
			if err != nil {
				t.Fatal(err)
			}
			if len(s.Ranks) != 2 || !slices.Equal(append(slices.Clone(s.Ranks[0].RowIDs), s.Ranks[1].RowIDs...), rows[0]) {
				t.Fatalf("step %d: slot %d ranks %+v, want rows %v", step, j, s.Ranks, rows[0])
			}
		}
	}
	for i, st := range got.Steps {
		check(st.Step, st.Slots, plan[i], []*loader.Loader{loaders[0], nil})
	}
	if nested == 0 {
		t.Fatal("no slot drew the inner mixture")
	}
	if out := ok(t, "deal", "--checkpoint", state, "--world-size", "2"); !strings.Contains(out, "(a mixture), step") || !strings.Contains(out, "    rank 1") {
		t.Fatalf("text output:\n%s", out)
	}
}

// TestDealMixtureWithFollower checks deal --checkpoint for a mixture of a
// followed growing table and a pinned one: each slot names its source's
// step, and its rows at world size 2 are those the follower's global step
// (or the loader's step) holds at world size 1.
func TestDealMixtureWithFollower(t *testing.T) {
	ctx := context.Background()
	src := t.TempDir()
	grows := "file://" + filepath.Join(t.TempDir(), "grows")
	var start int64
	for v, n := range []int64{40, 25, 31, 50} {
		verb := "append"
		if v == 0 {
			verb = "create"
		}
		ok(t, "tables", verb, grows, parquetFile(t, src, start, n))
		start += n
	}
	pinned := "file://" + filepath.Join(t.TempDir(), "pinned")
	ok(t, "tables", "create", pinned, parquetFile(t, src, 1000, 64))
	open := func(uri string) *table.Table {
		tb, err := table.Open(ctx, uri)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tb.Close() })
		return tb
	}
	fl, err := loader.NewFollower(open(grows), loader.Options{GlobalBatchSize: 8, ShuffleSeed: 3},
		loader.FollowOptions{RowsPerRound: 30, ReplayCount: 4, WaitTimeout: time.Millisecond, PollInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer fl.Close()
	tb := open(pinned)
	l, err := loader.New(tb, permutation.Identity{N: tb.NumRows()}, loader.Options{GlobalBatchSize: 8, DropLast: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	m, err := loader.NewMixture([]loader.Source{fl, l}, loader.MixtureOptions{Seed: 5, Weights: []float64{2, 1},
		OnExhausted: loader.ExhaustedCycle, Slots: 2})
	if err != nil {
		t.Fatal(err)
	}
	plan, _, state := planMixture(t, m, 6, 3)
	var last int64 // the follower's last step the plan holds
	for _, slots := range plan {
		for _, sl := range slots {
			if sl.Source == 0 {
				last = max(last, sl.Step)
			}
		}
	}
	dealt, err := fl.Steps(ctx, fl.Start(), 0, last+1)
	if err != nil {
		t.Fatal(err)
	}
	var got mixtureStepsOutput
	okJSON(t, &got, "deal", "--checkpoint", state, "--steps", "0:6", "--world-size", "2")
	var followed int
	for i, st := range got.Steps {
		for j, s := range st.Slots {
			want := plan[i][j]
			if s.Source != want.Source || s.Epoch != want.Epoch || s.Step != want.Step || len(s.Ranks) != 2 {
				t.Fatalf("step %d slot %d is %+v, want %+v", i, j, s, want)
			}
			rows := append(slices.Clone(s.Ranks[0].RowIDs), s.Ranks[1].RowIDs...)
			var whole []uint64
			if s.Source == 0 {
				followed++
				whole = slices.Concat(dealt[s.Step].Ranks...)
			} else {
				step, err := l.Step(ctx, s.Epoch, s.Step)
				if err != nil {
					t.Fatal(err)
				}
				whole = step[0]
			}
			slices.Sort(rows)
			slices.Sort(whole)
			if !slices.Equal(rows, whole) {
				t.Fatalf("step %d slot %d: rows %v, its source's step %v", i, j, rows, whole)
			}
		}
	}
	if followed == 0 {
		t.Fatal("no slot drew the followed table")
	}
}

// planMixture plans m's first steps steps from its start and writes the
// checkpoint taken after step at-1 to a file: the slots of each step, the
// checkpoint and the file's path.
// tableLoaders creates a croupier table of each size, the ids of table i
// from 1,000·i, and opens a loader of each in stored order, 8 rows a step;
// they are closed when the test ends.
func tableLoaders(t *testing.T, sizes ...int64) []*loader.Loader {
	t.Helper()
	src := t.TempDir()
	var loaders []*loader.Loader
	for i, n := range sizes {
		uri := "file://" + filepath.Join(t.TempDir(), "tbl")
		ok(t, "tables", "create", uri, parquetFile(t, src, int64(i)*1000, n))
		tb, err := table.Open(context.Background(), uri)
		if err != nil {
			t.Fatal(err)
		}
		l, err := loader.New(tb, permutation.Identity{N: tb.NumRows()}, loader.Options{GlobalBatchSize: 8, DropLast: true})
		tb.Close()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		loaders = append(loaders, l)
	}
	return loaders
}

func planMixture(t *testing.T, m *loader.Mixture, steps, at int64) ([][]loader.MixtureSlot, loader.MixtureCheckpoint, string) {
	t.Helper()
	var plan [][]loader.MixtureSlot
	var mid loader.MixturePosition
	for pos := m.Start(); pos.Step < steps; {
		slots, next, ok, err := m.Next(context.Background(), pos)
		if err != nil || !ok {
			t.Fatalf("step %d: %v, %v", pos.Step, ok, err)
		}
		if pos.Step == at {
			mid = pos
		}
		plan, pos = append(plan, slots), next
	}
	ckpt, err := m.Checkpoint(mid)
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(ckpt)
	if err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(t.TempDir(), "mixture.json")
	if err := os.WriteFile(state, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return plan, ckpt, state
}
