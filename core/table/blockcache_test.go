package table_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/croupier-data/croupier/core/blockcache"
	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/internal/s3test"
	"github.com/croupier-data/croupier/internal/tabletest"
)

// TestBlockCacheServesTheSecondRead reads a croupier table and a plain
// Parquet dataset on the S3 test server three times, each time opened anew
// with a block cache of its own on one folder (as another process would),
// the third time from the first's pin (as a DataLoader worker does): the
// reads after the first ask the store for no data range, and return the same
// rows.
func TestBlockCacheServesTheSecondRead(t *testing.T) {
	ctx := context.Background()
	s := startS3(t)
	const n = 12000
	croupierURI := s.URI("bkt", "cached/croupier")
	tb, err := table.Create(ctx, croupierURI, tabletest.Reader(0, n), table.WriteOptions{RowGroupRows: 2000})
	if err != nil {
		t.Fatal(err)
	}
	tb.Close()
	if err := s.Put("bkt", "cached/plain/part-0.parquet", tabletest.Encode(t, 0, n, 2000)); err != nil {
		t.Fatal(err)
	}
	ids := make([]uint64, n)
	for i, id := range rand.New(rand.NewPCG(1, 2)).Perm(n) {
		ids[i] = uint64(id)
	}
	for name, uri := range map[string]string{"croupier": croupierURI, "plain": s.URI("bkt", "cached/plain")} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			var pin *table.Pin
			var held bool // whether the table was Cached before the last read
			read := func() (table.ReaderStats, int64, table.Pin) {
				cache, err := blockcache.Open(blockcache.Options{Dir: dir})
				if err != nil {
					t.Fatal(err)
				}
				s.ResetCounts()
				opts := table.OpenOptions{BlockCache: cache}
				var tb *table.Table
				if pin != nil {
					tb, err = table.OpenPinWith(ctx, *pin, opts)
				} else {
					tb, err = table.OpenWith(ctx, uri, opts)
				}
				if err != nil {
					t.Fatal(err)
				}
				defer tb.Close()
				held = tb.Cached()
				r, err := tb.NewReader(table.ReaderOptions{})
				if err != nil {
					t.Fatal(err)
				}
				defer r.Close()
				rec, err := r.Read(ctx, ids)
				if err != nil {
					t.Fatal(err)
				}
				defer rec.Release()
				want := tabletest.Record(0, n)
				defer want.Release()
				for i, id := range ids {
					for c := range want.NumCols() {
						if !array.SliceEqual(rec.Column(int(c)), int64(i), int64(i+1), want.Column(int(c)), int64(id), int64(id+1)) {
							t.Fatalf("row %d (id %d), column %d differs", i, id, c)
						}
					}
				}
				return r.Stats(), s.Count("GET", ".parquet"), tb.Pin()
			}
			// The first read fetches its ranges; blocks that footers and
			// page indexes brought serve some of them.
			first, _, firstPin := read()
			if first.Requests == 0 {
				t.Fatalf("first read: %+v; want requests to the store", first)
			}
			if held {
				t.Error("the table was Cached before its first read")
			}
			for _, how := range []string{"opened again", "opened from the pin"} {
				again, gets, _ := read()
				if !held {
					t.Errorf("%s: the table read whole through the cache is not Cached", how)
				}
				if again.Requests != 0 || again.BytesRead != 0 || again.CacheHits == 0 || again.CacheHitBytes == 0 {
					t.Errorf("%s: %+v; want no request to the store, every byte from disk (first: %+v)", how, again, first)
				}
				// A plain dataset's listing knows its files' sizes only: the
				// first read of a footer learns their ETags. A pin knows them.
				if (name == "croupier" || pin != nil) && gets != 0 {
					t.Errorf("%s: %d GETs of data files; want none, footers too from disk", how, gets)
				}
				pin = &firstPin
			}
		})
	}
}

// TestKeepWarmsTheCache keeps rows of every row group of a table 20 ms away
// with a disk cache and a fetch share that holds one row group at a time: the
// blocks of the row groups' sections are fetched into the cache ahead of
// them, many at once, and the rows come out right.
func TestKeepWarmsTheCache(t *testing.T) {
	ctx := context.Background()
	s := startS3(t)
	const n, group = 200_000, 8000
	uri := s.URI("bkt", "warm")
	tb, err := table.Create(ctx, uri, tabletest.Reader(0, n), table.WriteOptions{RowGroupRows: group, PageBytes: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	tb.Close()
	cache, err := blockcache.Open(blockcache.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	s.SetFaults(s3test.Faults{FirstByte: 20 * time.Millisecond})
	tb, err = table.OpenWith(ctx, uri, table.OpenOptions{BlockCache: cache})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	r, err := tb.NewReader(table.ReaderOptions{Columns: []string{"id", "tokens", "text"}, FetchBytes: 1, Decoders: 1})
	if err != nil {
		t.Fatal(err)
	}
	var ids []uint64
	for id := uint64(7); id < n; id += 97 {
		ids = append(ids, id)
	}
	s.ResetCounts()
	got, err := r.Read(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Release()
	checkIDsAndText(t, got, ids, 2)
	// One row group at a time fetches one or two blocks at a time; the
	// warm-up fetches the 25 row groups' blocks side by side.
	if p := s.PeakInFlight(); p < 4 {
		t.Fatalf("at most %d requests at once: the cache was not warmed ahead of the row groups", p)
	}
	t.Logf("%d requests, %d at once at most", s.Requests(), s.PeakInFlight())
}
