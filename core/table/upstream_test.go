package table

import (
	"bytes"
	"context"
	"io"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// Canaries of the arrow-go behaviour core/table works around (listed in
// docs/upstream.md): each passes while arrow-go still behaves as the
// workaround assumes, and fails saying what to remove once it does not.

// nopCloser is a buffer the CRC writer can close.
type nopCloser struct{ *bytes.Buffer }

func (nopCloser) Close() error { return nil }

// plainFile returns a Parquet file of one uncompressed, plainly encoded
// int64 column holding 0 to 999, written by arrow-go with its defaults but
// those, through the CRC writer when crcs is true, and the offset of its
// first data page.
func plainFile(t *testing.T, crcs bool) ([]byte, int64) {
	t.Helper()
	schema := arrow.NewSchema([]arrow.Field{{Name: "v", Type: arrow.PrimitiveTypes.Int64}}, nil)
	b := array.NewInt64Builder(memory.DefaultAllocator)
	defer b.Release()
	for i := range int64(1000) {
		b.Append(i)
	}
	col := b.NewArray()
	defer col.Release()
	rec := array.NewRecordBatch(schema, []arrow.Array{col}, 1000)
	defer rec.Release()
	var buf bytes.Buffer
	var w io.Writer = &buf
	var c io.Closer
	if crcs {
		cw := newPageCRCWriter(nopCloser{&buf})
		w, c = cw, cw
	}
	props := parquet.NewWriterProperties(parquet.WithCompression(compress.Codecs.Uncompressed), parquet.WithDictionaryDefault(false))
	fw, err := pqarrow.NewFileWriter(schema, w, props, pqarrow.DefaultWriterProps())
	if err != nil {
		t.Fatal(err)
	}
	if err := fw.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := fw.Close(); err != nil {
		t.Fatal(err)
	}
	if c != nil {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	r, err := file.NewParquetReader(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	chunk, err := r.MetaData().RowGroup(0).ColumnChunk(0)
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), chunk.DataPageOffset()
}

func TestUpstreamWritesNoPageCRC(t *testing.T) {
	data, off := plainFile(t, false)
	h, err := readPageHeader(data[off:])
	if err != nil {
		t.Fatal(err)
	}
	if h.hasCRC {
		t.Fatal("fixed upstream: arrow-go writes page CRCs; the CRC writer (crcwrite.go) may go once they are the CRC-32 crc.go checks")
	}
}

func TestUpstreamChecksNoPageCRC(t *testing.T) {
	data, off := plainFile(t, true)
	h, err := readPageHeader(data[off:])
	if err != nil || !h.hasCRC {
		t.Fatalf("the CRC writer wrote no CRC: %+v, %v", h, err)
	}
	// The first value, 0, becomes 1: the page no longer matches its CRC.
	data[off+int64(h.headerLen)] ^= 1
	r, err := file.NewParquetReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	fr, err := pqarrow.NewFileReader(r, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := fr.ReadTable(context.Background())
	if err != nil {
		t.Fatalf("fixed upstream: arrow-go refuses a page that fails its CRC (%v); crc.go's own check may go", err)
	}
	defer tbl.Release()
	if v := tbl.Column(0).Data().Chunk(0).(*array.Int64).Value(0); v != 1 {
		t.Fatalf("the damaged page read %d first; want 1, the damaged value", v)
	}
}
