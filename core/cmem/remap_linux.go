package cmem

import (
	"syscall"
	"unsafe"
)

// On Linux a mapping is made, moved and unmapped with the system calls
// themselves: a mapping mremap moves is one syscall.Mmap never handed out,
// which syscall.Munmap refuses, and golang.org/x/sys/unix, which tracks moves,
// would add a package to the smallest program that reads tables
// (internal/sideeffects holds it to 300).

// mapAnon maps n bytes of zeroed anonymous memory.
func mapAnon(n int) ([]byte, error) {
	p, _, errno := syscall.Syscall6(syscall.SYS_MMAP, 0, uintptr(n),
		syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON, ^uintptr(0), 0)
	if errno != 0 {
		return nil, errno
	}
	return unsafe.Slice((*byte)(*(*unsafe.Pointer)(unsafe.Pointer(&p))), n), nil
}

// unmapBytes unmaps b, a mapping mapAnon or remap made.
func unmapBytes(b []byte) error {
	if _, _, errno := syscall.Syscall(syscall.SYS_MUNMAP, uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)), 0); errno != 0 {
		return errno
	}
	return nil
}

// mremapMayMove is MREMAP_MAYMOVE, which the syscall package does not name.
const mremapMayMove = 1

// remap moves mapping b to one of n bytes (mremap), its pages with it.
func remap(b []byte, n int) ([]byte, bool) {
	p, _, errno := syscall.Syscall6(syscall.SYS_MREMAP, uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)), uintptr(n), mremapMayMove, 0, 0)
	if errno != 0 {
		return nil, false
	}
	return unsafe.Slice((*byte)(*(*unsafe.Pointer)(unsafe.Pointer(&p))), n), true
}
