package table

import (
	"math/bits"
	"slices"
	"sync"
)

// scratch allocates the buffers that hold bytes only while a row group is
// decoded: the fetched column chunks, and the page reader's compressed and
// decompressed pages, which decoding copies from. Row groups of a table are
// alike, so instead of allocating, zeroing and freeing megabytes per column
// chunk (through cgo, for Arrow's C allocator), scratch recycles buffers by
// power-of-two size class. A buffer it hands out is not zeroed: its users
// overwrite the bytes they read. It implements memory.Allocator.
type scratch struct{}

// scratchPools holds free buffers of capacity classBytes(c) in
// scratchPools[c].
var scratchPools [8 * 40]sync.Pool // of *[]byte

// sizeClass is the class of the smallest buffer that holds n bytes. Classes
// step by an eighth to a quarter of their size (5, 6, 7 or 8 times a power
// of two), not by doubling: a buffer is at most a quarter larger than asked,
// so the bytes a stream's budget counts are about the bytes it holds.
func sizeClass(n int) int {
	shift := max(bits.Len(uint(n-1))-3, 0)
	return shift*8 + (n-1)>>shift
}

// classBytes is the capacity of the buffers of class c.
func classBytes(c int) int { return (c%8 + 1) << (c / 8) }

// Allocate returns a buffer of n bytes.
func (scratch) Allocate(n int) []byte {
	c := sizeClass(n)
	if n <= 0 || c >= len(scratchPools) {
		return make([]byte, n)
	}
	if p, ok := scratchPools[c].Get().(*[]byte); ok {
		return (*p)[:n]
	}
	return make([]byte, n, classBytes(c))
}

// Reallocate returns a buffer of n bytes starting with b's.
func (s scratch) Reallocate(n int, b []byte) []byte {
	if n <= cap(b) {
		return b[:n]
	}
	out := s.Allocate(n)
	copy(out, b)
	s.Free(b)
	return out
}

// Free recycles b, which no one may use after.
func (scratch) Free(b []byte) {
	c := sizeClass(cap(b))
	if cap(b) == 0 || c >= len(scratchPools) || cap(b) != classBytes(c) {
		return // not one of ours
	}
	b = b[:cap(b)]
	scratchPools[c].Put(&b)
}

// growScratch returns b resized to n bytes, trading it for a larger scratch
// buffer when it is too small; its bytes are not kept. Page decoding keeps
// its levels and indices in these, so that they are not zeroed and grown
// anew for every column chunk.
func growScratch(b []byte, n int) []byte {
	if n <= cap(b) {
		return b[:n]
	}
	scratch{}.Free(b)
	return scratch{}.Allocate(n)
}

// bufferList recycles buffers of any size among a few users, each holding
// one at a time: a Reader's decoders read each section of pages into one.
// Unlike scratch's pools, it keeps at most max buffers, the largest it has
// seen, and never sheds them to the collector: sections vary from a page to
// a column chunk, and pooled by size class they spread over dozens of
// classes, which held 18 MiB of a full shuffle's Go heap against the 4 MiB
// of two decoders' largest sections.
type bufferList struct {
	mu   sync.Mutex
	max  int
	free [][]byte
}

// get returns a buffer of n bytes, not zeroed: a free one that holds n bytes,
// else a new one with a quarter to spare.
func (l *bufferList) get(n int) []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	if i := slices.IndexFunc(l.free, func(b []byte) bool { return cap(b) >= n }); i >= 0 {
		b := l.free[i]
		l.free = slices.Delete(l.free, i, i+1)
		return b[:n]
	}
	return make([]byte, n, n+n/4)
}

// put gives b back, which no one may use after. A full list keeps the
// larger buffers.
func (l *bufferList) put(b []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.free) < l.max {
		l.free = append(l.free, b)
		return
	}
	i := slices.IndexFunc(l.free, func(f []byte) bool { return cap(f) < cap(b) })
	if i >= 0 {
		l.free[i] = b
	}
}
