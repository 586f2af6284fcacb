package loader

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strconv"

	"github.com/croupier-data/croupier/core/errcode"
)

// A Mixture is a Source too, so that a mixture mixes mixtures: a learner
// draws 70 % of its slots from the rollouts it follows and 30 % from a
// mixture of a replay table and an SFT table, with that mixture's own seed,
// schedule, slots and policy. A slot that draws a mixture is filled with the
// mixture's next step, whose slots it holds (MixtureSlot.Slots): one
// mixture's steps come in its own order whatever draws them, so they are
// the same at every world size, as every source's are.
//
// A mixture's position as a source is its MixturePosition
// (SourcePosition.Mixture); it has no step when its iteration ends, and it
// renews as a new iteration (Mixture.End).

// Describe says what m deals: kind "mixture", the rank of its sources.
func (m *Mixture) Describe() SourceInfo {
	first := m.sources[0].Describe()
	return SourceInfo{Kind: KindMixture, Rank: first.Rank, WorldSize: first.WorldSize}
}

// Begin is Start: every source at its beginning.
func (m *Mixture) Begin() SourcePosition {
	start := m.Start()
	return SourcePosition{Mixture: &start}
}

// sourcePosition returns the mixture position pos holds.
func (m *Mixture) sourcePosition(pos SourcePosition) (MixturePosition, error) {
	if pos.Mixture == nil || pos.Epoch != 0 || pos.StepsConsumed != 0 || pos.Round != nil || pos.WorkerPosition {
		return MixturePosition{}, errcode.New(errcode.InvalidArgument, "position", "",
			"epoch %d, step %d%s: a mixture's position is its own, under \"mixture\", with epoch and step 0", pos.Epoch, pos.StepsConsumed, roundNote(pos))
	}
	return *pos.Mixture, nil
}

// StepAt returns the mixture step at pos (Next), or false when the
// iteration ends there.
func (m *Mixture) StepAt(ctx context.Context, pos SourcePosition, wait bool) (SourceStep, SourcePosition, bool, error) {
	mp, err := m.sourcePosition(pos)
	if err != nil {
		return SourceStep{}, pos, false, err
	}
	slots, next, ok, err := m.next(ctx, mp, wait)
	if err != nil || !ok {
		return SourceStep{}, pos, false, err
	}
	return SourceStep{Step: mp.Step, slots: slots}, SourcePosition{Mixture: &next}, true, nil
}

// Renew returns where the next iteration starts (End) once the iteration
// at pos has no step left; false while it has one, also one whose rows are
// not committed yet.
func (m *Mixture) Renew(ctx context.Context, pos SourcePosition) (SourcePosition, bool, error) {
	mp, err := m.sourcePosition(pos)
	if err != nil {
		return pos, false, err
	}
	_, _, ok, err := m.next(ctx, mp, false)
	if ok || errors.Is(err, ErrNotReady) {
		return pos, false, nil
	}
	if err != nil {
		return pos, false, err
	}
	end, err := m.End(ctx, mp)
	if err != nil {
		return pos, false, err
	}
	return SourcePosition{Mixture: &end}, true, nil
}

// Save returns the MixtureCheckpoint at pos.
func (m *Mixture) Save(pos SourcePosition) (json.RawMessage, error) {
	mp, err := m.sourcePosition(pos)
	if err != nil {
		return nil, err
	}
	c, err := m.Checkpoint(mp)
	if err != nil {
		return nil, err
	}
	return json.Marshal(c)
}

// Restore reads a MixtureCheckpoint of a run of this mixture (Resume); opts
// do not apply to mixtures.
func (m *Mixture) Restore(ctx context.Context, data json.RawMessage, _ RestoreOptions) (SourcePosition, error) {
	c, err := ParseMixtureCheckpoint(data, "")
	if err != nil {
		return SourcePosition{}, err
	}
	pos, err := m.Resume(ctx, c)
	if err != nil {
		return SourcePosition{}, err
	}
	return SourcePosition{Mixture: &pos}, nil
}

