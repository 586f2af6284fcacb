// Package cmem allocates Arrow buffers outside the Go heap, and gives large
// ones back to the operating system as soon as they are freed.
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
// Built without cgo (CGO_ENABLED=0), small buffers come from the Go heap:
// there is then no C caller to hand them to, since Arrow's C Data Interface
// needs cgo.
package cmem

import (
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// LargeBytes is the smallest buffer mapped on its own.
const LargeBytes = 256 << 10

// Allocator is a memory.Allocator of C memory. It is safe for concurrent
// use.
type Allocator struct {
	small     smallAllocator
	mappings  sync.Map // address of a mapping -> its []byte
	allocated atomic.Int64
}

// New returns an allocator.
func New() *Allocator { return &Allocator{small: newSmall()} }

// Allocate returns n zeroed bytes.
func (a *Allocator) Allocate(n int) []byte {
	if n < LargeBytes {
		return a.small.Allocate(n)
	}
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		panic("cmem: out of memory: " + err.Error())
	}
	a.mappings.Store(address(b), b)
	a.allocated.Add(int64(n))
	return b[:n]
}

// Reallocate returns a buffer of n bytes that starts with the bytes of b,
// and frees b if it is not that buffer.
func (a *Allocator) Reallocate(n int, b []byte) []byte {
	if _, mapped := a.mappings.Load(address(b)); mapped {
		if cap(b) >= n {
			a.allocated.Add(int64(n - len(b)))
			return b[:n]
		}
	} else if n < LargeBytes || cap(b) >= n {
		return a.small.Reallocate(n, b)
	}
	out := a.Allocate(n)
	copy(out, b)
	a.Free(b)
	return out
}

func address(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// Free gives b back; a mapped buffer goes back to the operating system.
func (a *Allocator) Free(b []byte) {
	m, ok := a.mappings.LoadAndDelete(address(b))
	if !ok {
		a.small.Free(b)
		return
	}
	a.allocated.Add(-int64(len(b)))
	if err := syscall.Munmap(m.([]byte)); err != nil {
		panic("cmem: unmap: " + err.Error())
	}
}

// AllocatedBytes is the bytes allocated and not freed.
func (a *Allocator) AllocatedBytes() int64 {
	return a.allocated.Load() + a.small.AllocatedBytes()
}
