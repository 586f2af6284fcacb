//go:build !linux

package cmem

// remap cannot move a mapping here: a growing buffer is copied.
func remap(b []byte, n int) ([]byte, bool) { return nil, false }
