package table

import (
	"context"
	"hash/crc32"

	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/croupier-data/croupier/core/store"
)

// WriteOrphan writes data files as an Append would, without committing them:
// what a writer killed between its data and its manifest leaves behind.
func WriteOrphan(ctx context.Context, uri string, data array.RecordReader) error {
	loc, err := store.Open(ctx, uri)
	if err != nil {
		return err
	}
	defer loc.Close()
	opts, _ := WriteOptions{}.withDefaults()
	_, err = writeData(ctx, loc, data, opts)
	return err
}

// SetCommitHook makes every commit in this process call fn at each of its
// phases (see commitHook); nil removes it.
func SetCommitHook(fn func(phase string)) { commitHook = fn }

// ForgetProbes forgets which stores passed the check of their exclusive
// creates in this process, as a new process would.
func ForgetProbes() { honoured.Clear() }

// PagePayloads returns, for the section [off, off+n) of a Parquet file b
// that holds whole pages, where each page's bytes after its header lie.
func PagePayloads(b []byte, off, n int64) ([][2]int64, error) {
	var out [][2]int64
	for pos := off; pos < off+n; {
		h, err := readPageHeader(b[pos : off+n])
		if err != nil {
			return nil, err
		}
		start := pos + int64(h.headerLen)
		out = append(out, [2]int64{start, start + h.size})
		pos = start + h.size
	}
	return out, nil
}

// PageCRCs returns how many pages the section [off, off+n) of a Parquet file
// b holds, and how many of them carry a CRC that matches their bytes.
func PageCRCs(b []byte, off, n int64) (pages, good int, err error) {
	for pos := off; pos < off+n; pages++ {
		h, err := readPageHeader(b[pos : off+n])
		if err != nil {
			return pages, good, err
		}
		start := pos + int64(h.headerLen)
		if h.hasCRC && crc32.ChecksumIEEE(b[start:start+h.size]) == h.crc {
			good++
		}
		pos = start + h.size
	}
	return pages, good, nil
}
