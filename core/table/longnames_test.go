package table_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/croupier-data/croupier/core/table"
)

// TestLongColumnNames creates and rewrites tables whose column names are
// long: arrow-go writes part of each column chunk's metadata, which names
// its column, between the chunks, where the page CRC writer expects the
// next chunk's pages; every page gets its CRC all the same.
func TestLongColumnNames(t *testing.T) {
	ctx := context.Background()
	for _, n := range []int{4010, 64 << 10} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			name := strings.Repeat("c", n)
			schema := arrow.NewSchema([]arrow.Field{
				{Name: "id", Type: arrow.PrimitiveTypes.Int64},
				{Name: name, Type: arrow.BinaryTypes.String},
			}, nil)
			b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
			defer b.Release()
			for id := range int64(50) {
				b.Field(0).(*array.Int64Builder).Append(id)
				b.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("value %d %s", id, strings.Repeat("x", 100)))
			}
			rec := b.NewRecordBatch()
			defer rec.Release()
			rdr, err := array.NewRecordReader(schema, []arrow.RecordBatch{rec})
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			tb, err := table.Create(ctx, "file://"+filepath.Join(dir, "a"), rdr, table.WriteOptions{RowGroupRows: 20})
			if err != nil {
				t.Fatalf("create: %v", err)
			}
			defer tb.Close()
			checkCRCs(t, tb, filepath.Join(dir, "a"))
			again, err := table.Rewrite(ctx, tb, "file://"+filepath.Join(dir, "b"), table.RewriteOptions{Columns: []string{name}})
			if err != nil {
				t.Fatalf("rewrite: %v", err)
			}
			defer again.Close()
			r, err := again.NewReader(table.ReaderOptions{})
			if err != nil {
				t.Fatal(err)
			}
			got, err := r.Read(ctx, []uint64{49, 0})
			if err != nil {
				t.Fatal(err)
			}
			defer got.Release()
			if got.ColumnName(0) != name || !strings.HasPrefix(got.Column(0).ValueStr(0), "value 49 ") || !strings.HasPrefix(got.Column(0).ValueStr(1), "value 0 ") {
				t.Errorf("read %d-character column: %v", n, got.Column(0))
			}
		})
	}
}

// checkCRCs checks that every page of every column chunk of tb, a table in
// dir, carries its CRC.
func checkCRCs(t *testing.T, tb *table.Table, dir string) {
	t.Helper()
	for i, f := range tb.Files() {
		b, err := os.ReadFile(filepath.Join(dir, f.Key))
		if err != nil {
			t.Fatal(err)
		}
		md, err := tb.Footer(context.Background(), i)
		if err != nil {
			t.Fatal(err)
		}
		for g := range md.NumRowGroups() {
			for c := range md.RowGroup(g).NumColumns() {
				cc, err := md.RowGroup(g).ColumnChunk(c)
				if err != nil {
					t.Fatal(err)
				}
				n, good, err := table.PageCRCs(b, cc.DataPageOffset(), cc.TotalCompressedSize())
				if err != nil || n == 0 || n != good {
					t.Errorf("%s row group %d column %d: %d pages, %d with their CRC, %v", f.Key, g, c, n, good, err)
				}
			}
		}
	}
}
