package loader

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/croupier-data/croupier/core/errcode"
)

// A Source deals global steps to one rank, each step's rows the same at
// every world size, from positions a checkpoint records: a Loader deals the
// epochs of a table or a permutation's split, a Follower the rounds of a
// growing table, a Mixture the mixture steps of its own sources. A Mixture
// mixes any sources through this protocol, so that a learner can mix the
// rollouts it follows with a pinned replay table, or with a mixture of
// replay and SFT tables, and resume the mix exactly at another world size.
//
// A position is a SourcePosition; each kind fills its own fields of it (see
// there). A source is safe for concurrent use; the StepReaders it opens are
// not.
type Source interface {
	// Describe says what the source deals.
	Describe() SourceInfo
	// Begin returns the position before the source's first step.
	Begin() SourcePosition
	// StepAt returns the step at pos and the position after it, or ok false
	// when the source has no step there: a Loader's epoch has ended, a
	// Follower's wait for the versions of its next round timed out. With
	// wait false, a step whose rows are not committed yet (a Follower's
	// next round) is ErrNotReady instead of a wait.
	StepAt(ctx context.Context, pos SourcePosition, wait bool) (step SourceStep, next SourcePosition, ok bool, err error)
	// Renew returns where a source with no step at pos continues: a Loader
	// whose epoch ended continues at step 0 of the next epoch. It returns
	// false when the source has a step at pos, or never continues after
	// its end (a Follower).
	Renew(ctx context.Context, pos SourcePosition) (SourcePosition, bool, error)
	// Save returns the checkpoint of a run at pos: the JSON of the state
	// dict of the source's Python dataset (a Checkpoint, a
	// FollowCheckpoint).
	Save(pos SourcePosition) (json.RawMessage, error)
	// Restore checks that data, a checkpoint Save wrote, was made by a run
	// dealing what this source deals, and returns its position. Errors are
	// InvalidArgument and name the field and both values.
	Restore(ctx context.Context, data json.RawMessage, opts RestoreOptions) (SourcePosition, error)
	// OpenSteps starts reading this rank's batches of steps, steps StepAt
	// returned, of one epoch (one round), in order; Batch.Step is the
	// step's SourceStep.Step.
	OpenSteps(ctx context.Context, steps []SourceStep) (StepReader, error)
}

// A StepReader reads the batches of the steps it was opened for, in order,
// then returns io.EOF. Close it when done, also after an early stop.
type StepReader interface {
	Next(ctx context.Context) (Batch, error)
	Close() error
}

// ErrNotReady is what StepAt returns, with wait false, for a step whose
// rows are not committed yet.
var ErrNotReady = errors.New("loader: the step's rows are not committed yet")

// The kinds of sources, as SourceInfo.Kind names them.
const (
	KindEpochs  = "epochs"  // a Loader
	KindFollow  = "follow"  // a Follower
	KindMixture = "mixture" // a Mixture
)

// RestoreOptions relax what Source.Restore checks, for a caller that knows
// why.
type RestoreOptions struct {
	// TableMoved: the table was moved or copied on purpose: a Loader does
	// not compare the checkpoint's table_uri and table_version (table_id,
	// when the checkpoint has one, must still match).
	TableMoved bool `json:"table_moved"`
	// Workers is the number of DataLoader workers of a process restoring a
	// worker's own position (SourcePosition.WorkerPosition), which may run
	// up to Workers − 1 steps past the end of an epoch; 0 or 1 allows none.
	Workers int64 `json:"workers"`
}

// SourceInfo describes a source: its kind, the table it deals (none for a
// mixture), and the rank it deals to.
type SourceInfo struct {
	Kind      string `json:"kind"`
	TableURI  string `json:"table_uri"`
	Rank      int64  `json:"rank"`
	WorldSize int64  `json:"world_size"`
}

// SourcePosition is a source's cursor. For a Loader, StepsConsumed steps of
// Epoch are dealt; it may equal the epoch's steps: the source is exhausted
// until it is renewed. For a Follower, StepsConsumed global steps of
// following are dealt, Round is the round holding the next one (its JSON
// key "round"), and Epoch is 0. For a Mixture, Mixture is its position
// (its JSON key "mixture"), and Epoch and StepsConsumed are 0. Loader
// positions write no "round" and no "mixture", so a mixture's positions over
// loaders are what they always were. WorkerPosition marks a Loader position
// one DataLoader worker keeps (see Checkpoint.WorkerPosition).
type SourcePosition struct {
	Epoch          int64            `json:"epoch"`
	StepsConsumed  int64            `json:"steps_consumed"`
	Round          *FollowPosition  `json:"round,omitempty"`
	Mixture        *MixturePosition `json:"mixture,omitempty"`
	WorkerPosition bool             `json:"worker_position,omitempty"`
}

