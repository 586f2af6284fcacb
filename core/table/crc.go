package table

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sync"

	"github.com/apache/thrift/lib/go/thrift"
)

// Page CRCs.
//
// A Parquet page header may carry the CRC-32 (IEEE, as zlib's) of the page's
// bytes as stored, after the header: pyarrow writes it with
// write_page_checksum=True, parquet-java with page.write-checksum.enabled,
// croupier in its own data files (crcwrite.go). arrow-go (v18.8.0) neither
// writes nor checks it (docs/upstream.md; canary
// TestUpstreamChecksNoPageCRC), so croupier checks it
// itself, on the bytes it fetched, before any decoder reads them: every
// section a read fetches (a column chunk, a dictionary page, a run of data
// pages) begins at a page header and holds whole pages. A chunk whose first
// page has no CRC is taken for a writer that writes none and is not walked
// further, so files without CRCs cost one header's parse per chunk.
//
// Page headers are Thrift compact structs; they are read with the Apache
// Thrift library arrow-go itself uses, keeping only the fields needed here.

// Fields of parquet.thrift's PageHeader that checkPageCRCs reads.
const (
	pageHeaderCompressedSize = 3
	pageHeaderCRC            = 4
)

// pageHeader is what checkPageCRCs needs of one page header.
type pageHeader struct {
	headerLen int   // bytes of the header itself
	size      int64 // bytes of the page after the header
	crc       uint32
	hasCRC    bool
}

// errShortHeader means that b ended inside a page header.
var errShortHeader = errors.New("page header cut short")

// readPageHeader parses the page header at the start of b.
func readPageHeader(b []byte) (pageHeader, error) {
	ctx := context.Background()
	buf := &thrift.TMemoryBuffer{Buffer: bytes.NewBuffer(b)}
	p := thrift.NewTCompactProtocolConf(buf, &thrift.TConfiguration{MaxMessageSize: int32(min(len(b), 1<<30))})
	var h pageHeader
	fail := func(err error) (pageHeader, error) {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return h, errShortHeader
		}
		var te thrift.TTransportException
		if errors.As(err, &te) && te.TypeId() == thrift.END_OF_FILE || beyond(err, b) {
			return h, errShortHeader
		}
		return h, fmt.Errorf("page header: %w", err)
	}
	if _, err := p.ReadStructBegin(ctx); err != nil {
		return fail(err)
	}
	seenSize := false
	for {
		_, typ, id, err := p.ReadFieldBegin(ctx)
		if err != nil {
			return fail(err)
		}
		if typ == thrift.STOP {
			break
		}
		switch {
		case id == pageHeaderCompressedSize && typ == thrift.I32:
			v, err := p.ReadI32(ctx)
			if err != nil {
				return fail(err)
			}
			h.size, seenSize = int64(v), true
		case id == pageHeaderCRC && typ == thrift.I32:
			v, err := p.ReadI32(ctx)
			if err != nil {
				return fail(err)
			}
			h.crc, h.hasCRC = uint32(v), true
		default:
			if err := thrift.SkipDefaultDepth(ctx, p, typ); err != nil {
				return fail(err)
			}
		}
		if err := p.ReadFieldEnd(ctx); err != nil {
			return fail(err)
		}
	}
	if err := p.ReadStructEnd(ctx); err != nil {
		return fail(err)
	}
	if !seenSize || h.size < 0 {
		return h, fmt.Errorf("page header: compressed size %d", h.size)
	}
	h.headerLen = len(b) - buf.Len()
	return h, nil
}

// firstHeaderBytes is how much of a section headerAt reads first to parse
// its first page header; a longer header is read again whole.
const firstHeaderBytes = 1 << 10

// headerAt parses the page header that starts section s of src.
func headerAt(src io.ReaderAt, s byteRange) (pageHeader, error) {
	for n := min(s.n, firstHeaderBytes); ; n = min(s.n, 4*n) {
		buf := scratch{}.Allocate(int(n))
		_, err := src.ReadAt(buf, s.off)
		var h pageHeader
		if err == nil {
			h, err = readPageHeader(buf)
		}
		scratch{}.Free(buf)
		if errors.Is(err, errShortHeader) && n < s.n {
			continue
		}
		if err != nil {
			return h, fmt.Errorf("page at offset %d: %w", s.off, err)
		}
		return h, nil
	}
}

