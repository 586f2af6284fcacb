package table

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"sort"

	"github.com/apache/thrift/lib/go/thrift"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/internal/seal"
)

// Writing page CRCs.
//
// arrow-go (v18.8.0) writes no page CRC (docs/upstream.md; canary
// TestUpstreamWritesNoPageCRC), so croupier's data files pass
// through a pageCRCWriter on their way to the store, which adds the CRC of
// each page to its header (crc.go checks them on every read). A header with
// a CRC is 2 to 6 bytes longer, so the writer also moves everything that
// names a position or a size in the file: the pages' locations in the
// offset indexes, the offsets and sizes of column chunks and row groups in
// the footer, and the offsets and lengths of the page indexes themselves.
//
// Between column chunks there may be bytes that are no page: arrow-go
// writes each chunk's metadata (the ColumnChunk struct the footer holds)
// after the chunk through a 4 KiB buffer it never flushes, so the part of a
// metadata longer than that buffer (a column named with thousands of
// characters, long statistics) reaches the file, up to its last buffer.
// Readers go by the footer's offsets and never read those bytes. The
// writer forwards pages until it meets bytes that are not a page; from
// there it holds the rest of the file, and adds the CRCs of the pages of
// the chunks it holds once the footer says where they lie.
//
// A failure here is a bug, not the store's, whatever write it ends:
// crcError marks it Internal.
// arrow-go writes a file in two parts: the magic and the pages of each row
// group's column chunks, in file order; then, as the file closes, its page
// indexes (column indexes, then offset indexes) and its footer. The writer
// forwards the pages as they come, one at a time, and keeps the second part,
// a few bytes per page, to rewrite when the file closes. It tells a page from
// the first page index by its header's fields: a page header has the integer
// fields 1 to 3 and one of the page-type structs (5, 7, 8); a column or offset
// index begins with a list. Files are written with page indexes, so the second
// part never begins with the footer.

// Fields of parquet.thrift that the writer reads or moves.
const (
	pageHeaderType               = 1
	pageHeaderUncompressedSize   = 2
	pageLocationOffset           = 1
	pageLocationSize             = 2
	offsetIndexPageLocations     = 1
	fileMetaRowGroups            = 4
	rowGroupColumns              = 1
	rowGroupTotalByteSize        = 2
	rowGroupFileOffset           = 5
	rowGroupTotalCompressedSize  = 6
	columnChunkFileOffset        = 2
	columnChunkMetaData          = 3
	columnChunkOffsetIndexOffset = 4
	columnChunkOffsetIndexLength = 5
	columnChunkColumnIndexOffset = 6
	columnChunkColumnIndexLength = 7
	columnMetaUncompressedSize   = 6
	columnMetaCompressedSize     = 7
	columnMetaDataPageOffset     = 9
	columnMetaIndexPageOffset    = 10
	columnMetaDictPageOffset     = 11
	columnMetaBloomFilterOffset  = 14
)

var parquetMagic = []byte("PAR1")

// crcError is a failure of the page CRC writer.
type crcError struct{ err error }

func (e *crcError) Error() string { return "page CRCs: " + e.err.Error() }
func (e *crcError) Unwrap() error { return e.err }

// crcFailed returns a crcError of a formatted message.
func crcFailed(format string, args ...any) error { return &crcError{fmt.Errorf(format, args...)} }

// writeCode is the code of err, an error of writing a data file, when not
// the page CRC writer's (Internal): code.
func writeCode(err error, code errcode.Code) errcode.Code {
	var ce *crcError
	if errors.As(err, &ce) {
		return errcode.Internal
	}
	return code
}

// pageCRCWriter adds page CRCs to the Parquet file written through it, and
// closes w when the file is complete.
type pageCRCWriter struct {
	w    io.WriteCloser
	pos  int64  // the position, in the file as written to the writer, of buf[0]
	buf  []byte // a page not yet whole, or the second part of the file
	tail bool   // buf holds the second part
	// The pages, in file order: where each began as written to the writer,
	// and the bytes added to the headers of the pages up to it, itself included.
	starts, added []int64
	// footerSHA256 is the seal.Sum of the footer as written, once Close
	// has written it: what a manifest records of the file (File.FooterSHA256).
	footerSHA256 string
	err          error
}

