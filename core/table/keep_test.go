package table_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/croupier-data/croupier/core/cmem"
	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/internal/seedtest"
	"github.com/croupier-data/croupier/internal/tabletest"
)

// TestKeepReadsEveryPositionOnce: for random lists of row ids (repeats, runs
// and scattered rows over row groups of three files), kept sets of them read
// in random slices of positions give exactly the rows named, in order, in
// every column; two sets sharing a small budget both complete, in order, and
// give everything back; nothing is left allocated.
func TestKeepReadsEveryPositionOnce(t *testing.T) {
	dir, n := writeDir(t, 150, 70, 200) // row groups of 64 rows
	tb := open(t, "file://"+dir)
	rng := rand.New(rand.NewPCG(seedtest.Seed(t), 0))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for trial := range 40 {
		mem := memory.NewCheckedAllocator(cmem.New())
		r, err := tb.NewReader(table.ReaderOptions{Allocator: mem, MaxReads: 1 + rng.IntN(4), Decoders: 1 + rng.IntN(2),
			FetchBytes: int64(rng.IntN(2)) * (1 + rng.Int64N(64<<10))})
		if err != nil {
			t.Fatal(err)
		}
		var budget *table.Budget
		if rng.IntN(3) > 0 {
			budget = table.NewBudget(1 + rng.Int64N(32<<10))
		}
		sets := make([][]uint64, 1+rng.IntN(2))
		kept := make([]*table.Kept, len(sets))
		for s := range sets {
			sets[s] = randomIDs(rng, n)
			if kept[s], err = r.Keep(ctx, sets[s], budget); err != nil {
				t.Fatal(err)
			}
		}
		for s, ids := range sets {
			if kept[s].Len() != len(ids) {
				t.Fatalf("trial %d: Len = %d, want %d", trial, kept[s].Len(), len(ids))
			}
			for from := 0; from < len(ids); {
				to := min(len(ids), from+1+rng.IntN(50))
				rec, err := kept[s].Read(ctx, from, to)
				if err != nil {
					t.Fatalf("trial %d, set %d, positions [%d, %d): %v", trial, s, from, to, err)
				}
				checkRows(t, rec, ids[from:to])
				rec.Release()
				from = to
			}
		}
		if budget != nil {
			if now, _ := budget.Used(); now != 0 {
				t.Fatalf("trial %d: %d bytes held after every position was read", trial, now)
			}
		}
		for _, k := range kept {
			k.Close()
		}
		mem.AssertSize(t, 0)
	}
}

// randomIDs returns ids of rows in [0, n): runs of consecutive rows,
// scattered rows and repeats.
func randomIDs(rng *rand.Rand, n int64) []uint64 {
	var ids []uint64
	for range 1 + rng.IntN(8) {
		switch rng.IntN(3) {
		case 0: // a run
			start := rng.Int64N(n)
			for id := start; id < min(n, start+1+rng.Int64N(100)); id++ {
				ids = append(ids, uint64(id))
			}
		case 1: // scattered
			for range 1 + rng.IntN(60) {
				ids = append(ids, uint64(rng.Int64N(n)))
			}
		default: // repeats of ids so far
			if len(ids) > 0 {
				for range 1 + rng.IntN(5) {
					ids = append(ids, ids[rng.IntN(len(ids))])
				}
			}
		}
	}
	if len(ids) == 0 {
		ids = append(ids, uint64(rng.Int64N(n)))
	}
	return ids
}

