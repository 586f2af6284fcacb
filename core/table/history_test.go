package table_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/internal/tabletest"
)

// TestHistory: each version says when it was committed, its rows and the
// rows it added; a version removed by Cleanup is not listed.
func TestHistory(t *testing.T) {
	ctx := context.Background()
	uri := "file://" + t.TempDir()
	before := time.Now().UTC()
	tb, err := table.Create(ctx, uri, tabletest.Reader(0, 10), table.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	for _, n := range []int64{5, 7} {
		if _, err := tb.Append(ctx, tabletest.Reader(100, n), table.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	after := time.Now().UTC()
	hs, err := table.History(ctx, uri)
	if err != nil {
		t.Fatal(err)
	}
	type row struct{ version, rows, added int64 }
	var got []row
	for i, h := range hs {
		got = append(got, row{h.Version, h.NumRows, h.AddedRows})
		if h.Committed.Before(before) || h.Committed.After(after) || (i > 0 && h.Committed.Before(hs[i-1].Committed)) {
			t.Errorf("version %d committed at %v, outside [%v, %v] or before its parent", h.Version, h.Committed, before, after)
		}
	}
	if want := []row{{1, 10, 10}, {2, 15, 5}, {3, 22, 7}}; !slices.Equal(got, want) {
		t.Fatalf("history %v, want %v", got, want)
	}
	if _, err := table.Cleanup(ctx, uri, table.CleanupOptions{KeepLast: 2, Grace: time.Nanosecond}); err != nil {
		t.Fatal(err)
	}
	if hs, err := tb.History(ctx); err != nil || len(hs) != 2 || hs[0].Version != 2 || hs[0].AddedRows != 5 {
		t.Fatalf("history after cleanup: %+v, %v", hs, err)
	}
	plain := "file://" + t.TempDir()
	if _, err := table.History(ctx, plain); errcode.Of(err) != errcode.NotFound {
		t.Fatalf("history of a folder without a table: %v, want NotFound", err)
	}
}

// TestEmptyAppendRefused: an append of no rows makes no version and says so.
func TestEmptyAppendRefused(t *testing.T) {
	ctx := context.Background()
	uri := "file://" + t.TempDir()
	tb, err := table.Create(ctx, uri, tabletest.Reader(0, 10), table.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	_, err = table.Append(ctx, uri, tabletest.Reader(10, 0), table.WriteOptions{})
	if errcode.Of(err) != errcode.InvalidArgument ||
		!strings.Contains(err.Error(), "no rows to append: a version is made of new rows; the table stays at version 1") {
		t.Fatalf("empty append: %v, want InvalidArgument saying the table stays at version 1", err)
	}
	if vs, err := table.Versions(ctx, uri); err != nil || !slices.Equal(vs, []int64{1}) {
		t.Fatalf("versions after an empty append: %v, %v", vs, err)
	}
}

// TestList finds the croupier tables at and under a location, on local files
// and on S3 (whose URIs keep the location's query), and nothing else: a
// plain Parquet folder is not listed, a table whose creation has not
// committed is, with no version.
func TestList(t *testing.T) {
	ctx := context.Background()
	s := startS3(t)
	dir := t.TempDir()
	for _, root := range []string{"file://" + dir, s.URI("bkt", "runs")} {
		at := func(folder string) string {
			base, query, _ := strings.Cut(root, "?")
			if folder != "" {
				base += "/" + folder
			}
			if query != "" {
				return base + "?" + query
			}
			return base
		}
		for folder, appends := range map[string]int{"": 0, "a": 1, "b/c": 2} {
			tb, err := table.Create(ctx, at(folder), tabletest.Reader(0, 10), table.WriteOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for range appends {
				if _, err := tb.Append(ctx, tabletest.Reader(10, 3), table.WriteOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			tb.Close()
		}
		want := []table.Listed{{URI: at(""), Versions: 1, Latest: 1}, {URI: at("a"), Versions: 2, Latest: 2},
			{URI: at("b/c"), Versions: 3, Latest: 3}}
		if strings.HasPrefix(root, "file:") {
			// A creation in flight (its marker only) and a plain Parquet folder.
			for name, data := range map[string]string{"pending/_versions/_croupier": "", "plain/part-0.parquet": "PAR1"} {
				path := filepath.Join(dir, filepath.FromSlash(name))
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want = append(want, table.Listed{URI: at("pending")})
		}
		got, err := table.List(ctx, root)
		if err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(want, func(a, b table.Listed) int { return strings.Compare(a.URI, b.URI) })
		if !slices.Equal(got, want) {
			t.Fatalf("List(%s) = %+v, want %+v", root, got, want)
		}
		for _, l := range got {
			if _, err := table.Versions(ctx, l.URI); err != nil && l.Versions > 0 {
				t.Fatalf("a listed URI does not open: %v", err)
			}
		}
	}
	if got, err := table.List(ctx, "file://"+t.TempDir()); err != nil || len(got) != 0 {
		t.Fatalf("List of an empty folder: %v, %v", got, err)
	}
}