// SourceStep names one step of a source: step Step of epoch Epoch of a
// Loader, global step Step of a Follower in its round Epoch, or mixture step
// Step of a Mixture (Epoch 0).
type SourceStep struct {
	Epoch int64   `json:"epoch"`
	Step  int64   `json:"step"`
	round *Round  // a Follower's
	slots []drawn // a Mixture's
}

// Describe says what l deals.
func (l *Loader) Describe() SourceInfo {
	return SourceInfo{Kind: KindEpochs, TableURI: l.table.URI(), Rank: l.opts.Rank, WorldSize: l.opts.WorldSize}
}

// Begin is step 0 of epoch 0.
func (l *Loader) Begin() SourcePosition { return SourcePosition{} }

// StepAt returns step StepsConsumed of Epoch, or false once the epoch has
// no step left. It never waits.
func (l *Loader) StepAt(ctx context.Context, pos SourcePosition, _ bool) (SourceStep, SourcePosition, bool, error) {
	if err := l.checkPosition(pos); err != nil {
		return SourceStep{}, pos, false, err
	}
	n, err := l.EpochSteps(ctx, pos.Epoch)
	if err != nil || pos.StepsConsumed >= n {
		return SourceStep{}, pos, false, err
	}
	next := pos
	next.StepsConsumed++
	return SourceStep{Epoch: pos.Epoch, Step: pos.StepsConsumed}, next, true, nil
}

// errLastEpoch is why a Loader whose last epoch there is, 2⁶³ − 1, ended
// does not renew.
var errLastEpoch = errors.New("epoch 9223372036854775807 ended, the last there is")

// Renew returns step 0 of the next epoch once pos's epoch has no step left.
func (l *Loader) Renew(ctx context.Context, pos SourcePosition) (SourcePosition, bool, error) {
	if err := l.checkPosition(pos); err != nil {
		return pos, false, err
	}
	n, err := l.EpochSteps(ctx, pos.Epoch)
	if err != nil || pos.StepsConsumed < n {
		return pos, false, err
	}
	if pos.Epoch == math.MaxInt64 {
		return pos, false, errcode.Wrap(errLastEpoch, errcode.InvalidArgument, "renew", l.table.URI())
	}
	return SourcePosition{Epoch: pos.Epoch + 1}, true, nil
}

// checkPosition checks that pos is a Loader's.
func (l *Loader) checkPosition(pos SourcePosition) error {
	if pos.Epoch < 0 || pos.StepsConsumed < 0 || pos.Round != nil || pos.Mixture != nil {
		return errcode.New(errcode.InvalidArgument, "position", l.table.URI(),
			"epoch %d, step %d%s: a loader's position is an epoch and a step, both >= 0, and no round", pos.Epoch, pos.StepsConsumed, roundNote(pos))
	}
	return nil
}

// roundNote names pos's round, or its mixture position, in an error, if it
// has one.
func roundNote(pos SourcePosition) string {
	switch {
	case pos.Round != nil:
		return fmt.Sprintf(", round %d", pos.Round.Round)
	case pos.Mixture != nil:
		return fmt.Sprintf(", mixture step %d", pos.Mixture.Step)
	}
	return ""
}

// Save returns the Checkpoint at pos.
func (l *Loader) Save(pos SourcePosition) (json.RawMessage, error) {
	if err := l.checkPosition(pos); err != nil {
		return nil, err
	}
	c := l.Checkpoint(pos.Epoch, pos.StepsConsumed)
	c.WorkerPosition = pos.WorkerPosition
	return json.Marshal(c)
}

