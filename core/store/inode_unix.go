//go:build unix

package store

import (
	"os"
	"syscall"
)

// inode returns the inode number of the file fi describes.
func inode(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Ino)
	}
	return 0
}
