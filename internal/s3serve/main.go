// Command s3serve runs the local S3-compatible server (internal/s3test),
// loads folders of files into it, prints where they are, and serves until its
// standard input closes or it is interrupted. The Python tests and the loader
// benchmark start it to read tables over S3 from another process.
//
//	go run ./internal/s3serve [-bucket bench] [-delay 0ms] [-ignore-conditional-writes] NAME=FOLDER ...
//
// Each file under FOLDER, in its subfolders too, is stored as NAME/<path in
// FOLDER, slash-separated> in the bucket: a folder of Parquet files, a croupier
// table or a Lance dataset is served as it lies on disk. Once they are in, one
// JSON line goes to stdout:
//
//	{"control": "http://127.0.0.1:PORT", "uris": {"NAME": "s3://bench/NAME?endpoint=…"}}
//
// The URIs are anonymous, path-style requests to the server, as croupier opens
// them (drivers/s3's parameters endpoint, use_path_style, region,
// anonymous, disable_https). The server waits -delay before it serves each
// request, as a distant store delays the first byte (s3test's first-byte
// latency: in the server, so that no proxy copies every byte once more on the
// machine being measured). The control URL sets the delay and reads the
// counters:
//
//	GET  CONTROL/stats        {"requests": N, "gets": N, "bytes": N, "peak_in_flight": N, "delay_ms": N}
//	POST CONTROL/delay?ms=50  sets the delay
//	POST CONTROL/reset        zeroes the counters
//
// "requests" counts every request, "gets" the GETs among them (listings
// included), "bytes" the response bodies sent: what the readers fetched;
// "peak_in_flight" is the most requests served at once, how far a reader
// overlaps its requests to hide the delay. Exiting
// when standard input closes means the server never outlives the process that
// started it with a pipe.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/croupier-data/croupier/internal/s3test"
)

func main() {
	bucket := flag.String("bucket", "bench", "bucket to create")
	delay := flag.Duration("delay", 0, "first-byte delay of every request")
	ignore := flag.Bool("ignore-conditional-writes", false,
		"ignore If-None-Match on PUTs, as some servers and proxies do (see s3test.Server.IgnoreConditionalWrites)")
	flag.Parse()
	if err := run(*bucket, *delay, *ignore, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "s3serve:", err)
		os.Exit(1)
	}
}

func run(bucket string, delay time.Duration, ignoreConditionalWrites bool, folders []string) error {
	if len(folders) == 0 {
		return fmt.Errorf("no folders: give NAME=FOLDER arguments")
	}
	srv, err := s3test.Start(bucket)
	if err != nil {
		return err
	}
	defer srv.Close()
	srv.IgnoreConditionalWrites(ignoreConditionalWrites)
	uris := map[string]string{}
	for _, arg := range folders {
		name, folder, ok := strings.Cut(arg, "=")
		if !ok || name == "" {
			return fmt.Errorf("argument %q: want NAME=FOLDER", arg)
		}
		if err := upload(srv, bucket, name, folder); err != nil {
			return err
		}
		uris[name] = srv.URI(bucket, name)
	}
	ctl := newControl(srv, delay)
	web := httptest.NewServer(ctl)
	defer web.Close()
	srv.ResetCounts() // the uploads are not reads
	enc := json.NewEncoder(os.Stdout)
	enc.SetEscapeHTML(false) // keep the URIs' "&" readable
	if err := enc.Encode(map[string]any{"control": web.URL, "uris": uris}); err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()
	<-ctx.Done()
	return nil
}

// control serves the delay and the counters of the server over HTTP.
type control struct {
	srv   *s3test.Server
	delay atomic.Int64 // nanoseconds
}

func newControl(srv *s3test.Server, delay time.Duration) *control {
	c := &control{srv: srv}
	c.setDelay(delay)
	return c
}

func (c *control) setDelay(d time.Duration) {
	c.delay.Store(int64(d))
	c.srv.SetFaults(s3test.Faults{FirstByte: d})
}

func (c *control) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/stats" && r.Method == http.MethodGet:
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]int64{"requests": c.srv.Requests(),
			"gets": c.srv.Count(http.MethodGet, ""), "bytes": c.srv.BytesServed(),
			"peak_in_flight": c.srv.PeakInFlight(), "delay_ms": time.Duration(c.delay.Load()).Milliseconds()})
	case r.URL.Path == "/delay" && r.Method == http.MethodPost:
		ms, err := strconv.ParseFloat(r.URL.Query().Get("ms"), 64)
		if err != nil || ms < 0 {
			http.Error(w, "POST /delay?ms=N with N >= 0", http.StatusBadRequest)
			return
		}
		c.setDelay(time.Duration(ms * float64(time.Millisecond)))
	case r.URL.Path == "/reset" && r.Method == http.MethodPost:
		c.srv.ResetCounts()
	default:
		http.Error(w, "GET /stats, POST /delay?ms=N or POST /reset", http.StatusNotFound)
	}
}

// upload stores the files under folder as name/<path in folder> in bucket.
func upload(srv *s3test.Server, bucket, name, folder string) error {
	return filepath.WalkDir(folder, func(path string, e fs.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() {
			return err
		}
		rel, err := filepath.Rel(folder, path)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		key := name + "/" + filepath.ToSlash(rel)
		if err := srv.Put(bucket, key, data); err != nil {
			return fmt.Errorf("put %s: %w", key, err)
		}
		return nil
	})
}
