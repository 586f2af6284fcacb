package table

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/thrift/lib/go/thrift"

	"github.com/croupier-data/croupier/internal/seedtest"
)

// TestPageCRCsStreamed reads column chunks of files with and without page
// CRCs, a seeded bit flipped in most, in reads of random sizes that
// sometimes skip ahead, and checks pageCRCs against checkPageCRCs reading
// each chunk whole: the same verdict, the same CRC mismatch, and the read
// that fails is the one bringing the last byte of the first page that does
// not match, so that the pages a stream delivers are those that match.
func TestPageCRCsStreamed(t *testing.T) {
	rng := rand.New(rand.NewPCG(seedtest.Seed(t), 0))
	for _, name := range []string{"testdata/crc/pages-crc.parquet", "testdata/crc/pages-nocrc.parquet"} {
		orig, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		pf, err := file.NewParquetReader(bytes.NewReader(orig))
		if err != nil {
			t.Fatal(err)
		}
		md := pf.MetaData()
		var chunks []byteRange
		for g := range md.NumRowGroups() {
			leaves := make([]int, md.Schema.NumColumns())
			for i := range leaves {
				leaves[i] = i
			}
			more, err := leafChunks(md, g, leaves)
			if err != nil {
				t.Fatal(err)
			}
			chunks = append(chunks, more...)
		}
		pf.Close()
		mismatches := 0
		for iter := range 1500 {
			s := chunks[rng.IntN(len(chunks))]
			b := slices.Clone(orig)
			if rng.IntN(4) > 0 {
				b[s.off+rng.Int64N(s.n)] ^= 1 << rng.IntN(8)
			}
			src := bytes.NewReader(b)
			want := checkPageCRCs(src, s)
			c := newPageCRCs(s)
			pos, end, skipped := s.off, s.off+s.n, false
			var got error
			var failed byteRange
			for pos < end && got == nil {
				if rng.IntN(40) == 0 {
					pos += rng.Int64N(end - pos) // a read that skips bytes
					skipped = true
				}
				p := make([]byte, min(1+rng.Int64N(2000), end-pos))
				src.ReadAt(p, pos)
				if got = c.read(src, p, pos); got == nil {
					pos += int64(len(p))
				}
				failed = byteRange{pos, int64(len(p))}
			}
			if (got == nil) != (want == nil) {
				t.Fatalf("%s iter %d, chunk at %d: streamed %v, whole %v", name, iter, s.off, got, want)
			}
			if got == nil || !strings.Contains(want.Error(), ": CRC ") || skipped { // a mismatch, not a CRC missing
				continue
			}
			mismatches++
			if got.Error() != want.Error() {
				t.Fatalf("%s iter %d: streamed %v, whole %v", name, iter, got, want)
			}
			var at int64
			if _, err := fmt.Sscanf(want.Error(), "page at offset %d:", &at); err != nil {
				t.Fatalf("%q: %v", want, err)
			}
			h, err := readPageHeader(b[at:])
			if err != nil {
				t.Fatal(err)
			}
			if last := at + int64(h.headerLen) + h.size - 1; last < failed.off || last >= failed.off+failed.n {
				t.Fatalf("%s iter %d: the page at %d ends at byte %d, the read that failed was [%d, %d)", name, iter, at, last, failed.off, failed.off+failed.n)
			}
		}
		t.Logf("%s: %d CRC mismatches found where they end", name, mismatches)
		if strings.Contains(name, "-crc") && mismatches == 0 {
			t.Fatalf("%s: no CRC mismatch", name)
		}
	}
}

// FuzzPageCRCs feeds pageCRCs any bytes, in reads of any sizes: it returns
// an error or nil, never panics, and agrees with checkPageCRCs when the
// reads are in order.
func FuzzPageCRCs(f *testing.F) {
	orig, err := os.ReadFile("testdata/crc/pages-crc.parquet")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(orig[4:2000], uint64(1))
	f.Add([]byte{0x15, 0x00, 0x15, 0x10, 0x15, 0x10, 0x1c}, uint64(7))
	f.Fuzz(func(t *testing.T, b []byte, seed uint64) {
		s := byteRange{0, int64(len(b))}
		src := bytes.NewReader(b)
		want := checkPageCRCs(src, s)
		rng := rand.New(rand.NewPCG(seed, 0))
		c := newPageCRCs(s)
		var got error
		for pos := int64(0); pos < s.n && got == nil; {
			n := min(1+rng.Int64N(64), s.n-pos)
			got = c.read(src, b[pos:pos+n], pos)
			pos += n
		}
		if (got == nil) != (want == nil) {
			t.Fatalf("streamed %v, whole %v", got, want)
		}
	})
}

// TestLongHeaderReadInParts parses a page header whose statistics hold a
// 4 KiB value (pyarrow writes a page's min and max of a binary column up to
// 4 KiB) from a prefix of it: cut short, never a corrupt header, and whole
// once the bytes are there, as readPageHeader and decodeStruct both read it.
func TestLongHeaderReadInParts(t *testing.T) {
	stats := &tStruct{fields: []tField{{id: 5, typ: thrift.STRING, val: bytes.Repeat([]byte{7}, 4096)}}}
	v1 := &tStruct{fields: []tField{{id: pageNumValues, typ: thrift.I32, val: int64(16)}, {id: 5, typ: thrift.STRUCT, val: stats}}}
	h := &tStruct{}
	h.setInt(pageHeaderType, thrift.I32, pageTypeDataV1)
	h.setInt(2, thrift.I32, 100)
	h.setInt(pageHeaderCompressedSize, thrift.I32, 100)
	h.fields = append(h.fields, tField{id: pageHeaderDataV1, typ: thrift.STRUCT, val: v1})
	b, err := encodeStruct(h)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{10, firstHeaderBytes, 4096, len(b) - 1} {
		if _, err := readPageHeader(b[:n]); !errors.Is(err, errShortHeader) {
			t.Errorf("readPageHeader of %d of the header's %d bytes: %v, want it cut short", n, len(b), err)
		}
		if _, _, err := decodeStruct(b[:n]); !errors.Is(err, errShortHeader) {
			t.Errorf("decodeStruct of %d of the header's %d bytes: %v, want it cut short", n, len(b), err)
		}
	}
	page := append(slices.Clone(b), make([]byte, 100)...)
	got, err := readPageHeader(page)
	if err != nil || got.size != 100 || got.headerLen != len(b) {
		t.Errorf("readPageHeader of the whole header: %+v, %v", got, err)
	}
	if s, n, err := decodeStruct(page); err != nil || n != len(b) || s.child(pageHeaderDataV1) == nil {
		t.Errorf("decodeStruct of the whole header: %d bytes, %v", n, err)
	}
}
