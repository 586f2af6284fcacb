package main

import (
	"context"
	"errors"
	"runtime"
	"testing"
)

// onThread runs fn as an export runs: under guard's recovery and call
// bookkeeping, on an OS thread of its own. It sends the thread's id on
// started, then fn's error on the returned channel.
func onThread(started chan<- uint64, fn func() error) <-chan error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		done <- recovered(func() error {
			started <- threadID()
			return fn()
		})
	}()
	return done
}

func TestCancelReachesTheCallsOfOneThread(t *testing.T) {
	started := make(chan uint64, 2)
	inner := make(chan error, 1)
	blocked := func() error {
		<-callContext().Done()
		return callContext().Err()
	}
	// A call, and a second call made inside it on the same thread (as a
	// callback into the caller would), both waiting for their contexts.
	outer := onThread(started, func() error {
		inner <- recovered(func() error {
			started <- threadID()
			return blocked()
		})
		return blocked()
	})
	otherStarted := make(chan uint64, 1)
	other := onThread(otherStarted, blocked)
	otherID := <-otherStarted
	id := <-started
	if again := <-started; again != id {
		t.Fatalf("the nested call ran on thread %d, not %d", again, id)
	}
	if n := cancelThread(id); n != 2 {
		t.Fatalf("cancelThread canceled %d calls, want the 2 in progress on the thread", n)
	}
	for _, ch := range []<-chan error{inner, outer} {
		if err := <-ch; !errors.Is(err, context.Canceled) {
			t.Fatalf("canceled call returned %v", err)
		}
	}
	if n := cancelThread(id); n != 0 {
		t.Fatalf("after the calls returned, cancelThread found %d", n)
	}
	calls.Lock()
	others := calls.byThread[otherID]
	calls.Unlock()
	if len(others) != 1 || others[0].ctx.Err() != nil {
		t.Fatal("canceling one thread's calls canceled a call on another thread")
	}
	cancelThread(otherID)
	if err := <-other; !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled call returned %v", err)
	}
	if callContext().Err() != nil {
		t.Fatal("outside any call, callContext is canceled")
	}
}
