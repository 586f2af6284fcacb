package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"syscall"
	"time"

	// backoff/v5 (v5.0.3, the newest release the module proxy serves) runs
	// the retry loop: bounded tries, permanent errors, waits that end when
	// the context does. It is small, dependency-free and widely used (the
	// OpenTelemetry exporters retry with it); its ExponentialBackOff gives
	// full jitter with RandomizationFactor 1 (see RetryPolicy.backOff).
	"github.com/cenkalti/backoff/v5"
	"gocloud.dev/gcerrors"

	"github.com/croupier-data/croupier/core/errcode"
)

// RetryPolicy bounds how croupier retries a store request that failed
// transiently. Every request croupier makes through a Location (range reads,
// Stat, Exists, listings, whole-object reads and writes, deletes,
// CreateExclusive) runs under its Location's policy:
//
//   - each attempt runs under its own deadline, AttemptTimeout, so a stalled
//     connection costs at most that long and is then retried like any other
//     transient failure;
//   - before retry n (n = 1, 2, …) it waits a time drawn uniformly from
//     [0, min(MaxDelay, BaseDelay·2ⁿ⁻¹)] ("full jitter"), so that many
//     readers failing at once do not retry in lockstep;
//   - after Attempts attempts it fails with errcode.Unavailable and a message
//     naming the object, the number of attempts and the time spent, wrapping
//     the last error.
//
// Transient failures are the store being unavailable (5xx answers, throttling,
// network errors, connection resets), an attempt timing out, and a body that
// ends before its Content-Length. Nothing else is retried: not NotFound, not a
// pinned object that changed (errcode.Changed), not an invalid argument or a
// permission error, and never the caller's own cancellation or deadline.
//
// The worst case of a failing read is therefore Attempts·AttemptTimeout plus
// the waits (at most the sum of the capped delays); with the defaults, about
// 4 minutes against a store that accepts connections and never answers, and
// about 11 seconds on average, 23 at most, against one that fails at once.
type RetryPolicy struct {
	// Attempts is the most attempts of one request, the first included.
	Attempts int
	// BaseDelay is the ceiling of the wait before the first retry; it doubles
	// with each further retry up to MaxDelay.
	BaseDelay time.Duration
	// MaxDelay caps the ceiling of the wait between attempts.
	MaxDelay time.Duration
	// AttemptTimeout is the deadline of one attempt: request, answer and
	// body. It bounds how long a stalled connection can hold a read.
	AttemptTimeout time.Duration
}

// DefaultRetryPolicy is the policy of locations opened while SetRetryPolicy
// has not been called. Eight attempts ride out a store that is unavailable
// for ten seconds or so (a failover, a burst of throttling) without hiding an
// outage for minutes; 30s per attempt is far longer than any single request
// croupier makes should take (its largest reads are ranges of a few MiB),
// yet short enough that a stalled connection does not hold a training step
// for long. Treat it as read-only.
var DefaultRetryPolicy = RetryPolicy{
	Attempts:       8,
	BaseDelay:      200 * time.Millisecond,
	MaxDelay:       10 * time.Second,
	AttemptTimeout: 30 * time.Second,
}

var (
	policyMu sync.Mutex
	policy   = DefaultRetryPolicy
)

// SetRetryPolicy sets the policy of the locations opened from now on in this
// process and returns the previous one. Zero fields of p take
// DefaultRetryPolicy's values. A Location's own policy is its Retry field.
func SetRetryPolicy(p RetryPolicy) RetryPolicy {
	policyMu.Lock()
	defer policyMu.Unlock()
	prev := policy
	policy = p.withDefaults()
	return prev
}

func currentPolicy() RetryPolicy {
	policyMu.Lock()
	defer policyMu.Unlock()
	return policy
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	d := DefaultRetryPolicy
	if p.Attempts <= 0 {
		p.Attempts = d.Attempts
	}
	if p.BaseDelay <= 0 {
		p.BaseDelay = d.BaseDelay
	}
	if p.MaxDelay <= 0 {
		p.MaxDelay = d.MaxDelay
	}
	if p.AttemptTimeout <= 0 {
		p.AttemptTimeout = d.AttemptTimeout
	}
	return p
}

