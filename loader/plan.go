package loader

import (
	"context"
	"runtime"
	"sync"

	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/permutation"
)

// The dealing order is known far ahead, so a stream need not wait for a step
// to be asked for before decoding what it needs. A planner goroutine walks the
// worker's future steps ahead of the consumer, finds the row groups each will
// touch in the order they are first needed, and decodes them into the
// reader's cache on GOMAXPROCS goroutines. It keeps at most a window of row
// groups planned for steps the consumer has not reached: as many as fill half
// the memory budget at the mean decoded size seen so far (one per core before
// the first is decoded). The cache drops the least recently used row group
// first, and the planner loads row groups in the order they will be used.

// progress tells the planner how far the consumer is.
type progress struct {
	mu       sync.Mutex
	consumed int           // steps Next has returned
	moved    chan struct{} // signalled when consumed grows
}

func newProgress() *progress { return &progress{moved: make(chan struct{}, 1)} }

// advance records one more step consumed.
func (p *progress) advance() {
	p.mu.Lock()
	p.consumed++
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
func (s *Stream) plan(ctx context.Context, l *Loader, order permutation.Order, steps []int64) {
	defer s.wg.Done()
	cores := runtime.GOMAXPROCS(0)
	sem := make(chan struct{}, cores)
	planned := map[table.GroupRef]bool{}
	var ahead []int // for each planned row group still ahead: the index of the step that first needs it
	for i, t := range steps {
		ids, err := l.deal.Batch(ctx, order, t, l.opts.Rank)
		if err != nil {
			return
		}
		groups, err := s.reader.Groups(ids)
		if err != nil {
			return
		}
		for _, g := range groups {
			if planned[g] {
				continue
			}
			for { // wait for room in the window
				consumed := s.progress.steps()
				for len(ahead) > 0 && ahead[0] < consumed {
					ahead = ahead[1:]
				}
				if len(ahead) < s.window(l.opts.MemoryBudget, cores) {
					break
				}
				select {
				case <-s.progress.moved:
				case <-ctx.Done():
					return
				}
			}
			planned[g] = true
			ahead = append(ahead, i)
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer func() { <-sem }()
				s.reader.Prefetch(ctx, g)
			}()
		}
	}
}

// window is how many row groups the planner may load ahead of the consumer.
func (s *Stream) window(budget int64, cores int) int {
	_, mean := s.reader.CacheBytes()
	if mean == 0 {
		return cores
	}
	return max(1, int(budget/2/mean))
}
