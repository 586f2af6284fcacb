//go:build !linux

package cmem

import "syscall"

// mapAnon maps n bytes of zeroed anonymous memory.
func mapAnon(n int) ([]byte, error) {
	return syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
}

// unmapBytes unmaps b, a mapping mapAnon made.
func unmapBytes(b []byte) error { return syscall.Munmap(b) }

// remap cannot move a mapping here: a growing buffer is copied.
func remap(b []byte, n int) ([]byte, bool) { return nil, false }
