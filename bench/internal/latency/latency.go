// Package latency puts an HTTP reverse proxy in front of a server (the local
// S3-compatible server of the benchmarks) that waits a set time before it
// forwards each request, as a distant object store delays the first byte, and
// counts the requests it forwards and the body bytes it sends back.
//
// The delay is applied per request, before forwarding, so concurrent requests
// wait in parallel, as they would on a real network; the body then streams at
// loopback speed. The count of body bytes is what a reader fetched from the
// store, whatever the reader, which the benchmarks compare with the bytes it
// delivered.
//
// Paths under /_bench/ are the proxy's own and are never forwarded (an S3
// bucket name cannot start with "_"):
//
//	GET  /_bench/stats           {"requests": N, "bytes": N, "delay_ms": N}
//	POST /_bench/delay?ms=50     sets the delay
//	POST /_bench/reset           zeroes the counters
package latency

import (
	"context"
	"encoding/json"
	"errors"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"
)

// Proxy forwards requests to one target after a delay and counts what it serves.
type Proxy struct {
	srv      *httptest.Server
	rp       *httputil.ReverseProxy
	delay    atomic.Int64 // nanoseconds
	requests atomic.Int64
	bytes    atomic.Int64
}

// Stats are the proxy's counters since it started or was last reset.
type Stats struct {
	Requests int64 `json:"requests"` // requests forwarded
	Bytes    int64 `json:"bytes"`    // response body bytes sent back
	DelayMS  int64 `json:"delay_ms"` // the current delay
}

// Start starts a proxy to target on a loopback port.
func Start(target string) (*Proxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	p := &Proxy{rp: httputil.NewSingleHostReverseProxy(u)}
	// The default transport keeps 2 idle connections per host: with 64 requests
	// in flight the proxy would open and close a connection for most of them.
	p.rp.Transport = &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 1024,
		IdleConnTimeout:     90 * time.Second,
	}
	// A reader that stops early cancels requests in flight; that is not an
	// error of the store, and the default handler would log each one.
	p.rp.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
		if !errors.Is(err, context.Canceled) {
			log.Printf("latency proxy: %s %s: %v", r.Method, r.URL.Path, err)
		}
		w.WriteHeader(http.StatusBadGateway)
	}
	p.srv = httptest.NewServer(p)
	return p, nil
}

// URL returns the proxy's base URL (http://127.0.0.1:port).
func (p *Proxy) URL() string { return p.srv.URL }

// Close stops the proxy.
func (p *Proxy) Close() { p.srv.Close() }

// SetDelay sets the wait before each request is forwarded.
func (p *Proxy) SetDelay(d time.Duration) { p.delay.Store(int64(d)) }

// Stats returns the counters.
func (p *Proxy) Stats() Stats {
	return Stats{Requests: p.requests.Load(), Bytes: p.bytes.Load(),
		DelayMS: time.Duration(p.delay.Load()).Milliseconds()}
}

// Reset zeroes the counters.
func (p *Proxy) Reset() {
	p.requests.Store(0)
	p.bytes.Store(0)
}

// Endpoint returns the s3:// URI uri with its endpoint parameter pointed at
// the proxy, so that a client of the URI goes through it.
func (p *Proxy) Endpoint(uri string) (string, error) {
	u, err := url.Parse(uri)
	if err != nil {
		return "", err
	}
	q := u.Query()
	q.Set("endpoint", p.srv.URL)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// ServeHTTP answers the control paths and forwards everything else.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/_bench/stats":
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(p.Stats())
		return
	case "/_bench/delay":
		ms, err := strconv.ParseFloat(r.URL.Query().Get("ms"), 64)
		if err != nil || ms < 0 || r.Method != http.MethodPost {
			http.Error(w, "POST /_bench/delay?ms=N with N >= 0", http.StatusBadRequest)
			return
		}
		p.SetDelay(time.Duration(ms * float64(time.Millisecond)))
		return
	case "/_bench/reset":
		if r.Method != http.MethodPost {
			http.Error(w, "POST /_bench/reset", http.StatusBadRequest)
			return
		}
		p.Reset()
		return
	}
	p.requests.Add(1)
	if d := time.Duration(p.delay.Load()); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	p.rp.ServeHTTP(&countingWriter{ResponseWriter: w, n: &p.bytes}, r)
}

// countingWriter counts the body bytes written through it.
type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (c *countingWriter) Write(b []byte) (int, error) {
	n, err := c.ResponseWriter.Write(b)
	c.n.Add(int64(n))
	return n, err
}

// Unwrap lets http.ResponseController reach the underlying writer (Flush).
func (c *countingWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }
