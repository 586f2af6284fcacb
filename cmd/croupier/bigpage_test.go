package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"

	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/internal/bigtest"
	"github.com/croupier-data/croupier/internal/tabletest"
)

// TestCreateFromBigPage creates a table from a Parquet file whose one page
// holds a 100 MB cell, more than arrow-go reads by default: the command
// reads what the file's footer bounds.
func TestCreateFromBigPage(t *testing.T) {
	const size = 100e6
	bigtest.Skip(t, size)
	schema := arrow.NewSchema([]arrow.Field{{Name: "blob", Type: arrow.BinaryTypes.Binary}}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	b.Field(0).(*array.BinaryBuilder).Append(bytes.Repeat([]byte("x"), size))
	b.Field(0).(*array.BinaryBuilder).Append([]byte("y"))
	rec := b.NewRecordBatch()
	defer rec.Release()
	src := filepath.Join(t.TempDir(), "big.parquet")
	if err := os.WriteFile(src, tabletest.EncodeRecord(t, rec, parquet.WithCompression(compress.Codecs.Uncompressed)), 0o644); err != nil {
		t.Fatal(err)
	}
	uri := "file://" + filepath.Join(t.TempDir(), "tbl")
	ok(t, "tables", "create", uri, src)
	tb, err := table.Open(context.Background(), uri)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	if tb.NumRows() != 2 {
		t.Fatalf("%d rows, want 2", tb.NumRows())
	}
}