// OpenSteps starts reading the batches of steps, steps StepAt returned: one
// batch for each slot of theirs that no mixture fills, depth first (the
// order of MixtureBatch.Records), each Batch.Step the step of its source.
func (m *Mixture) OpenSteps(ctx context.Context, steps []SourceStep) (StepReader, error) {
	if len(steps) == 0 {
		return nil, errcode.New(errcode.InvalidArgument, "open steps", "", "no mixture step to read")
	}
	var leaves []leaf
	for _, st := range steps {
		if st.slots == nil {
			return nil, errcode.New(errcode.InvalidArgument, "open steps", "", "step %d of epoch %d is not a mixture's", st.Step, st.Epoch)
		}
		leaves = m.leaves(leaves, "", st.slots)
	}
	return openLeaves(ctx, leaves)
}

// A leaf is a step of a source that is not a mixture, filling a slot of a
// mixture step or of a mixture step nested in one. Its path names the
// source by its index in each mixture from the outermost down ("1/0": source
// 0 of source 1).
type leaf struct {
	path string
	src  Source
	step SourceStep
}

// leaves appends the leaves of slots, drawn by m, to out in order, depth
// first; prefix is the path to m.
func (m *Mixture) leaves(out []leaf, prefix string, slots []drawn) []leaf {
	for _, d := range slots {
		path := prefix + strconv.Itoa(d.source)
		if d.step.slots != nil {
			out = m.sources[d.source].(*Mixture).leaves(out, path+"/", d.step.slots)
			continue
		}
		out = append(out, leaf{path, m.sources[d.source], d.step})
	}
	return out
}

// leafKey is a reader's key: a source by its path, and an epoch (round) of
// it.
type leafKey struct {
	path  string
	epoch int64
}

// leafReader reads the batches of leaves in order, through one StepReader
// of each source and epoch (round) among them.
type leafReader struct {
	leaves  []leaf
	streams map[leafKey]StepReader
}

// openLeaves opens the readers of leaves; they read nothing before the
// first Next.
func openLeaves(ctx context.Context, leaves []leaf) (*leafReader, error) {
	type reading struct {
		src   Source
		steps []SourceStep
	}
	wanted := map[leafKey]*reading{}
	var order []leafKey
	for _, l := range leaves {
		key := leafKey{l.path, l.step.Epoch}
		if wanted[key] == nil {
			wanted[key] = &reading{src: l.src}
			order = append(order, key)
		}
		wanted[key].steps = append(wanted[key].steps, l.step)
	}
	r := &leafReader{leaves: leaves, streams: map[leafKey]StepReader{}}
	for _, key := range order {
		st, err := wanted[key].src.OpenSteps(ctx, wanted[key].steps)
		if err != nil {
			return nil, errors.Join(sourceError(err, key.path), r.Close())
		}
		r.streams[key] = st
	}
	return r, nil
}

// Next returns the next leaf's batch, or io.EOF after the last. If ctx ends
// first, it returns ctx's error and a later Next reads the same leaf.
func (r *leafReader) Next(ctx context.Context) (Batch, error) {
	if len(r.leaves) == 0 {
		return Batch{}, io.EOF
	}
	l := r.leaves[0]
	b, err := r.streams[leafKey{l.path, l.step.Epoch}].Next(ctx)
	if err != nil && ctx.Err() != nil {
		return Batch{}, err
	}
	if err == nil && b.Step != l.step.Step {
		b.Record.Release()
		err = errcode.New(errcode.Internal, "mixture", l.src.Describe().TableURI,
			"gave step %d of epoch %d where step %d was due", b.Step, l.step.Epoch, l.step.Step)
	}
	if err != nil {
		return Batch{}, sourceError(err, l.path)
	}
	r.leaves = r.leaves[1:]
	return b, nil
}

// Close closes the readers.
func (r *leafReader) Close() error {
	var errs []error
	for _, st := range r.streams {
		errs = append(errs, st.Close())
	}
	r.streams = nil
	return errors.Join(errs...)
}
