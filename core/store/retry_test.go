package store_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/store"
	"github.com/croupier-data/croupier/internal/s3test"
)

// fast is the retry policy of these tests: four attempts, short waits, and
// a per-attempt deadline far above a loopback request even under -race.
var fast = store.RetryPolicy{Attempts: 4, BaseDelay: 5 * time.Millisecond, MaxDelay: 20 * time.Millisecond,
	AttemptTimeout: 500 * time.Millisecond}

// faultyStore starts an S3 server holding bkt/data/obj (objSize bytes) and
// opens bkt/data under the fast policy.
func faultyStore(t *testing.T) (*s3test.Server, *store.Location, []byte) {
	t.Helper()
	s, err := s3test.Start("bkt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	data := make([]byte, objSize)
	for i := range data {
		data[i] = byte(i * 7)
	}
	if err := s.Put("bkt", "data/obj", data); err != nil {
		t.Fatal(err)
	}
	loc, err := store.Open(context.Background(), s.URI("bkt", "data"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { loc.Close() })
	loc.Retry = fast
	return s, loc, data
}

const objSize = 64 << 10

// TestReadsSurviveFaults runs every kind of read through a server that
// injects every kind of fault into a third of the requests: each read
// returns exactly the stored bytes, and the faults did happen.
func TestReadsSurviveFaults(t *testing.T) {
	s, loc, data := faultyStore(t)
	// Eight attempts: a request fails all of them once in 7,000, where with
	// four one of the test's hundred or so requests would, for most seeds.
	loc.Retry.Attempts = 8
	ctx := context.Background()
	s.SetFaults(s3test.Faults{Rate: 0.33, Seed: 1, Stall: 5 * time.Second, Spike: 20 * time.Millisecond})
	obj, err := loc.Stat(ctx, "data/obj")
	if err != nil || obj.Size != objSize {
		t.Fatalf("Stat = %+v, %v", obj, err)
	}
	r := loc.NewReaderAt(ctx, obj)
	for i := range 60 {
		off, n := int64(i*997%objSize), 1+i*131%4096
		p := make([]byte, n)
		got, err := r.ReadAt(p, off)
		if err != nil && err != io.EOF {
			t.Fatalf("ReadAt(%d, %d): %v", n, off, err)
		}
		if !bytes.Equal(p[:got], data[off:off+int64(got)]) {
			t.Fatalf("ReadAt(%d, %d): wrong bytes", n, off)
		}
	}
	for i := range 60 { // sent ahead, read after: a failed request or body is read again
		off, n := int64(i*991%objSize), 1+i*137%4096
		a := r.Request(off, int64(n))
		p := make([]byte, n)
		got, err := a.ReadInto(p)
		if err != nil && err != io.EOF {
			t.Fatalf("Request(%d, %d).ReadInto: %v", off, n, err)
		}
		if !bytes.Equal(p[:got], data[off:off+int64(got)]) {
			t.Fatalf("Request(%d, %d).ReadInto: wrong bytes", off, n)
		}
	}
	for range 10 {
		if b, err := loc.ReadAll(ctx, "data/obj"); err != nil || !bytes.Equal(b, data) {
			t.Fatalf("ReadAll: %d bytes, %v", len(b), err)
		}
		if objs, err := loc.Match(ctx); err != nil || len(objs) != 1 || objs[0].Key != "data/obj" || objs[0].Size != int64(len(data)) {
			t.Fatalf("Match = %v, %v", objs, err)
		}
		if ok, err := loc.Exists(ctx, "data/nothing"); ok || err != nil {
			t.Fatalf("Exists(missing) = %t, %v", ok, err)
		}
	}
	injected := s.Injected()
	for _, k := range s3test.AllKinds {
		if injected[k] == 0 {
			t.Errorf("no %s fault injected: %v", k, injected)
		}
	}
}

// TestRetryBound makes every request fail with a 5xx answer: each kind of
// read fails with Unavailable after exactly the policy's attempts, one
// request each (the driver does not retry underneath), with a message naming
// the object, the attempts, the time spent and the store's answer.
func TestRetryBound(t *testing.T) {
	s, loc, _ := faultyStore(t)
	ctx := context.Background()
	obj, err := loc.Stat(ctx, "data/obj")
	if err != nil {
		t.Fatal(err)
	}
	s.SetFaults(s3test.Faults{Rate: 1, Kinds: []s3test.Kind{s3test.ServerError}})
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"stat", func() error { _, err := loc.Stat(ctx, "data/obj"); return err }},
		{"read", func() error { _, err := loc.NewReaderAt(ctx, obj).ReadAt(make([]byte, 10), 5); return err }},
		{"read", func() error { _, err := loc.ReadAll(ctx, "data/obj"); return err }},
		{"list", func() error { _, err := loc.List(ctx, "data/", 0); return err }},
	} {
		s.ResetCounts()
		err := tc.call()
		if errcode.Of(err) != errcode.Unavailable {
			t.Fatalf("%s: %v, want Unavailable", tc.name, err)
		}
		msg := err.Error()
		where := "s3://bkt/data/obj"
		if tc.name == "list" {
			where = "s3://bkt/data/"
		}
		if !strings.HasPrefix(msg, tc.name+" "+where+": unavailable after 4 attempts in ") ||
			!strings.Contains(msg, ": 50") {
			t.Errorf("%s: message %q", tc.name, msg)
		}
		if n := s.Requests(); n != 4 {
			t.Errorf("%s: %d requests, want 4", tc.name, n)
		}
	}
}