// TestKeepClosedEarly: a kept set closed before any position is read, or
// half read, frees everything and gives its budget back.
func TestKeepClosedEarly(t *testing.T) {
	dir, n := writeDir(t, 300)
	tb := open(t, "file://"+dir)
	mem := memory.NewCheckedAllocator(cmem.New())
	defer mem.AssertSize(t, 0)
	r, err := tb.NewReader(table.ReaderOptions{Allocator: mem})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	budget := table.NewBudget(1 << 20)
	ids := make([]uint64, n)
	for i := range ids {
		ids[i] = uint64(n) - 1 - uint64(i)
	}
	for _, read := range []int{0, int(n) / 2} {
		k, err := r.Keep(ctx, ids, budget)
		if err != nil {
			t.Fatal(err)
		}
		if read > 0 {
			rec, err := k.Read(ctx, 0, read)
			if err != nil {
				t.Fatal(err)
			}
			checkRows(t, rec, ids[:read])
			rec.Release()
		}
		k.Close()
		if now, _ := budget.Used(); now != 0 {
			t.Fatalf("%d bytes held after Close", now)
		}
	}
	if _, err := r.Keep(ctx, []uint64{uint64(n)}, budget); err == nil {
		t.Fatal("Keep of a row id past the table succeeded")
	}
}

// TestKeepReadsPages: from a croupier table (with an offset index, pages of
// a few dozen rows) kept sets read back exactly the rows named, as from files
// without an index (above), and a read of a few rows fetches the pages that
// hold them, not their column chunks.
func TestKeepReadsPages(t *testing.T) {
	ctx := context.Background()
	const n = 30000
	recs := []arrow.RecordBatch{tabletest.Record(0, n/2), tabletest.Record(n/2, n/2)}
	defer recs[0].Release()
	defer recs[1].Release()
	rdr, err := array.NewRecordReader(tabletest.Schema, recs)
	if err != nil {
		t.Fatal(err)
	}
	defer rdr.Release()
	tb, err := table.Create(ctx, "file://"+t.TempDir(), rdr, table.WriteOptions{RowGroupRows: 10000, PageBytes: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	rng := rand.New(rand.NewPCG(seedtest.Seed(t), 1))
	mem := memory.NewCheckedAllocator(cmem.New())
	defer mem.AssertSize(t, 0)
	r, err := tb.NewReader(table.ReaderOptions{Allocator: mem})
	if err != nil {
		t.Fatal(err)
	}
	for range 30 {
		ids := randomIDs(rng, n)
		k, err := r.Keep(ctx, ids, table.NewBudget(1<<20))
		if err != nil {
			t.Fatal(err)
		}
		for from := 0; from < len(ids); {
			to := min(len(ids), from+1+rng.IntN(50))
			rec, err := k.Read(ctx, from, to)
			if err != nil {
				t.Fatalf("positions [%d, %d): %v", from, to, err)
			}
			checkRows(t, rec, ids[from:to])
			rec.Release()
			from = to
		}
		k.Close()
	}
	// One row of each row group: a page of the token column of each and its
	// dictionary page (here as large as the values: each token is distinct),
	// not the chunks.
	tokens := func() *table.Reader {
		r, err := tb.NewReader(table.ReaderOptions{Columns: []string{"tokens"}, Allocator: mem})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	whole, sparse := tokens(), tokens()
	for g := range 3 {
		rec, err := whole.ReadGroup(ctx, 0, g)
		if err != nil {
			t.Fatal(err)
		}
		rec.Release()
	}
	rec, err := sparse.Read(ctx, []uint64{10, 15000, 29999})
	if err != nil {
		t.Fatal(err)
	}
	if got := rec.Column(0).(*array.List).ListValues().(*array.Int32).Value(0); got != tabletest.Tokens(10)[0] {
		t.Errorf("row 10's first token %d, want %d", got, tabletest.Tokens(10)[0])
	}
	rec.Release()
	md, err := tb.Footer(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	var dicts int64
	for g := range 3 {
		col, err := md.RowGroup(g).ColumnChunk(1) // the tokens
		if err != nil {
			t.Fatal(err)
		}
		if col.HasDictionaryPage() {
			dicts += col.DataPageOffset() - col.DictionaryPageOffset()
		}
	}
	got, chunks := sparse.Stats().BytesRead, whole.Stats().BytesRead
	if (got-dicts)*4 > chunks-dicts {
		t.Errorf("three rows read %d bytes besides %d of dictionaries; the data pages of their token chunks hold %d",
			got-dicts, dicts, chunks-dicts)
	}
}
