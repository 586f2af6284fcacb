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

// TestBufferList: a buffer given back serves the next get that fits in it,
// whatever its size; a full list keeps the largest buffers it was given.
func TestBufferList(t *testing.T) {
	l := bufferList{max: 2}
	a := l.get(1000)
	if len(a) != 1000 || cap(a) < 1000 {
		t.Fatalf("get(1000): len %d, cap %d", len(a), cap(a))
	}
	l.put(a)
	if b := l.get(10); &b[0] != &a[0] || len(b) != 10 {
		t.Fatalf("get(10) after put of a 1000-byte buffer: a new buffer of %d bytes", len(b))
	}
	if b := l.get(10); &b[0] == &a[0] {
		t.Fatal("a buffer handed out twice")
	}
	small, mid, large := l.get(10), l.get(100), l.get(5000)
	l.put(small)
	l.put(mid)
	l.put(large) // full: replaces the first smaller one it finds
	caps := []int{cap(l.free[0]), cap(l.free[1])}
	if len(l.free) != 2 || (caps[0] != cap(large) && caps[1] != cap(large)) || (caps[0] != cap(mid) && caps[1] != cap(mid)) {
		t.Fatalf("kept buffers of %v bytes; want those of %d and %d", caps, cap(mid), cap(large))
	}
	if b := l.get(4000); &b[0] != &large[0] {
		t.Fatal("get(4000) did not reuse the 5000-byte buffer")
	}
}
