package store

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestFileVersionOfClosedFile: a read whose file another read closed
// meanwhile (to make room, or on seeing it changed) sees os.ErrClosed from
// the version check, as from the read itself, and so opens the file again
// instead of failing.
func TestFileVersionOfClosedFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := fileVersion(f); err != nil || v.Size != 1 {
		t.Fatalf("fileVersion of an open file = %+v, %v", v, err)
	}
	f.Close()
	if _, err := fileVersion(f); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("fileVersion of a closed file = %v, want os.ErrClosed", err)
	}
}
