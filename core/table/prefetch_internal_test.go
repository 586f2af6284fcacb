package table

import (
	"bytes"
	"context"
	"testing"

	"github.com/croupier-data/croupier/core/store"
)

// TestPrefetchFreesWhatIsRead reads an object through a prefetch in order,
// a page spanning several windows at a time: each window is freed once a
// read has copied it to its end, not once a later read lies past it, so that
// the windows after it are fetched in its room while the page is decoded;
// the bytes read are the object's.
func TestPrefetchFreesWhatIsRead(t *testing.T) {
	ctx := context.Background()
	loc, err := store.Open(ctx, "mem://prefetchtest/t")
	if err != nil {
		t.Fatal(err)
	}
	defer loc.Close()
	data := make([]byte, 1<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	if err := loc.WriteAll(ctx, "obj", data, store.WriterOptions{}); err != nil {
		t.Fatal(err)
	}
	obj, err := loc.Stat(ctx, "obj")
	if err != nil {
		t.Fatal(err)
	}
	const win, limit, page = 64 << 10, 256 << 10, 200 << 10 // a page spans four windows
	var stats readerStats
	open := func(ctx context.Context) *store.ReaderAt { return loc.NewReaderAt(ctx, obj) }
	p := newPrefetch(ctx, open, "obj", []byteRange{{0, int64(len(data))}}, win, limit, newSlots(64, 0), 0, &stats)
	defer p.close()
	buf := make([]byte, page)
	for off := 0; off < len(data); off += page {
		b := buf[:min(page, len(data)-off)]
		n, err := p.read(b, int64(off))
		if err != nil || n != len(b) {
			t.Fatalf("read at %d: %d bytes, %v", off, n, err)
		}
		if !bytes.Equal(b, data[off:off+len(b)]) {
			t.Fatalf("read at %d: other bytes than the object's", off)
		}
		p.mu.Lock()
		for j, w := range p.wins {
			if read := w.off+w.n <= int64(off+len(b)); read != p.freed[j] {
				p.mu.Unlock()
				t.Fatalf("after reading to %d: window %d [%d, %d) freed %v", off+len(b), j, w.off, w.off+w.n, p.freed[j])
			}
		}
		p.mu.Unlock()
	}
}
