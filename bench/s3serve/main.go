// Command s3serve runs the local S3-compatible server (core/store/s3test)
// behind a latency proxy (bench/internal/latency), loads folders of files
// into it, prints where they are, and serves until its standard input closes
// or it is interrupted. The Python loader benchmark starts it to read tables
// over S3.
//
//	go run ./bench/s3serve [-bucket bench] [-delay 0ms] NAME=FOLDER ...
//
// Each file of FOLDER (not its subfolders) is stored as NAME/<file name> in the
// bucket. Once they are in, one JSON line goes to stdout:
//
//	{"proxy": "http://127.0.0.1:PORT", "uris": {"NAME": "s3://bench/NAME?endpoint=…"}}
//
// The URIs are anonymous, path-style requests to the proxy, as croupier opens
// them (gocloud.dev s3blob parameters endpoint, use_path_style, region,
// anonymous, disable_https). The proxy's delay and byte counters are set and
// read over HTTP at PROXY/_bench/ (see bench/internal/latency). Exiting when
// standard input closes means the server never outlives the process that
// started it with a pipe.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/croupier-data/croupier/bench/internal/latency"
	"github.com/croupier-data/croupier/core/store/s3test"
)

func main() {
	bucket := flag.String("bucket", "bench", "bucket to create")
	delay := flag.Duration("delay", 0, "first-byte delay of the proxy")
	flag.Parse()
	if err := run(*bucket, *delay, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "s3serve:", err)
		os.Exit(1)
	}
}

func run(bucket string, delay time.Duration, folders []string) error {
	if len(folders) == 0 {
		return fmt.Errorf("no folders: give NAME=FOLDER arguments")
	}
	srv, err := s3test.Start(bucket)
	if err != nil {
		return err
	}
	defer srv.Close()
	u, err := url.Parse(srv.URI(bucket, ""))
	if err != nil {
		return err
	}
	proxy, err := latency.Start(u.Query().Get("endpoint"))
	if err != nil {
		return err
	}
	defer proxy.Close()
	proxy.SetDelay(delay)
	uris := map[string]string{}
	for _, arg := range folders {
		name, folder, ok := strings.Cut(arg, "=")
		if !ok || name == "" {
			return fmt.Errorf("argument %q: want NAME=FOLDER", arg)
		}
		if err := upload(srv, bucket, name, folder); err != nil {
			return err
		}
		if uris[name], err = proxy.Endpoint(srv.URI(bucket, name)); err != nil {
			return err
		}
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetEscapeHTML(false) // keep the URIs' "&" readable
	if err := enc.Encode(map[string]any{"proxy": proxy.URL(), "uris": uris}); err != nil {
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

// upload stores the files of folder as name/<file> in bucket.
func upload(srv *s3test.Server, bucket, name, folder string) error {
	entries, err := os.ReadDir(folder)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(folder, e.Name()))
		if err != nil {
			return err
		}
		if err := srv.Put(bucket, name+"/"+e.Name(), data); err != nil {
			return fmt.Errorf("put %s/%s: %w", name, e.Name(), err)
		}
	}
	return nil
}
