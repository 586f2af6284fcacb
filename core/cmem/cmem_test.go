package cmem_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/croupier-data/croupier/core/cmem"
	"github.com/croupier-data/croupier/internal/seedtest"
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

// peakRSS is the process's peak resident memory (VmHWM).
func peakRSS(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if kb, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var n int64
			if _, err := fmt.Sscan(kb, &n); err != nil {
				t.Fatal(err)
			}
			return n << 10
		}
	}
	t.Fatal("no VmHWM in /proc/self/status")
	return 0
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

// TestSpareMappings: a freed mapping is handed out again, zeroed, to a
// buffer of its size; in random sequences of allocations, reallocations and
// frees of large buffers, each filled with a pattern, a new buffer is always
// zeroed, also where it reuses a freed mapping, and a reallocated one keeps
// its bytes; at most SpareBytes of mappings are kept once nothing is live.
func TestSpareMappings(t *testing.T) {
	a := cmem.New()
	b := a.Allocate(cmem.LargeBytes)
	fill(b, 1)
	a.Free(b)
	spare := a.SpareBytes()
	if b = a.Allocate(cmem.LargeBytes); a.SpareBytes() != spare-cmem.LargeBytes {
		t.Fatalf("spare mappings went from %d to %d bytes: the freed one was not reused", spare, a.SpareBytes())
	}
	if !bytes.Equal(b, make([]byte, len(b))) {
		t.Fatal("a reused mapping is not zeroed")
	}
	a.Free(b)
	rng := rand.New(rand.NewPCG(seedtest.Seed(t), 0))
	var live [][]byte
	for step := range 600 {
		switch op := rng.IntN(3); {
		case op == 0 || len(live) == 0: // a new buffer
			n := cmem.LargeBytes + rng.IntN(1<<20)
			b := a.Allocate(n)
			if !bytes.Equal(b, make([]byte, n)) {
				t.Fatalf("step %d: a new buffer of %d bytes is not zeroed", step, n)
			}
			fill(b, byte(step))
			live = append(live, b)
		case op == 1: // grow or shrink one
			i := rng.IntN(len(live))
			old := live[i]
			n := cmem.LargeBytes + rng.IntN(1<<20)
			b := a.Reallocate(n, old)
			for j := range min(len(old), n) {
				if b[j] != b[0] {
					t.Fatalf("step %d: reallocating %d to %d bytes changed byte %d", step, len(old), n, j)
				}
			}
			fill(b, b[0])
			live[i] = b
		default: // free one
			i := rng.IntN(len(live))
			a.Free(live[i])
			live = slices.Delete(live, i, i+1)
		}
	}
	for _, b := range live {
		a.Free(b)
	}
	if got := a.AllocatedBytes(); got != 0 {
		t.Fatalf("%d bytes allocated after every buffer was freed", got)
	}
	if spare := a.SpareBytes(); spare > cmem.SpareBytes || spare == 0 {
		t.Fatalf("%d bytes of spare mappings kept, want some and at most %d", spare, cmem.SpareBytes)
	}
}

// TestUnzeroed checks that AllocateUnzeroed reuses a spare mapping as
// Allocate does, leaving what it held; that growing the buffer within its
// mapping adds zero bytes; and that Allocate zeroes all that the mapping
// held when it reuses it next.
func TestUnzeroed(t *testing.T) {
	a := cmem.New()
	size := 2 * cmem.LargeBytes
	b := a.Allocate(size)
	fill(b, 7)
	a.Free(b)
	n := size - 4096
	u := a.AllocateUnzeroed(n)
	if a.SpareBytes() != 0 || len(u) != n {
		t.Fatalf("%d bytes of spare mappings left, a buffer of %d bytes: the freed mapping was not reused", a.SpareBytes(), len(u))
	}
	if !bytes.Equal(u, bytes.Repeat([]byte{7}, n)) {
		t.Fatal("an unzeroed buffer does not hold what its mapping held")
	}
	fill(u, 8)
	g := a.Reallocate(size, u)
	if !bytes.Equal(g[:n], bytes.Repeat([]byte{8}, n)) || !bytes.Equal(g[n:], make([]byte, size-n)) {
		t.Fatal("growing an unzeroed buffer within its mapping did not keep its bytes and add zeros")
	}
	a.Free(g)
	if z := a.Allocate(size); !bytes.Equal(z, make([]byte, len(z))) {
		t.Fatal("Allocate reused a mapping without zeroing what an unzeroed buffer left in it")
	} else {
		a.Free(z)
	}
	if got := a.AllocatedBytes(); got != 0 {
		t.Fatalf("%d bytes allocated after every buffer was freed", got)
	}
	if s := a.AllocateUnzeroed(100); len(s) != 100 { // small buffers come from malloc
		t.Fatalf("a small unzeroed buffer of %d bytes", len(s))
	} else {
		a.Free(s)
	}
}

