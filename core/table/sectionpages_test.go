package table

import (
	"bytes"
	"io"
	"math/rand/v2"
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
		r, err := newSectionPages(&memStream{b: section}, byteRange{off, int64(len(section))}, chunk)
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

// TestReaderStreamReadsAsMemory applies random runs of Peek, Discard and
// Read to a section streamed from a store (readerStream, with windows far
// smaller than the section, and peeks larger than a window) and to the same
// bytes in memory (memStream): each answers the same bytes, and each reaches
// the section's end at the same call, whatever the offset of the section in
// its object. Its buffer goes back to the list once closed.
func TestReaderStreamReadsAsMemory(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	object := make([]byte, 1<<16)
	for i := range object {
		object[i] = byte(rng.Uint32())
	}
	for trial := range 200 {
		off := rng.Int64N(1 << 10)
		n := rng.Int64N(int64(len(object))-off) + 1
		window := rng.Int64N(512) + 1
		var bufs bufferList
		bufs.max = 1
		rs := newReaderStream(bytes.NewReader(object), byteRange{off, n}, window, &bufs)
		ms := &memStream{b: object[off : off+n]}
		for step := 0; ; step++ {
			k := rng.IntN(int(2*window)) + rng.IntN(2)*rng.IntN(4096)
			var got, want []byte
			var gotErr, wantErr error
			switch rng.IntN(3) {
			case 0:
				got, gotErr = rs.Peek(k)
				want, wantErr = ms.Peek(k)
			case 1:
				var g, w int
				g, gotErr = rs.Discard(k)
				w, wantErr = ms.Discard(k)
				got, want = []byte{byte(g), byte(g >> 8)}, []byte{byte(w), byte(w >> 8)}
			default:
				gb, wb := make([]byte, k), make([]byte, k)
				g, ge := io.ReadFull(rs, gb)
				w, we := io.ReadFull(ms, wb)
				got, want, gotErr, wantErr = gb[:g], wb[:w], ge, we
			}
			if !bytes.Equal(got, want) || (gotErr == nil) != (wantErr == nil) {
				t.Fatalf("trial %d (section [%d, +%d), window %d), call %d of %d bytes: got %d bytes, %v; in memory %d bytes, %v",
					trial, off, n, window, step, k, len(got), gotErr, len(want), wantErr)
			}
			if len(ms.b) == 0 {
				break
			}
		}
		had := rs.buf != nil
		rs.Close()
		if had && len(bufs.free) != 1 || rs.buf != nil {
			t.Fatalf("trial %d: the stream's buffer was not given back", trial)
		}
	}
}
