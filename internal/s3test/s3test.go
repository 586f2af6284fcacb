// Package s3test runs an S3-compatible server (gofakes3 with its in-memory
// backend) on a loopback port, for tests and benchmarks that need a real S3
// protocol peer: signed HTTP requests, ranges, listings, conditional PUTs
// (If-None-Match: *, checked under the backend's lock, so racing creates of one
// key have exactly one winner) and conditional reads (If-Match on GET and HEAD,
// answered 412 Precondition Failed when the object's ETag differs, which
// gofakes3 itself ignores) and multipart uploads, whose incomplete ones it
// lists and aborts (listing none, as S3 does, for a bucket that never had
// one, where gofakes3 answers NoSuchUpload), unless told to refuse those
// listings as some S3-compatible stores do (RefuseUploadListings).
//
// A Server can also misbehave like a remote store on a bad day: SetFaults
// makes it answer a deterministic, seeded fraction of requests with 5xx
// errors, stalls, connection resets, truncated bodies, latency spikes or
// lost responses, and add a fixed first-byte latency to every request.
// Injected counts what it injected, so that a test can check that its
// faults really happened.
package s3test

import (
	"bytes"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// Server is a running S3-compatible server.
type Server struct {
	srv     *httptest.Server
	backend *s3mem.Backend

	mu       sync.Mutex
	counts   map[string]int64 // by method and key suffix, see Count
	faults   Faults
	seen     map[uint64]uint64 // identical requests seen since SetFaults, by request hash
	injected map[Kind]int64
	total    atomic.Int64
	inFlight atomic.Int64
	peak     atomic.Int64 // most requests in flight at once since ResetCounts
	served   atomic.Int64 // response body bytes sent since ResetCounts
	largest  atomic.Int64 // most body bytes one response sent since ResetCounts
	// ignoreIfNoneMatch drops If-None-Match from PUTs; see IgnoreConditionalWrites.
	ignoreIfNoneMatch atomic.Bool
	// refuseUploadListings answers listings of multipart uploads 501; see
	// RefuseUploadListings.
	refuseUploadListings atomic.Bool

	closing   chan struct{} // closed by Close, to end stalls
	closeOnce sync.Once
}

// Start starts a server holding the given empty buckets.
func Start(buckets ...string) (*Server, error) {
	backend := s3mem.New()
	for _, b := range buckets {
		if err := backend.CreateBucket(b); err != nil {
			return nil, fmt.Errorf("create bucket %s: %w", b, err)
		}
	}
	s := &Server{counts: map[string]int64{}, backend: backend, seen: map[uint64]uint64{},
		injected: map[Kind]int64{}, closing: make(chan struct{})}
	h := s.withUploadListings(gofakes3.New(backend).Server())
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.total.Add(1)
		n := s.inFlight.Add(1)
		defer s.inFlight.Add(-1)
		for p := s.peak.Load(); n > p; p = s.peak.Load() {
			if s.peak.CompareAndSwap(p, n) {
				break
			}
		}
		s.mu.Lock()
		s.counts[r.Method+" "+r.URL.Path]++
		s.mu.Unlock()
		if r.Method == http.MethodPut && s.ignoreIfNoneMatch.Load() {
			r.Header.Del("If-None-Match")
		}
		if !s.ifMatch(w, r) {
			return
		}
		s.serveFaulty(&countingWriter{ResponseWriter: w, n: &s.served, largest: &s.largest}, r, h)
	}))
	return s, nil
}

// URI returns the s3:// URI of bucket/prefix on this server: anonymous,
// path-style requests to its loopback endpoint.
func (s *Server) URI(bucket, prefix string) string {
	q := url.Values{"endpoint": {s.srv.URL}, "use_path_style": {"true"}, "region": {"us-east-1"},
		"anonymous": {"true"}, "disable_https": {"true"}}
	return "s3://" + bucket + "/" + strings.TrimPrefix(prefix, "/") + "?" + q.Encode()
}

// Put stores an object directly in the backend, without a request,
// replacing any object of that key.
func (s *Server) Put(bucket, key string, data []byte) error {
	_, err := s.backend.PutObject(bucket, key, map[string]string{}, bytes.NewReader(data), int64(len(data)), nil)
	return err
}

// RefuseUploadListings makes the server answer (true) listings of
// incomplete multipart uploads with 501 NotImplemented, as some
// S3-compatible stores do, or serve them (false, the default).
func (s *Server) RefuseUploadListings(refuse bool) { s.refuseUploadListings.Store(refuse) }