// Restore reads a Checkpoint of a run dealing what l deals. Unlike Resume,
// a checkpoint at the end of an epoch stays there: the position of a source
// exhausted until it is renewed.
func (l *Loader) Restore(ctx context.Context, data json.RawMessage, opts RestoreOptions) (SourcePosition, error) {
	const op = "resume"
	switch {
	case IsFollowCheckpoint(data):
		return SourcePosition{}, errcode.New(errcode.InvalidArgument, op, l.table.URI(),
			"the checkpoint is following's (kind \"follow\"): resume a follower of the same table with it (Python: a croupier.FollowingDataset), not a dataset")
	case IsMixtureCheckpoint(data):
		return SourcePosition{}, errcode.New(errcode.InvalidArgument, op, l.table.URI(),
			"the checkpoint is a mixture's (it has sources): resume a mixture of the same sources with it (Python: a croupier.Mixture), not a dataset")
	}
	c, err := ParseCheckpoint(data, "")
	if err != nil {
		return SourcePosition{}, err
	}
	pos, _, err := l.position(ctx, c, opts)
	return pos, err
}

// position checks that c was made by a run dealing what l deals and that
// its position lies inside its epoch, and returns the position and the
// epoch's steps. A position past the end of the epoch is refused, not
// carried into the next one: it comes from another run or was edited.
// Only a worker's own position (WorkerPosition) runs up to opts.Workers − 1
// steps past the end.
func (l *Loader) position(ctx context.Context, c Checkpoint, opts RestoreOptions) (SourcePosition, int64, error) {
	if err := l.checkDeals(c, opts.TableMoved); err != nil {
		return SourcePosition{}, 0, err
	}
	n, err := l.EpochSteps(ctx, c.Epoch)
	if err != nil {
		return SourcePosition{}, 0, err
	}
	most := n
	if c.WorkerPosition {
		most += min(max(opts.Workers-1, 0), math.MaxInt64-n)
	}
	if c.StepsConsumed > most {
		return SourcePosition{}, 0, errcode.New(errcode.InvalidArgument, "resume", l.table.URI(),
			"checkpoint steps_consumed is %d, past the end of an epoch of %d steps: it must be at most %d", c.StepsConsumed, n, most)
	}
	return SourcePosition{Epoch: c.Epoch, StepsConsumed: c.StepsConsumed, WorkerPosition: c.WorkerPosition}, n, nil
}

// IsFollowCheckpoint reports whether data is following's checkpoint (a
// FollowCheckpoint): its kind says so.
func IsFollowCheckpoint(data []byte) bool {
	var probe struct {
		Kind string `json:"kind"`
	}
	return json.Unmarshal(data, &probe) == nil && probe.Kind == "follow"
}

// IsMixtureCheckpoint reports whether data is a mixture's checkpoint (a
// MixtureCheckpoint): it has sources.
func IsMixtureCheckpoint(data []byte) bool {
	var probe struct {
		Sources json.RawMessage `json:"sources"`
	}
	return json.Unmarshal(data, &probe) == nil && probe.Sources != nil
}

// OpenSteps starts reading this rank's batches of steps, all of one epoch.
func (l *Loader) OpenSteps(ctx context.Context, steps []SourceStep) (StepReader, error) {
	if len(steps) == 0 {
		return nil, errcode.New(errcode.InvalidArgument, "open steps", l.table.URI(), "no step to read")
	}
	epoch := steps[0].Epoch
	ts := make([]int64, len(steps))
	for i, s := range steps {
		if s.Epoch != epoch {
			return nil, errcode.New(errcode.InvalidArgument, "open steps", l.table.URI(),
				"steps of epochs %d and %d: a reader reads one epoch", epoch, s.Epoch)
		}
		ts[i] = s.Step
	}
	d, err := l.dealer(ctx, epoch)
	if err != nil {
		return nil, err
	}
	return l.stepStream(ctx, epoch, d, ts, 0, nil, nil)
}

// Describe says what f deals.
func (f *Follower) Describe() SourceInfo {
	return SourceInfo{Kind: KindFollow, TableURI: f.table.URI(), Rank: f.opts.Rank, WorldSize: f.opts.WorldSize}
}

// Begin is global step 0, in the first round.
func (f *Follower) Begin() SourcePosition {
	start := f.Start()
	return SourcePosition{Round: &start}
}

