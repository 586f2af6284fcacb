package table

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/apache/thrift/lib/go/thrift"
)

// Page CRCs.
//
// A Parquet page header may carry the CRC-32 (IEEE, as zlib's) of the page's
// bytes as stored, after the header: pyarrow writes it with
// write_page_checksum=True, parquet-java with page.write-checksum.enabled,
// croupier in its own data files (crcwrite.go). arrow-go (v18.8.0) neither
// writes nor checks it, so croupier checks it
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
		if errors.As(err, &te) && te.TypeId() == thrift.END_OF_FILE {
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

// firstHeaderBytes is how much of a section checkPageCRCs reads first to
// parse its first page header; a longer header is read again whole.
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
// holds whole pages, when its first page has one. Sections that src has
// fetched are checked where they lie; others a page at a time.
func checkPageCRCs(src io.ReaderAt, s byteRange) error {
	whole := fetchedBytes(src, s)
	for pos := int64(0); pos < s.n; {
		var h pageHeader
		var err error
		if whole != nil {
			if h, err = readPageHeader(whole[pos:]); err != nil {
				err = fmt.Errorf("page at offset %d: %w", s.off+pos, err)
			}
		} else {
			h, err = headerAt(src, byteRange{s.off + pos, s.n - pos})
		}
		if err != nil {
			return err
		}
		start := pos + int64(h.headerLen)
		if h.size > s.n-start {
			return fmt.Errorf("page at offset %d: %d bytes, past the end of its column chunk", s.off+pos, h.size)
		}
		if !h.hasCRC {
			if pos == 0 {
				return nil // a section of pages written without CRCs
			}
			return fmt.Errorf("page at offset %d has no CRC, the pages before it have one", s.off+pos)
		}
		var got uint32
		if whole != nil {
			got = crc32.ChecksumIEEE(whole[start : start+h.size])
		} else {
			body := scratch{}.Allocate(int(h.size))
			_, err := src.ReadAt(body, s.off+start)
			got = crc32.ChecksumIEEE(body)
			scratch{}.Free(body)
			if err != nil {
				return err
			}
		}
		if got != h.crc {
			return fmt.Errorf("page at offset %d: CRC %08x, its header says %08x", s.off+pos, got, h.crc)
		}
		pos = start + h.size
	}
	return nil
}
