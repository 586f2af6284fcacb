//go:build linux || darwin

package blockcache

import (
	"crypto/sha256"
	"os"
	"path/filepath"
	"syscall"
)

// Free reports whether the lock of block b of the object whose ID is id is
// free: taken without waiting through an open file of its own (on Linux a
// lock of this process is held to it too), and let go.
func (c *Cache) Free(id string, b int64) bool {
	f, err := os.OpenFile(filepath.Join(c.dir, lockFile), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return false
	}
	defer f.Close()
	off := lockOffset(key{sha256.Sum256([]byte(id)), b})
	if setLock(f, off, syscall.F_WRLCK) != nil {
		return false
	}
	return setLock(f, off, syscall.F_UNLCK) == nil
}
