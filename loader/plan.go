package loader

import (
	"context"
	"sync"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/permutation"
)

// The dealing order is known far ahead, so a stream need not wait for a step
// to be asked for before decoding what it needs. A planner goroutine walks the
// worker's future steps ahead of the consumer, finds the row groups each will
// touch in the order they are first needed, and has the reader fetch and
// decode them into its cache, with up to MaxReads row groups in flight (the
// reader bounds requests and decoding threads itself). It keeps at most a
// window of row groups planned for steps the consumer has not reached: as many
// as fill half the memory budget at the mean decoded size seen so far (before
// the first is decoded, at a size guessed from the footer: waiting for one to
// decode first would cost a distant store a round trip at the start). The
// cache drops the least recently used row group first, and the planner loads
// row groups in the order they will be used.

// progress tells the planner how far the consumer is.
type progress struct {
	mu       sync.Mutex
	consumed int           // steps Next has returned
	moved    chan struct{} // signalled when consumed grows
}

func newProgress() *progress { return &progress{moved: make(chan struct{}, 1)} }

// advance records n more steps consumed.
func (p *progress) advance(n int) {
	p.mu.Lock()
	p.consumed += n
	p.mu.Unlock()
	select {
	case p.moved <- struct{}{}:
	default:
	}
}

func (p *progress) steps() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.consumed
}

// plan prefetches the row groups of steps, the worker's steps in order.
// Errors are left to the reads that need the data: a prefetch only warms the
// cache.
//
// A row group stays in the window from the first step that needs it to the
// last one planned so far; a group needed again after the consumer has passed
// all its planned steps is planned anew, which reloads it if it was evicted
// and otherwise marks it recently used, so that the cache evicts the groups
// with no planned use first.
func (s *Stream) plan(ctx context.Context, l *Loader, order permutation.Order, steps []int64) (err error) {
	defer s.wg.Done()
	// A panic here only stops the prefetching; the reads do the work anyway.
	defer errcode.Recover(&err, errcode.Internal, "plan", l.table.URI())
	sem := make(chan struct{}, l.opts.MaxReads)
	type use struct {
		group table.GroupRef
		step  int
	}
	last := map[table.GroupRef]int{} // of each group in the window: the last step planned to need it
	var uses []use                   // every planned use, in step order
	drop := func() {                 // forget the uses the consumer has passed
		consumed := s.progress.steps()
		for len(uses) > 0 && uses[0].step < consumed {
			if last[uses[0].group] == uses[0].step {
				delete(last, uses[0].group)
			}
			uses = uses[1:]
		}
	}
	var guess int64 // decoded bytes of a row group, guessed from the first one's footer
	for i, t := range steps {
		ids, err := l.deal.Batch(ctx, order, t, l.opts.Rank)
		if err != nil {
			return nil // the read of step t reports it
		}
		groups, err := s.reader.Groups(ids)
		if err != nil {
			return nil
		}
		if guess == 0 && len(groups) > 0 {
			if guess, err = s.reader.GuessBytes(ctx, groups[0]); err != nil {
				return nil
			}
		}
		drop()
		for _, g := range groups {
			_, inWindow := last[g]
			last[g] = i
			uses = append(uses, use{g, i})
			s.planned.Store(int64(len(last)))
			if inWindow {
				continue
			}
			for len(last) > s.window(l.opts.MemoryBudget, guess) { // wait for room
				select {
				case <-s.progress.moved:
				case <-ctx.Done():
					return nil
				}
				drop()
			}
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return nil
			}
			s.wg.Add(1)
			go func() (err error) {
				defer s.wg.Done()
				defer func() { <-sem }()
				defer errcode.Recover(&err, errcode.Internal, "prefetch", l.table.URI())
				return s.reader.Prefetch(ctx, g) // errors are the reads' to report
			}()
		}
	}
	return nil
}

// window is how many row groups the planner may hold for steps ahead of the
// consumer: as many as fill half the memory budget at the mean decoded size
// seen so far, or at guess before the first is decoded.
func (s *Stream) window(budget, guess int64) int {
	_, mean := s.reader.CacheBytes()
	if mean == 0 {
		mean = max(guess, 1)
	}
	return max(1, int(budget/2/mean))
}
