package table

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestSlotsGrantLowestPriorityFirst holds the only slot while waiters of
// mixed priorities queue, then checks the order they get it in, and that a
// canceled waiter leaves the queue without taking a slot.
func TestSlotsGrantLowestPriorityFirst(t *testing.T) {
	s := newSlots(1, 100)
	ctx := context.Background()
	if _, err := s.acquire(ctx, 5, 0); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []int64
	var wg sync.WaitGroup
	queued := func(n int) { waitQueued(s, n) }
	for i, p := range []int64{7, 3, 9, 3, 0} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.acquire(ctx, p, 0); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, p)
			mu.Unlock()
			s.release(0)
		}()
		queued(i + 1)
	}
	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error)
	go func() { _, err := s.acquire(cctx, 1, 0); errc <- err }()
	queued(6)
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("a canceled acquire succeeded")
	}
	s.release(0)
	wg.Wait()
	want := []int64{0, 3, 3, 7, 9}
	for i := range want {
		if i >= len(order) || order[i] != want[i] {
			t.Fatalf("granted in order %v, want %v", order, want)
		}
	}
	if s.free != 1 || len(s.queue) != 0 {
		t.Fatalf("after all released: %d free, %d queued; want 1 and 0", s.free, len(s.queue))
	}
}

// TestSlotsShareBytes checks the byte bound: holders run at once while their
// bytes fit, a waiter that does not fit waits for room (and so do those
// behind it, whatever their size), one larger than the limit runs alone,
// and a canceled waiter at the head lets the waiters behind it through.
func TestSlotsShareBytes(t *testing.T) {
	ctx := context.Background()
	s := newSlots(4, 100)
	take := func(prio, n int64) int64 {
		t.Helper()
		got, err := s.acquire(ctx, prio, n)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	a, b := take(0, 60), take(1, 40) // both fit
	if a != 60 || b != 40 || s.bytes != 0 {
		t.Fatalf("took %d and %d, %d bytes left; want 60, 40 and 0", a, b, s.bytes)
	}
	queued := func(n int) { waitQueued(s, n) }
	big := make(chan int64)
	go func() { big <- take(2, 1000) }() // larger than the limit: waits for all of it
	queued(1)
	small := make(chan int64)
	go func() { small <- take(3, 1) }() // behind it, though it would fit once a frees
	queued(2)
	s.release(a)
	select {
	case <-small:
		t.Fatal("a waiter was granted ahead of the one before it")
	case <-big:
		t.Fatal("a holder larger than the limit was granted while others held bytes")
	case <-time.After(10 * time.Millisecond):
	}
	s.release(b)
	if got := <-big; got != 100 {
		t.Fatalf("a holder larger than the limit was charged %d, want the limit 100", got)
	}
	s.release(100)
	if got := <-small; got != 1 {
		t.Fatalf("charged %d, want 1", got)
	}

	// A canceled waiter at the head of the queue lets the one behind it in.
	hold := take(4, 90)
	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error)
	go func() { _, err := s.acquire(cctx, 5, 50); errc <- err }()
	queued(1)
	go func() { small <- take(6, 5) }()
	queued(2)
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("a canceled acquire succeeded")
	}
	if got := <-small; got != 5 {
		t.Fatalf("charged %d, want 5", got)
	}
	s.release(5)
	s.release(hold)
	s.release(1)
	if s.free != 4 || s.bytes != 100 || len(s.queue) != 0 {
		t.Fatalf("after all released: %d free slots, %d bytes, %d queued; want 4, 100 and 0", s.free, s.bytes, len(s.queue))
	}
}

// waitQueued waits until n waiters queue for s.
func waitQueued(s *slots, n int) {
	for {
		s.mu.Lock()
		l := len(s.queue)
		s.mu.Unlock()
		if l == n {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// TestSlotsTakenTogether: a holder of several slots takes none before it can
// take all (a holder asking for more than there are takes them all), and
// the waiters behind it wait for it, though one slot would do for them.
func TestSlotsTakenTogether(t *testing.T) {
	ctx := context.Background()
	s := newSlots(4, 0)
	if _, err := s.acquire(ctx, 0, 0); err != nil {
		t.Fatal(err)
	}
	many := make(chan error)
	go func() { _, err := s.acquireSlots(ctx, 1, 9, 0); many <- err }()
	waitQueued(s, 1)
	one := make(chan error)
	go func() { _, err := s.acquire(ctx, 2, 0); one <- err }()
	waitQueued(s, 2)
	s.mu.Lock()
	free := s.free
	s.mu.Unlock()
	if free != 3 {
		t.Fatalf("%d slots free while a holder of all of them waits, want 3: it took some", free)
	}
	s.release(0)
	if err := <-many; err != nil {
		t.Fatal(err)
	}
	select {
	case <-one:
		t.Fatal("a waiter was granted a slot while another held all of them")
	case <-time.After(10 * time.Millisecond):
	}
	for range 4 {
		s.release(0)
	}
	if err := <-one; err != nil {
		t.Fatal(err)
	}
	s.release(0)
	if s.free != 4 || len(s.queue) != 0 {
		t.Fatalf("after all released: %d free, %d queued; want 4 and 0", s.free, len(s.queue))
	}
}