func newPageCRCWriter(w io.WriteCloser) *pageCRCWriter { return &pageCRCWriter{w: w} }

// Write takes the next bytes of the file.
func (c *pageCRCWriter) Write(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	c.buf = append(c.buf, p...)
	if !c.tail {
		c.err = c.forwardPages()
	}
	if c.err != nil {
		return 0, c.err
	}
	return len(p), nil
}

// forwardPages writes out the magic and every whole page at the start of buf.
func (c *pageCRCWriter) forwardPages() error {
	done := 0
	defer func() { c.buf, c.pos = c.buf[:copy(c.buf, c.buf[done:])], c.pos+int64(done) }()
	for {
		b := c.buf[done:]
		if c.pos+int64(done) == 0 {
			if len(b) < len(parquetMagic) {
				return nil
			}
			if !bytes.Equal(b[:len(parquetMagic)], parquetMagic) {
				return crcFailed("the file does not begin with PAR1")
			}
			if _, err := c.w.Write(parquetMagic); err != nil {
				return err
			}
			done += len(parquetMagic)
			continue
		}
		if len(b) == 0 {
			return nil
		}
		h, n, err := decodeStruct(b)
		if errors.Is(err, errShortHeader) {
			return nil
		}
		if err != nil || !isPageHeader(h) {
			c.tail = true // the page indexes begin
			return nil
		}
		size, _ := h.int(pageHeaderCompressedSize)
		if int64(len(b)-n) < size {
			return nil
		}
		page := b[n : n+int(size)]
		header, err := c.withCRC(h, n, page, c.pos+int64(done))
		if err != nil {
			return err
		}
		if _, err := c.w.Write(header); err != nil {
			return err
		}
		if _, err := c.w.Write(page); err != nil {
			return err
		}
		done += n + int(size)
	}
}

// withCRC returns the header h, n bytes as written at off, of page, with
// the page's CRC, and records how much it grew.
func (c *pageCRCWriter) withCRC(h *tStruct, n int, page []byte, off int64) ([]byte, error) {
	h.setInt(pageHeaderCRC, thrift.I32, int64(int32(crc32.ChecksumIEEE(page))))
	header, err := encodeStruct(h)
	if err != nil {
		return nil, crcFailed("page at offset %d: %w", off, err)
	}
	grew := int64(len(header) - n)
	if k := len(c.added); k > 0 {
		grew += c.added[k-1]
	}
	c.starts, c.added = append(c.starts, off), append(c.added, grew)
	return header, nil
}

// isPageHeader tells a page header from the structs that follow the pages.
func isPageHeader(h *tStruct) bool {
	for _, id := range []int16{pageHeaderType, pageHeaderUncompressedSize, pageHeaderCompressedSize} {
		if f := h.field(id); f == nil || f.typ != thrift.I32 {
			return false
		}
	}
	for _, id := range []int16{5, 7, 8} { // data page, dictionary page, data page v2
		if f := h.field(id); f != nil && f.typ == thrift.STRUCT {
			return true
		}
	}
	return false
}

// addedBefore returns the bytes added to the headers of the pages that begin
// before off in the file as written to the writer.
func (c *pageCRCWriter) addedBefore(off int64) int64 {
	i := sort.Search(len(c.starts), func(i int) bool { return c.starts[i] >= off })
	if i == 0 {
		return 0
	}
	return c.added[i-1]
}

// moved returns where off, a position in the file as written to the writer
// at or before the end of the pages, is in the file with CRCs.
func (c *pageCRCWriter) moved(off int64) int64 { return off + c.addedBefore(off) }

// Close rewrites and writes the page indexes and the footer, then closes the
// underlying writer. After an error it leaves the underlying writer open, for
// its owner to discard what it holds.
func (c *pageCRCWriter) Close() error {
	if c.err == nil {
		c.err = c.finish()
	}
	if c.err != nil {
		return c.err
	}
	return c.w.Close()
}

