package table

import (
	"context"
	"testing"

	"github.com/croupier-data/croupier/core/store"
	"github.com/croupier-data/croupier/internal/tabletest"
)

// TestPinReadsFootersOfTheVersionStated pins files whose listing is out of
// date (the size listed is not the size stat'ed, as when a file is replaced
// between the two): the footer read at the listed size must not stand, and
// the pin must describe the file as it is.
func TestPinReadsFootersOfTheVersionStated(t *testing.T) {
	ctx := context.Background()
	loc, err := store.Open(ctx, "mem://pintest/t")
	if err != nil {
		t.Fatal(err)
	}
	defer loc.Close()
	small, large := tabletest.Encode(t, 0, 100, 10), tabletest.Encode(t, 0, 1000, 10)
	for _, f := range []struct {
		key  string
		data []byte
	}{{"t/a.parquet", large}, {"t/b.parquet", small}} {
		if err := loc.WriteAll(ctx, f.key, f.data, store.WriterOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	listed := []store.Object{
		{Key: "t/a.parquet", Size: int64(len(large))}, // up to date
		{Key: "t/b.parquet", Size: int64(len(large))}, // listed before b was rewritten smaller
	}
	tb, err := pinParquet(ctx, loc, listed, nil)
	if err != nil {
		t.Fatal(err)
	}
	files := tb.Files()
	if files[0].NumRows != 1000 || files[1].NumRows != 100 || files[1].Size != int64(len(small)) {
		t.Fatalf("pinned %d rows (%d bytes) and %d rows (%d bytes); want 1000 and 100 rows (%d bytes)",
			files[0].NumRows, files[0].Size, files[1].NumRows, files[1].Size, len(small))
	}
	if files[1].ModTime.IsZero() {
		t.Fatal("the pin has no modification time")
	}
}
