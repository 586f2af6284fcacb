package table_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"

	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/internal/bigtest"
	"github.com/croupier-data/croupier/internal/tabletest"
)

// bigSchema is the schema of bigCells: an id and a binary blob.
var bigSchema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "blob", Type: arrow.BinaryTypes.Binary},
}, nil)

// bigCell is the blob of row id: size bytes that differ from row to row.
func bigCell(id int64, size int) []byte {
	return bytes.Repeat([]byte{byte('a' + id)}, size)
}

// bigCells returns three rows whose middle one holds a blob of size bytes;
// the others hold a few bytes.
func bigCells(size int) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, bigSchema)
	defer b.Release()
	for id, n := range []int{3, size, 5} {
		b.Field(0).(*array.Int64Builder).Append(int64(id))
		b.Field(1).(*array.BinaryBuilder).Append(bigCell(int64(id), n))
	}
	return b.NewRecordBatch()
}

// checkBigCells reads the rows of tb by id (the page reader of planned
// sections) and by row group (the page reader of whole chunks), and checks
// their blobs.
func checkBigCells(t *testing.T, tb *table.Table, size int) {
	t.Helper()
	ctx := context.Background()
	r, err := tb.NewReader(table.ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	check := func(how string, rec arrow.RecordBatch, ids []int64) {
		t.Helper()
		defer rec.Release()
		blobs := rec.Column(1).(*array.Binary)
		for i, id := range ids {
			b := blobs.Value(i)
			if want := []int{3, size, 5}[id]; len(b) != want || bytes.Count(b, []byte{byte('a' + id)}) != want {
				t.Errorf("%s: row %d: a blob of %d bytes, want %d", how, id, blobs.ValueLen(i), want)
			}
		}
	}
	rec, err := r.Read(ctx, []uint64{2, 1, 0})
	if err != nil {
		t.Fatalf("read rows: %v", err)
	}
	check("rows", rec, []int64{2, 1, 0})
	rec, err = r.ReadGroup(ctx, 0, 0)
	if err != nil {
		t.Fatalf("read row group: %v", err)
	}
	check("row group", rec, []int64{0, 1, 2})
}

// TestBigCells writes tables with one cell, and so one page, larger than
// arrow-go's default bound on a page (64 MiB stored, 256 MiB decoded), and
// reads them back: a page is bounded by its column chunk, which the footer
// bounds and the file holds, not by a fixed size.
func TestBigCells(t *testing.T) {
	for _, size := range []int{100e6, 250e6} {
		t.Run(fmt.Sprint(size/1e6, "MB"), func(t *testing.T) {
			bigtest.Skip(t, int64(size))
			rec := bigCells(size)
			defer rec.Release()
			rdr, err := array.NewRecordReader(bigSchema, []arrow.RecordBatch{rec})
			if err != nil {
				t.Fatal(err)
			}
			uri := "file://" + filepath.Join(t.TempDir(), "big")
			tb, err := table.Create(context.Background(), uri, rdr, table.WriteOptions{Compression: "none"})
			if err != nil {
				t.Fatal(err)
			}
			defer tb.Close()
			checkBigCells(t, tb, size)
		})
	}
}

// TestBigDictionaryPage reads a file, written as other writers write,
// whose dictionary page holds a 100 MB value: a dictionary is bounded by
// its column chunk.
func TestBigDictionaryPage(t *testing.T) {
	const size = 100e6
	bigtest.Skip(t, size)
	rec := bigCells(size)
	defer rec.Release()
	data := tabletest.EncodeRecord(t, rec, parquet.WithDictionaryDefault(true),
		parquet.WithDictionaryPageSizeLimit(2*size), parquet.WithCompression(0), parquet.WithPageIndexEnabled(true))
	p := filepath.Join(t.TempDir(), "dict.parquet")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	data = nil
	tb := open(t, "file://"+p)
	md, err := tb.Footer(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if chunk, err := md.RowGroup(0).ColumnChunk(1); err != nil || !chunk.HasDictionaryPage() || chunk.DictionaryPageOffset() == 0 {
		t.Fatalf("the blobs are not dictionary-encoded: %v", err)
	}
	checkBigCells(t, tb, size)
}
