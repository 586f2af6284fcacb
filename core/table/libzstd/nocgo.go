//go:build !cgo

package libzstd

// Register does nothing without cgo: arrow-go's pure-Go codec decompresses.
func Register() bool { return false }
