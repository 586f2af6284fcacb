//go:build !unix

package store

import "os"

// inode returns 0: inode numbers are a Unix notion.
func inode(os.FileInfo) uint64 { return 0 }
