package blockcache

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"hash/crc32"
	"io"
	"os"
	"time"
)

// A block file is a header and the block's bytes:
//
//	magic        8 bytes  "croupblk"
//	format       uint32   formatVersion
//	length       uint32   bytes of the block
//	index        uint64   the block's index in its object
//	identity     32 bytes SHA-256 of the object's ID
//	checksum     uint32   CRC-32C (Castagnoli) of the header before it and the bytes
//	bytes        length bytes
//
// Integers are little-endian. A file is served only when every field is the
// one expected and the file ends with the bytes.
const (
	formatVersion = 1
	headerSize    = 8 + 4 + 4 + 8 + sha256.Size + 4
	checked       = headerSize - 4 // the header bytes the checksum covers
)

var (
	magic      = []byte("croupblk")
	castagnoli = crc32.MakeTable(crc32.Castagnoli)
)

// header returns the header of block index of the object id, of length
// bytes, without its checksum.
func header(id [sha256.Size]byte, index, length int64) [headerSize]byte {
	var h [headerSize]byte
	copy(h[:8], magic)
	binary.LittleEndian.PutUint32(h[8:], formatVersion)
	binary.LittleEndian.PutUint32(h[12:], uint32(length))
	binary.LittleEndian.PutUint64(h[16:], uint64(index))
	copy(h[24:], id[:])
	return h
}

// writeBlock writes the block whose bytes are bufs, end to end, to w.
func writeBlock(w io.Writer, id [sha256.Size]byte, index int64, bufs [][]byte) error {
	var n int64
	for _, b := range bufs {
		n += int64(len(b))
	}
	h := header(id, index, n)
	sum := crc32.Update(0, castagnoli, h[:checked])
	for _, b := range bufs {
		sum = crc32.Update(sum, castagnoli, b)
	}
	binary.LittleEndian.PutUint32(h[checked:], sum)
	if _, err := w.Write(h[:]); err != nil {
		return err
	}
	for _, b := range bufs {
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// readBlock reads block index of the object id, length bytes, from f into
// bufs, and reports whether f held exactly that block, intact. bufs may hold
// anything when it did not.
func readBlock(f io.Reader, id [sha256.Size]byte, index, length int64, bufs [][]byte) bool {
	var h [headerSize]byte
	if _, err := io.ReadFull(f, h[:]); err != nil {
		return false
	}
	want := header(id, index, length)
	if !bytes.Equal(h[:checked], want[:checked]) {
		return false
	}
	sum := crc32.Update(0, castagnoli, h[:checked])
	for _, b := range bufs {
		if _, err := io.ReadFull(f, b); err != nil {
			return false
		}
		sum = crc32.Update(sum, castagnoli, b)
	}
	if sum != binary.LittleEndian.Uint32(h[checked:]) {
		return false
	}
	var more [1]byte
	n, _ := f.Read(more[:])
	return n == 0
}

// touch marks the block at path as used now, for the sweeps' least recently
// used order.
func touch(path string) {
	os.Chtimes(path, time.Time{}, time.Now()) // best effort: a block deleted meanwhile is gone anyway
}
