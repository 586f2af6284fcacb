package store

import (
	"context"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/croupier-data/croupier/core/errcode"
)

// Hedged range reads.
//
// Most requests to an object store answer within a few times their usual
// first-byte latency, and a few take far longer: a slow disk, a busy front
// end, a lost packet. A training step waits for its slowest read, so the
// retry after AttemptTimeout (30 s) comes far too late for them. A range read
// of a remote store that has not had its first byte after a few times the
// latency the location has seen so far sends the same request again, and
// takes whichever answers first; the other is canceled. Reads are
// idempotent, and both are conditional on the pinned version, so either
// answer is the pinned bytes.
//
// Hedges are bounded so that a store that is slow for everyone is not sent
// twice the requests: at most one for every hedgeShare requests, and none
// before the location has seen hedgeSamples answers to learn its latency
// from.

const (
	hedgeSamples = 16
	hedgeShare   = 20 // at most one request in 20 is hedged
	// hedgeFactor times the usual first-byte latency is how long a request
	// waits before it is hedged; hedgeFloor the least.
	hedgeFactor = 4
	hedgeFloor  = 10 * time.Millisecond
)

// latency learns a usual latency from the latencies observed.
type latency struct {
	mu      sync.Mutex
	mean    time.Duration // moving average of the latencies seen
	samples int64
}

// hedging is what a location knows to hedge its range requests: their
// first-byte latency, how many it sent and how many it sent again.
type hedging struct {
	latency
	requests, hedges atomic.Int64
}

// observe records a latency.
func (l *latency) observe(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.samples++
	if l.samples == 1 {
		l.mean = d
		return
	}
	l.mean += (d - l.mean) / 16
}

// usual returns the usual latency, once there has been one to learn it from.
func (l *latency) usual() (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mean, l.samples > 0
}

// hedgeAfter says how long a request waits for its first byte before it is
// hedged, or false when it is not to be.
func (l *hedging) hedgeAfter() (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.samples < hedgeSamples || (l.hedges.Load()+1)*hedgeShare > l.requests.Load() {
		return 0, false
	}
	return max(hedgeFactor*l.mean, hedgeFloor), true
}

// opened is a range reader, or why none could be opened.
type opened struct {
	rc     io.ReadCloser
	seen   Object
	err    error
	cancel context.CancelFunc
}

// cancelOnClose cancels its request's context once the body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}

// hedgedRange opens a range reader of obj on a remote store, sending the
// request again when the first has had no answer after the location's hedge
// delay (see hedgeAfter). It returns the first answer that is not an error,
// or the last error, and calls hedged when it sends a request again.
func (l *Location) hedgedRange(ctx context.Context, obj *Object, off, n int64, hedged func()) (io.ReadCloser, Object, error) {
	l.lat.requests.Add(1)
	results := make(chan opened, 2)
	where := l.ObjectURI(obj.Key)
	send := func() {
		rctx, cancel := context.WithCancel(ctx)
		start := time.Now()
		// o is a parameter so that the deferred send, which runs after the
		// recover, sends what a panic left in it.
		go func(o opened) {
			defer func() { results <- o }()
			defer errcode.Recover(&o.err, errcode.Internal, "read", where)
			o.rc, o.seen, o.err = l.bucket.NewRangeReader(rctx, obj.Key, off, n, obj)
			if o.err == nil {
				l.lat.observe(time.Since(start))
				l.served.observe(time.Since(start))
			}
		}(opened{cancel: cancel})
	}
	send()
	pending := 1
	var hedge <-chan time.Time
	if d, ok := l.lat.hedgeAfter(); ok {
		t := time.NewTimer(d)
		defer t.Stop()
		hedge = t.C
	}
	var last opened
	for pending > 0 {
		select {
		case <-hedge:
			hedge = nil
			l.lat.hedges.Add(1)
			hedged()
			send()
			pending++
			continue
		case last = <-results:
			pending--
		}
		if last.err == nil {
			// The other, if sent, is canceled and its answer dropped.
			go func() (err error) {
				defer errcode.Recover(&err, errcode.Internal, "read", where)
				drain(results, pending)
				return nil
			}()
			return cancelOnClose{last.rc, last.cancel}, last.seen, nil
		}
		last.cancel()
		if hedge != nil { // failed before its hedge was due: the caller retries
			break
		}
	}
	return nil, last.seen, last.err
}

// drain closes the answers of the n requests still out once they come.
func drain(results <-chan opened, n int) {
	for range n {
		o := <-results
		o.cancel()
		if o.rc != nil {
			o.rc.Close()
		}
	}
}
