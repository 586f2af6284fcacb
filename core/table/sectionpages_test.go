package table

import (
	"bytes"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/thrift/lib/go/thrift"

	"github.com/croupier-data/croupier/internal/tabletest"
)

// TestSectionPagesBoundPages reads a column chunk's pages with their first
// header edited to claim more than the file holds: more bytes stored than
// its section, or more decoded than its column chunk (and arrow-go's 256
// MiB). Each is refused, before anything is allocated for it; the chunk as
// written reads whole.
func TestSectionPagesBoundPages(t *testing.T) {
	b := tabletest.Encode(t, 0, 3000, 3000)
	pf, err := file.NewParquetReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	chunk, err := pf.MetaData().RowGroup(0).ColumnChunk(3) // text: a string per row
	if err != nil {
		t.Fatal(err)
	}
	off, n := chunk.DataPageOffset(), chunk.TotalCompressedSize()
	if d := dictionaryOffset(chunk); d >= 0 {
		off = d
	}
	section := b[off : off+n]
	read := func(section []byte) (pages int, err error) {
		r, err := newSectionPages(&memStream{b: section}, int64(len(section)), chunk)
		if err != nil {
			return 0, err
		}
		defer r.Close()
		for r.Next() {
			pages++
		}
		return pages, r.Err()
	}
	if pages, err := read(section); err != nil || pages < 2 {
		t.Fatalf("the chunk as written: %d pages, %v", pages, err)
	}
	h, hn, err := decodeStruct(section)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		field int16
		value int64
		want  string
	}{
		{pageHeaderCompressedSize, 1<<31 - 1, "2147483647 bytes stored, where its section has"},
		{pageHeaderCompressedSize, -1, "-1 bytes stored"},
		{pageHeaderUncompressedSize, 1<<31 - 1, "2147483647 bytes decoded"},
		{pageHeaderUncompressedSize, -1, "-1 bytes decoded"},
	} {
		edited := *h
		edited.fields = slices.Clone(h.fields)
		edited.setInt(tc.field, thrift.I32, tc.value)
		header, err := encodeStruct(&edited)
		if err != nil {
			t.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err = read(append(header, section[hn:]...))
		runtime.ReadMemStats(&after)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("field %d = %d: %v, want an error with %q", tc.field, tc.value, err, tc.want)
		}
		if a := after.TotalAlloc - before.TotalAlloc; a > 1<<20 {
			t.Errorf("field %d = %d: %d bytes allocated", tc.field, tc.value, a)
		}
	}
}
