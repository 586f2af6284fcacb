//go:build linux

package main

import (
	"os"
	"testing"
)

// TestReleaseImageDropsCleanPages makes every page of this binary's
// read-only mappings resident, releases them, and finds the clean ones
// dropped and the private copies (relocated data) kept.
func TestReleaseImageDropsCleanPages(t *testing.T) {
	mem, err := os.Open("/proc/self/mem")
	if err != nil {
		t.Skip("no /proc/self/mem here")
	}
	defer mem.Close()
	maps, err := imageMappings()
	if err != nil {
		t.Fatal(err)
	}
	if len(maps) == 0 {
		t.Fatal("no mapping of this binary found")
	}
	buf := make([]byte, 1<<20)
	for _, m := range maps {
		for at := m.start; at < m.end && !m.writable; at += uintptr(len(buf)) {
			_, _ = mem.ReadAt(buf[:min(uintptr(len(buf)), m.end-at)], int64(at))
		}
	}
	resident, err := imageMappings()
	if err != nil {
		t.Fatal(err)
	}
	dropped, err := releaseImage()
	if err != nil {
		t.Fatal(err)
	}
	after, err := imageMappings()
	if err != nil {
		t.Fatal(err)
	}
	clean, cleanAfter, copies := int64(0), int64(0), 0
	for i, m := range resident {
		switch {
		case m.writable:
		case m.anonymous > 0:
			copies++
			if after[i].start != m.start || after[i].anonymous != m.anonymous {
				t.Errorf("mapping at %#x held %d bytes of private copies, then %d", m.start, m.anonymous, after[i].anonymous)
			}
		default:
			clean += m.rss
			cleanAfter += after[i].rss
		}
	}
	t.Logf("clean read-only pages: %d MiB resident, %d MiB after dropping %d MiB of mappings; %d with private copies kept",
		clean>>20, cleanAfter>>20, dropped>>20, copies)
	if dropped == 0 || clean < 4<<20 {
		t.Fatalf("dropped %d bytes of mappings, %d resident before: nothing to test", dropped, clean)
	}
	if cleanAfter > clean/2 {
		t.Errorf("clean read-only pages: %d bytes resident after release, of %d", cleanAfter, clean)
	}
}
