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
	s := newSlots(1)
	ctx := context.Background()
	if err := s.acquire(ctx, 5); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []int64
	var wg sync.WaitGroup
	queued := func(n int) { // wait until n waiters queue
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
	for i, p := range []int64{7, 3, 9, 3, 0} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.acquire(ctx, p); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, p)
			mu.Unlock()
			s.release()
		}()
		queued(i + 1)
	}
	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error)
	go func() { errc <- s.acquire(cctx, 1) }()
	queued(6)
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("a canceled acquire succeeded")
	}
	s.release()
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
