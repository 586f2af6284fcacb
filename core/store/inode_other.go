//go:build !unix

package store

import "os"

// inode returns 0: inode numbers are a Unix notion.
func inode(os.FileInfo) uint64 { return 0 }

// fileVersion returns the size and modification time of the open file f.
func fileVersion(f *os.File) (Object, error) {
	fi, err := f.Stat()
	if err != nil {
		return Object{}, err
	}
	return Object{Size: fi.Size(), ModTime: fi.ModTime()}, nil
}
