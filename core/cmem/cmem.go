// Package cmem allocates Arrow buffers outside the Go heap, and gives large
// ones back to the operating system once freed, but for a few kept for reuse.
//
// Batches leave croupier through the Arrow C Data Interface, so their
// buffers must not be Go memory. arrow-go's mallocator takes them from the C
// library's malloc, and glibc's malloc keeps freed memory for reuse: once a
// large block has been freed it raises its threshold for serving blocks with
// mmap (up to 32 MiB), and serves later blocks of that size from heaps it
// rarely trims. A loader that decodes, copies and frees tens of megabytes a
// second then holds twice or three times the memory it uses (measured: a
// 200 MiB budget, 190–220 MiB of live buffers, 530–560 MiB of resident
// memory). Allocator serves buffers of LargeBytes or more from mappings of
// their own, unmapped on Free, and smaller ones from malloc.
//
// A fresh mapping costs a page fault for each 4 KiB page its buffer fills,
// and unmapping it stops every thread of the process to flush its address
// translations. A loader keeps rows in pieces of a megabyte or so and frees
// them as steps are read: in a clumped read of a table 4 times its budget,
// the kernel took 0.05 of the 0.10–0.12 CPU-seconds per 10,000 rows. So up
// to SpareBytes of the mappings freed last are kept and handed out again,
// zeroed (or as they are, to AllocateUnzeroed), to buffers of up to an
// eighth smaller: resident memory stays within SpareBytes of what is
// allocated (and the eighth), and the kernel's part fell to 0.03. Mappings
// are made in sizes of eight steps per power of two (see mappedSize), so a
// buffer a little larger than the one freed before it, as the next batch of
// a stream often is, mostly fits in its mapping:
// merging workers' runs of 3 MB, made in buffers a few percent apart, took
// 0.6 ms a run so, against 3 ms when the spare mappings were the first
// freed, each of its buffer's exact size.
//
// Built without cgo (CGO_ENABLED=0), small buffers come from the Go heap:
// there is then no C caller to hand them to, since Arrow's C Data Interface
// needs cgo.
package cmem

import (
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"
)

// LargeBytes is the smallest buffer mapped on its own.
const LargeBytes = 256 << 10

// SpareBytes bounds the freed mappings an Allocator keeps for reuse.
const SpareBytes = 8 << 20

// Allocator is a memory.Allocator of C memory. It is safe for concurrent
// use.
type Allocator struct {
	small     smallAllocator
	mappings  sync.Map // address of a mapping handed out -> *mapping
	allocated atomic.Int64

	mu         sync.Mutex
	spare      []*mapping // freed, kept for reuse
	spareN     int        // their bytes
	spareLimit int        // bytes of freed mappings kept at most
}

// mapping is one mapped buffer.
type mapping struct {
	b    []byte // all of it
	used int    // the most bytes handed out since it was last zeroed (or mapped)
}

// New returns an allocator.
func New() *Allocator { return &Allocator{small: newSmall(), spareLimit: SpareBytes} }

// Allocate returns n zeroed bytes.
func (a *Allocator) Allocate(n int) []byte { return a.allocate(n, true) }

// AllocateUnzeroed returns n bytes as Allocate does, but a buffer of
// LargeBytes or more that reuses a spare mapping holds what the mapping held:
// for a buffer its caller fills before anyone reads it. Zeroing a reused
// mapping touches all of it, as filling it does again: a decoder sizes its
// values for a whole column chunk and fills the part its rows take, and
// zeroing the rest took a fifth of the CPU time of a clumped read of a table
// 32 times its budget.
func (a *Allocator) AllocateUnzeroed(n int) []byte { return a.allocate(n, false) }

func (a *Allocator) allocate(n int, zero bool) []byte {
	if n < LargeBytes {
		return a.small.Allocate(n)
	}
	m := a.reuse(n, zero)
	if m == nil {
		b, err := mapAnon(mappedSize(n))
		if err != nil {
			panic("cmem: out of memory: " + err.Error())
		}
		m = &mapping{b: b}
	}
	m.used = max(m.used, n)
	a.mappings.Store(address(m.b), m)
	a.allocated.Add(int64(n))
	return m.b[:n]
}

