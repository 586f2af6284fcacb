package loader

import (
	"context"
	"fmt"
	"io"
	"iter"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/permutation"
)

// StreamOptions choose which of a rank's batches a Stream makes.
type StreamOptions struct {
	Epoch     int64 `json:"epoch"`
	StartStep int64 `json:"start_step"` // the first global step of this iteration; ≥ −Worker

	Worker     int `json:"worker"`      // this worker's index in [0, NumWorkers)
	NumWorkers int `json:"num_workers"` // 0 behaves as 1

	// CoalesceBytes, when positive, lets one Batch hold several of the
	// worker's consecutive steps, as many as fit in about this many bytes (at
	// most MaxCoalescedSteps). Each step that crosses into Python or C costs
	// the same tens of microseconds however small it is; for rows of a few
	// dozen bytes that is most of the work. Zero: one step per Batch.
	CoalesceBytes int64 `json:"coalesce_bytes"`
}

// MaxCoalescedSteps bounds the steps of one coalesced Batch.
const MaxCoalescedSteps = 64

// Batch is one rank's share of one global step, or of Steps consecutive
// steps of the worker when the stream coalesces them: Step, Step+K, …
// (K = the stream's NumWorkers), in that order in Record. Every step of an
// epoch has the rank's batch size in rows (Loader.RankBatchSize) except its
// last, which may have fewer when DropLast is false.
type Batch struct {
	Step   int64
	Steps  int               // ≥ 1
	Record arrow.RecordBatch // released by the receiver
}

type result struct {
	batch Batch
	err   error
}

// Stream makes one worker's batches of one epoch in step order, reading up to
// ReadAhead batches ahead. It is not safe for concurrent use; Close it when done,
// also after an early stop.
type Stream struct {
	cancel   context.CancelFunc
	reader   *table.Reader
	progress *progress
	pending  chan chan result // one per step being read, in step order
	waiting  chan result      // taken from pending by a Next that ctx interrupted
	wg       sync.WaitGroup
	err      error // sticky: after an error or the end, Next keeps returning it

	rows    atomic.Int64 // rows Next returned
	stall   atomic.Int64 // nanoseconds Next waited for a batch still being read
	ready   atomic.Int64 // batches read and not yet taken by Next
	planned atomic.Int64 // row groups in the planner's window

	rowBytes atomic.Int64 // bytes a row of the last batch read took: sizes coalesced batches
}

// Stats describe what a stream has done so far, for monitoring and tuning.
type Stats struct {
	table.ReaderStats
	Steps     int64         `json:"steps"`    // steps Next returned
	Rows      int64         `json:"rows"`     // rows in them
	StallTime time.Duration `json:"stall_ns"` // time Next waited for a batch still being read
	Ready     int64         `json:"ready"`    // batches read ahead, waiting for Next
	Planned   int64         `json:"planned"`  // row groups the planner holds for steps ahead
}

// Stats returns the stream's counters. It is safe to call at any time, also
// concurrently with Next.
func (s *Stream) Stats() Stats {
	return Stats{ReaderStats: s.reader.Stats(), Steps: int64(s.progress.steps()), Rows: s.rows.Load(),
		StallTime: time.Duration(s.stall.Load()), Ready: s.ready.Load(), Planned: s.planned.Load()}
}

// Stream starts producing the batches of worker so.Worker: steps
// so.StartStep + so.Worker, + so.NumWorkers, … up to the end of the epoch.
// The stream stops when ctx is canceled or Close is called.
func (l *Loader) Stream(ctx context.Context, so StreamOptions) (*Stream, error) {
	const op = "open stream"
	k := max(so.NumWorkers, 1)
	switch {
	case l.closed.Load():
		return nil, errcode.New(errcode.Closed, op, l.table.URI(), "the loader is closed")
	case so.Worker < 0 || so.Worker >= k:
		return nil, errcode.New(errcode.InvalidArgument, op, "", "worker %d out of range [0, %d)", so.Worker, k)
	case so.StartStep+int64(so.Worker) < 0 || so.StartStep > l.StepsPerEpoch():
		return nil, errcode.New(errcode.InvalidArgument, op, "", "start step %d of worker %d out of range [%d, %d]",
			so.StartStep, so.Worker, -so.Worker, l.StepsPerEpoch())
	case so.Epoch < 0:
		return nil, errcode.New(errcode.InvalidArgument, op, "", "epoch %d is negative", so.Epoch)
	}
	r, err := l.table.NewReader(table.ReaderOptions{Columns: l.opts.Columns,
		CacheBytes: l.opts.MemoryBudget, Allocator: l.opts.Allocator, MaxReads: l.opts.MaxReads})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &Stream{cancel: cancel, reader: r, progress: newProgress(),
		pending: make(chan chan result, l.opts.ReadAhead)}
	var steps []int64
	for t := so.StartStep + int64(so.Worker); t < l.StepsPerEpoch(); t += int64(k) {
		steps = append(steps, t)
	}
	order := l.EpochOrder(so.Epoch)
	s.wg.Add(2)
	go s.produce(ctx, l, order, steps, so.CoalesceBytes)
	go s.plan(ctx, l, order, steps)
	return s, nil
}

