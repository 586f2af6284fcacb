package main

/*
#include <pthread.h>
#include <stdint.h>

static uint64_t croupier_thread_id(void) { return (uint64_t)(uintptr_t)pthread_self(); }
*/
import "C"

import (
	"context"
	"slices"
	"sync"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/loader"
)

// An export runs on the C thread that called it, from entry to return, and C
// has no other name for "this call" than that thread. So the calls in progress
// are kept by thread: guard begins one (a context, canceled when the export
// returns), the export's Go calls take callContext(), and croupier_cancel,
// called from any other thread, cancels those of a thread. A thread holds more
// than one call when a callback into the caller calls croupier again.
var calls = struct {
	sync.Mutex
	byThread map[uint64][]*call
}{byThread: map[uint64][]*call{}}

type call struct {
	ctx    context.Context
	cancel context.CancelFunc
}

// threadID is the calling C thread's pthread_self(), which Python's
// threading.get_ident() also returns.
func threadID() uint64 { return uint64(C.croupier_thread_id()) }

// beginCall records a call in progress on this thread; the returned function
// ends it.
func beginCall() (end func()) {
	id := threadID()
	ctx, cancel := context.WithCancel(context.Background())
	c := &call{ctx: ctx, cancel: cancel}
	calls.Lock()
	calls.byThread[id] = append(calls.byThread[id], c)
	calls.Unlock()
	return func() {
		cancel()
		calls.Lock()
		defer calls.Unlock()
		rest := slices.DeleteFunc(calls.byThread[id], func(o *call) bool { return o == c })
		if len(rest) == 0 {
			delete(calls.byThread, id)
			return
		}
		calls.byThread[id] = rest
	}
}

// callContext is the context of the innermost call in progress on this thread:
// croupier_cancel cancels it. Outside a call it is context.Background().
func callContext() context.Context {
	id := threadID()
	calls.Lock()
	defer calls.Unlock()
	if cs := calls.byThread[id]; len(cs) > 0 {
		return cs[len(cs)-1].ctx
	}
	return context.Background()
}

// cancelThread cancels every call in progress on thread id; it returns how many.
func cancelThread(id uint64) int {
	calls.Lock()
	defer calls.Unlock()
	for _, c := range calls.byThread[id] {
		c.cancel()
	}
	return len(calls.byThread[id])
}

// openStreamForCall opens a stream that lives until it is closed, not only for
// the call that opens it, while that call's cancellation still stops the open.
func openStreamForCall(l *loader.Loader, so loader.StreamOptions) (*loader.Stream, error) {
	ctx, cancel := context.WithCancel(context.Background())
	stop := context.AfterFunc(callContext(), cancel)
	s, err := l.Stream(ctx, so)
	if stop() {
		return s, err
	}
	// Canceled during the open: a stream opened anyway runs on a canceled context.
	if err == nil {
		s.Close()
	}
	return nil, errcode.Wrap(context.Canceled, errcode.Canceled, "open stream", l.Table().URI())
}

//export croupier_cancel
func croupier_cancel(thread C.uint64_t) (n C.int64_t) {
	guard(nil, func() error {
		n = C.int64_t(cancelThread(uint64(thread)))
		return nil
	})
	return n
}