// withUploadListings answers the listings of a bucket's incomplete multipart
// uploads through h, except that where h answers NoSuchUpload because the
// bucket never had one (gofakes3 does), it answers an empty listing, as S3
// does, and that it refuses them when told to (see RefuseUploadListings).
func (s *Server) withUploadListings(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bucket := strings.Trim(r.URL.Path, "/")
		if r.Method != http.MethodGet || !r.URL.Query().Has("uploads") || strings.Contains(bucket, "/") {
			h.ServeHTTP(w, r)
			return
		}
		if s.refuseUploadListings.Load() {
			writeError(w, http.StatusNotImplemented, "NotImplemented", "ListMultipartUploads is not implemented", "/"+bucket)
			return
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code != http.StatusNotFound || !bytes.Contains(rec.Body.Bytes(), []byte("NoSuchUpload")) {
			maps.Copy(w.Header(), rec.Header())
			w.WriteHeader(rec.Code)
			w.Write(rec.Body.Bytes())
			return
		}
		w.Header().Set("Content-Type", "application/xml")
		var prefix bytes.Buffer
		xml.EscapeText(&prefix, []byte(r.URL.Query().Get("prefix")))
		fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>`+"\n"+
			`<ListMultipartUploadsResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">`+
			`<Bucket>%s</Bucket><Prefix>%s</Prefix><MaxUploads>1000</MaxUploads><IsTruncated>false</IsTruncated>`+
			`</ListMultipartUploadsResult>`, bucket, prefix.String())
	})
}

// Overwrite replaces the object at key, which must exist, with data, keeping
// the old object's Last-Modified: how a writer that replaces an object within
// the same second looks to a reader, since Last-Modified has a resolution of
// one second.
func (s *Server) Overwrite(bucket, key string, data []byte) error {
	old, err := s.backend.HeadObject(bucket, key)
	if err != nil {
		return err
	}
	old.Contents.Close()
	_, err = s.backend.PutObject(bucket, key, maps.Clone(old.Metadata), bytes.NewReader(data), int64(len(data)), nil)
	return err
}

// ifMatch answers a GET or HEAD whose If-Match names another ETag than the
// object's with 412 Precondition Failed, as S3 does, and reports whether the
// request is still to be served.
func (s *Server) ifMatch(w http.ResponseWriter, r *http.Request) bool {
	want := r.Header.Get("If-Match")
	if want == "" || want == "*" || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
		return true
	}
	bucket, key, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	obj, err := s.backend.HeadObject(bucket, key)
	if err != nil {
		return true // gofakes3 answers for a missing object
	}
	obj.Contents.Close()
	if `"`+hex.EncodeToString(obj.Hash)+`"` == want {
		return true
	}
	writeError(w, http.StatusPreconditionFailed, "PreconditionFailed",
		"At least one of the pre-conditions you specified did not hold", r.URL.Path)
	return false
}

// writeError answers with an S3 error document.
func writeError(w http.ResponseWriter, status int, code, msg, resource string) {
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>`+"\n"+
		`<Error><Code>%s</Code><Message>%s</Message><Resource>%s</Resource><RequestId>s3test</RequestId></Error>`,
		code, msg, resource)
}

// Requests returns how many requests the server has answered.
func (s *Server) Requests() int64 { return s.total.Load() }

// PeakInFlight returns the most requests the server was serving at once
// since it started or since ResetCounts: how much a client overlaps its
// requests, which is what hides a store's latency.
func (s *Server) PeakInFlight() int64 { return s.peak.Load() }

// BytesServed returns the response body bytes the server has sent since it
// started or since ResetCounts: what its clients fetched.
func (s *Server) BytesServed() int64 { return s.served.Load() }

// LargestResponse returns the most body bytes one response has sent since
// the server started or since ResetCounts: the longest range a client asked
// for in one request.
func (s *Server) LargestResponse() int64 { return s.largest.Load() }

// Count returns how many requests with the method had a path ending in suffix
// (path-style paths are /bucket/key).
func (s *Server) Count(method, suffix string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for k, c := range s.counts {
		if strings.HasPrefix(k, method+" ") && strings.HasSuffix(k, suffix) {
			n += c
		}
	}
	return n
}

// ResetCounts zeroes the request counters and the counts of injected faults,
// and restarts the peak of requests in flight from those in flight now.
func (s *Server) ResetCounts() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.counts = map[string]int64{}
	s.injected = map[Kind]int64{}
	s.total.Store(0)
	s.served.Store(0)
	s.largest.Store(0)
	s.peak.Store(s.inFlight.Load())
}

// countingWriter counts the body bytes written through it, in all (n) and
// the most of one response (largest).
type countingWriter struct {
	http.ResponseWriter
	n, largest *atomic.Int64
	sent       int64
}

func (c *countingWriter) Write(b []byte) (int, error) {
	n, err := c.ResponseWriter.Write(b)
	c.n.Add(int64(n))
	c.sent += int64(n)
	for l := c.largest.Load(); c.sent > l && !c.largest.CompareAndSwap(l, c.sent); l = c.largest.Load() {
	}
	return n, err
}

// Unwrap lets http.ResponseController reach the writer below (Flush, Hijack).
func (c *countingWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// Close stops the server, ending stalled requests first.
func (s *Server) Close() {
	s.closeOnce.Do(func() { close(s.closing) })
	s.srv.Close()
}
