package table

import (
	"container/heap"
	"context"
	"sync"
)

// slots is a semaphore that grants its slots to the waiter with the lowest
// priority value first, and among equals to the first to come.
//
// Decoding is bounded to one row group per core, and which fetched row group
// decodes next decides how long the consumer waits: Keep fetches up to
// MaxReads row groups at once, and from a distant store they arrive in any
// order. Granting decoding slots in the order the groups will be used (the
// order Keep calls asked for them) keeps the next group needed from queueing
// behind groups needed later.
type slots struct {
	mu    sync.Mutex
	free  int
	queue waiters
	seq   int64 // arrivals, to keep equal priorities first come, first served
}

type waiter struct {
	prio, seq int64
	ready     chan struct{} // closed when the slot is granted
	index     int           // in the queue; -1 once granted
}

func newSlots(n int) *slots { return &slots{free: n} }

// acquire waits for a slot, or for ctx to end (then it holds none).
func (s *slots) acquire(ctx context.Context, prio int64) error {
	s.mu.Lock()
	if s.free > 0 && len(s.queue) == 0 {
		s.free--
		s.mu.Unlock()
		return nil
	}
	s.seq++
	w := &waiter{prio: prio, seq: s.seq, ready: make(chan struct{})}
	heap.Push(&s.queue, w)
	s.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		granted := w.index < 0
		if !granted {
			heap.Remove(&s.queue, w.index)
		}
		s.mu.Unlock()
		if granted { // granted as ctx ended: pass it on
			s.release()
		}
		return ctx.Err()
	}
}

// release returns a slot, to the first waiter if any.
func (s *slots) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) == 0 {
		s.free++
		return
	}
	w := heap.Pop(&s.queue).(*waiter)
	w.index = -1
	close(w.ready)
}

// waiters is a heap of waiters by (prio, seq).
type waiters []*waiter

func (q waiters) Len() int { return len(q) }
func (q waiters) Less(i, j int) bool {
	if q[i].prio != q[j].prio {
		return q[i].prio < q[j].prio
	}
	return q[i].seq < q[j].seq
}
func (q waiters) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}
func (q *waiters) Push(x any) {
	w := x.(*waiter)
	w.index = len(*q)
	*q = append(*q, w)
}
func (q *waiters) Pop() any {
	old := *q
	w := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return w
}
