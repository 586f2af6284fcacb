package table

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
)

// ID identifies the rows of a pinned version whatever URI reached it: another
// spelling of the same location (file:///d, file:///d/, file:///./d), or a
// copy of the table moved elsewhere, has the same ID. Checkpoints record it
// instead of binding themselves to a URI string.
//
// It is "t" and 16 hex digits of the SHA-256 of the kind and, for every file
// in pin order, its key relative to the table, its size and its row count;
// not modification times or ETags, which a copy changes. A croupier table's
// data files are named by random UUIDs, so its ID tells its versions and its
// copies apart from any other table; a plain dataset is identified by its
// pinned files.
func (t *Table) ID() string { return filesID(t.pin.Kind, t.pin.Files) }

// filesID is the ID of files of a table of kind, in their order.
func filesID(kind string, files []File) string {
	h := sha256.New()
	h.Write([]byte(kind))
	var n [8]byte
	for _, f := range files {
		h.Write([]byte{0})
		h.Write([]byte(f.Key))
		h.Write([]byte{0})
		binary.LittleEndian.PutUint64(n[:], uint64(f.Size))
		h.Write(n[:])
		binary.LittleEndian.PutUint64(n[:], uint64(f.NumRows))
		h.Write(n[:])
	}
	return "t" + hex.EncodeToString(h.Sum(nil)[:8])
}
