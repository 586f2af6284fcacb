package cmem

import "golang.org/x/sys/unix"

// remap moves mapping b to one of n bytes (mremap), its pages with it.
func remap(b []byte, n int) ([]byte, bool) {
	moved, err := unix.Mremap(b, n, unix.MREMAP_MAYMOVE)
	return moved, err == nil
}
