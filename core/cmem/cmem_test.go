package cmem_test

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"testing"

	"github.com/croupier-data/croupier/core/cmem"
)

// TestBuffers: buffers of every size keep their bytes through reallocations
// across the threshold, and the bytes allocated come back to zero.
func TestBuffers(t *testing.T) {
	a := cmem.New()
	sizes := []int{0, 1, 100, cmem.LargeBytes - 1, cmem.LargeBytes, 3 * cmem.LargeBytes, 100, 5 << 20, 10}
	b := a.Allocate(sizes[0])
	for _, n := range sizes[1:] {
		for i := range b {
			b[i] = byte(i)
		}
		old := len(b)
		b = a.Reallocate(n, b)
		if len(b) != n {
			t.Fatalf("reallocate to %d: len %d", n, len(b))
		}
		for i := range min(old, n) {
			if b[i] != byte(i) {
				t.Fatalf("reallocate %d -> %d: byte %d is %d", old, n, i, b[i])
			}
		}
		if got := a.AllocatedBytes(); got != int64(n) {
			t.Fatalf("after reallocate to %d: %d bytes allocated", n, got)
		}
	}
	a.Free(b)
	if got := a.AllocatedBytes(); got != 0 {
		t.Fatalf("%d bytes allocated after the last free", got)
	}
	big := a.Allocate(2 * cmem.LargeBytes)
	if !bytes.Equal(big, make([]byte, len(big))) {
		t.Fatal("a new large buffer is not zeroed")
	}
	a.Free(big)
}

// TestLargeBuffersLeaveResidentMemory: touching and freeing 256 MiB of large
// buffers leaves resident memory where it was.
func TestLargeBuffersLeaveResidentMemory(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc/self/statm")
	}
	a := cmem.New()
	before := rss(t)
	var held [][]byte
	for range 256 {
		b := a.Allocate(1 << 20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		held = append(held, b)
	}
	if grown := rss(t) - before; grown < 200<<20 {
		t.Fatalf("resident memory grew %d MiB while 256 MiB were touched", grown>>20)
	}
	for _, b := range held {
		a.Free(b)
	}
	if left := rss(t) - before; left > 32<<20 {
		t.Errorf("%d MiB still resident after every buffer was freed", left>>20)
	}
}

func rss(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Fatal(err)
	}
	var size, resident int64
	if _, err := fmt.Sscan(string(b), &size, &resident); err != nil {
		t.Fatal(err)
	}
	return resident * int64(os.Getpagesize())
}