// checkPageCRCs checks the CRC of every page in section s of src, which
// holds whole pages, when its first page has one (see pageCRCs). Sections
// that src has fetched are checked where they lie; others are read a
// window at a time.
func checkPageCRCs(src io.ReaderAt, s byteRange) error {
	c := newPageCRCs(s)
	if whole := fetchedBytes(src, s); whole != nil {
		return c.feed(whole)
	}
	buf := scratch{}.Allocate(int(min(s.n, minWindow)))
	defer scratch{}.Free(buf)
	for off, end := s.off, s.off+s.n; off < end && !c.done; {
		n := min(int64(len(buf)), end-off)
		if _, err := src.ReadAt(buf[:n], off); err != nil {
			return err
		}
		if err := c.feed(buf[:n]); err != nil {
			return err
		}
		off += n
	}
	return nil
}

// streamedHeaderBytes bounds the bytes of one page header pageCRCs gathers
// across reads before it takes a header it cannot parse for corrupt.
const streamedHeaderBytes = 1 << 20

// pageCRCs checks the page CRCs of one section of pages as a stream reads
// the section in order from the store (checkPageCRCs feeds it the section
// at once, or a window at a time), so that a row group streamed rather than
// fetched (fetched.window) is read once: a page is checked by the read that
// brings its last byte, which fails, with no bytes, when the CRC does not
// match, so that no decoder has the page whole. A read that skips bytes of
// the section has the rest read and checked by checkPageCRCs.
type pageCRCs struct {
	mu        sync.Mutex
	s         byteRange
	next      int64  // offset of the next byte to check
	page      int64  // offset of the page being read
	header    []byte // its header's first bytes, when a read ended inside it
	inBody    bool   // the header has been read; left bytes of the body have not
	left      int64
	crc, want uint32
	done      bool // every page is checked, or the section has no CRCs
	err       error
}

func newPageCRCs(s byteRange) *pageCRCs { return &pageCRCs{s: s, next: s.off, page: s.off} }

// read checks what it can of p, the bytes at off read from src.
func (c *pageCRCs) read(src io.ReaderAt, p []byte, off int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	end := c.s.off + c.s.n
	from, to := max(off, c.next), min(off+int64(len(p)), end)
	switch {
	case c.err != nil:
		return c.err
	case c.done || from >= to:
		return nil
	case off > c.next:
		c.done = true
		c.err = checkPageCRCs(src, byteRange{c.page, end - c.page})
	default:
		c.err = c.feed(p[from-off : to-off])
	}
	return c.err
}

// feed checks b, the bytes at c.next.
func (c *pageCRCs) feed(b []byte) error {
	end := c.s.off + c.s.n
	for len(b) > 0 && !c.done {
		if c.inBody {
			n := min(int64(len(b)), c.left)
			c.crc = crc32.Update(c.crc, crc32.IEEETable, b[:n])
			b, c.left, c.next = b[n:], c.left-n, c.next+n
			if err := c.endPage(); err != nil {
				return err
			}
			continue
		}
		// A page header, its start perhaps in the read before.
		had, hdr := len(c.header), b
		if had > 0 {
			c.header = append(c.header, b...)
			hdr = c.header
		}
		h, err := readPageHeader(hdr)
		if err != nil && c.next+int64(len(b)) < end && len(hdr) < streamedHeaderBytes {
			// Cut short, or a field cut short: the next read has more.
			if had == 0 {
				c.header = append(c.header, b...)
			}
			c.next += int64(len(b))
			return nil
		}
		if err != nil {
			return fmt.Errorf("page at offset %d: %w", c.page, err)
		}
		used := h.headerLen - had
		if used <= 0 || used > len(b) {
			return fmt.Errorf("page at offset %d: a page header of %d bytes", c.page, h.headerLen)
		}
		b, c.next, c.header = b[used:], c.next+int64(used), c.header[:0]
		switch {
		case h.size > end-c.next:
			return fmt.Errorf("page at offset %d: %d bytes, past the end of its column chunk", c.page, h.size)
		case !h.hasCRC && c.page == c.s.off:
			c.done = true // a section of pages written without CRCs
			return nil
		case !h.hasCRC:
			return fmt.Errorf("page at offset %d has no CRC, the pages before it have one", c.page)
		}
		c.inBody, c.left, c.crc, c.want = true, h.size, 0, h.crc
		if err := c.endPage(); err != nil {
			return err
		}
	}
	return nil
}

// endPage checks the page being read once its body is all read.
func (c *pageCRCs) endPage() error {
	if c.left > 0 {
		return nil
	}
	if c.crc != c.want {
		return fmt.Errorf("page at offset %d: CRC %08x, its header says %08x", c.page, c.crc, c.want)
	}
	c.inBody, c.page = false, c.next
	c.done = c.next >= c.s.off+c.s.n
	return nil
}
