//go:build !cgo

package cmem

import (
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow/memory"
)

// smallAllocator serves the buffers under LargeBytes from the Go heap,
// counting them as mallocator does.
type smallAllocator = *goHeap

type goHeap struct {
	memory.GoAllocator
	allocated atomic.Int64
}

func newSmall() smallAllocator { return new(goHeap) }

func (h *goHeap) Allocate(n int) []byte {
	h.allocated.Add(int64(n))
	return h.GoAllocator.Allocate(n)
}

func (h *goHeap) Reallocate(n int, b []byte) []byte {
	h.allocated.Add(int64(n - len(b)))
	return h.GoAllocator.Reallocate(n, b)
}

func (h *goHeap) Free(b []byte) {
	h.allocated.Add(-int64(len(b)))
	h.GoAllocator.Free(b)
}

func (h *goHeap) AllocatedBytes() int64 { return h.allocated.Load() }
