package store_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/store"
	"github.com/croupier-data/croupier/internal/s3test"
)

// TestPermanentErrorsFailAtOnce: a name too long, and a range read of an
// object pinned at an impossible size, are the request's own fault: they
// fail at once, with their own class, not as Unavailable after the retries.
func TestPermanentErrorsFailAtOnce(t *testing.T) {
	s, loc, _ := faultyStore(t)
	ctx := context.Background()
	file, err := store.Open(ctx, "file://"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	file.Retry = fast
	if err := file.WriteAll(ctx, "obj", []byte("0123456789"), store.WriterOptions{}); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("k", 5000)
	huge := int64(1) << 62
	for _, tc := range []struct {
		name     string
		code     errcode.Code
		requests int64 // to the S3 server
		call     func() error
	}{
		{"stat long name (file)", errcode.InvalidArgument, 0, func() error { _, err := file.Stat(ctx, long); return err }},
		{"write long name (file)", errcode.InvalidArgument, 0, func() error { return file.WriteAll(ctx, long, []byte("x"), store.WriterOptions{}) }},
		{"read pinned at 2^62 bytes (file)", errcode.Changed, 0, func() error {
			_, err := file.NewReaderAt(ctx, store.Object{Key: "obj", Size: huge}).ReadAt(make([]byte, 10), huge-10)
			return err
		}},
		{"read pinned at 2^62 bytes (s3)", errcode.Changed, 1, func() error {
			_, err := loc.NewReaderAt(ctx, store.Object{Key: "data/obj", Size: huge}).ReadAt(make([]byte, 10), huge-10)
			return err
		}},
	} {
		s.ResetCounts()
		err := tc.call()
		if errcode.Of(err) != tc.code {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.code)
		}
		if n := s.Requests(); n != tc.requests {
			t.Errorf("%s: %d requests, want %d", tc.name, n, tc.requests)
		}
	}
}

// TestCodes: errors of this host's resources and of credentials have classes
// of their own.
func TestCodes(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code errcode.Code
	}{
		{&os.PathError{Op: "open", Path: "/x", Err: syscall.EMFILE}, errcode.ResourceExhausted},
		{&os.PathError{Op: "open", Path: "/x", Err: syscall.ENFILE}, errcode.ResourceExhausted},
		{&os.PathError{Op: "open", Path: "/x", Err: syscall.ENAMETOOLONG}, errcode.InvalidArgument},
		{&os.PathError{Op: "read", Path: "/x", Err: syscall.ECONNRESET}, errcode.Unavailable},
		{context.Canceled, errcode.Canceled},
		{errors.New("something unknown"), errcode.Unavailable},
	} {
		if got := store.Code(tc.err); got != tc.code {
			t.Errorf("Code(%v) = %s, want %s", tc.err, got, tc.code)
		}
	}
}

// TestUploadsRetryThrottling: half the uploads answered 429 Too Many
// Requests, half 503 SlowDown; whole-object writes and streamed uploads (as
// of a data file) all succeed, retried under the location's policy.
func TestUploadsRetryThrottling(t *testing.T) {
	prev := store.SetRetryPolicy(store.RetryPolicy{Attempts: 20, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond})
	defer store.SetRetryPolicy(prev)
	s, err := s3test.Start("bkt")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	loc, err := store.Open(ctx, s.URI("bkt", "up"))
	if err != nil {
		t.Fatal(err)
	}
	defer loc.Close()
	for _, kind := range []s3test.Kind{s3test.Throttle, s3test.ServerError} {
		s.ResetCounts()
		s.SetFaults(s3test.Faults{Rate: 0.5, Seed: 7, Kinds: []s3test.Kind{kind}, Match: s3test.MatchKey("PUT", "")})
		for i := range 20 {
			key := fmt.Sprintf("up/%s-%d", kind, i)
			if err := loc.WriteAll(ctx, key+"-whole", []byte(key), store.WriterOptions{}); err != nil {
				t.Fatalf("%s: WriteAll: %v", kind, err)
			}
			w, err := loc.NewWriter(ctx, key+"-streamed", store.WriterOptions{})
			if err != nil {
				t.Fatal(err)
			}
			w.Write([]byte(key))
			if err := w.Close(); err != nil {
				t.Fatalf("%s: streamed upload: %v", kind, err)
			}
		}
		if s.Injected()[kind] < 10 {
			t.Fatalf("%s injected %d times; want at least 10", kind, s.Injected()[kind])
		}
	}
}

// TestMissingCredentials: with no AWS credentials anywhere, a request fails
// at once with PermissionDenied saying where credentials were looked for.
func TestMissingCredentials(t *testing.T) {
	for _, v := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
		"AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI"} {
		t.Setenv(v, "")
	}
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	s, err := s3test.Start("bkt")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	uri := strings.Replace(s.URI("bkt", "x"), "anonymous=true&", "", 1)
	loc, err := store.Open(context.Background(), uri)
	if err != nil {
		t.Fatal(err)
	}
	defer loc.Close()
	loc.Retry = fast
	_, err = loc.Stat(context.Background(), "x/obj")
	if errcode.Of(err) != errcode.PermissionDenied || !strings.Contains(err.Error(), "AWS_ACCESS_KEY_ID") ||
		!strings.Contains(err.Error(), "s3://bkt/x/obj") {
		t.Fatalf("Stat without credentials: %v; want PermissionDenied naming the object and the credentials looked for", err)
	}
	if n := s.Requests(); n != 0 {
		t.Fatalf("%d requests sent unsigned", n)
	}
}
