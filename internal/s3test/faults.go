package s3test

import (
	"bytes"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"time"
)

// Kind is a kind of fault the server injects.
type Kind int

// The kinds of fault. Each is what a real object store or the network
// between does now and then over weeks of training.
const (
	// ServerError answers 500 InternalError or 503 SlowDown (half each) with
	// an S3 error document, without serving the request.
	ServerError Kind = iota
	// Stall sends nothing for Faults.Stall, meant to be longer than the
	// client's per-request timeout, then serves the request (unless the
	// client has gone away by then, as it should have).
	Stall
	// Reset resets the connection (TCP RST) before serving the request.
	Reset
	// Truncate serves the request, sends the response's headers with its
	// true Content-Length and half its body, then closes the connection. A
	// response without a body is cut in the middle of its headers instead.
	Truncate
	// Spike delays the response by Faults.Spike, shorter than the client's
	// per-request timeout, then serves the request.
	Spike
	// LostResponse serves the request, then resets the connection instead
	// of answering: the request took effect but the client cannot know it.
	LostResponse
	// Throttle answers 429 Too Many Requests with an S3 error document,
	// without serving the request, as S3-compatible servers (and gateways
	// in front of S3) throttle.
	Throttle
	numKinds
)

// AllKinds lists every kind of fault.
var AllKinds = []Kind{ServerError, Stall, Reset, Truncate, Spike, LostResponse, Throttle}

var kindNames = [...]string{"ServerError", "Stall", "Reset", "Truncate", "Spike", "LostResponse", "Throttle"}

func (k Kind) String() string {
	if k >= 0 && k < numKinds {
		return kindNames[k]
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Faults configures the faults a Server injects. The zero value injects none.
//
// Whether a request gets a fault, and which, is a function of the seed, the
// request (method, path, query, Range header) and how many identical requests
// the server saw before since SetFaults: the same seed gives the same faults
// to the same requests whatever the order in which concurrent requests
// arrive, and a retried request draws again.
type Faults struct {
	// Rate is the probability that a request gets a fault, in [0, 1].
	Rate float64
	// Seed seeds the draws.
	Seed uint64
	// Kinds are the kinds drawn from, uniformly; empty means AllKinds.
	Kinds []Kind
	// Stall is how long a Stall holds a request before serving it; 0 means
	// 10s. The server stops waiting as soon as the client goes away.
	Stall time.Duration
	// Spike is the extra latency of a Spike; 0 means 50ms.
	Spike time.Duration
	// FirstByte delays every response, fault or not, by this much: a fixed
	// first-byte latency, as a remote store has.
	FirstByte time.Duration
	// Match selects the requests that may get a fault; nil means all. It is
	// called with the server's lock held, so it must not call the Server.
	Match func(*http.Request) bool
}

// SetFaults replaces the server's fault configuration and restarts the
// count of identical requests that the draws depend on. The counts of
// injected faults are kept (see Injected and ResetCounts).
func (s *Server) SetFaults(f Faults) {
	if len(f.Kinds) == 0 {
		f.Kinds = AllKinds
	}
	if f.Stall == 0 {
		f.Stall = 10 * time.Second
	}
	if f.Spike == 0 {
		f.Spike = 50 * time.Millisecond
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = f
	s.seen = map[uint64]uint64{}
}

// Injected returns how many faults of each kind the server injected since it
// started or since ResetCounts.
func (s *Server) Injected() map[Kind]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[Kind]int64, len(s.injected))
	for k, n := range s.injected {
		out[k] = n
	}
	return out
}

// fault is one draw's outcome.
type fault struct {
	kind Kind
	alt  bool // the second variant of the kind (503 rather than 500)
}

// draw returns the configuration in force and the fault of request r, if any.
func (s *Server) draw(r *http.Request) (Faults, *fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.faults
	if f.Rate <= 0 || (f.Match != nil && !f.Match(r)) {
		return f, nil
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "%s %s?%s range=%s", r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Get("Range"))
	id := h.Sum64()
	n := s.seen[id]
	s.seen[id] = n + 1
	rng := rand.New(rand.NewPCG(f.Seed^id, n))
	if rng.Float64() >= f.Rate {
		return f, nil
	}
	ft := &fault{kind: f.Kinds[rng.IntN(len(f.Kinds))], alt: rng.IntN(2) == 1}
	s.injected[ft.kind]++
	return f, ft
}

// serveFaulty serves r through next, injecting the fault the draw decides.
func (s *Server) serveFaulty(w http.ResponseWriter, r *http.Request, next http.Handler) {
	f, ft := s.draw(r)
	if !s.wait(r, f.FirstByte) {
		return
	}
	if ft == nil {
		next.ServeHTTP(w, r)
		return
	}
	switch ft.kind {
	case ServerError:
		code, status, msg := "InternalError", http.StatusInternalServerError, "We encountered an internal error. Please try again."
		if ft.alt {
			code, status, msg = "SlowDown", http.StatusServiceUnavailable, "Please reduce your request rate."
		}
		writeError(w, status, code, msg, r.URL.Path)
	case Throttle:
		writeError(w, http.StatusTooManyRequests, "TooManyRequests", "Please reduce your request rate.", r.URL.Path)
	case Stall:
		if s.wait(r, f.Stall) {
			next.ServeHTTP(w, r)
		}
	case Spike:
		if s.wait(r, f.Spike) {
			next.ServeHTTP(w, r)
		}
	case Reset:
		reset(w)
	case LostResponse:
		next.ServeHTTP(httptest.NewRecorder(), r)
		reset(w)
	case Truncate:
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, r)
		truncate(w, r, rec)
	}
}

// wait sleeps for d and reports whether the request should still be served:
// false when the client went away or the server is closing.
func (s *Server) wait(r *http.Request, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
	case <-s.closing:
	}
	return false
}

// reset hijacks the connection and closes it with a TCP RST.
func reset(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	conn.Close()
}

// truncate writes the recorded response with its full Content-Length but only
// the first half of its body (or of its headers, when it has no body), then
// closes the connection.
func truncate(w http.ResponseWriter, r *http.Request, rec *httptest.ResponseRecorder) {
	conn, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	body := rec.Body.Bytes()
	if r.Method == http.MethodHead {
		body = nil
	}
	var head bytes.Buffer
	fmt.Fprintf(&head, "HTTP/1.1 %d %s\r\n", rec.Code, http.StatusText(rec.Code))
	h := rec.Header().Clone()
	if h.Get("Content-Length") == "" {
		h.Set("Content-Length", strconv.Itoa(len(body)))
	}
	h.Write(&head)
	head.WriteString("\r\n")
	if len(body) < 2 {
		// Nothing to cut in the body: cut the headers.
		buf.Write(head.Bytes()[:head.Len()/2])
	} else {
		buf.Write(head.Bytes())
		buf.Write(body[:len(body)/2])
	}
	buf.Flush()
}

// MatchKey returns a Match function selecting requests whose path (/bucket/key
// in path style) contains substr and whose method is method ("" for any).
func MatchKey(method, substr string) func(*http.Request) bool {
	return func(r *http.Request) bool {
		return (method == "" || r.Method == method) && strings.Contains(r.URL.Path, substr)
	}
}
