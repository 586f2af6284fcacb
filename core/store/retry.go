package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sync"
	"syscall"
	"time"

	// backoff/v5 (v5.0.3, the newest release the module proxy serves) runs
	// the retry loop: bounded tries, permanent errors, waits that end when
	// the context does. It is small, dependency-free and widely used (the
	// OpenTelemetry exporters retry with it). The waits are RetryPolicy.Delay,
	// which the SDK's retries of uploads share.
	"github.com/cenkalti/backoff/v5"

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
// pinned object that changed (errcode.Changed), not an invalid argument, a
// permission error or an exhausted resource of this host, and never the
// caller's own cancellation or deadline (see classify). On s3:// the SDK
// retries uploads under the same policy and classification (drivers/s3).
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

// Delay returns the wait before retry n (n = 1, 2, …): uniform on
// [0, min(MaxDelay, BaseDelay·2ⁿ⁻¹)], "full jitter". The retries of
// croupier's own requests (Do) and a driver's retries of upload parts (see
// drivers/s3) both wait this long.
func (p RetryPolicy) Delay(n int) time.Duration {
	ceiling := p.MaxDelay
	if n <= 31 && p.BaseDelay<<(n-1) < ceiling && p.BaseDelay<<(n-1) > 0 {
		ceiling = p.BaseDelay << (n - 1)
	}
	return rand.N(ceiling + 1)
}

// waits is the backoff.BackOff of Do: p.Delay(1), p.Delay(2), ….
type waits struct {
	p RetryPolicy
	n int
}

func (w *waits) NextBackOff() time.Duration { w.n++; return w.p.Delay(w.n) }
func (w *waits) Reset()                     { w.n = 0 }

// A TransientError is a failure that a later attempt may not meet, whatever
// else it wraps: a driver returns one where its store's verdict is "try
// again" in a form classify does not read.
type TransientError struct{ Err error }

func (e TransientError) Error() string { return e.Err.Error() }

func (e TransientError) Unwrap() error { return e.Err }

// WithCode returns err, its message unchanged, as an error that Code
// classifies as code (and never retries): what a Bucket returns where the
// meaning of its failure is not in a form classify reads.
func WithCode(code errcode.Code, err error) error { return codedError{code, err} }

type codedError struct {
	code errcode.Code
	err  error
}

func (e codedError) Error() string { return e.err.Error() }

func (e codedError) Unwrap() error { return e.err }

// classify decides, once for every request croupier makes (reads, writes,
// and the upload parts a driver retries), what a failed attempt means:
// its code, and whether another attempt is worth making. Three kinds:
//
//   - transient, retried: the store unavailable (5xx, 408, 429, throttling),
//     network errors and resets (an HTTP request that got no answer), an
//     attempt past its deadline, a body cut short, a TransientError:
//     Unavailable;
//   - exhausted, never retried: a resource of this host ran out (EMFILE,
//     ENFILE): ResourceExhausted. Retrying cannot free it, and failing at
//     once says which limit to raise;
//   - permanent, never retried: the request's own fault or a final verdict.
//     croupier's own errors keep their code; missing or refused credentials
//     are PermissionDenied; a name too long, other 4xx answers and 501 Not
//     Implemented (a request the store does not support) are InvalidArgument;
//     404 and a missing file are NotFound, an existing one AlreadyExists;
//     412 (a read's precondition) and 416 (a range past the end of an
//     object pinned larger) are Changed.
func classify(err error) (code errcode.Code, again bool) {
	var te TransientError
	var coded codedError
	var ce *errcode.Error
	switch {
	case errors.As(err, &te):
		return errcode.Unavailable, true
	case errors.As(err, &coded):
		return coded.code, false
	case errors.As(err, &ce):
		return ce.Code, false
	case errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE):
		return errcode.ResourceExhausted, false
	case errors.Is(err, syscall.ENAMETOOLONG):
		return errcode.InvalidArgument, false
	case errors.Is(err, fs.ErrNotExist):
		return errcode.NotFound, false
	case errors.Is(err, fs.ErrExist):
		return errcode.AlreadyExists, false
	case errors.Is(err, fs.ErrPermission):
		return errcode.PermissionDenied, false
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED):
		return errcode.Unavailable, true
	}
	var status interface{ HTTPStatusCode() int }
	if errors.As(err, &status) {
		switch c := status.HTTPStatusCode(); {
		case c == http.StatusNotImplemented: // a request this store does not support: no attempt will do
			return errcode.InvalidArgument, false
		case c == http.StatusRequestTimeout || c == http.StatusTooManyRequests || c >= 500:
			return errcode.Unavailable, true
		case c == http.StatusUnauthorized || c == http.StatusForbidden:
			return errcode.PermissionDenied, false
		case c == http.StatusNotFound:
			return errcode.NotFound, false
		case c == http.StatusPreconditionFailed || c == http.StatusRequestedRangeNotSatisfiable:
			return errcode.Changed, false
		case c >= 400:
			return errcode.InvalidArgument, false
		}
	}
	var ue *url.Error // an HTTP request that got no answer
	if errors.As(err, &ue) {
		return errcode.Unavailable, true
	}
	return errcode.Unavailable, false
}

// Transient reports whether err is worth another attempt: classify's
// verdict, for the SDKs that retry some requests themselves (drivers/s3).
func Transient(err error) bool {
	_, again := classify(err)
	return again
}

// Do runs attempt under policy p until it succeeds, fails for good, or
// the policy's bound is reached; op and where name the request in errors.
// Each attempt gets a context with the per-attempt deadline; attempt must
// finish all its work (reading the body included) before it returns. Every
// request of a Location goes through it; a Driver sends its own requests
// (drivers/s3's listing of uploads) through it too.
func Do[T any](ctx context.Context, p RetryPolicy, op, where string, attempt func(context.Context) (T, error)) (T, error) {
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
			_, again := classify(err)
			last, final = err, !again
		}
		if final {
			return v, backoff.Permanent(last)
		}
		return v, last
	}, backoff.WithBackOff(&waits{p: p}), backoff.WithMaxTries(uint(p.Attempts)), backoff.WithMaxElapsedTime(0))
	var ce *errcode.Error
	switch {
	case err == nil:
		return v, nil
	case ctx.Err() != nil:
		return v, errcode.Wrap(err, errcode.Canceled, op, where)
	case final && errors.As(last, &ce):
		if ce.Path != "" {
			return v, last
		}
		// One that names nothing (credentials not found, by a driver) is
		// named here, without the SDK's wrapping.
		return v, &errcode.Error{Code: ce.Code, Op: op, Path: where, Err: ce}
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