// finish writes the rest of the file, held in buf: pages, if bytes that
// were not a page came before them, then the page indexes and the footer.
func (c *pageCRCWriter) finish() error {
	b := c.buf
	n := len(b)
	if n < 8 || !bytes.Equal(b[n-4:], parquetMagic) {
		return crcFailed("the file does not end with a footer")
	}
	footerLen := int(uint32le(b[n-8 : n-4]))
	if footerLen > n-8 {
		return crcFailed("a footer of %d bytes in the last %d", footerLen, n-8)
	}
	footer, _, err := decodeStruct(b[n-8-footerLen : n-8])
	if err != nil {
		return crcFailed("footer: %w", err)
	}
	held := b[:n-8-footerLen]
	out, used, err := c.heldPages(footer, held)
	if err != nil {
		return err
	}
	indexes, err := c.moveIndexes(footer, held[used:], c.pos+int64(used))
	if err != nil {
		return err
	}
	if err := c.moveChunks(footer); err != nil {
		return err
	}
	meta, err := encodeStruct(footer)
	if err != nil {
		return crcFailed("footer: %w", err)
	}
	c.footerSHA256 = seal.Sum(meta)
	out = append(out, indexes...)
	out = append(out, meta...)
	out = append(out, byte(len(meta)), byte(len(meta)>>8), byte(len(meta)>>16), byte(len(meta)>>24))
	out = append(out, parquetMagic...)
	_, err = c.w.Write(out)
	return err
}

// heldPages returns the column chunks that lie in held, the bytes held from
// c.pos on, with their pages' CRCs and the bytes between them as they are,
// and how many bytes of held they took: none, when held begins with the
// page indexes.
func (c *pageCRCWriter) heldPages(footer *tStruct, held []byte) ([]byte, int, error) {
	var chunks []byteRange
	for _, rg := range footer.structs(fileMetaRowGroups) {
		for _, cc := range rg.structs(rowGroupColumns) {
			md := cc.child(columnChunkMetaData)
			if md == nil {
				continue
			}
			start, size := chunkRange(md)
			switch {
			case start+size <= c.pos:
				continue // forwarded
			case start < c.pos || size < 0 || start+size > c.pos+int64(len(held)):
				return nil, 0, crcFailed("a column chunk at offset %d, %d bytes, neither before offset %d nor in the %d bytes after it",
					start, size, c.pos, len(held))
			}
			chunks = append(chunks, byteRange{start, size})
		}
	}
	slices.SortFunc(chunks, func(a, b byteRange) int { return cmp.Compare(a.off, b.off) })
	var out []byte
	at := c.pos
	for _, ch := range chunks {
		if ch.off < at {
			return nil, 0, crcFailed("column chunks overlap at offset %d", ch.off)
		}
		out = append(out, held[at-c.pos:ch.off-c.pos]...) // anything between, as it is
		for off := ch.off; off < ch.off+ch.n; {
			b := held[off-c.pos : ch.off+ch.n-c.pos]
			h, n, err := decodeStruct(b)
			if err != nil || !isPageHeader(h) {
				return nil, 0, crcFailed("no page header at offset %d, in the column chunk at offset %d", off, ch.off)
			}
			size, _ := h.int(pageHeaderCompressedSize)
			if size < 0 || int64(len(b)-n) < size {
				return nil, 0, crcFailed("a page at offset %d, %d bytes, overruns its column chunk", off, size)
			}
			page := b[n : n+int(size)]
			header, err := c.withCRC(h, n, page, off)
			if err != nil {
				return nil, 0, err
			}
			out = append(append(out, header...), page...)
			off += int64(n) + size
		}
		at = ch.off + ch.n
	}
	return out, int(at - c.pos), nil
}

// writtenIndex is one column or offset index among the structs after the pages.
type writtenIndex struct {
	off, n int64 // where it is in the file as written to the writer
	chunk  *tStruct
	offset bool // an offset index
}

