package table_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/croupier-data/croupier/core/catalog"
	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/internal/tabletest"
	"github.com/croupier-data/croupier/permutation"
)

// The catalog is only ever a cache: a table opened with one holds what the
// store holds, whatever the catalog's file says.

// padTo returns the Parquet file data grown to n bytes by zeros between its
// last column chunk and its footer, where no reader looks: two files of
// different rows and one size.
func padTo(t *testing.T, data []byte, n int) []byte {
	t.Helper()
	flen := int(binary.LittleEndian.Uint32(data[len(data)-8:]))
	at := len(data) - 8 - flen
	if n < len(data) {
		t.Fatalf("pad %d bytes to %d", len(data), n)
	}
	return append(append(append([]byte(nil), data[:at]...), make([]byte, n-len(data))...), data[at:]...)
}

// filtered builds a permutation of tb's rows that filter keeps, and returns
// how many rows it kept and the id column's value of the first.
func filtered(t *testing.T, tb *table.Table, filter string) (int64, int64) {
	t.Helper()
	ctx := context.Background()
	p, err := permutation.Build(ctx, tb, permutation.Spec{Filter: filter}, "file://"+t.TempDir(), permutation.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	kept := p.Manifest().RowsKept
	if kept == 0 {
		return 0, -1
	}
	ids, err := p.Splits()[0].RowIDs(ctx, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	r, err := tb.NewReader(table.ReaderOptions{Columns: []string{"id"}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rec, err := r.Read(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	return kept, rec.Column(0).(*array.Int64).Value(0)
}

// TestCatalogMissesAFileReplacedAlike replaces a plain Parquet file by
// another of the same size and modification time, as cp -p and rsync -t do
// (a new file renamed over it: a new inode). The catalog keyed by size and
// time alone served the old footer, whose statistics ruled out every row
// group of the new file: a filter kept none of its 20,000 rows.
func TestCatalogMissesAFileReplacedAlike(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "part.parquet")
	before, after := tabletest.Encode(t, 10_000, 20_000, 2_000), tabletest.Encode(t, 30_000, 20_000, 2_000)
	size := max(len(before), len(after))
	before, after = padTo(t, before, size), padTo(t, after, size)
	mtime := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	put := func(data []byte) {
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(tmp, mtime, mtime); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	cat := catalog.Open(catalog.Options{Path: filepath.Join(t.TempDir(), "catalog.db")})
	opts := table.OpenOptions{Catalog: cat}

	put(before)
	tb, err := table.OpenWith(ctx, "file://"+dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	if kept, first := filtered(t, tb, "id >= 30000"); kept != 0 {
		t.Fatalf("the first file: %d rows kept (first id %d), want none", kept, first)
	}
	tb.Close()

	put(after)
	tb, err = table.OpenWith(ctx, "file://"+dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	if kept, first := filtered(t, tb, "id >= 30000"); kept != 20_000 || first != 30_000 {
		t.Fatalf("the file replaced alike: %d rows kept, the first with id %d; want 20000 from id 30000", kept, first)
	}
}

// TestFlippedCachedFooterIsAColdOpen flips one bit of a footer in the
// catalog's file, in a row group's statistics: the table opens as from the
// store, and a filter keeps the rows it keeps without a catalog (when
// footers were not sealed, the flip made it skip 201 of them).
func TestFlippedCachedFooterIsAColdOpen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	data := tabletest.Encode(t, 0, 20_000, 1_000)
	if err := os.WriteFile(filepath.Join(dir, "part.parquet"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	catPath := filepath.Join(t.TempDir(), "catalog.db")
	cat := catalog.Open(catalog.Options{Path: catPath})
	opts := table.OpenOptions{Catalog: cat}
	tb, err := table.OpenWith(ctx, "file://"+dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	tb.Close()

	// Flip the bit that makes the smallest id of row group 14 (14,000) read
	// 14,256, so that the filter would skip the group, in every copy of the
	// footer in the catalog's file (bbolt leaves copies in free pages).
	flen := int(binary.LittleEndian.Uint32(data[len(data)-8:]))
	footer := data[len(data)-8-flen : len(data)-8]
	stat := bytes.LastIndex(footer, binary.LittleEndian.AppendUint64(nil, 14_000))
	if stat < 0 {
		t.Fatal("no statistic of 14000 in the footer")
	}
	file, err := os.ReadFile(catPath)
	if err != nil {
		t.Fatal(err)
	}
	copies := 0
	for off := 0; ; copies++ {
		i := bytes.Index(file[off:], footer)
		if i < 0 {
			break
		}
		file[off+i+stat+1] ^= 0x01 // 0x36b0 → 0x37b0
		off += i + flen
	}
	if copies == 0 {
		t.Fatal("the footer is not in the catalog's file")
	}
	if err := os.WriteFile(catPath, file, 0o644); err != nil {
		t.Fatal(err)
	}

	tb, err = table.OpenWith(ctx, "file://"+dir, opts)
	if err != nil {
		t.Fatalf("open with a flipped cached footer: %v", err)
	}
	defer tb.Close()
	if kept, first := filtered(t, tb, "id <= 14200"); kept != 14_201 || first != 0 {
		t.Fatalf("%d rows kept, the first with id %d; want 14201 from id 0", kept, first)
	}
	if aside, _ := filepath.Glob(catPath + ".damaged-*"); len(aside) != 1 {
		t.Errorf("the damaged catalog file was not set aside: %v", aside)
	}
}

// garbled is a Cache that answers every key with bytes that decode as
// nothing: what a damaged cache would serve if it served anything.
type garbled struct{}

func (garbled) Get(keys []string) [][]byte {
	out := make([][]byte, len(keys))
	for i := range out {
		out[i] = []byte("{\"format\":2,\"sha256\":\"0000\"}\n")
	}
	return out
}

func (garbled) Put([]string, [][]byte) {}

// TestUndecodableCacheEntriesAreMisses opens tables through a cache whose
// every entry fails to decode: each such entry is a miss and a read from
// the store, never an error blaming the healthy manifest or data file.
func TestUndecodableCacheEntriesAreMisses(t *testing.T) {
	ctx := context.Background()
	croupier := "file://" + filepath.Join(t.TempDir(), "tbl")
	tb, err := table.Create(ctx, croupier, tabletest.Reader(0, 50), table.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tb.Close()
	plain, _ := writeDir(t, 30, 30)
	for _, uri := range []string{croupier, "file://" + plain} {
		tb, err := table.OpenWith(ctx, uri, table.OpenOptions{Catalog: garbled{}})
		if err != nil {
			t.Fatalf("%s: %v", uri, err)
		}
		checkRowsOf(t, tb, []uint64{0, 29})
		tb.Close()
	}
}
