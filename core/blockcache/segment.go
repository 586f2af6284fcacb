package blockcache

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash/crc32"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"
)

// A segment is a file of records appended one after the other by one
// process. A record is a header and, unless it is a seal, a block's bytes:
//
//	magic        8 bytes  "croupblk"
//	format       uint32   formatVersion
//	length       uint32   bytes of the block; sealLength for a seal
//	index        uint64   the block's index in its object
//	identity     32 bytes SHA-256 of the object's ID
//	bytes sum    uint32   CRC-32C (Castagnoli) of the block's bytes
//	header sum   uint32   CRC-32C of the 60 header bytes before it
//	bytes        length bytes
//
// Integers are little-endian. A reader takes a segment's records from its
// start while each header is whole, carries its own sums and the expected
// magic and format, and its bytes end within the file; it stops at the
// first that does not, and looks again from there later: that record may be
// one its writer is appending, or the torn tail of a writer that died. A
// seal is the last record of a segment whose writer moved on to another: a
// sealed segment never grows, and is never looked at again.
const (
	formatVersion = 2
	headerSize    = 8 + 4 + 4 + 8 + sha256.Size + 4 + 4
	headerSummed  = headerSize - 4 // the header bytes the header sum covers
	sealLength    = 1<<32 - 1
	segSuffix     = ".seg"
)

var (
	magic      = []byte("croupblk")
	castagnoli = crc32.MakeTable(crc32.Castagnoli)
)

// key names a block: the identity hash of its object and its index.
type key struct {
	id [sha256.Size]byte
	b  int64
}

// entry is where the bytes of a block lie.
type entry struct {
	seg *segment
	off int64 // of the bytes in seg
	n   int64
	sum uint32
	// ok is set once the bytes were read whole and found to match sum (or
	// were written by this process): later hits read only what they need.
	// A record is never written over, so what was checked stays so.
	ok atomic.Bool
}

// segment is an open segment file.
type segment struct {
	name string
	f    *os.File
	// Guarded by the index's lock: the headers were read up to scanned, and
	// sealed says the segment ends there; size is the size last seen, first
	// seen at grew.
	scanned int64
	sealed  bool
	size    int64
	grew    time.Time
	used    atomic.Int64 // the last mark of its use, in Unix nanoseconds
}

// touch marks the segment as used now, for the sweeps' least recently used
// order, where its last mark is older than touchAge.
func (s *segment) touch(dir string, now time.Time) {
	if now.UnixNano()-s.used.Load() < int64(touchAge) {
		return
	}
	s.used.Store(now.UnixNano())
	os.Chtimes(filepath.Join(dir, s.name), time.Time{}, now) // best effort: a segment deleted meanwhile is gone anyway
}

// header returns the header of a record of length bytes whose bytes sum to
// sum, of block k.
func header(k key, length int64, sum uint32) [headerSize]byte {
	var h [headerSize]byte
	copy(h[:8], magic)
	binary.LittleEndian.PutUint32(h[8:], formatVersion)
	binary.LittleEndian.PutUint32(h[12:], uint32(length))
	binary.LittleEndian.PutUint64(h[16:], uint64(k.b))
	copy(h[24:], k.id[:])
	binary.LittleEndian.PutUint32(h[56:], sum)
	binary.LittleEndian.PutUint32(h[headerSummed:], crc32.Checksum(h[:headerSummed], castagnoli))
	return h
}

// parseHeader returns the block, length and bytes sum that header h
// describes, and reports whether h is a whole header.
func parseHeader(h []byte) (k key, length int64, sum uint32, ok bool) {
	if len(h) < headerSize || !bytes.Equal(h[:8], magic) ||
		binary.LittleEndian.Uint32(h[8:]) != formatVersion ||
		crc32.Checksum(h[:headerSummed], castagnoli) != binary.LittleEndian.Uint32(h[headerSummed:]) {
		return key{}, 0, 0, false
	}
	k.b = int64(binary.LittleEndian.Uint64(h[16:]))
	copy(k.id[:], h[24:56])
	return k, int64(binary.LittleEndian.Uint32(h[12:])), binary.LittleEndian.Uint32(h[56:]), true
}

// sumOf returns the CRC-32C of bufs end to end.
func sumOf(bufs [][]byte) uint32 {
	var sum uint32
	for _, b := range bufs {
		sum = crc32.Update(sum, castagnoli, b)
	}
	return sum
}

// readEntry reads the bytes of e into bufs, end to end, and reports whether
// they match its sum.
func readEntry(e *entry, bufs [][]byte) bool {
	off := e.off
	for _, b := range bufs {
		if _, err := e.seg.f.ReadAt(b, off); err != nil {
			return false
		}
		off += int64(len(b))
	}
	return off == e.off+e.n && sumOf(bufs) == e.sum
}

// scanFrom reads the headers of s from off to the first that is not of a
// whole record, and returns the blocks found, where they stop, the size of
// the file, and whether they stop at a seal.
func scanFrom(s *segment, off int64) (found []kv, end, size int64, sealed bool) {
	fi, err := s.f.Stat()
	if err != nil {
		return nil, off, 0, false
	}
	size = fi.Size()
	var h [headerSize]byte
	for off+headerSize <= size {
		if _, err := s.f.ReadAt(h[:], off); err != nil {
			break
		}
		k, n, sum, ok := parseHeader(h[:])
		if !ok {
			break
		}
		if n == sealLength {
			return found, off, size, true
		}
		if off+headerSize+n > size {
			break
		}
		found = append(found, kv{k, &entry{seg: s, off: off + headerSize, n: n, sum: sum}})
		off += headerSize + n
	}
	return found, off, size, false
}

// kv is a block found in a segment.
type kv struct {
	k key
	e *entry
}

// newSegmentName returns the name of a new segment: random, so that no two
// processes ever append to one file.
func newSegmentName() string {
	var r [12]byte
	rand.Read(r[:])
	return hex.EncodeToString(r[:]) + segSuffix
}