// backOff returns the waits between attempts. backoff's ExponentialBackOff
// draws from [(1-r)·I, (1+r)·I] for an interval I that grows by Multiplier
// up to MaxInterval; with r = 1 and halved intervals that is exactly full
// jitter, uniform on [0, min(MaxDelay, BaseDelay·2ⁿ⁻¹)].
func (p RetryPolicy) backOff() backoff.BackOff {
	return &backoff.ExponentialBackOff{
		InitialInterval:     p.BaseDelay / 2,
		RandomizationFactor: 1,
		Multiplier:          2,
		MaxInterval:         p.MaxDelay / 2,
	}
}

// transientError marks an error that an operation knows to be transient
// although its classification says otherwise (see List).
type transientError struct{ error }

func (e transientError) Unwrap() error { return e.error }

// transient reports whether err, from one attempt whose caller's context is
// still live, is worth another attempt.
func transient(err error) bool {
	var te transientError
	if errors.As(err, &te) {
		return true
	}
	var ce *errcode.Error
	if errors.As(err, &ce) {
		return false // croupier's own verdicts (Changed, Corrupt, …) are final
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) {
		return true
	}
	// An HTTP answer in the 4xx range is the request's fault, except a
	// timeout or throttling answer (as AWS's SDK response errors report it).
	var status interface{ HTTPStatusCode() int }
	if errors.As(err, &status) {
		if c := status.HTTPStatusCode(); c >= 400 && c < 500 && c != http.StatusRequestTimeout && c != http.StatusTooManyRequests {
			return false
		}
	}
	switch gcerrors.Code(err) {
	case gcerrors.Unknown, gcerrors.Internal, gcerrors.ResourceExhausted, gcerrors.DeadlineExceeded:
		return true
	}
	return false
}

// retry runs attempt under policy p until it succeeds, fails for good, or
// the policy's bound is reached; op and where name the request in errors.
// Each attempt gets a context with the per-attempt deadline; attempt must
// finish all its work (reading the body included) before it returns.
func retry[T any](ctx context.Context, p RetryPolicy, op, where string, attempt func(context.Context) (T, error)) (T, error) {
	start := time.Now()
	attempts := 0
	var last error // the last attempt's error
	final := false // whether it ends the retries
	v, err := backoff.Retry(ctx, func() (T, error) {
		attempts++
		actx, cancel := context.WithTimeout(ctx, p.AttemptTimeout)
		defer cancel()
		v, err := attempt(actx)
		switch {
		case err == nil:
			return v, nil
		case ctx.Err() != nil: // the caller's own cancellation or deadline
			last, final = err, true
		case errors.Is(actx.Err(), context.DeadlineExceeded):
			last = fmt.Errorf("no answer within %s: %w", p.AttemptTimeout, err)
		default:
			last, final = err, !transient(err)
		}
		if final {
			return v, backoff.Permanent(last)
		}
		return v, last
	}, backoff.WithBackOff(p.backOff()), backoff.WithMaxTries(uint(p.Attempts)), backoff.WithMaxElapsedTime(0))
	var ce *errcode.Error
	switch {
	case err == nil:
		return v, nil
	case ctx.Err() != nil:
		return v, errcode.Wrap(err, errcode.Canceled, op, where)
	case final && errors.As(last, &ce):
		return v, last
	case final:
		return v, wrap(last, op, where)
	}
	plural := "s"
	if attempts == 1 {
		plural = ""
	}
	return v, &errcode.Error{Code: errcode.Unavailable, Op: op, Path: where,
		Err: fmt.Errorf("unavailable after %d attempt%s in %s: %w", attempts, plural, time.Since(start).Round(time.Millisecond), last)}
}
