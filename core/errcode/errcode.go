// Package errcode gives croupier's errors stable codes that callers can branch on.
//
// The same integer codes cross the C ABI and become Python exception classes, so
// they are part of the public contract: never renumber them. Every error that
// leaves croupier is, or wraps, an *Error that says what was being done (Op),
// where (Path: a URI, file, column or field), and why (Err).
package errcode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"syscall"
)

// Code classifies an error. The zero value means success.
type Code int

// The codes. Their numbers are shared with the C ABI and Python.
const (
	OK              Code = 0
	Internal        Code = 1 // a bug, a recovered panic or an unexpected failure
	InvalidArgument Code = 2 // bad option, unknown column, inconsistent numbers
	NotFound        Code = 3 // a path, table, file or object does not exist
	Corrupt         Code = 4 // data could not be decoded
	Changed         Code = 5 // a pinned file changed or vanished since it was pinned
	Unavailable     Code = 6 // the object store could not be reached
	Closed          Code = 7 // the object was closed or released
	Canceled        Code = 8 // the context was canceled or its deadline passed
	AlreadyExists   Code = 9 // a table, version or object that must be new exists
	// PermissionDenied: the store refused the credentials, or none were found.
	PermissionDenied Code = 10
	// ResourceExhausted: a resource of this host ran out (open files).
	ResourceExhausted Code = 11
)

var names = [...]string{"OK", "Internal", "InvalidArgument", "NotFound", "Corrupt",
	"Changed", "Unavailable", "Closed", "Canceled", "AlreadyExists", "PermissionDenied", "ResourceExhausted"}

func (c Code) String() string {
	if c >= 0 && int(c) < len(names) {
		return names[c]
	}
	return fmt.Sprintf("Code(%d)", int(c))
}

// Error is a croupier error: Op on Path failed with Err, classified by Code.
type Error struct {
	Code Code
	Op   string // what was being done, e.g. "open table"
	Path string // where: a URI, file, column; may be empty
	Err  error
}

func (e *Error) Error() string {
	switch {
	case e.Path == "":
		return e.Op + ": " + e.Err.Error()
	case e.Op == "":
		return e.Path + ": " + e.Err.Error()
	}
	return e.Op + " " + e.Path + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is the sentinel of e's code, so that callers can
// branch with errors.Is(err, errcode.ErrChanged) through any wrapping.
func (e *Error) Is(target error) bool {
	s, ok := target.(sentinel)
	return ok && Code(s) == e.Code
}

// sentinel is the error value of one code, for errors.Is.
type sentinel Code

func (s sentinel) Error() string { return "croupier: " + Code(s).String() }

// Sentinels for errors.Is, one per code: errors.Is(err, ErrX) holds when an
// *Error of code X is in err's chain.
var (
	ErrInternal          error = sentinel(Internal)
	ErrInvalidArgument   error = sentinel(InvalidArgument)
	ErrNotFound          error = sentinel(NotFound)
	ErrCorrupt           error = sentinel(Corrupt)
	ErrChanged           error = sentinel(Changed)
	ErrUnavailable       error = sentinel(Unavailable)
	ErrClosed            error = sentinel(Closed)
	ErrCanceled          error = sentinel(Canceled)
	ErrAlreadyExists     error = sentinel(AlreadyExists)
	ErrPermissionDenied  error = sentinel(PermissionDenied)
	ErrResourceExhausted error = sentinel(ResourceExhausted)
)

// New returns an *Error with the given code whose cause is a formatted message.
func New(code Code, op, path, format string, args ...any) error {
	return &Error{Code: code, Op: op, Path: path, Err: fmt.Errorf(format, args...)}
}

// Wrap annotates err with op and path. The code is kept from err when it already
// has one (see Of), else code is used. Wrap(nil) is nil.
func Wrap(err error, code Code, op, path string) error {
	if err == nil {
		return nil
	}
	if c := Of(err); c != Internal {
		code = c
	}
	return &Error{Code: code, Op: op, Path: path, Err: err}
}

// Of returns the code of err: the outermost *Error's code, Canceled for
// context errors, ResourceExhausted for running out of file descriptors
// (EMFILE, ENFILE), OK for nil and Internal for anything else. Wrap keeps
// those, so that whatever the operation, too many open files never reads as
// a bad argument.
func Of(err error) Code {
	if err == nil {
		return OK
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return Canceled
	}
	if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
		return ResourceExhausted
	}
	return Internal
}

// Recover turns a panic into an error with the given code. Defer it, directly,
// at the top of every goroutine croupier starts and around decoders of
// untrusted bytes: a panic that leaves a goroutine of the C shared library
// kills the host process, Python and all.
//
//	defer errcode.Recover(&err, errcode.Internal, "read", uri)
//
// The error's message is for the user: it holds the panic's value, never the
// word panic or a goroutine stack. For an Internal error (a bug) the stack is
// written to standard error when the environment sets CROUPIER_TRACEBACK, for
// a report; a Corrupt one (a decoder that failed on bad bytes) needs none.
func Recover(err *error, code Code, op, path string) {
	p := recover()
	if p == nil {
		return
	}
	if code == Internal {
		if os.Getenv("CROUPIER_TRACEBACK") != "" {
			fmt.Fprintf(os.Stderr, "croupier: unexpected failure in %s %s: %v\n%s", op, path, p, debug.Stack())
		}
		*err = New(code, op, path, "unexpected failure: %v (a bug in croupier; "+
			"run with CROUPIER_TRACEBACK=1 to print where it happened, for a report)", p)
		return
	}
	*err = New(code, op, path, "malformed input (%v)", p)
}
