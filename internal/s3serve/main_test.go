package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/croupier-data/croupier/core/store/s3test"
)

// The control URL sets the server's first-byte delay and reads and resets its
// counters, which count what a client fetched.
func TestControl(t *testing.T) {
	srv, err := s3test.Start("bench")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if err := srv.Put("bench", "t/obj", make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	web := httptest.NewServer(newControl(srv, 0))
	defer web.Close()
	stats := func() map[string]int64 {
		t.Helper()
		resp, err := http.Get(web.URL + "/stats")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]int64
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	post := func(path string, want int) {
		t.Helper()
		resp, err := http.Post(web.URL+path, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("POST %s: %s, want %d", path, resp.Status, want)
		}
	}
	post("/delay?ms=40", http.StatusOK)
	post("/delay?ms=-1", http.StatusBadRequest)
	u, err := url.Parse(srv.URI("bench", "t"))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	resp, err := http.Get(u.Query().Get("endpoint") + "/bench/t/obj")
	if err != nil {
		t.Fatal(err)
	}
	n, _ := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if took := time.Since(start); n != 1000 || took < 40*time.Millisecond {
		t.Errorf("GET: %d bytes in %v, want 1000 after at least 40ms", n, took)
	}
	if got := stats(); got["requests"] != 1 || got["bytes"] != 1000 || got["delay_ms"] != 40 {
		t.Errorf("stats %v, want 1 request, 1000 bytes, delay 40 ms", got)
	}
	post("/reset", http.StatusOK)
	if got := stats(); got["requests"] != 0 || got["bytes"] != 0 {
		t.Errorf("stats after reset %v", got)
	}
}