// produce starts one read per batch, at most ReadAhead at a time (the
// capacity of pending), and hands them to Next in step order. Should it
// panic, Next gets the error in place of the next batch.
//
// A batch is one step unless coalesce is positive: then it takes as many
// steps as fit in coalesce bytes at the size of a row of the last batch read
// (one step until a batch has been read).
func (s *Stream) produce(ctx context.Context, l *Loader, order permutation.Order, steps []int64, coalesce int64) (err error) {
	defer func() {
		if err != nil {
			ch := make(chan result, 1)
			ch <- result{err: err}
			select {
			case s.pending <- ch:
			case <-ctx.Done():
			}
		}
		close(s.pending)
		s.wg.Done()
	}()
	defer errcode.Recover(&err, errcode.Internal, "read ahead", l.table.URI())
	for len(steps) > 0 {
		ch := make(chan result, 1)
		select {
		case s.pending <- ch:
		case <-ctx.Done():
			return nil
		}
		n := 1
		if rb := s.rowBytes.Load(); coalesce > 0 && rb > 0 {
			n = int(min(max(coalesce/(rb*l.RankBatchSize()), 1), MaxCoalescedSteps, int64(len(steps))))
		}
		s.wg.Add(1)
		go s.read(ctx, l, order, steps[:n], ch)
		steps = steps[n:]
	}
	return nil
}

// read makes the batch of steps and sends it on ch (and returns it); a panic
// becomes the result's error.
func (s *Stream) read(ctx context.Context, l *Loader, order permutation.Order, steps []int64, ch chan<- result) (res result) {
	defer func() {
		s.ready.Add(1)
		ch <- res
		s.wg.Done()
	}()
	defer errcode.Recover(&res.err, errcode.Internal, fmt.Sprintf("read step %d of", steps[0]), l.table.URI())
	var ids []uint64
	for _, t := range steps {
		step, err := l.deal.Batch(ctx, order, t, l.opts.Rank)
		if err != nil {
			return result{err: err}
		}
		if ids == nil {
			ids = make([]uint64, 0, len(step)*len(steps))
		}
		ids = append(ids, step...)
	}
	rec, err := s.reader.Read(ctx, ids)
	if err != nil {
		return result{err: err}
	}
	if n := rec.NumRows(); n > 0 {
		s.rowBytes.Store(max(table.RecordBytes(rec)/n, 1))
	}
	return result{batch: Batch{Step: steps[0], Steps: len(steps), Record: rec}}
}

// Next returns the next batch, or io.EOF after the last one. If ctx ends
// first, Next returns its error and a later Next returns the same step.
func (s *Stream) Next(ctx context.Context) (Batch, error) {
	if s.err != nil {
		return Batch{}, s.err
	}
	if err := ctx.Err(); err != nil {
		return Batch{}, err
	}
	if s.waiting == nil {
		select {
		case c, ok := <-s.pending:
			if !ok {
				s.err = io.EOF
				return Batch{}, s.err
			}
			s.waiting = c
		case <-ctx.Done():
			return Batch{}, ctx.Err()
		}
	}
	var res result
	select {
	case res = <-s.waiting:
	default:
		start := time.Now()
		select {
		case res = <-s.waiting:
		case <-ctx.Done():
			s.stall.Add(int64(time.Since(start)))
			return Batch{}, ctx.Err()
		}
		s.stall.Add(int64(time.Since(start)))
	}
	s.waiting = nil
	s.ready.Add(-1)
	if res.err != nil {
		s.err = res.err
		s.cancel()
		return res.batch, res.err
	}
	s.rows.Add(res.batch.Record.NumRows())
	s.progress.advance(res.batch.Steps)
	return res.batch, nil
}

// All iterates over the remaining batches. Iteration stops at the first error,
// which it yields.
func (s *Stream) All(ctx context.Context) iter.Seq2[Batch, error] {
	return func(yield func(Batch, error) bool) {
		for {
			b, err := s.Next(ctx)
			if err == io.EOF {
				return
			}
			if !yield(b, err) || err != nil {
				return
			}
		}
	}
}

// Close stops the stream, waits for its goroutines and frees what it holds,
// including batches read ahead but not yet returned.
func (s *Stream) Close() error {
	s.cancel()
	// Drain: reads in flight finish (canceled) and their batches are freed.
	if s.waiting != nil {
		if res := <-s.waiting; res.batch.Record != nil {
			res.batch.Record.Release()
		}
	}
	for ch := range s.pending {
		if res := <-ch; res.batch.Record != nil {
			res.batch.Record.Release()
		}
	}
	s.wg.Wait()
	if s.err == nil {
		s.err = errcode.New(errcode.Closed, "next", "", "stream is closed")
	}
	return s.reader.Close()
}