// mappedSize is the size of the mapping made for a buffer of n bytes: n
// rounded up to an eighth of the power of two at or below it, at most n/8
// more. The pages past n are never touched, so they take no memory, until
// the mapping is reused for a larger buffer.
func mappedSize(n int) int {
	step := 1 << (bits.Len(uint(n)) - 4)
	return (n + step - 1) &^ (step - 1)
}

// reuse takes from the spare mappings the smallest of n bytes up to an
// eighth more, zeroed if zero, or returns nil.
func (a *Allocator) reuse(n int, zero bool) *mapping {
	a.mu.Lock()
	best := -1
	for i, m := range a.spare {
		if len(m.b) >= n && len(m.b) <= n+n/8 && (best < 0 || len(m.b) < len(a.spare[best].b)) {
			best = i
		}
	}
	if best < 0 {
		a.mu.Unlock()
		return nil
	}
	m := a.spare[best]
	a.spare = slices.Delete(a.spare, best, best+1)
	a.spareN -= len(m.b)
	a.mu.Unlock()
	if zero {
		clear(m.b[:m.used]) // the rest was never handed out: still zero
		m.used = 0
	}
	return m
}

// Reallocate returns a buffer of n bytes that starts with the bytes of b,
// and frees b if it is not that buffer.
func (a *Allocator) Reallocate(n int, b []byte) []byte {
	if v, mapped := a.mappings.Load(address(b)); mapped {
		m := v.(*mapping)
		if len(m.b) >= n || a.move(m, b, n) {
			if end := min(n, m.used); end > len(b) {
				clear(m.b[len(b):end]) // handed out before: grown bytes are zero
			}
			m.used = max(m.used, n)
			a.allocated.Add(int64(n - len(b)))
			return m.b[:n]
		}
	} else if n < LargeBytes || cap(b) >= n {
		return a.small.Reallocate(n, b)
	}
	out := a.Allocate(n)
	copy(out, b)
	a.Free(b)
	return out
}

// move grows the mapping m of buffer b to hold n bytes where the kernel can
// move it (Linux's mremap), and reports whether it did: its pages move
// rather than being copied, so a buffer that grows by doubling, as a
// decoder's values do, never holds its old and new bytes at once (a piece
// of wide rows growing from 32 to 64 MiB held 64 MiB resident while it was
// copied, past what its rows were charged).
func (a *Allocator) move(m *mapping, b []byte, n int) bool {
	moved, ok := remap(m.b, mappedSize(n))
	if !ok {
		return false
	}
	a.mappings.Delete(address(b))
	m.b = moved
	a.mappings.Store(address(m.b), m)
	return true
}

// Mapped reports whether b is a buffer of LargeBytes or more that a handed
// out and that is not freed.
func (a *Allocator) Mapped(b []byte) bool {
	_, ok := a.mappings.Load(address(b))
	return ok
}

func address(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// Free gives b back. A mapped buffer is kept for reuse, and the mappings
// freed longest ago go back to the operating system as it needs their room:
// what a loader frees next is most like what it freed last. One larger than
// all the room goes back at once.
func (a *Allocator) Free(b []byte) {
	v, ok := a.mappings.LoadAndDelete(address(b))
	if !ok {
		a.small.Free(b)
		return
	}
	a.allocated.Add(-int64(len(b)))
	m := v.(*mapping)
	var unmap []*mapping
	a.mu.Lock()
	if len(m.b) > a.spareLimit {
		unmap = append(unmap, m)
	} else {
		for a.spareN+len(m.b) > a.spareLimit {
			unmap = append(unmap, a.spare[0])
			a.spareN -= len(a.spare[0].b)
			a.spare = slices.Delete(a.spare, 0, 1)
		}
		a.spare = append(a.spare, m)
		a.spareN += len(m.b)
	}
	a.mu.Unlock()
	for _, m := range unmap {
		if err := unmapBytes(m.b); err != nil {
			panic("cmem: unmap: " + err.Error())
		}
	}
}

// AllocatedBytes is the bytes allocated and not freed.
func (a *Allocator) AllocatedBytes() int64 {
	return a.allocated.Load() + a.small.AllocatedBytes()
}
