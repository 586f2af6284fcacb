package table_test

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/croupier-data/croupier/core/blockcache"
	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/core/table/tabletest"
)

// TestBlockCacheServesTheSecondRead reads a croupier table and a plain
// Parquet dataset on the S3 test server twice, each time opened anew with a
// block cache of its own on one folder (as a second process would): the
// second read asks the store for no data range, and returns the same rows.
func TestBlockCacheServesTheSecondRead(t *testing.T) {
	ctx := context.Background()
	s := startS3(t)
	const n = 20000
	croupierURI := s.URI("bkt", "cached/croupier")
	tb, err := table.Create(ctx, croupierURI, tabletest.Reader(0, n), table.WriteOptions{RowGroupRows: 2500})
	if err != nil {
		t.Fatal(err)
	}
	tb.Close()
	if err := s.Put("bkt", "cached/plain/part-0.parquet", tabletest.Encode(t, 0, n, 3000)); err != nil {
		t.Fatal(err)
	}
	ids := make([]uint64, n)
	for i, id := range rand.New(rand.NewPCG(1, 2)).Perm(n) {
		ids[i] = uint64(id)
	}
	for name, uri := range map[string]string{"croupier": croupierURI, "plain": s.URI("bkt", "cached/plain")} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			read := func() (table.ReaderStats, int64) {
				cache, err := blockcache.Open(blockcache.Options{Dir: dir})
				if err != nil {
					t.Fatal(err)
				}
				s.ResetCounts()
				tb, err := table.OpenWith(ctx, uri, table.OpenOptions{BlockCache: cache})
				if err != nil {
					t.Fatal(err)
				}
				defer tb.Close()
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
				return r.Stats(), s.Count("GET", ".parquet")
			}
			// The first read fetches its ranges; blocks that footers and
			// page indexes brought serve some of them.
			first, _ := read()
			if first.Requests == 0 {
				t.Fatalf("first read: %+v; want requests to the store", first)
			}
			second, gets := read()
			if second.Requests != 0 || second.BytesRead != 0 || second.CacheHits == 0 || second.CacheHitBytes <= first.CacheHitBytes {
				t.Errorf("second read: %+v; want no request to the store, every byte from disk (first: %+v)", second, first)
			}
			if name == "croupier" && gets != 0 {
				// A plain dataset's listing knows its files' sizes only: the
				// first read of a footer learns their ETags.
				t.Errorf("second open and read: %d GETs of data files; want none, footers too from disk", gets)
			}
		})
	}
}
