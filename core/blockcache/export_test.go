package blockcache

import (
	"context"
	"crypto/sha256"
	"os"
)

// HeaderSize is the size of a block file's header.
const HeaderSize = headerSize

// BlockPath returns the file of block b of the object whose ID is id.
func (c *Cache) BlockPath(id string, b int64) string { return c.path(sha256.Sum256([]byte(id)), b) }

// Sweep sweeps the folder now.
func (c *Cache) Sweep(ctx context.Context) { c.sweep(ctx) }

// Intact reports whether the file at path holds block b, of length bytes,
// of the object whose ID is id, intact.
func Intact(path, id string, b, length int64) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	return readBlock(f, sha256.Sum256([]byte(id)), b, length, [][]byte{make([]byte, length)})
}
