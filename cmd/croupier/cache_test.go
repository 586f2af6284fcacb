package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/croupier-data/croupier/internal/s3test"
)

// TestDealReadsThroughTheCache prints the rows of a step of a table on the
// S3 test server twice with one --cache-dir: the second run reads no data
// file from the store and prints the same rows; with --cache-dir "" it reads
// them again.
func TestDealReadsThroughTheCache(t *testing.T) {
	s, err := s3test.Start("bkt")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	uri := s.URI("bkt", "tbl")
	ok(t, "tables", "create", uri, parquetFile(t, t.TempDir(), 0, 300))
	dir := filepath.Join(t.TempDir(), "blocks")
	deal := func(cacheDir string) (string, int64) {
		s.ResetCounts()
		out := ok(t, "deal", "--table", uri, "--global-batch-size", "8", "--step", "3", "--columns", "id,text",
			"--shuffle-seed", "5", "--cache-dir", cacheDir)
		return out, s.Count("GET", ".parquet")
	}
	first, gets := deal(dir)
	if gets == 0 {
		t.Fatal("the first deal read no data file from the store")
	}
	if again, gets := deal(dir); again != first || gets != 0 {
		t.Errorf("with the cache again: %d GETs of data files, want none; printed\n%s\nthen\n%s", gets, first, again)
	}
	if again, gets := deal(""); again != first || gets == 0 {
		t.Errorf("without the cache: %d GETs of data files, want some; printed\n%s\nthen\n%s", gets, first, again)
	}
}

// TestDefaultCacheDir: --cache-dir defaults to $CROUPIER_CACHE_DIR, even
// empty, else to croupier/blocks under $XDG_CACHE_HOME, else under ~/.cache.
func TestDefaultCacheDir(t *testing.T) {
	t.Setenv("CROUPIER_CACHE_DIR", "/x/blocks")
	t.Setenv("XDG_CACHE_HOME", "/xdg")
	t.Setenv("HOME", "/home/u")
	if got := defaultCacheDir(); got != "/x/blocks" {
		t.Errorf("with CROUPIER_CACHE_DIR: %q", got)
	}
	t.Setenv("CROUPIER_CACHE_DIR", "")
	if got := defaultCacheDir(); got != "" {
		t.Errorf("with CROUPIER_CACHE_DIR empty: %q; want no cache", got)
	}
	unsetenv(t, "CROUPIER_CACHE_DIR")
	if got := defaultCacheDir(); got != "/xdg/croupier/blocks" {
		t.Errorf("with XDG_CACHE_HOME: %q", got)
	}
	t.Setenv("XDG_CACHE_HOME", "")
	if got := defaultCacheDir(); got != "/home/u/.cache/croupier/blocks" {
		t.Errorf("with HOME only: %q", got)
	}
}

// unsetenv removes key from the environment for the rest of t.
func unsetenv(t *testing.T, key string) {
	t.Setenv(key, "") // restores the value before t when t ends
	os.Unsetenv(key)
}
