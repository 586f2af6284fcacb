package table

import (
	"errors"
	"fmt"
	"io"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"

	"github.com/croupier-data/croupier/core/cmem"
	"github.com/croupier-data/croupier/core/errcode"
)

// The pages of a section.
//
// A section of a column chunk that a page plan reads (a dictionary page, a
// run of data pages) is read by a page reader of its own, here. arrow-go's
// page reader of a stream refuses a page larger than fixed bounds (64 MiB
// stored, 256 MiB decoded), which one cell of a training table can pass, and
// has no way to be told otherwise; this one bounds a page by what the file
// says of it: stored, it lies within its section, which lies within its
// column chunk, which lies within the file; decoded, it is no larger than
// its column chunk decoded, as the footer gives it (or arrow-go's 256 MiB,
// where that is more). What a writer wrote, it reads; a header that claims
// more is Corrupt, before anything is allocated for it.

// Fields of parquet.thrift's page headers that sectionPages reads, besides
// pageHeaderType, pageHeaderUncompressedSize and pageHeaderCompressedSize.
const (
	pageHeaderDataV1     = 5
	pageHeaderDictionary = 7
	pageHeaderDataV2     = 8
	pageTypeDataV1       = 0
	pageTypeDictionary   = 2
	pageTypeDataV2       = 3
	pageNumValues        = 1 // of each of the three page headers
	pageEncoding         = 2 // of DataPageHeader and DictionaryPageHeader
	pageV1DefEncoding    = 3
	pageV1RepEncoding    = 4
	pageV2Nulls          = 2
	pageV2Rows           = 3
	pageV2Encoding       = 4
	pageV2DefBytes       = 5
	pageV2RepBytes       = 6
	pageV2Compressed     = 7
)

// decodedBound is the most bytes a page of a column chunk of decoded bytes
// decoded may hold: decoded, as the footer says, but never less than
// arrow-go's own bound, so that no file it reads is refused for a footer
// that understates its chunks.
func decodedBound(decoded int64) int64 { return max(decoded, parquet.DefaultMaxUncompressedPageSize) }

// A page of a cell of tens of megabytes is held twice while it is decoded,
// stored and decompressed; from Go's heap, and kept in scratch's pools once
// freed, those buffers stayed resident until two collections later, beside
// the next large page's. Buffers of hugePage bytes or more are mapped
// instead (hugePages), and unmapped as soon as they are freed, which
// sectionPages does with a page's stored bytes once they are decompressed.
const hugePage = 8 << 20

var hugePages = cmem.New()

// growPage returns b resized to n bytes, trading it for a larger buffer
// when it is too small; its bytes are not kept (see growScratch).
func growPage(b []byte, n int) []byte {
	if n <= cap(b) {
		return b[:n]
	}
	freePage(b)
	if n >= hugePage {
		return hugePages.AllocateUnzeroed(n)
	}
	return scratch{}.Allocate(n)
}

// freePage frees a buffer of growPage.
func freePage(b []byte) {
	if hugePages.Mapped(b) {
		hugePages.Free(b)
		return
	}
	scratch{}.Free(b)
}

// pageStream is what sectionPages reads a section from: a memStream, or
// one of arrow-go's buffered streams over the file.
type pageStream interface {
	io.Reader
	Peek(n int) ([]byte, error)
	Discard(n int) (int, error)
}

// sectionPages yields the pages of a section of a column chunk, which holds
// whole pages, one at a time. A page's buffer is valid until the next call
// to Next: decoding copies what it keeps.
type sectionPages struct {
	r       pageStream
	at      byteRange // the section
	left    int64     // bytes of the section not read yet
	codec   compress.Codec
	none    bool  // the chunk is stored uncompressed
	decoded int64 // the column chunk's bytes decoded: no page holds more
	limit   int64 // a page that decodes to more is a PageTooLarge of column; 0: no bound
	column  string
	stored  []byte
	page    []byte // scratch, for the stored and decoded bytes of a page
	cur     file.Page
	last    byteRange // where the current page lies, header and all
	err     error
}

