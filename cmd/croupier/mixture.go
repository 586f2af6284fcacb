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
// fills it, and that step's rows by rank; or, for a slot a mixture fills,
// that mixture's step and its own slots.
type mixtureSlotOutput struct {
	Slot          int                 `json:"slot"`
	Source        int                 `json:"source"`
	PermutationID string              `json:"permutation_id"`
	TableURI      string              `json:"table_uri"`
	Epoch         int64               `json:"epoch"`
	Step          int64               `json:"step"`
	Ranks         []dealRank          `json:"ranks,omitempty"`
	Slots         []mixtureSlotOutput `json:"slots,omitempty"`
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
	var opened []io.Closer
	defer func() {
		for _, src := range opened {
			src.Close()
		}
	}()
	m, err := openMixture(ctx, c, path, f, &opened)
	if err != nil {
		return err
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
		if st.Slots, err = slotsRanks(ctx, m, slots, f); err != nil {
			return err
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
	head.print(e, len(m.Sources()), f.columns)
	return nil
}

// slotsRanks returns the slots of a mixture step of m, each filled by its
// source: its source step's rows by rank (f.rank's alone when set), or a
// nested mixture's slots.
func slotsRanks(ctx context.Context, m *loader.Mixture, slots []loader.MixtureSlot, f mixtureFlags) ([]mixtureSlotOutput, error) {
	var outs []mixtureSlotOutput
	for j, sl := range slots {
		src := m.Sources()[sl.Source]
		out := mixtureSlotOutput{Slot: j, Source: sl.Source, TableURI: src.Describe().TableURI, Epoch: sl.Epoch, Step: sl.Step}
		var err error
		switch src := src.(type) {
		case *loader.Loader:
			out.PermutationID = src.Order().ID()
			out.Ranks, err = stepRanks(ctx, src, sl.Epoch, sl.Step, f.rank, f.columns)
		case *loader.Follower:
			var r loader.Round
			var l *loader.Loader
			if r, l, err = roundOf(ctx, src, out.TableURI, src.Start(), sl.Step); err == nil {
				out.Ranks, err = stepRanks(ctx, l, 0, sl.Step-r.Step, f.rank, f.columns)
				l.Close()
			}
		case *loader.Mixture:
			out.Slots, err = slotsRanks(ctx, src, sl.Slots, f)
		}
		if err != nil {
			return nil, err
		}
		outs = append(outs, out)
	}
	return outs, nil
}

// openMixture opens the mixture of the checkpoint c (read from where) at
// f's world size, its sources as c's sources say: a loader of a dataset's
// checkpoint, a follower of following's, a mixture of a mixture's. It adds
// the loaders and followers it opens to opened, for the caller to close,
// also with an error.
func openMixture(ctx context.Context, c loader.MixtureCheckpoint, where string, f mixtureFlags, opened *[]io.Closer) (*loader.Mixture, error) {
	if len(c.Schedule) == 0 {
		return nil, errcode.New(errcode.InvalidArgument, "deal", where, "mixture state dict has no schedule: it has the weights at step 0 first")
	}
	var sources []loader.Source
	for i, raw := range c.Sources {
		src, err := openSource(ctx, raw, fmt.Sprintf("%s (source %d)", where, i), f, opened)
		if err != nil {
			return nil, err
		}
		sources = append(sources, src)
	}
	m, err := loader.NewMixture(sources, loader.MixtureOptions{Seed: c.Seed, Weights: c.Schedule[0].Weights,
		Schedule: c.Schedule[1:], OnExhausted: c.OnExhausted, Slots: c.Slots})
	if err != nil {
		return nil, errcode.Wrap(err, errcode.InvalidArgument, "deal", where)
	}
	return m, nil
}

// openSource opens the source of the checkpoint raw of a mixture's source
// (see openMixture).
func openSource(ctx context.Context, raw []byte, where string, f mixtureFlags, opened *[]io.Closer) (loader.Source, error) {
	switch {
	case loader.IsMixtureCheckpoint(raw):
		mc, err := loader.ParseMixtureCheckpoint(raw, where)
		if err != nil {
			return nil, err
		}
		return openMixture(ctx, mc, where, f, opened)
	case loader.IsFollowCheckpoint(raw):
		fc, err := loader.ParseFollowCheckpoint(raw, where)
		if err != nil {
			return nil, err
		}
		tb, fl, err := openFollower(ctx, fc, where, f.w, f.cache)
		if err != nil {
			return nil, err
		}
		tb.Close() // the follower holds its table
		*opened = append(*opened, fl)
		return fl, nil
	}
	sc, err := loader.ParseCheckpoint(raw, where)
	if err != nil {
		return nil, err
	}
	permURI, split, tableURI, err := dealtBy(sc, where)
	if err != nil {
		return nil, err
	}
	t, order, closeOrder, err := openDealt(ctx, permURI, split, tableURI, 0, f.cache)
	if err != nil {
		return nil, err
	}
	dropLast := f.dropLast
	if sc.TokensPerStep != 0 && !f.dropLastSet {
		dropLast = false // token-budget steps deal every row
	}
	l, err := loader.New(t, order, loader.Options{GlobalBatchSize: sc.GlobalBatchSize, NumSplits: sc.NumSplits,
		TokensPerStep: sc.TokensPerStep, Oversize: sc.Oversize, WorldSize: f.w, ShuffleSeed: sc.ShuffleSeed, DropLast: dropLast})
	closeOrder() // the loader holds its table
	if err != nil {
		return nil, err
	}
	*opened = append(*opened, l)
	return l, nil
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
		printSlots(e, st.Slots, columns, "")
	}
}

// printSlots prints a mixture step's slots, a nested mixture's indented
// under its slot.
func printSlots(e *env, slots []mixtureSlotOutput, columns []string, indent string) {
	for _, s := range slots {
		if s.Slots != nil {
			fmt.Fprintf(e.stdout, "%sslot %d: source %d (a mixture), step %d:\n", indent, s.Slot, s.Source, s.Step)
			printSlots(e, s.Slots, columns, indent+"  ")
			continue
		}
		fmt.Fprintf(e.stdout, "%sslot %d: source %d (%s of %s), epoch %d, step %d:\n", indent, s.Slot, s.Source, s.PermutationID, s.TableURI, s.Epoch, s.Step)
		printRanks(e, s.Ranks, columns, indent+"  ")
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