// moveIndexes returns the page indexes in structs (which begins at base, in
// the file as written to the writer, after the pages) with the pages' new
// locations in the offset indexes, and sets their new offsets and lengths
// in footer's column chunks.
func (c *pageCRCWriter) moveIndexes(footer *tStruct, structs []byte, base int64) ([]byte, error) {
	var all []writtenIndex
	for _, rg := range footer.structs(fileMetaRowGroups) {
		for _, cc := range rg.structs(rowGroupColumns) {
			if off, ok := cc.int(columnChunkOffsetIndexOffset); ok {
				n, _ := cc.int(columnChunkOffsetIndexLength)
				all = append(all, writtenIndex{off, n, cc, true})
			}
			if off, ok := cc.int(columnChunkColumnIndexOffset); ok {
				n, _ := cc.int(columnChunkColumnIndexLength)
				all = append(all, writtenIndex{off, n, cc, false})
			}
		}
	}
	slices.SortFunc(all, func(a, b writtenIndex) int { return int(a.off - b.off) })
	out := make([]byte, 0, len(structs)+8*len(c.starts))
	at := base
	for _, x := range all {
		if x.off < at || x.n < 0 || x.off+x.n > base+int64(len(structs)) {
			return nil, crcFailed("a page index at offset %d, %d bytes, outside the page indexes", x.off, x.n)
		}
		out = append(out, structs[at-base:x.off-base]...) // anything between, as it is
		idx := structs[x.off-base : x.off-base+x.n]
		if x.offset {
			var err error
			if idx, err = c.movePages(idx); err != nil {
				return nil, crcFailed("offset index at offset %d: %w", x.off, err)
			}
		}
		offID, lenID := int16(columnChunkColumnIndexOffset), int16(columnChunkColumnIndexLength)
		if x.offset {
			offID, lenID = columnChunkOffsetIndexOffset, columnChunkOffsetIndexLength
		}
		x.chunk.setInt(offID, thrift.I64, c.moved(base)+int64(len(out)))
		x.chunk.setInt(lenID, thrift.I32, int64(len(idx)))
		out = append(out, idx...)
		at = x.off + x.n
	}
	return append(out, structs[at-base:]...), nil
}

// movePages returns the offset index idx with its pages' new locations.
func (c *pageCRCWriter) movePages(idx []byte) ([]byte, error) {
	oi, n, err := decodeStruct(idx)
	if err != nil {
		return nil, err
	}
	if n != len(idx) {
		return nil, fmt.Errorf("%d bytes, its footer says %d", n, len(idx))
	}
	for _, loc := range oi.structs(offsetIndexPageLocations) {
		off, _ := loc.int(pageLocationOffset)
		size, _ := loc.int(pageLocationSize)
		i, found := slices.BinarySearch(c.starts, off)
		if !found {
			return nil, fmt.Errorf("no page begins at offset %d", off)
		}
		grew := c.added[i] - c.addedBefore(off)
		loc.setInt(pageLocationOffset, thrift.I64, c.moved(off))
		loc.setInt(pageLocationSize, thrift.I32, size+grew)
	}
	return encodeStruct(oi)
}

// moveChunks sets the new offsets and sizes of footer's column chunks and
// row groups.
func (c *pageCRCWriter) moveChunks(footer *tStruct) error {
	move := func(s *tStruct, id int16) {
		if off, ok := s.int(id); ok && off > 0 {
			s.setInt(id, thrift.I64, c.moved(off))
		}
	}
	for _, rg := range footer.structs(fileMetaRowGroups) {
		var grew int64
		for _, cc := range rg.structs(rowGroupColumns) {
			move(cc, columnChunkFileOffset)
			md := cc.child(columnChunkMetaData)
			if md == nil {
				continue
			}
			start, size := chunkRange(md)
			g := c.addedBefore(start+size) - c.addedBefore(start)
			grew += g
			md.setInt(columnMetaCompressedSize, thrift.I64, size+g)
			if u, ok := md.int(columnMetaUncompressedSize); ok {
				md.setInt(columnMetaUncompressedSize, thrift.I64, u+g)
			}
			if _, ok := md.int(columnMetaBloomFilterOffset); ok {
				return crcFailed("files with bloom filters are not supported")
			}
			for _, id := range []int16{columnMetaDataPageOffset, columnMetaIndexPageOffset, columnMetaDictPageOffset} {
				move(md, id)
			}
		}
		move(rg, rowGroupFileOffset)
		for _, id := range []int16{rowGroupTotalByteSize, rowGroupTotalCompressedSize} {
			if v, ok := rg.int(id); ok {
				rg.setInt(id, thrift.I64, v+grew)
			}
		}
	}
	return nil
}

// chunkRange returns where the column chunk whose metadata is md begins (its
// dictionary page, or its first data page) and its compressed size.
func chunkRange(md *tStruct) (start, size int64) {
	start, _ = md.int(columnMetaDataPageOffset)
	if dict, ok := md.int(columnMetaDictPageOffset); ok && dict > 0 {
		start = min(start, dict)
	}
	size, _ = md.int(columnMetaCompressedSize)
	return start, size
}
