//go:build cgo

package cmem

import (
	"github.com/apache/arrow-go/v18/arrow/memory/mallocator"
)

// smallAllocator serves the buffers under LargeBytes.
type smallAllocator = *mallocator.Mallocator

func newSmall() smallAllocator { return mallocator.NewMallocator() }
