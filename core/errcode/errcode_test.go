package errcode_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/croupier-data/croupier/core/errcode"
)

func TestOf(t *testing.T) {
	base := errcode.New(errcode.NotFound, "open table", "file:///x", "no such file")
	for _, tc := range []struct {
		err  error
		want errcode.Code
	}{
		{nil, errcode.OK},
		{errors.New("plain"), errcode.Internal},
		{base, errcode.NotFound},
		{fmt.Errorf("context: %w", base), errcode.NotFound},
		{errcode.Wrap(base, errcode.Internal, "deal", ""), errcode.NotFound},
		{errcode.Wrap(errors.New("x"), errcode.Corrupt, "decode", "f"), errcode.Corrupt},
		{fmt.Errorf("read: %w", context.Canceled), errcode.Canceled},
	} {
		if got := errcode.Of(tc.err); got != tc.want {
			t.Errorf("Of(%v) = %s, want %s", tc.err, got, tc.want)
		}
	}
	if errcode.Wrap(nil, errcode.Corrupt, "x", "y") != nil {
		t.Error("Wrap(nil) is not nil")
	}
}

func TestMessageNamesOpAndPath(t *testing.T) {
	err := errcode.Wrap(errcode.New(errcode.Corrupt, "read footer", "file:///d/a.parquet", "bad magic"), errcode.Internal, "open table", "file:///d")
	want := "open table file:///d: read footer file:///d/a.parquet: bad magic"
	if err.Error() != want {
		t.Errorf("message %q, want %q", err, want)
	}
	if errcode.Closed.String() != "Closed" || errcode.Code(42).String() != "Code(42)" {
		t.Error("String names")
	}
}

func TestSentinels(t *testing.T) {
	err := fmt.Errorf("training: %w", errcode.Wrap(errcode.New(errcode.Changed, "read", "s3://b/k", "pinned file changed"), errcode.Internal, "next", ""))
	if !errors.Is(err, errcode.ErrChanged) {
		t.Errorf("errors.Is(%v, ErrChanged) = false", err)
	}
	for _, other := range []error{errcode.ErrNotFound, errcode.ErrInternal, errcode.ErrCanceled} {
		if errors.Is(err, other) {
			t.Errorf("errors.Is(%v, %v) = true", err, other)
		}
	}
	if errors.Is(errors.New("plain"), errcode.ErrInternal) {
		t.Error("a plain error matches ErrInternal")
	}
}

func TestRecover(t *testing.T) {
	run := func(code errcode.Code) (err error) {
		defer errcode.Recover(&err, code, "decode", "file:///d/a.parquet")
		var s []int
		_ = s[3]
		return nil
	}
	err := run(errcode.Corrupt)
	if errcode.Of(err) != errcode.Corrupt || !strings.Contains(err.Error(), "decode file:///d/a.parquet: malformed input") ||
		!strings.Contains(err.Error(), "index out of range") || strings.Contains(err.Error(), "goroutine") || strings.Contains(err.Error(), "panic") {
		t.Errorf("Corrupt: %v", err)
	}
	err = run(errcode.Internal)
	if errcode.Of(err) != errcode.Internal || !strings.Contains(err.Error(), "unexpected failure: runtime error: index out of range") ||
		strings.Contains(err.Error(), "panic") || strings.Contains(err.Error(), "goroutine") {
		t.Errorf("Internal: %v", err)
	}
	ok := func() (err error) {
		defer errcode.Recover(&err, errcode.Internal, "x", "")
		return errors.New("kept")
	}
	if err := ok(); err == nil || err.Error() != "kept" {
		t.Errorf("no panic: %v", err)
	}
}

// TestTooManyOpenFiles: running out of descriptors keeps its class through
// Wrap, whatever code the caller suggests.
func TestTooManyOpenFiles(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE} {
		err := errcode.Wrap(&os.PathError{Op: "open", Path: "/d/f", Err: errno}, errcode.InvalidArgument, "open location", "file:///d")
		if errcode.Of(err) != errcode.ResourceExhausted || !errors.Is(err, errcode.ErrResourceExhausted) {
			t.Errorf("%v: code %s, want ResourceExhausted", err, errcode.Of(err))
		}
	}
}
