package loader

import (
	"context"
	"errors"
	"io"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/croupier-data/croupier/core/errcode"
)

// MixtureStreamOptions choose which mixture steps a MixtureStream makes.
type MixtureStreamOptions struct {
	// Worker k of NumWorkers deals the mixture steps p.Step + k,
	// p.Step + k + K, … of the stream's start position p (K = NumWorkers;
	// 0 behaves as 1): torch's round robin, so that a DataLoader taking one
	// step from each worker in turn gets them in order.
	Worker     int `json:"worker"`
	NumWorkers int `json:"num_workers"`
}

// MixtureBatch is one rank's share of one mixture step: each slot's source
// step and its rows.
type MixtureBatch struct {
	Step    int64
	Slots   []MixtureSlot
	Records []arrow.RecordBatch // one per slot, released by the receiver
	// Next is the position after the step: a checkpoint taken once the
	// step has reached the training loop holds it.
	Next MixturePosition
}

// mixtureWindow is the number of mixture steps a MixtureStream plans at a
// time. It opens one Stream per source and epoch for the worker's slots in
// a window, and a Stream decodes the row groups its steps touch, so each
// window boundary costs a stream opening (a footer read, the memory budget's
// guesses) and, in shuffled orders, decoding again the row groups whose rows
// the windows on both sides of it deal. Planning a step costs a few
// microseconds (SHA-256 draws), so a window of 4,096 steps is planned in
// milliseconds and holds a few hundred kilobytes of slots.
const mixtureWindow = 4096

// MixtureStream makes one worker's mixture steps of one iteration in order,
// each source's steps read ahead by a Stream of that source's loader (so it
// holds up to each source's memory budget). It is not safe for concurrent
// use; Close it when done, also after an early stop.
type MixtureStream struct {
	ctx    context.Context
	cancel context.CancelFunc
	m      *Mixture
	pos    MixturePosition // where planning continues
	start  int64
	worker int64
	k      int64
	ended  bool // the plan reached the end of the iteration

	// steps are the worker's planned steps not returned yet; the first may
	// hold the records of its first slots, read by a Next that ctx interrupted.
	steps   []MixtureBatch
	streams map[[2]int64]StepReader // of the window, by source and epoch (round)
	err     error                   // sticky: after an error or the end, Next keeps returning it
}

// Stream starts dealing worker so.Worker's mixture steps from pos, until the
// iteration ends (see Next). The stream stops when ctx is canceled or Close
// is called. It reads nothing before the first MixtureStream.Next.
func (m *Mixture) Stream(ctx context.Context, pos MixturePosition, so MixtureStreamOptions) (*MixtureStream, error) {
	k := max(so.NumWorkers, 1)
	if so.Worker < 0 || so.Worker >= k {
		return nil, errcode.New(errcode.InvalidArgument, "open mixture stream", "", "worker %d out of range [0, %d)", so.Worker, k)
	}
	if err := m.checkPosition(pos); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	return &MixtureStream{ctx: ctx, cancel: cancel, m: m, pos: pos, start: pos.Step, worker: int64(so.Worker), k: int64(k)}, nil
}

// Mixture returns the mixture the stream deals.
func (s *MixtureStream) Mixture() *Mixture { return s.m }

// Next returns the worker's next mixture step, or io.EOF after the last step
// of the iteration. If ctx ends first, Next returns its error and a later
// Next returns the same step.
func (s *MixtureStream) Next(ctx context.Context) (MixtureBatch, error) {
	if s.err != nil {
		return MixtureBatch{}, s.err
	}
	for len(s.steps) == 0 {
		if err := s.closeStreams(); err != nil {
			return MixtureBatch{}, s.fail(err)
		}
		if s.ended {
			s.err = io.EOF
			return MixtureBatch{}, s.err
		}
		if err := s.plan(ctx); err != nil {
			return MixtureBatch{}, s.fail(err)
		}
	}
	b := &s.steps[0]
	for len(b.Records) < len(b.Slots) {
		slot := b.Slots[len(b.Records)]
		part, err := s.streams[[2]int64{int64(slot.Source), slot.Epoch}].Next(ctx)
		if err != nil && ctx.Err() != nil {
			return MixtureBatch{}, err // the same step comes at the next call
		}
		if err == nil && part.Step != slot.Step {
			part.Record.Release()
			err = errcode.New(errcode.Internal, "mixture", s.m.sources[slot.Source].Describe().TableURI,
				"source %d gave step %d of epoch %d where step %d was due", slot.Source, part.Step, slot.Epoch, slot.Step)
		}
		if err != nil {
			return MixtureBatch{}, s.fail(err)
		}
		b.Records = append(b.Records, part.Record)
	}
	out := *b
	s.steps = s.steps[1:]
	return out, nil
}

// fail makes err the stream's last word.
func (s *MixtureStream) fail(err error) error {
	s.err = err
	s.cancel()
	return err
}

// plan lays out the next window of mixture steps and opens a stream for
// each source and epoch the worker's steps draw from. A window holds one
// epoch (round) of each source (but where one step's slots cross into the
// next), so that it holds no more than one stream, and one memory budget,
// per source while a small source cycles through many epochs. It ends
// before a step that would wait for a followed source's rows, unless it
// holds none of the worker's steps yet: steps are dealt as soon as their
// rows are committed, as a FollowStream deals them.
func (s *MixtureStream) plan(ctx context.Context) error {
	wanted := map[[2]int64][]SourceStep{}
	epochs := map[int]int64{} // of each source in the window
	var order [][2]int64
	for range mixtureWindow {
		if err := ctx.Err(); err != nil {
			return errcode.Wrap(err, errcode.Canceled, "mixture", "")
		}
		slots, next, ok, err := s.m.next(ctx, s.pos, len(s.steps) == 0)
		if err == ErrNotReady {
			break
		}
		if err != nil {
			return err
		}
		if !ok {
			s.ended = true
			break
		}
		if (s.pos.Step-s.start)%s.k == s.worker {
			if len(s.steps) > 0 && slices.ContainsFunc(slots, func(d drawn) bool {
				e, ok := epochs[d.source]
				return ok && e != d.step.Epoch
			}) {
				break // the step opens a source's next epoch: it begins the next window
			}
			b := MixtureBatch{Step: s.pos.Step, Next: next}
			for _, d := range slots {
				b.Slots = append(b.Slots, d.slot())
				epochs[d.source] = d.step.Epoch
				key := [2]int64{int64(d.source), d.step.Epoch}
				if _, ok := wanted[key]; !ok {
					order = append(order, key)
				}
				wanted[key] = append(wanted[key], d.step)
			}
			s.steps = append(s.steps, b)
		}
		s.pos = next
	}
	s.streams = map[[2]int64]StepReader{}
	for _, key := range order {
		st, err := s.m.sources[key[0]].OpenSteps(s.ctx, wanted[key])
		if err != nil {
			return sourceError(err, int(key[0]))
		}
		s.streams[key] = st
	}
	return nil
}

// closeStreams closes the window's streams.
func (s *MixtureStream) closeStreams() error {
	var errs []error
	for _, st := range s.streams {
		errs = append(errs, st.Close())
	}
	s.streams = nil
	return errors.Join(errs...)
}

// Close stops the stream and frees what it holds.
func (s *MixtureStream) Close() error {
	s.cancel()
	err := s.closeStreams()
	for _, b := range s.steps {
		for _, r := range b.Records {
			r.Release()
		}
	}
	s.steps = nil
	if s.err == nil {
		s.err = errcode.New(errcode.Closed, "next", "", "mixture stream is closed")
	}
	return err
}
