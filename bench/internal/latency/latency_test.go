package latency

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestProxyDelaysAndCounts(t *testing.T) {
	body := bytes.Repeat([]byte("x"), 100_000)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(body)
	}))
	defer backend.Close()
	p, err := Start(backend.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	get := func(path string) []byte {
		t.Helper()
		resp, err := http.Get(p.URL() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %v", path, resp.StatusCode, err)
		}
		return b
	}
	post := func(path string) int {
		t.Helper()
		resp, err := http.Post(p.URL()+path, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}

	if got := get("/bucket/key"); !bytes.Equal(got, body) {
		t.Fatalf("forwarded body: %d bytes, want %d", len(got), len(body))
	}
	if code := post("/_bench/delay?ms=40"); code != http.StatusOK {
		t.Fatalf("set delay: %d", code)
	}
	start := time.Now()
	get("/bucket/key")
	if d := time.Since(start); d < 40*time.Millisecond {
		t.Fatalf("request took %v with a 40ms delay", d)
	}
	var s Stats
	if err := json.Unmarshal(get("/_bench/stats"), &s); err != nil {
		t.Fatal(err)
	}
	if want := (Stats{Requests: 2, Bytes: 2 * int64(len(body)), DelayMS: 40}); s != want {
		t.Fatalf("stats %+v, want %+v", s, want)
	}
	if code := post("/_bench/delay?ms=-1"); code != http.StatusBadRequest {
		t.Fatalf("negative delay: %d", code)
	}
	post("/_bench/reset")
	if s := p.Stats(); s.Requests != 0 || s.Bytes != 0 {
		t.Fatalf("after reset: %+v", s)
	}
}

func TestEndpoint(t *testing.T) {
	p, err := Start("http://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	got, err := p.Endpoint("s3://b/pre?endpoint=http%3A%2F%2F127.0.0.1%3A9&region=us-east-1")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, "endpoint="+strings.ReplaceAll(strings.ReplaceAll(p.URL(), ":", "%3A"), "/", "%2F")) ||
		!strings.Contains(got, "region=us-east-1") || !strings.HasPrefix(got, "s3://b/pre?") {
		t.Fatalf("Endpoint: %s (proxy %s)", got, p.URL())
	}
}