// StepAt returns global step StepsConsumed, forming the rounds from pos's
// on until one holds it, or false when the wait for a round's versions
// timed out (FollowOptions.WaitTimeout). The position after a round's last
// step is the next round's.
func (f *Follower) StepAt(ctx context.Context, pos SourcePosition, wait bool) (SourceStep, SourcePosition, bool, error) {
	if pos.Round == nil || pos.Mixture != nil || pos.Epoch != 0 || pos.StepsConsumed < pos.Round.Step {
		return SourceStep{}, pos, false, errcode.New(errcode.InvalidArgument, "position", f.table.URI(),
			"epoch %d, step %d%s: a follower's position is a step and the round holding it", pos.Epoch, pos.StepsConsumed, roundNote(pos))
	}
	at := *pos.Round
	for {
		r, ok, _, err := f.round(ctx, at, wait)
		switch {
		case err == io.EOF:
			return SourceStep{}, pos, false, nil
		case err != nil:
			return SourceStep{}, pos, false, err
		case !ok:
			return SourceStep{}, pos, false, ErrNotReady
		}
		if pos.StepsConsumed >= r.Step+r.Steps {
			at = r.next
			continue
		}
		next := SourcePosition{StepsConsumed: pos.StepsConsumed + 1, Round: &r.FollowPosition}
		if next.StepsConsumed == r.Step+r.Steps {
			next.Round = &r.next
		}
		return SourceStep{Epoch: r.Round, Step: pos.StepsConsumed, round: &r}, next, true, nil
	}
}

// Renew returns false: following ends for good when its wait times out.
func (f *Follower) Renew(context.Context, SourcePosition) (SourcePosition, bool, error) {
	return SourcePosition{}, false, nil
}

// Save returns the FollowCheckpoint at pos.
func (f *Follower) Save(pos SourcePosition) (json.RawMessage, error) {
	if pos.Round == nil {
		return nil, errcode.New(errcode.InvalidArgument, "checkpoint", f.table.URI(), "a follower's position needs its round")
	}
	return json.Marshal(f.Checkpoint(*pos.Round, pos.StepsConsumed))
}

// Restore reads a FollowCheckpoint of a run of this follower; opts do not
// apply to following.
func (f *Follower) Restore(_ context.Context, data json.RawMessage, _ RestoreOptions) (SourcePosition, error) {
	c, err := ParseFollowCheckpoint(data, "")
	if err != nil {
		return SourcePosition{}, err
	}
	round, step, err := f.Resume(c)
	if err != nil {
		return SourcePosition{}, err
	}
	return SourcePosition{StepsConsumed: step, Round: &round}, nil
}

// OpenSteps starts reading this rank's batches of steps of one round: their
// records have the VersionColumn, as a FollowStream's.
func (f *Follower) OpenSteps(ctx context.Context, steps []SourceStep) (StepReader, error) {
	if len(steps) == 0 || steps[0].round == nil {
		return nil, errcode.New(errcode.InvalidArgument, "open steps", f.table.URI(), "no step of a round to read")
	}
	r := steps[0].round
	local := make([]int64, len(steps))
	for i, s := range steps {
		if s.round == nil || s.round.Round != r.Round {
			return nil, errcode.New(errcode.InvalidArgument, "open steps", f.table.URI(),
				"steps of rounds %d and %d: a reader reads one round", r.Round, s.Epoch)
		}
		local[i] = s.Step - r.Step
	}
	if !slices.IsSorted(local) {
		return nil, errcode.New(errcode.InvalidArgument, "open steps", f.table.URI(), "steps out of order")
	}
	l, err := f.Loader(ctx, r)
	if err != nil {
		return nil, err
	}
	d, err := l.dealer(ctx, 0)
	if err == nil {
		var st *Stream
		if st, err = l.stepStream(ctx, 0, d, local, 0, nil, nil); err == nil {
			return &roundSteps{f: f, round: r, loader: l, stream: st}, nil
		}
	}
	l.Close()
	return nil, err
}

// roundSteps reads steps of one round of following.
type roundSteps struct {
	f      *Follower
	round  *Round
	loader *Loader
	stream *Stream
}

// Next returns the next step, numbered as following numbers it, its record
// with the VersionColumn.
func (s *roundSteps) Next(ctx context.Context) (Batch, error) {
	b, err := s.stream.Next(ctx)
	if err != nil {
		return Batch{}, err
	}
	rec, err := s.f.withVersions(b, s.round.Step)
	b.Record.Release()
	if err != nil {
		return Batch{}, err
	}
	return Batch{Step: s.round.Step + b.Step, Steps: b.Steps, Record: rec, RowIDs: b.RowIDs}, nil
}

// Close stops reading and releases the round's loader.
func (s *roundSteps) Close() error {
	return errors.Join(s.stream.Close(), s.loader.Close())
}