// TestSparesFollowTheFrees checks that the spare mappings are those freed
// last: a buffer a little larger than one freed before it reuses its
// mapping, and a buffer freed when the spare mappings are full of others
// takes the room of those freed first, so that the next of its size reuses
// it.
func TestSparesFollowTheFrees(t *testing.T) {
	a := cmem.New()
	a.Free(a.Allocate(1_000_000))
	spare := a.SpareBytes()
	b := a.Allocate(1_040_000)
	if a.SpareBytes() >= spare {
		t.Fatalf("a buffer 4%% larger than the one freed mapped afresh (spare mappings: %d bytes, then %d)", spare, a.SpareBytes())
	}
	a.Free(b)
	var small [][]byte
	for range cmem.SpareBytes / cmem.LargeBytes {
		small = append(small, a.Allocate(cmem.LargeBytes))
	}
	for _, b := range small {
		a.Free(b)
	}
	if a.SpareBytes() != cmem.SpareBytes {
		t.Fatalf("%d bytes of spare mappings, want them full (%d)", a.SpareBytes(), cmem.SpareBytes)
	}
	a.Free(a.Allocate(2 << 20))
	spare = a.SpareBytes()
	if a.Allocate(2 << 20); a.SpareBytes() != spare-2<<20 {
		t.Fatalf("spare mappings went from %d to %d bytes: the one freed last was not kept", spare, a.SpareBytes())
	}
}

// fill writes v over b.
func fill(b []byte, v byte) {
	for i := range b {
		b[i] = v
	}
}

// BenchmarkPieces allocates, fills and frees buffers of 0.5–1.5 MiB from
// two goroutines, each freeing its buffers eight allocations later, as a
// loader keeps rows in pieces and frees them once read: with freed mappings
// reused (spare) and every buffer mapped afresh (fresh), side by side.
//
//	go test ./core/cmem -run '^$' -bench Pieces
func BenchmarkPieces(b *testing.B) {
	for _, bc := range []struct {
		name string
		a    *cmem.Allocator
	}{{"fresh", cmem.NewWithoutSpares()}, {"spare", cmem.New()}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(1 << 20)
			b.RunParallel(func(pb *testing.PB) {
				rng := rand.New(rand.NewPCG(1, 2))
				var held [][]byte
				for pb.Next() {
					buf := bc.a.Allocate(1<<19 + rng.IntN(1<<20))
					fill(buf, 1)
					if held = append(held, buf); len(held) > 8 {
						bc.a.Free(held[0])
						held = held[1:]
					}
				}
				for _, buf := range held {
					bc.a.Free(buf)
				}
			})
		})
	}
}

// TestGrowingMovesPages: a mapped buffer grown past its mapping keeps its
// bytes and zeroes the rest without holding them twice: its pages move (Linux).
func TestGrowingMovesPages(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("mremap and /proc/self/statm")
	}
	a := cmem.NewWithoutSpares()
	const old, grown = 32 << 20, 64 << 20
	b := a.Allocate(old)
	for i := 0; i < len(b); i += 4096 {
		b[i] = byte(i>>12) | 1
	}
	// The peak from here: VmHWM starts over at the resident memory now.
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Skip("cannot reset the peak resident memory: ", err)
	}
	before := peakRSS(t)
	b = a.Reallocate(grown, b)
	if added := peakRSS(t) - before; added > 8<<20 {
		t.Errorf("growing a %d MiB buffer to %d MiB held %d MiB more at its peak: its bytes were copied", old>>20, grown>>20, added>>20)
	}
	if len(b) != grown || a.AllocatedBytes() != grown {
		t.Fatalf("grown to %d bytes, %d allocated; want %d", len(b), a.AllocatedBytes(), grown)
	}
	for i := 0; i < old; i += 4096 {
		if b[i] != byte(i>>12)|1 {
			t.Fatalf("byte %d is %d after growing, was %d", i, b[i], byte(i>>12)|1)
		}
	}
	for i := old; i < grown; i += 4096 {
		if b[i] != 0 {
			t.Fatalf("grown byte %d is %d, not zero", i, b[i])
		}
	}
	a.Free(b)
	if a.AllocatedBytes() != 0 {
		t.Errorf("%d bytes allocated after freeing", a.AllocatedBytes())
	}
}
