package table

import (
	"container/heap"
	"context"
	"sync"
)

// slots is a semaphore of a number of slots and a number of bytes: each
// holder takes one slot and some bytes. It grants them to the waiter with the
// lowest priority value first, and among equals to the first to come; a
// waiter that does not fit waits, and so do those behind it.
//
// Decoding is bounded to one row group per core, and which fetched row group
// decodes next decides how long the consumer waits: Keep fetches up to
// MaxReads row groups at once, and from a distant store they arrive in any
// order. Granting decoding slots in the order the groups will be used (the
// order Keep calls asked for them) keeps the next group needed from queueing
// behind groups needed later. The bytes are those of the decoded column a
// decoder holds: reading a few pages of a row group holds far less than
// decoding all of it, and as many such decoders run at once as there are
// cores.
type slots struct {
	mu    sync.Mutex
	total int   // slots
	free  int   // slots
	bytes int64 // free bytes
	limit int64 // all the bytes
	queue waiters
	seq   int64 // arrivals, to keep equal priorities first come, first served
}

type waiter struct {
	prio, seq int64
	k         int           // slots wanted
	n         int64         // bytes wanted
	ready     chan struct{} // closed when the slot is granted
	index     int           // in the queue; -1 once granted
}

// newSlots returns n slots sharing limit bytes.
func newSlots(n int, limit int64) *slots {
	return &slots{total: n, free: n, bytes: limit, limit: limit}
}

// size is what a holder asking for n bytes is charged: a holder larger than
// the limit takes all of it, so that it runs alone.
func (s *slots) size(n int64) int64 { return min(max(n, 0), s.limit) }

// acquire waits for a slot and n bytes, or for ctx to end (then it holds
// none). It returns the bytes to give back to release.
func (s *slots) acquire(ctx context.Context, prio, n int64) (int64, error) {
	return s.acquireSlots(ctx, prio, 1, n)
}

// acquireSlots waits for k slots at once (all there are, if fewer) and n
// bytes: a holder that needs several slots together takes none of them
// before it can take all, so that holders waiting for slots never hold some
// that another waits for. The holder gives each slot back with release, the
// bytes with one of them. It returns the bytes.
func (s *slots) acquireSlots(ctx context.Context, prio int64, k int, n int64) (int64, error) {
	n, k = s.size(n), min(k, s.total)
	s.mu.Lock()
	if len(s.queue) == 0 && s.fits(k, n) {
		s.free -= k
		s.bytes -= n
		s.mu.Unlock()
		return n, nil
	}
	s.seq++
	w := &waiter{prio: prio, seq: s.seq, k: k, n: n, ready: make(chan struct{})}
	heap.Push(&s.queue, w)
	s.mu.Unlock()
	select {
	case <-w.ready:
		return n, nil
	case <-ctx.Done():
		s.mu.Lock()
		granted := w.index < 0
		if !granted {
			heap.Remove(&s.queue, w.index)
			s.grant() // the waiters behind it may fit now
		}
		s.mu.Unlock()
		if granted { // granted as ctx ended: pass it on
			s.release(n)
			for range k - 1 {
				s.release(0)
			}
		}
		return 0, ctx.Err()
	}
}

func (s *slots) fits(k int, n int64) bool { return s.free >= k && s.bytes >= n }

// release returns a slot and n bytes, and grants waiters that fit now, in
// order.
func (s *slots) release(n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.free++
	s.bytes += n
	s.grant()
}

// grant hands slots to the waiters at the head of the queue while they fit.
func (s *slots) grant() {
	for len(s.queue) > 0 && s.fits(s.queue[0].k, s.queue[0].n) {
		w := heap.Pop(&s.queue).(*waiter)
		s.free -= w.k
		s.bytes -= w.n
		w.index = -1
		close(w.ready)
	}
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
