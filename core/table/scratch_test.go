package table

import (
	"bytes"
	"testing"
)

func TestScratchAllocator(t *testing.T) {
	var s scratch
	for n := 1; n < 1<<12; n++ {
		c := sizeClass(n)
		if size := classBytes(c); size < n || size > max(8, n+n/4) || sizeClass(size) != c {
			t.Fatalf("%d bytes: class %d of %d bytes (class %d); want at least %[1]d, at most a quarter more", n, c, size, sizeClass(size))
		}
	}
	for _, n := range []int{1, 63, 64, 65, 1000, 1 << 20, 3<<20 + 5} {
		b := s.Allocate(n)
		if len(b) != n || cap(b) < n || cap(b) > n+n/4+8 {
			t.Fatalf("Allocate(%d): len %d, cap %d; want len %d and a cap at most a quarter larger", n, len(b), cap(b), n)
		}
		for i := range b {
			b[i] = byte(i)
		}
		grown := s.Reallocate(2*n+1, b)
		if len(grown) != 2*n+1 || !bytes.Equal(grown[:n], b[:n]) {
			t.Fatalf("Reallocate(%d) of %d bytes: len %d, prefix kept %v", 2*n+1, n, len(grown), bytes.Equal(grown[:n], b[:n]))
		}
		s.Free(grown)
	}
	if b := s.Allocate(0); len(b) != 0 {
		t.Fatalf("Allocate(0) has %d bytes", len(b))
	}
	s.Free(make([]byte, 99)) // not a class's capacity: ignored
	s.Free(nil)
}
