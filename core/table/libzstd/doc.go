// Package libzstd decompresses the zstd pages of Parquet files with libzstd,
// the reference C library, in place of arrow-go's pure-Go codec.
//
// Parquet pages of training data are mostly zstd, and decompressing them was
// a third of the CPU time of a read. arrow-go decompresses with
// klauspost/compress, in pure Go; libzstd, which pyarrow also uses,
// decompresses the same pages 1.4–2.3× faster. The cgo bindings of
// DataDog/zstd build libzstd from its vendored source with the C compiler
// croupier's shared library needs anyway. Compression, used only to write
// tables, stays with arrow-go's codec.
//
// arrow-go keeps one codec registry for the whole process, so the swap is
// the application's choice, never a side effect of an import: croupier's C
// library and command call Register when they start, and a Go program that
// wants the faster decompression calls it in main. Built without cgo
// (CGO_ENABLED=0), Register does nothing and arrow-go's codec decompresses.
package libzstd