// TestStalledServer: a server that never answers holds a read no longer
// than the per-attempt deadline times the attempts (plus the short waits).
func TestStalledServer(t *testing.T) {
	s, loc, _ := faultyStore(t)
	ctx := context.Background()
	obj, err := loc.Stat(ctx, "data/obj")
	if err != nil {
		t.Fatal(err)
	}
	loc.Retry.AttemptTimeout = 200 * time.Millisecond
	s.SetFaults(s3test.Faults{Rate: 1, Kinds: []s3test.Kind{s3test.Stall}, Stall: time.Minute})
	start := time.Now()
	_, err = loc.NewReaderAt(ctx, obj).ReadAt(make([]byte, 100), 0)
	elapsed := time.Since(start)
	if errcode.Of(err) != errcode.Unavailable || !strings.Contains(err.Error(), "after 4 attempts") ||
		!strings.Contains(err.Error(), "no answer within 200ms") {
		t.Fatalf("stalled read: %v", err)
	}
	if limit := 4*200*time.Millisecond + 3*20*time.Millisecond + time.Second; elapsed > limit {
		t.Fatalf("stalled read took %s, more than %s", elapsed, limit)
	}
	if got := s.Injected()[s3test.Stall]; got != 4 {
		t.Errorf("%d stalls injected, want 4", got)
	}
}

// TestCallerCancelNotRetried: the caller's own cancellation ends a read at
// once, with Canceled, after one request.
func TestCallerCancelNotRetried(t *testing.T) {
	s, loc, _ := faultyStore(t)
	loc.Retry.AttemptTimeout = time.Minute
	s.SetFaults(s3test.Faults{Rate: 1, Kinds: []s3test.Kind{s3test.Stall}, Stall: time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	s.ResetCounts()
	start := time.Now()
	_, err := loc.ReadAll(ctx, "data/obj")
	if errcode.Of(err) != errcode.Canceled || time.Since(start) > 5*time.Second {
		t.Fatalf("canceled read: %v after %s", err, time.Since(start))
	}
	if n := s.Requests(); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
}

// TestFinalErrorsNotRetried: NotFound and Changed are answers, not
// failures: one request each.
func TestFinalErrorsNotRetried(t *testing.T) {
	s, loc, _ := faultyStore(t)
	ctx := context.Background()
	obj, err := loc.Stat(ctx, "data/obj")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		code errcode.Code
		call func() error
	}{
		{"stat missing", errcode.NotFound, func() error { _, err := loc.Stat(ctx, "data/missing"); return err }},
		{"read missing", errcode.NotFound, func() error { _, err := loc.ReadAll(ctx, "data/missing"); return err }},
		{"read changed", errcode.Changed, func() error {
			if err := s.Put("bkt", "data/obj", []byte("something else")); err != nil {
				t.Fatal(err)
			}
			_, err := loc.NewReaderAt(ctx, obj).ReadAt(make([]byte, 10), 0)
			return err
		}},
		{"read vanished", errcode.Changed, func() error {
			_, err := loc.NewReaderAt(ctx, store.Object{Key: "data/missing", Size: 100}).ReadAt(make([]byte, 10), 0)
			return err
		}},
	} {
		s.ResetCounts()
		err := tc.call()
		if errcode.Of(err) != tc.code {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.code)
		}
		if n := s.Requests(); n != 1 {
			t.Errorf("%s: %d requests, want 1", tc.name, n)
		}
	}
}

// TestCreateExclusiveLostResponse loses the answer to a conditional create
// that succeeded: CreateExclusive reads the object back, finds its own bytes
// and succeeds; a later create of the key by another writer still fails
// with AlreadyExists.
func TestCreateExclusiveLostResponse(t *testing.T) {
	s, loc, _ := faultyStore(t)
	ctx := context.Background()
	key := "data/_versions/00000000000000000002.json"
	var lost atomic.Int64
	s.SetFaults(s3test.Faults{Rate: 1, Kinds: []s3test.Kind{s3test.LostResponse},
		Match: func(r *http.Request) bool {
			return r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, key) && lost.Add(1) == 1
		}})
	if err := loc.CreateExclusive(ctx, key, []byte("mine")); err != nil {
		t.Fatalf("create whose answer was lost: %v", err)
	}
	if got := s.Injected()[s3test.LostResponse]; got != 1 {
		t.Fatalf("%d responses lost, want 1", got)
	}
	if n := s.Count(http.MethodPut, key); n < 2 {
		t.Fatalf("%d PUTs: the create was not retried", n)
	}
	if b, err := loc.ReadAll(ctx, key); err != nil || string(b) != "mine" {
		t.Fatalf("object = %q, %v", b, err)
	}
	err := loc.CreateExclusive(ctx, key, []byte("theirs"))
	if errcode.Of(err) != errcode.AlreadyExists || !strings.Contains(err.Error(), "s3://bkt/"+key) {
		t.Fatalf("second create: %v, want AlreadyExists naming the object", err)
	}
}

