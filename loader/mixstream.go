package loader

import (
	"context"
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
	Step  int64
	Slots []MixtureSlot
	// Records hold the rows of each slot that no mixture fills, depth
	// first: a slot a nested mixture fills holds the records of its own
	// slots in their place (one per slot when no source is a mixture).
	// The receiver releases them.
	Records []arrow.RecordBatch
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
	steps  []MixtureBatch
	reader *leafReader // of the window
	err    error       // sticky: after an error or the end, Next keeps returning it
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
		if err := s.closeReader(); err != nil {
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
	for n := records(b.Slots); len(b.Records) < n; {
		part, err := s.reader.Next(ctx)
		if err != nil && ctx.Err() != nil {
			return MixtureBatch{}, err // the same step comes at the next call
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

// records returns how many records a step of slots holds: one for each
// slot that no mixture fills, those of its own slots for each that one
// does.
func records(slots []MixtureSlot) int {
	n := 0
	for _, s := range slots {
		if s.Slots != nil {
			n += records(s.Slots)
		} else {
			n++
		}
	}
	return n
}

// fail makes err the stream's last word.
func (s *MixtureStream) fail(err error) error {
	s.err = err
	s.cancel()
	return err
}

// plan lays out the next window of mixture steps and opens the readers of
// their slots. A window holds one epoch (round) of each source (but where
// one step's slots cross into the next), a source nested in a mixture named
// by its path, so that it holds no more than one stream, and one memory
// budget, per source while a small source cycles through many epochs. It
// ends before a step that would wait for a followed source's rows, unless
// it holds none of the worker's steps yet: steps are dealt as soon as their
// rows are committed, as a FollowStream deals them.
func (s *MixtureStream) plan(ctx context.Context) error {
	epochs := map[string]int64{} // of each source in the window, by path
	var window []leaf
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
			leaves := s.m.leaves(nil, "", slots)
			if len(s.steps) > 0 && slices.ContainsFunc(leaves, func(l leaf) bool {
				e, ok := epochs[l.path]
				return ok && e != l.step.Epoch
			}) {
				break // the step opens a source's next epoch: it begins the next window
			}
			b := MixtureBatch{Step: s.pos.Step, Next: next}
			for _, d := range slots {
				b.Slots = append(b.Slots, d.slot())
			}
			for _, l := range leaves {
				epochs[l.path] = l.step.Epoch
			}
			window = append(window, leaves...)
			s.steps = append(s.steps, b)
		}
		s.pos = next
	}
	if len(window) == 0 {
		return nil
	}
	r, err := openLeaves(s.ctx, window)
	s.reader = r
	return err
}

// closeReader closes the window's readers.
func (s *MixtureStream) closeReader() error {
	if s.reader == nil {
		return nil
	}
	err := s.reader.Close()
	s.reader = nil
	return err
}

// Close stops the stream and frees what it holds.
func (s *MixtureStream) Close() error {
	s.cancel()
	err := s.closeReader()
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
