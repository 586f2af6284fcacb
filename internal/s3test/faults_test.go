package s3test_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/croupier-data/croupier/internal/s3test"
)

// objectURL returns the plain HTTP URL of bkt/key on s (anonymous, path style).
func objectURL(t *testing.T, s *s3test.Server, key string) string {
	t.Helper()
	u, err := url.Parse(s.URI("bkt", key))
	if err != nil {
		t.Fatal(err)
	}
	return u.Query().Get("endpoint") + "/bkt/" + key
}

func start(t *testing.T) (*s3test.Server, []byte) {
	t.Helper()
	s, err := s3test.Start("bkt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	body := bytes.Repeat([]byte("0123456789"), 100)
	if err := s.Put("bkt", "obj", body); err != nil {
		t.Fatal(err)
	}
	return s, body
}

// TestEachFaultKind checks, with plain HTTP requests, that each kind of fault
// does what it says and is counted.
func TestEachFaultKind(t *testing.T) {
	s, body := start(t)
	get := func(timeout time.Duration) (*http.Response, []byte, time.Duration, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, objectURL(t, s, "obj"), nil)
		// A fresh connection per request: a reset must not be retried by the
		// transport as a stale keep-alive connection.
		client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		began := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			return nil, nil, time.Since(began), err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp, b, time.Since(began), err
	}
	for _, k := range s3test.AllKinds {
		s.SetFaults(s3test.Faults{Rate: 1, Kinds: []s3test.Kind{k}, Stall: time.Minute, Spike: 100 * time.Millisecond})
		resp, b, took, err := get(time.Second)
		switch k {
		case s3test.ServerError:
			if err != nil || (resp.StatusCode != 500 && resp.StatusCode != 503) || !bytes.Contains(b, []byte("<Error><Code>")) {
				t.Errorf("%s: %v, %v, %q", k, resp, err, b)
			}
		case s3test.Throttle:
			if err != nil || resp.StatusCode != http.StatusTooManyRequests || !bytes.Contains(b, []byte("<Error><Code>TooManyRequests")) {
				t.Errorf("%s: %v, %v, %q", k, resp, err, b)
			}
		case s3test.Stall:
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s: %v after %s, want the client's deadline", k, err, took)
			}
		case s3test.Reset, s3test.LostResponse:
			if err == nil {
				t.Errorf("%s: got a response", k)
			}
		case s3test.Truncate:
			if !errors.Is(err, io.ErrUnexpectedEOF) || resp.ContentLength != int64(len(body)) || len(b) != len(body)/2 {
				t.Errorf("%s: %v, Content-Length %d, %d bytes", k, err, resp.ContentLength, len(b))
			}
		case s3test.Spike:
			if err != nil || !bytes.Equal(b, body) || took < 100*time.Millisecond {
				t.Errorf("%s: %v, %d bytes after %s", k, err, len(b), took)
			}
		}
		if n := s.Injected()[k]; n != 1 {
			t.Errorf("%s: injected %d times, want 1", k, n)
		}
	}
	s.SetFaults(s3test.Faults{FirstByte: 100 * time.Millisecond})
	if _, b, took, err := get(time.Second); err != nil || !bytes.Equal(b, body) || took < 100*time.Millisecond {
		t.Errorf("first-byte latency: %v, %d bytes after %s", err, len(b), took)
	}
}

// TestFaultsDeterministic: the same seed gives the same faults to the same
// requests; another seed gives others; the rate is about right.
func TestFaultsDeterministic(t *testing.T) {
	s, _ := start(t)
	run := func(seed uint64) []int {
		s.SetFaults(s3test.Faults{Rate: 0.3, Seed: seed, Kinds: []s3test.Kind{s3test.ServerError}})
		var faulty []int
		for i := range 200 {
			req, _ := http.NewRequest(http.MethodGet, objectURL(t, s, "obj"), nil)
			req.Header.Set("Range", "bytes=0-"+strconv.Itoa(i%10))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode >= 500 {
				faulty = append(faulty, i)
			}
		}
		return faulty
	}
	a, b, c := run(7), run(7), run(8)
	if !slices.Equal(a, b) {
		t.Errorf("seed 7 gave different faults: %v, %v", a, b)
	}
	if slices.Equal(a, c) {
		t.Errorf("seeds 7 and 8 gave the same faults")
	}
	if len(a) < 30 || len(a) > 90 {
		t.Errorf("%d of 200 requests faulty at rate 0.3", len(a))
	}
}

// TestCountsWhatItServes checks the byte and in-flight counters with plain
// HTTP requests: ranged GETs held by a first-byte latency, all at once.
func TestCountsWhatItServes(t *testing.T) {
	s, body := start(t)
	s.SetFaults(s3test.Faults{FirstByte: 100 * time.Millisecond})
	s.ResetCounts()
	const requests, n = 4, 100
	obj := objectURL(t, s, "obj")
	errs := make(chan error, requests)
	for i := range requests {
		go func() {
			req, err := http.NewRequest(http.MethodGet, obj, nil)
			if err != nil {
				errs <- err
				return
			}
			req.Header.Set("Range", "bytes="+strconv.Itoa(i*n)+"-"+strconv.Itoa(i*n+n-1))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				errs <- err
				return
			}
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil && !bytes.Equal(got, body[i*n:i*n+n]) {
				err = errors.New("wrong bytes for range " + req.Header.Get("Range"))
			}
			errs <- err
		}()
	}
	for range requests {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := s.BytesServed(); got != requests*n {
		t.Errorf("BytesServed = %d, want %d", got, requests*n)
	}
	if got := s.PeakInFlight(); got != requests {
		t.Errorf("PeakInFlight = %d, want %d (each waited 100 ms for its first byte)", got, requests)
	}
	if got := s.LargestResponse(); got != n {
		t.Errorf("LargestResponse = %d, want %d", got, n)
	}
	s.ResetCounts()
	if s.BytesServed() != 0 || s.PeakInFlight() != 0 || s.Requests() != 0 || s.LargestResponse() != 0 {
		t.Errorf("after ResetCounts: %d bytes, peak %d, %d requests, largest %d", s.BytesServed(), s.PeakInFlight(), s.Requests(), s.LargestResponse())
	}
}