// TestOpenRefusesCredentials: a URI carrying credentials is refused with a
// message that says where credentials go and repeats none of them.
func TestOpenRefusesCredentials(t *testing.T) {
	const secret = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"
	for _, uri := range []string{
		"s3://b/p?region=us-east-1&secret_access_key=" + secret,
		"s3://b/p?AWSAccessKeyId=" + secret,
		"s3://b/p?X-Amz-Security-Token=" + secret,
		"s3://b/p?X-Amz-Credential=" + secret + "&X-Amz-Signature=" + secret,
		"azblob://c/p?sv=2020-08-04&sig=" + secret,
		"gs://b/p?access_token=" + secret,
		"s3://AKIA:" + secret + "@b/p",
		"mem://b/p?password=" + secret,
	} {
		_, err := store.Open(context.Background(), uri)
		if errcode.Of(err) != errcode.InvalidArgument {
			t.Errorf("Open(%s) = %v, want InvalidArgument", uri, err)
			continue
		}
		if msg := err.Error(); strings.Contains(msg, secret) || !strings.Contains(msg, "environment") {
			t.Errorf("Open(%s): message %q", uri, msg)
		}
	}
	// Parameters that merely contain such a word are accepted.
	loc, err := store.Open(context.Background(), "mem://b/p?kmskeyid=alias/x")
	if err != nil {
		t.Fatalf("kmskeyid refused: %v", err)
	}
	loc.Close()
}

// TestErrorsDropQuery: every error of the store names objects without the
// URI's query.
func TestErrorsDropQuery(t *testing.T) {
	s, loc, _ := faultyStore(t)
	ctx := context.Background()
	s.SetFaults(s3test.Faults{Rate: 1, Kinds: []s3test.Kind{s3test.ServerError}})
	var errs []error
	_, err := loc.Match(ctx)
	errs = append(errs, err)
	_, err = loc.Stat(ctx, "data/obj")
	errs = append(errs, err)
	errs = append(errs, loc.WriteAll(ctx, "data/new", []byte("x"), store.WriterOptions{}))
	errs = append(errs, loc.CreateExclusive(ctx, "data/new", []byte("x")))
	errs = append(errs, loc.Delete(ctx, "data/obj"))
	_, err = store.Open(ctx, "s3://b/p%zz?endpoint=http://127.0.0.1:1&region=x")
	errs = append(errs, err)
	_, err = store.Open(ctx, "file:///no/such/folder?x=1")
	errs = append(errs, err)
	for i, err := range errs {
		if err == nil {
			t.Errorf("call %d: no error", i)
			continue
		}
		if msg := err.Error(); strings.Contains(msg, "endpoint=") || strings.Contains(msg, "use_path_style") || strings.Contains(msg, "?x=1") {
			t.Errorf("call %d: message has the query: %s", i, msg)
		}
	}
}

// TestAnswersReadLater sends range requests ahead and reads their bodies
// afterwards, in another order: each body is read from its own answer (no
// request sent again), and an object changed since it was pinned is refused
// as ReadAt refuses it.
func TestAnswersReadLater(t *testing.T) {
	s, loc, data := faultyStore(t)
	ctx := context.Background()
	obj, err := loc.Stat(ctx, "data/obj")
	if err != nil {
		t.Fatal(err)
	}
	r := loc.NewReaderAt(ctx, obj)
	if !r.Direct() {
		t.Fatal("reads of an S3 object without a disk cache are not direct")
	}
	s.ResetCounts()
	var answers []*store.Answer
	for i := range 8 {
		answers = append(answers, r.Request(int64(i)*4096, 4096))
	}
	for i := len(answers) - 1; i >= 0; i-- {
		p := make([]byte, 4096)
		if _, err := answers[i].ReadInto(p); err != nil || !bytes.Equal(p, data[i*4096:(i+1)*4096]) {
			t.Fatalf("answer %d: %v, or wrong bytes", i, err)
		}
	}
	if n := s.Count("GET", "data/obj"); n != 8 {
		t.Errorf("8 answers read with %d requests, want 8", n)
	}
	closed := r.Request(0, 10)
	closed.Close() // let go unread: its connection is freed
	if err := s.Overwrite("bkt", "data/obj", data[:100]); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Request(0, 10).ReadInto(make([]byte, 10)); errcode.Of(err) != errcode.Changed || !strings.Contains(err.Error(), "data/obj") {
		t.Fatalf("an answer of a changed object: %v, want Changed naming it", err)
	}
}
