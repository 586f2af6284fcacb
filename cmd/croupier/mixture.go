package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/croupier-data/croupier/core/blockcache"
	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/loader"
)

// isMixture reports whether a state dict is a mixture's: it has sources.
func isMixture(data []byte) bool {
	var probe struct {
		Sources json.RawMessage `json:"sources"`
	}
	return json.Unmarshal(data, &probe) == nil && probe.Sources != nil
}

// mixtureFlags are the flags of deal that apply to a mixture's checkpoint.
type mixtureFlags struct {
	step        int64
	stepSet     bool
	steps       *stepRange // --steps, nil without
	w, rank     int64
	dropLast    bool
	dropLastSet bool
	columns     []string
	asJSON      bool
	cache       *blockcache.Cache // may be nil
}

// mixtureSlotOutput is one slot of a mixture step: the source step that
// fills it, and that step's rows by rank.
type mixtureSlotOutput struct {
	Slot          int        `json:"slot"`
	Source        int        `json:"source"`
	PermutationID string     `json:"permutation_id"`
	TableURI      string     `json:"table_uri"`
	Epoch         int64      `json:"epoch"`
	Step          int64      `json:"step"`
	Ranks         []dealRank `json:"ranks"`
}

// mixtureStep is one mixture step: the weights at it and its slots.
type mixtureStep struct {
	Step    int64               `json:"step"`
	Weights []float64           `json:"weights"` // at Step
	Slots   []mixtureSlotOutput `json:"slot_batches"`
}

type mixtureOutput struct {
	Seed          uint64 `json:"seed"`
	OnExhausted   string `json:"on_exhausted"`
	NumSlots      int64  `json:"slots"`
	WorldSize     int64  `json:"world_size"`
	StepsConsumed int64  `json:"steps_consumed"` // the checkpoint's
	mixtureStep
}

// mixtureStepsOutput answers --steps: the steps in order.
type mixtureStepsOutput struct {
	Seed          uint64        `json:"seed"`
	OnExhausted   string        `json:"on_exhausted"`
	NumSlots      int64         `json:"slots"`
	WorldSize     int64         `json:"world_size"`
	StepsConsumed int64         `json:"steps_consumed"`
	Steps         []mixtureStep `json:"steps"`
}

// dealMixture answers deal --checkpoint for a mixture's state dict (Python's
// Mixture.state_dict()): which step of which source fills each slot of
// mixture step --step (the step after the checkpoint by default), and each
// rank's rows of it.
func dealMixture(ctx context.Context, e *env, data []byte, path string, f mixtureFlags) error {
	c, err := loader.ParseMixtureCheckpoint(data, path)
	if err != nil {
		return err
	}
	if f.w < 1 || f.rank >= f.w {
		return usagef("deal: --world-size %d and --rank %d: want at least one rank, and --rank below --world-size", f.w, f.rank)
	}
	if len(c.Schedule) == 0 {
		return errcode.New(errcode.InvalidArgument, "deal", path, "mixture state dict has no schedule: it has the weights at step 0 first")
	}
	sources, err := mixtureSources(ctx, c, path, f)
	defer func() {
		for _, src := range sources {
			src.(io.Closer).Close()
		}
	}()
	if err != nil {
		return err
	}
	m, err := loader.NewMixture(sources, loader.MixtureOptions{Seed: c.Seed, Weights: c.Schedule[0].Weights,
		Schedule: c.Schedule[1:], OnExhausted: c.OnExhausted, Slots: c.Slots})
	if err != nil {
		return errcode.Wrap(err, errcode.InvalidArgument, "deal", path)
	}
	pos, err := m.Resume(ctx, c)
	if err != nil {
		return errcode.Wrap(err, errcode.InvalidArgument, "deal", path)
	}
	from, to := pos.Step, pos.Step+1 // the step after the checkpoint
	switch {
	case f.steps != nil:
		from, to = f.steps.from, f.steps.end(pos.Step)
	case f.stepSet:
		from, to = f.step, f.step+1
	}
	if from < pos.Step {
		if pos, err = replay(ctx, m, pos, from); err != nil {
			return errcode.Wrap(err, errcode.InvalidArgument, "deal", path)
		}
	}
	planned, err := stepsOf(ctx, m, pos, from, to)
	if err != nil {
		return err
	}
	steps := make([]mixtureStep, len(planned))
	for i, slots := range planned {
		st := &steps[i]
		st.Step, st.Weights = from+int64(i), m.WeightsAt(from+int64(i))
		for j, sl := range slots {
			out, err := slotRanks(ctx, sources[sl.Source], sl, f)
			if err != nil {
				return err
			}
			out.Slot = j
			st.Slots = append(st.Slots, out)
		}
	}
	head := mixtureStepsOutput{Seed: c.Seed, OnExhausted: c.OnExhausted, NumSlots: c.Slots, WorldSize: f.w,
		StepsConsumed: c.StepsConsumed, Steps: steps}
	if f.asJSON && f.steps != nil {
		return writeJSON(e.stdout, head)
	}
	if f.asJSON {
		return writeJSON(e.stdout, mixtureOutput{Seed: head.Seed, OnExhausted: head.OnExhausted, NumSlots: head.NumSlots,
			WorldSize: head.WorldSize, StepsConsumed: head.StepsConsumed, mixtureStep: steps[0]})
	}
	head.print(e, len(sources), f.columns)
	return nil
}

