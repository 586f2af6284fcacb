package table

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
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
	h := newFilesHash(kind)
	for _, f := range files {
		h.add(f)
	}
	return h.id()
}

// prefixIDs returns the IDs of files[:i] for i from 0 to len(files), from
// one pass of the hash.
func prefixIDs(kind string, files []File) []string {
	h := newFilesHash(kind)
	out := []string{h.id()}
	for _, f := range files {
		h.add(f)
		out = append(out, h.id())
	}
	return out
}

// filesHash hashes a table's kind, then its files one by one.
type filesHash struct{ h hash.Hash }

func newFilesHash(kind string) filesHash {
	h := sha256.New()
	h.Write([]byte(kind))
	return filesHash{h}
}

func (fh filesHash) add(f File) {
	var n [8]byte
	fh.h.Write([]byte{0})
	fh.h.Write([]byte(f.Key))
	fh.h.Write([]byte{0})
	binary.LittleEndian.PutUint64(n[:], uint64(f.Size))
	fh.h.Write(n[:])
	binary.LittleEndian.PutUint64(n[:], uint64(f.NumRows))
	fh.h.Write(n[:])
}

// id is the ID of what was hashed so far; hashing may go on.
func (fh filesHash) id() string { return "t" + hex.EncodeToString(fh.h.Sum(nil)[:8]) }