// newSectionPages returns a reader of the pages of chunk in section at, which r
// reads.
func newSectionPages(r pageStream, at byteRange, chunk *metadata.ColumnChunkMetaData) (*sectionPages, error) {
	codec, err := compress.GetCodec(chunk.Compression())
	if err != nil {
		return nil, err
	}
	return &sectionPages{r: r, at: at, left: at.n, codec: codec, none: chunk.Compression() == compress.Codecs.Uncompressed,
		decoded: decodedBound(chunk.TotalUncompressedSize())}, nil
}

// Next reads the next page, skipping pages other than dictionary and data
// pages; it is false at the section's end or on an error (see Err).
func (s *sectionPages) Next() bool {
	s.cur = nil
	for s.err == nil && s.left > 0 && s.cur == nil {
		at := s.at.off + s.at.n - s.left
		if s.cur, s.err = s.next(); s.cur != nil {
			s.last = byteRange{at, s.at.off + s.at.n - s.left - at}
		}
	}
	return s.cur != nil
}

func (s *sectionPages) Page() file.Page { return s.cur }

func (s *sectionPages) Err() error { return s.err }

// Close frees the reader's buffers.
func (s *sectionPages) Close() {
	if rs, ok := s.r.(*readerStream); ok {
		rs.Close()
	}
	freePage(s.stored)
	freePage(s.page)
	s.stored, s.page, s.cur = nil, nil, nil
}

// take hands the buffer of the current page's bytes over to the caller, who
// frees it with freePage, and returns it; nil where the page's bytes lie in
// a section in memory, which the reader does not own.
func (s *sectionPages) take() []byte {
	if s.cur == nil {
		return nil
	}
	data := s.cur.Data()
	for _, b := range []*[]byte{&s.page, &s.stored} {
		if len(data) > 0 && len(*b) > 0 && &data[0] == &(*b)[0] {
			out := *b
			*b = nil
			return out
		}
	}
	return nil
}

// next reads one page: nil for a page of a type it skips.
func (s *sectionPages) next() (file.Page, error) {
	h, err := s.header()
	if err != nil {
		return nil, err
	}
	typ, _ := h.int(pageHeaderType)
	stored, _ := h.int(pageHeaderCompressedSize)
	size, _ := h.int(pageHeaderUncompressedSize)
	if stored < 0 || stored > s.left {
		return nil, fmt.Errorf("a page header says %d bytes stored, where its section has %d left", stored, s.left)
	}
	if size < 0 || size > s.decoded {
		return nil, fmt.Errorf("a page header says %d bytes decoded (%d stored), more than its column chunk's %d", size, stored, s.decoded)
	}
	if s.limit > 0 && size > s.limit {
		return nil, errcode.Wrap(&PageTooLarge{Column: s.column, Bytes: size, Limit: s.limit}, errcode.InvalidArgument, "", "")
	}
	if s.none && size != stored {
		return nil, fmt.Errorf("a page header of an uncompressed column chunk says %d bytes decoded and %d stored", size, stored)
	}
	body, err := s.body(int(stored))
	if err != nil {
		return nil, err
	}
	s.left -= stored
	var sub *tStruct
	switch typ {
	case pageTypeDictionary:
		sub = h.child(pageHeaderDictionary)
	case pageTypeDataV1:
		sub = h.child(pageHeaderDataV1)
	case pageTypeDataV2:
		sub = h.child(pageHeaderDataV2)
	default:
		return nil, nil // an index page, or one of a type yet unknown
	}
	if sub == nil {
		return nil, fmt.Errorf("a page of type %d without its header of that type", typ)
	}
	values, _ := sub.int(pageNumValues)
	if values < 0 {
		return nil, fmt.Errorf("a page of %d values", values)
	}
	switch typ {
	case pageTypeDictionary:
		enc, _ := sub.int(pageEncoding)
		data, err := s.decode(body, 0, int(size), true)
		if err != nil {
			return nil, err
		}
		return file.NewDictionaryPage(memory.NewBufferBytes(data), int32(values), parquet.Encoding(enc)), nil
	case pageTypeDataV1:
		enc, _ := sub.int(pageEncoding)
		def, _ := sub.int(pageV1DefEncoding)
		rep, _ := sub.int(pageV1RepEncoding)
		data, err := s.decode(body, 0, int(size), true)
		if err != nil {
			return nil, err
		}
		return file.NewDataPageV1(memory.NewBufferBytes(data), int32(values), parquet.Encoding(enc),
			parquet.Encoding(def), parquet.Encoding(rep), int32(size)), nil
	}
	enc, _ := sub.int(pageV2Encoding)
	nulls, _ := sub.int(pageV2Nulls)
	rows, _ := sub.int(pageV2Rows)
	def, _ := sub.int(pageV2DefBytes)
	rep, _ := sub.int(pageV2RepBytes)
	compressed := true // the field's default
	if f := sub.field(pageV2Compressed); f != nil {
		compressed, _ = f.val.(bool)
	}
	if def < 0 || rep < 0 || def+rep > min(stored, size) {
		return nil, fmt.Errorf("page levels of %d bytes in a page of %d", def+rep, min(stored, size))
	}
	data, err := s.decode(body, int(def+rep), int(size), compressed)
	if err != nil {
		return nil, err
	}
	return file.NewDataPageV2(memory.NewBufferBytes(data), int32(values), int32(nulls), int32(rows),
		parquet.Encoding(enc), int32(def), int32(rep), int32(size), compressed), nil
}

