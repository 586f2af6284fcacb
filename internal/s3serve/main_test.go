package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/croupier-data/croupier/internal/s3test"
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
	if got := stats(); got["requests"] != 1 || got["gets"] != 1 || got["bytes"] != 1000 ||
		got["peak_in_flight"] != 1 || got["delay_ms"] != 40 {
		t.Errorf("stats %v, want 1 request, a GET, 1000 bytes, 1 in flight at most, delay 40 ms", got)
	}
	post("/reset", http.StatusOK)
	if got := stats(); got["requests"] != 0 || got["gets"] != 0 || got["bytes"] != 0 {
		t.Errorf("stats after reset %v", got)
	}
}

// A folder is served as it lies on disk, its subfolders too: a croupier table
// or a Lance dataset keeps its files in folders.
func TestUploadSubfolders(t *testing.T) {
	folder := t.TempDir()
	files := map[string]string{"top.parquet": "top", "data/part.parquet": "part", "_versions/x/1.json": "v1"}
	for rel, body := range files {
		path := filepath.Join(folder, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	srv, err := s3test.Start("bench")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if err := upload(srv, "bench", "t", folder); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(srv.URI("bench", "t"))
	if err != nil {
		t.Fatal(err)
	}
	for rel, want := range files {
		resp, err := http.Get(u.Query().Get("endpoint") + "/bench/t/" + rel)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(got) != want {
			t.Errorf("GET t/%s: %s %q, want %q", rel, resp.Status, got, want)
		}
	}
	if err := upload(srv, "bench", "u", filepath.Join(folder, "missing")); err == nil {
		t.Error("upload of a missing folder: no error")
	}
}
