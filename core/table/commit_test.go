package table_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/croupier-data/croupier/core/catalog"
	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/internal/tabletest"
)

// TestCommitRefusedWhereConditionalWritesIgnored commits to a store that
// ignores If-None-Match: creating and appending are refused with an error
// naming the override before any data file is written, so no row is lost;
// with TrustConditionalWrites both commit.
func TestCommitRefusedWhereConditionalWritesIgnored(t *testing.T) {
	ctx := context.Background()
	s := startS3(t)
	s.IgnoreConditionalWrites(true)
	uri := s.URI("bkt", "ignored")
	refused := func(what string, err error) {
		t.Helper()
		if errcode.Of(err) != errcode.InvalidArgument || !strings.Contains(err.Error(), "ignores conditional writes") ||
			!strings.Contains(err.Error(), "TrustConditionalWrites") {
			t.Fatalf("%s: %v (%s), want InvalidArgument saying the store ignores conditional writes", what, err, errcode.Of(err))
		}
		if n := s.Count("PUT", ".parquet"); n != 0 {
			t.Fatalf("%s: %d data files written before the refusal", what, n)
		}
	}
	_, err := table.Create(ctx, uri, tabletest.Reader(0, 10), table.WriteOptions{})
	refused("create", err)
	if vs, _ := table.Versions(ctx, uri); len(vs) != 0 {
		t.Fatalf("versions %v after a refused create", vs)
	}
	if n := s.Count("PUT", "_croupier"); n != 0 {
		t.Fatalf("a refused create wrote the marker of a table being created (%d PUTs)", n)
	}

	tb, err := table.Create(ctx, uri, tabletest.Reader(0, 10), table.WriteOptions{TrustConditionalWrites: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	s.ResetCounts()
	_, err = tb.Append(ctx, tabletest.Reader(10, 5), table.WriteOptions{})
	refused("append", err)
	if v, err := tb.Append(ctx, tabletest.Reader(10, 5), table.WriteOptions{TrustConditionalWrites: true}); err != nil || v != 2 {
		t.Fatalf("trusted append = %d, %v; want version 2", v, err)
	}
	if got := allIDs(t, open(t, uri)); !slices.Equal(got, seq(0, 15)) {
		t.Fatalf("rows = %v, want 0…14", got)
	}
}

// TestProbeCachedInCatalog checks that a store that honours conditional
// writes is probed once per process, and once per host with a catalog: a
// new process (here: the process's memory of probes forgotten) finds the
// result in the catalog and probes no more.
func TestProbeCachedInCatalog(t *testing.T) {
	ctx := context.Background()
	s := startS3(t)
	uri := s.URI("bkt", "probed")
	cat := catalog.Open(catalog.Options{Path: filepath.Join(t.TempDir(), "catalog.db")})
	table.ForgetProbes()
	tb, err := table.Create(ctx, uri, tabletest.Reader(0, 10), table.WriteOptions{Catalog: cat})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	probes := func() int64 { return s.Count("PUT", ".probe") }
	if n := probes(); n != 2 {
		t.Fatalf("%d probe creates, want 2 (one create, one that must fail)", n)
	}
	for i, step := range []struct {
		forget bool
		cat    *catalog.Catalog
		want   int64 // probe creates so far
	}{
		{false, nil, 2}, // this process knows the store
		{true, cat, 2},  // a new process finds it in the catalog
		{true, nil, 4},  // a new process without a catalog probes again
	} {
		if step.forget {
			table.ForgetProbes()
		}
		if _, err := table.Append(ctx, uri, tabletest.Reader(int64(10+i), 1), table.WriteOptions{Catalog: step.cat}); err != nil {
			t.Fatal(err)
		}
		if n := probes(); n != step.want {
			t.Fatalf("append %d: %d probe creates, want %d", i, n, step.want)
		}
	}
}

// TestCommitReadsItsManifestBack replaces a committed manifest before the
// commit reads it back, as a store that ignores conditional writes does when
// another writer commits the same version: the append fails with Changed
// instead of reporting a version that holds none of its rows.
func TestCommitReadsItsManifestBack(t *testing.T) {
	ctx := context.Background()
	s := startS3(t)
	uri := s.URI("bkt", "overwritten")
	tb, err := table.Create(ctx, uri, tabletest.Reader(0, 10), table.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	table.SetCommitHook(func(phase string) {
		if phase == "committed" {
			if err := s.Put("bkt", "overwritten/_versions/00000000000000000002.json", []byte(`{"other":"writer"}`)); err != nil {
				t.Error(err)
			}
		}
	})
	defer table.SetCommitHook(nil)
	_, err = tb.Append(ctx, tabletest.Reader(10, 5), table.WriteOptions{})
	if errcode.Of(err) != errcode.Changed || !strings.Contains(err.Error(), "00000000000000000002.json") ||
		!strings.Contains(err.Error(), "does not honour conditional writes") {
		t.Fatalf("append: %v (%s), want Changed naming version 2's manifest", err, errcode.Of(err))
	}
}