// header reads the page header at the reader's position and moves past it.
func (s *sectionPages) header() (*tStruct, error) {
	for n := min(s.left, firstHeaderBytes); ; n = min(s.left, 4*n) {
		b, err := s.r.Peek(int(n))
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		h, size, err := decodeStruct(b)
		if errors.Is(err, errShortHeader) && int64(len(b)) == n && n < s.left {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("page header: %w", err)
		}
		if _, err := s.r.Discard(size); err != nil {
			return nil, err
		}
		s.left -= int64(size)
		return h, nil
	}
}

// body reads the n bytes of a page as stored: where they lie, when the
// section is in memory or the page is compressed and streamed.
func (s *sectionPages) body(n int) ([]byte, error) {
	_, inMemory := s.r.(*memStream)
	rs, streamed := s.r.(*readerStream)
	// A streamed page no larger than the stream's window is decompressed
	// into s.page before the stream moves on. (The bytes of an uncompressed
	// chunk's pages are the pages', and a dictionary's outlive the next
	// page: those are copied out, as larger pages are read, into pages
	// mapped off Go's heap.)
	if inMemory || streamed && !s.none && n <= rs.window {
		b, err := s.r.Peek(n)
		if err == nil {
			_, err = s.r.Discard(n)
		}
		if err != nil {
			return nil, fmt.Errorf("a page of %d bytes cut short: %w", n, err)
		}
		return b, nil
	}
	s.stored = growPage(s.stored, n)
	if _, err := io.ReadFull(s.r, s.stored); err != nil {
		return nil, fmt.Errorf("a page of %d bytes cut short: %w", n, err)
	}
	return s.stored, nil
}

// decode returns body, a page's bytes as stored, decoded into size bytes:
// its first plain bytes are stored as they are (a version 2 page's levels),
// the rest compressed with the chunk's codec, if compressed. A page stored
// as it is is not copied.
func (s *sectionPages) decode(body []byte, plain, size int, compressed bool) ([]byte, error) {
	if s.none || !compressed {
		if len(body) != size {
			return nil, fmt.Errorf("a page of %d bytes decoded stores %d", size, len(body))
		}
		return body, nil
	}
	s.page = growPage(s.page, size)
	copy(s.page, body[:plain])
	out, err := compress.Decode(s.codec, s.page[plain:], body[plain:])
	if err != nil {
		return nil, fmt.Errorf("decompress a page: %w", err)
	}
	if plain+len(out) != size {
		return nil, fmt.Errorf("a page of %d bytes decoded holds %d", size, plain+len(out))
	}
	if len(out) > 0 && &out[0] != &s.page[plain] {
		copy(s.page[plain:], out)
	}
	if hugePages.Mapped(s.stored) { // not needed any more: given back now
		freePage(s.stored)
		s.stored = nil
	}
	return s.page, nil
}