// slotRanks returns the slot sl of a mixture step, filled by src: its
// source step's rows by rank (f.rank's alone when set).
func slotRanks(ctx context.Context, src loader.Source, sl loader.MixtureSlot, f mixtureFlags) (mixtureSlotOutput, error) {
	out := mixtureSlotOutput{Source: sl.Source, TableURI: src.Describe().TableURI, Epoch: sl.Epoch, Step: sl.Step}
	var err error
	switch src := src.(type) {
	case *loader.Loader:
		out.PermutationID = src.Order().ID()
		out.Ranks, err = stepRanks(ctx, src, sl.Epoch, sl.Step, f.rank, f.columns)
	case *loader.Follower:
		r, l, rerr := roundOf(ctx, src, out.TableURI, src.Start(), sl.Step)
		if rerr != nil {
			return out, rerr
		}
		defer l.Close()
		out.Ranks, err = stepRanks(ctx, l, 0, sl.Step-r.Step, f.rank, f.columns)
	}
	return out, err
}

// mixtureSources opens a source of each source of the mixture checkpoint c
// (read from path), at f's world size: a loader of a dataset's checkpoint, a
// follower of following's; the caller closes those it returns, also with an
// error.
func mixtureSources(ctx context.Context, c loader.MixtureCheckpoint, path string, f mixtureFlags) ([]loader.Source, error) {
	var sources []loader.Source
	for i, raw := range c.Sources {
		where := fmt.Sprintf("%s (source %d)", path, i)
		if loader.IsFollowCheckpoint(raw) {
			fc, err := loader.ParseFollowCheckpoint(raw, where)
			if err != nil {
				return sources, err
			}
			tb, fl, err := openFollower(ctx, fc, where, f.w, f.cache)
			if err != nil {
				return sources, err
			}
			tb.Close() // the follower holds its table
			sources = append(sources, fl)
			continue
		}
		sc, err := loader.ParseCheckpoint(raw, where)
		if err != nil {
			return sources, err
		}
		permURI, split, tableURI, err := dealtBy(sc, where)
		if err != nil {
			return sources, err
		}
		t, order, closeOrder, err := openDealt(ctx, permURI, split, tableURI, 0, f.cache)
		if err != nil {
			return sources, err
		}
		dropLast := f.dropLast
		if sc.TokensPerStep != 0 && !f.dropLastSet {
			dropLast = false // token-budget steps deal every row
		}
		l, err := loader.New(t, order, loader.Options{GlobalBatchSize: sc.GlobalBatchSize, NumSplits: sc.NumSplits,
			TokensPerStep: sc.TokensPerStep, Oversize: sc.Oversize, WorldSize: f.w, ShuffleSeed: sc.ShuffleSeed, DropLast: dropLast})
		closeOrder() // the loader holds its table
		if err != nil {
			return sources, err
		}
		sources = append(sources, l)
	}
	return sources, nil
}

// print prints the mixture's steps for people: each slot, and its ranks'
// batches with columns.
func (head mixtureStepsOutput) print(e *env, sources int, columns []string) {
	fmt.Fprintf(e.stdout, "mixture of %d sources, seed %d, on_exhausted=%s, %d slots a step, W=%d\n",
		sources, head.Seed, head.OnExhausted, head.NumSlots, head.WorldSize)
	for _, st := range head.Steps {
		weights := make([]string, len(st.Weights))
		for i, w := range st.Weights {
			weights[i] = fmt.Sprint(w)
		}
		fmt.Fprintf(e.stdout, "step %d (weights %s):\n", st.Step, strings.Join(weights, " "))
		for _, s := range st.Slots {
			fmt.Fprintf(e.stdout, "slot %d: source %d (%s of %s), epoch %d, step %d:\n", s.Slot, s.Source, s.PermutationID, s.TableURI, s.Epoch, s.Step)
			printRanks(e, s.Ranks, columns, "  ")
		}
	}
}

// stepsOf returns the slots of mixture steps from to to−1, planned from pos
// (at or before from), through the ends of iterations on the way.
func stepsOf(ctx context.Context, m *loader.Mixture, pos loader.MixturePosition, from, to int64) ([][]loader.MixtureSlot, error) {
	var out [][]loader.MixtureSlot
	ended := false // the last Next ended an iteration
	for pos.Step < to {
		slots, next, ok, err := m.Next(ctx, pos)
		if err != nil {
			return nil, err
		}
		if !ok && ended {
			return nil, errcode.New(errcode.Internal, "deal", "", "mixture step %d ends two iterations in a row", pos.Step)
		}
		if ok && pos.Step >= from {
			out = append(out, slots)
		}
		pos, ended = next, !ok
	}
	return out, nil
}

// replay returns the position before step target of the run that reached
// at, replaying it from its start (every source at step 0 of epoch 0). It
// fails when that run does not reach at: the checkpoint's sources started
// elsewhere, so the steps before it are not known.
func replay(ctx context.Context, m *loader.Mixture, at loader.MixturePosition, target int64) (loader.MixturePosition, error) {
	var before loader.MixturePosition
	ended := false // the last Next ended an iteration
	for pos := m.Start(); ; {
		if pos.Step == target && before.Sources == nil {
			before = pos
		}
		if samePosition(pos, at) {
			return before, nil
		}
		if pos.Step > at.Step {
			return before, errcode.New(errcode.InvalidArgument, "deal", "",
				"the checkpoint's mixture did not start with every source at step 0 of epoch 0: the steps before its step %d cannot be replayed", at.Step)
		}
		_, next, ok, err := m.Next(ctx, pos)
		if err != nil {
			return before, err
		}
		if !ok && ended {
			return before, errcode.New(errcode.Internal, "deal", "", "mixture step %d ends two iterations in a row", pos.Step)
		}
		pos, ended = next, !ok
	}
}

// samePosition reports whether a and b are one position: their JSON is
// (a followed source's round is a pointer).
func samePosition(a, b loader.MixturePosition) bool {
	x, errA := json.Marshal(a)
	y, errB := json.Marshal(b)
	return errA == nil && errB == nil && bytes.Equal(x, y)
}
