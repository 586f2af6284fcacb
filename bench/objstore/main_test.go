package main

import (
	"context"
	"io"
	"testing"
	"time"
)

// The benchmark runs end to end on every local store, with the server's delay
// in every latency of the delayed store.
func TestRun(t *testing.T) {
	t.Setenv("CROUPIER_BENCH_S3_URI", "")
	t.Setenv("CROUPIER_BENCH_GCS_URI", "")
	rep, err := run(context.Background(), "1MiB", "1,4", "64KiB,1MiB", "30ms", 50*time.Millisecond, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Stores) != 6 || rep.Stores[4].Skipped == "" || rep.Stores[5].Skipped == "" {
		t.Fatalf("stores: %+v", rep.Stores)
	}
	if len(rep.Cells) != 4*2*2 {
		t.Fatalf("%d cells, want 16", len(rep.Cells))
	}
	for _, c := range rep.Cells {
		if c.Reads == 0 || c.MBPerSec <= 0 || c.P50MS > c.P90MS || c.P90MS > c.P99MS {
			t.Errorf("cell %+v", c)
		}
		if c.Store == "s3+30ms" && c.P50MS < 30 {
			t.Errorf("%s: p50 %.2f ms", c.Store, c.P50MS)
		}
	}
}

func TestParseSize(t *testing.T) {
	for s, want := range map[string]int64{"64KiB": 64 << 10, "8MiB": 8 << 20, "1GiB": 1 << 30, "100": 100} {
		if got, err := parseSize(s); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", s, got, err, want)
		}
		if s != "100" && formatSize(want) != s {
			t.Errorf("formatSize(%d) = %s", want, formatSize(want))
		}
	}
	for _, s := range []string{"", "0", "-1KiB", "1MB", "x"} {
		if _, err := parseSize(s); err == nil {
			t.Errorf("parseSize(%q) succeeded", s)
		}
	}
}
