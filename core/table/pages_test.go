package table

import (
	"bytes"
	"encoding/binary"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/parquet/metadata"

	"github.com/croupier-data/croupier/internal/tabletest"
)

// offsetIndex encodes an offset index of pages at the given first rows,
// 100 bytes each from offset 4.
func offsetIndex(t *testing.T, first ...int64) []byte {
	t.Helper()
	b := &metadata.OffsetIndexBuilder{}
	for i, f := range first {
		if err := b.AddPage(4+100*int64(i), f, 100); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Finish(0); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := b.WriteTo(&buf, nil); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestOffsetIndexChecked: an offset index that does not describe pages of
// the row group in order, or does not decode, is an error that says so.
func TestOffsetIndexChecked(t *testing.T) {
	for _, c := range []struct {
		name  string
		index []byte
		want  string
	}{
		{"garbage", []byte{0xff, 0x13, 0x00, 0x42}, "offset index"},
		{"first page not at row 0", offsetIndex(t, 5, 10), "page 0 starts at row 5"},
		{"rows going back", offsetIndex(t, 0, 50, 40), "page 2 starts at row 40"},
		{"past the row group", offsetIndex(t, 0, 100), "page 1 starts at row 100"},
	} {
		if _, err := parseOffsetIndex(c.index, 100, 1<<20); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
	}
	if _, err := parseOffsetIndex(offsetIndex(t, 0, 10), 100, 150); err == nil || !strings.Contains(err.Error(), "out of place") {
		t.Errorf("a page past the end of the file: %v", err)
	}
	locs, err := parseOffsetIndex(offsetIndex(t, 0, 10, 40), 100, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(locs.first, []int64{0, 10, 40, 100}) {
		t.Fatalf("first rows %v", locs.first)
	}
}

// TestPlanPages: a plan holds the pages of the rows asked for, maps each row
// to its place among those pages' rows, and is nil when every page is needed;
// rows past the located pages of a chunk located in part are read from
// where its located pages end.
func TestPlanPages(t *testing.T) {
	locs := &pageLocs{first: []int64{0, 10, 40, 45, 100}, off: []int64{4, 104, 204, 304}, size: []int64{100, 100, 100, 100}}
	p := planPages(locs, []int64{3, 7, 41, 44, 99})
	if p == nil || !slices.Equal(p.pages, []int{0, 2, 3}) || p.rows != 10+5+55 {
		t.Fatalf("plan %+v", p)
	}
	for row, want := range map[int64]int64{3: 3, 7: 7, 41: 11, 44: 14, 45: 15, 99: 69} {
		if got := p.row(row); got != want {
			t.Errorf("row %d at %d, want %d", row, got, want)
		}
	}
	if got := p.sections(0); !slices.Equal(got, []byteRange{{0, 4}, {4, 100}, {204, 200}}) { // the dictionary page, then runs of pages
		t.Errorf("sections %v", got)
	}
	if planPages(locs, []int64{0, 10, 40, 45}) != nil {
		t.Error("a plan of every page")
	}
	// Pages located up to row 40, the rest not yet: rows from 40 on are
	// read from there, after the located pages the plan takes.
	part := &pageLocs{first: []int64{0, 10, 40}, off: []int64{4, 104}, size: []int64{100, 100}, rest: byteRange{204, 300}}
	p = planPages(part, []int64{3, 41, 50})
	if p == nil || !p.tail || !slices.Equal(p.pages, []int{0}) || p.rows != 10 {
		t.Fatalf("plan with a tail %+v", p)
	}
	for row, want := range map[int64]int64{3: 3, 41: 11, 50: 20} {
		if got := p.row(row); got != want {
			t.Errorf("row %d at %d, want %d", row, got, want)
		}
	}
	if got := p.sections(0); !slices.Equal(got, []byteRange{{0, 4}, {4, 100}, {204, 300}}) {
		t.Errorf("sections with a tail %v", got)
	}
	if got := planPages(part, []int64{11, 45}).sections(-1); !slices.Equal(got, []byteRange{{104, 400}}) {
		t.Errorf("a page and the tail after it: sections %v, want one", got)
	}
	if p := planPages(part, []int64{3, 12}); p == nil || p.tail || len(p.pages) != 2 {
		t.Errorf("every located page of a chunk located in part: plan %+v, want those pages", p)
	}
}

// TestIndexTailsKeepWhatTheFooterReadBrought: the offset indexes within the
// bytes a footer's read fetched are held, byte for byte, up to tailsBytes in
// all, the oldest dropped first; those the read did not fetch are not.
func TestIndexTailsKeepWhatTheFooterReadBrought(t *testing.T) {
	b := tabletest.Encode(t, 0, 2000, 500)
	flen := int64(binary.LittleEndian.Uint32(b[len(b)-8:]))
	md, err := parseFooter(b[int64(len(b))-8-flen:len(b)-8], "test")
	if err != nil {
		t.Fatal(err)
	}
	var start, end int64 = -1, 0
	for g := range md.NumRowGroups() {
		for leaf := range md.Schema.NumColumns() {
			col, err := md.RowGroup(g).ColumnChunk(leaf)
			if err != nil {
				t.Fatal(err)
			}
			loc := col.GetOffsetIndexLocation()
			if start < 0 || loc.Offset < start {
				start = loc.Offset
			}
			end = max(end, loc.Offset+int64(loc.Length))
		}
	}
	var it indexTails
	// A tail that starts within the indexes holds none.
	it.keep(0, md, tailBytes{start + 1, b[start+1:]})
	if buf := make([]byte, 1); it.read(0, buf, end-1) {
		t.Fatal("held the indexes of a tail that does not hold them all")
	}
	files := int(tailsBytes/(end-start)) + 5
	for f := range files {
		it.keep(f, md, tailBytes{start - 10, b[start-10:]})
	}
	if it.bytes > tailsBytes || it.bytes < tailsBytes-int(end-start) {
		t.Errorf("held %d bytes, want at most %d and more than %d", it.bytes, tailsBytes, tailsBytes-(end-start))
	}
	buf := make([]byte, end-start)
	if it.read(0, buf, start) {
		t.Error("the oldest file's indexes are still held")
	}
	if !it.read(files-1, buf, start) || !bytes.Equal(buf, b[start:end]) {
		t.Error("the newest file's indexes are not held as the file has them")
	}
	if it.read(files-1, buf, start-1) {
		t.Error("read bytes before the indexes")
	}
}

// TestPageLocsEncoding: locations cached round-trip; an entry that does not
// fit its chunk, or is damaged, does not decode.
func TestPageLocsEncoding(t *testing.T) {
	locs := &pageLocs{first: []int64{0, 10, 40, 100}, off: []int64{104, 204, 310}, size: []int64{100, 100, 90}}
	b := locs.encode()
	got, err := decodePageLocs(b, 100, byteRange{100, 300})
	if err != nil || !slices.Equal(got.first, locs.first) || !slices.Equal(got.off, locs.off) || !slices.Equal(got.size, locs.size) || got.partial() {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	for name, c := range map[string]struct {
		rows  int64
		chunk byteRange
	}{
		"other row count":        {99, byteRange{100, 300}},
		"pages before the chunk": {100, byteRange{105, 300}},
		"pages past the chunk":   {100, byteRange{100, 299}},
	} {
		if _, err := decodePageLocs(b, c.rows, c.chunk); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
	for i := range b {
		bad := slices.Clone(b)
		bad[i] ^= 0x10
		if _, err := decodePageLocs(bad, 100, byteRange{100, 300}); err == nil {
			t.Errorf("byte %d damaged: decoded", i)
		}
	}
	if _, err := decodePageLocs(b[:len(b)-1], 100, byteRange{100, 300}); err == nil {
		t.Error("cut short: decoded")
	}
}
