package loader_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/internal/tabletest"
	"github.com/croupier-data/croupier/loader"
	"github.com/croupier-data/croupier/permutation"
)

// The rare-rows table: rareRows rows of 100 random bytes, but for rows
// rareAt, each rareCell random bytes (2,600 times the others), in four
// consecutive steps of 16 rows in the table's order.
const (
	rareRows = 2048
	rareCell = 256 << 10
)

var rareAt = []int{1000, 1016, 1032, 1048}

// rareTables writes the rare-rows table as a croupier table (offset index,
// 16 KiB pages), as plain Parquet as arrow-go writes it (no offset index,
// 1 MiB pages in row groups of 512 rows), as the same in 4 KiB pages, and as
// the plain Parquet of 1 MiB pages with the cells as lists of int32, and
// opens them.
func rareTables(t *testing.T) map[string]*table.Table {
	t.Helper()
	ctx := context.Background()
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "blob", Type: arrow.BinaryTypes.Binary},
	}, nil)
	b := array.NewRecordBuilder(memory.NewGoAllocator(), schema)
	defer b.Release()
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range rareRows {
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		cell := make([]byte, 100)
		for _, at := range rareAt {
			if i == at {
				cell = make([]byte, rareCell)
			}
		}
		for j := range cell {
			cell[j] = byte(rng.Uint32())
		}
		b.Field(1).(*array.BinaryBuilder).Append(cell)
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	rr, err := array.NewRecordReader(schema, []arrow.RecordBatch{rec})
	if err != nil {
		t.Fatal(err)
	}
	croupier, err := table.Create(ctx, "file://"+t.TempDir(), rr, table.WriteOptions{RowGroupRows: 512})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { croupier.Close() })
	plain := openPlain(t, rec)
	// The same, in pages of 4 KiB: each large cell ends a page of its own
	// and a few dozen small rows, which only the pages' headers declare.
	smallPages := openPlain(t, rec, parquet.WithDataPageSize(4<<10), parquet.WithBatchSize(8))
	// The same cells as lists of int32, which headers alone do not locate:
	// a V1 page does not say how many lists it holds.
	lists := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "blob", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32)},
	}, nil)
	lb := array.NewRecordBuilder(memory.NewGoAllocator(), lists)
	defer lb.Release()
	cells := rec.Column(1).(*array.Binary)
	for i := range rareRows {
		lb.Field(0).(*array.Int64Builder).Append(int64(i))
		list := lb.Field(1).(*array.ListBuilder)
		list.Append(true)
		for j := 0; j+4 <= len(cells.Value(i)); j += 4 {
			list.ValueBuilder().(*array.Int32Builder).Append(int32(binary.LittleEndian.Uint32(cells.Value(i)[j:])))
		}
	}
	lrec := lb.NewRecordBatch()
	defer lrec.Release()
	plainLists := openPlain(t, lrec)
	return map[string]*table.Table{"croupier table": croupier, "plain Parquet": plain,
		"plain Parquet, small pages": smallPages, "plain Parquet of lists": plainLists}
}

// openPlain writes rec as one Parquet file of arrow-go's, in row groups of
// 512 rows, without dictionaries, with props more, and opens it as a table.
func openPlain(t *testing.T, rec arrow.RecordBatch, props ...parquet.WriterProperty) *table.Table {
	t.Helper()
	dir := t.TempDir()
	props = append([]parquet.WriterProperty{parquet.WithMaxRowGroupLength(512), parquet.WithDictionaryDefault(false)}, props...)
	if err := os.WriteFile(filepath.Join(dir, "part-0.parquet"), tabletest.EncodeRecord(t, rec, props...), 0o644); err != nil {
		t.Fatal(err)
	}
	tb, err := table.Open(context.Background(), "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tb.Close() })
	return tb
}

// rareOrders are the table's order and a full shuffle of it.
func rareOrders(t *testing.T, tb *table.Table) map[string]permutation.Order {
	t.Helper()
	perms, err := permutation.Build(context.Background(), tb, permutation.Spec{Shuffle: &permutation.ShuffleSpec{Seed: 7}},
		"file://"+t.TempDir()+"/perm", permutation.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { perms.Close() })
	return map[string]permutation.Order{"stored": permutation.Identity{N: tb.NumRows()}, "full shuffle": perms.Splits()[0]}
}

// TestRareLargeRowsWithinTheBudget deals the rare-rows table, both forms, in
// its order and in a full shuffle, with a budget 16 times a large cell and
// four batches read ahead: every row is dealt once, the batches read ahead
// never hold more than their share or, when one batch is larger, that batch
// alone (four consecutive steps each with a large cell would otherwise be
// read ahead together), and the rows kept exceed their share by at most the
// large rows of one horizon.
func TestRareLargeRowsWithinTheBudget(t *testing.T) {
	for form, tb := range rareTables(t) {
		for name, order := range rareOrders(t, tb) {
			t.Run(form+", "+name, func(t *testing.T) {
				seen := make([]bool, rareRows)
				var largest int64 // bytes of the largest batch
				_, st := dealWithBudget(t, tb, order, loader.Options{GlobalBatchSize: 16, NumSplits: 1, ReadAhead: 4,
					MemoryBudget: 16 * rareCell}, func(rec arrow.RecordBatch) {
					for _, id := range rec.Column(0).(*array.Int64).Int64Values() {
						if seen[id] {
							t.Fatalf("row %d dealt twice", id)
						}
						seen[id] = true
					}
					largest = max(largest, table.RecordBytes(rec))
				})
				for id, ok := range seen {
					if !ok {
						t.Fatalf("row %d not dealt", id)
					}
				}
				if largest < rareCell {
					t.Fatalf("the largest batch holds %d bytes, less than a large cell", largest)
				}
				if st.AheadPeak > max(st.AheadLimit, largest) {
					t.Errorf("batches read ahead peaked at %d bytes; the share is %d and the largest batch %d",
						st.AheadPeak, st.AheadLimit, largest)
				}
				if st.HeldPeak > st.HeldLimit*5/4+int64(len(rareAt))*rareCell {
					t.Errorf("kept rows peaked at %d bytes; the share is %d, the large rows %d", st.HeldPeak, st.HeldLimit,
						len(rareAt)*rareCell)
				}
			})
		}
	}
}

// TestLargeBatchOutReadsNothingAhead deals the rare-rows table in its
// order with four batches read ahead: while the consumer holds a batch larger
// than the whole read-ahead share (a step with a large cell), that batch is
// counted among the batches read ahead, and nothing else is read ahead
// beside it, until the consumer asks for the next batch.
func TestLargeBatchOutReadsNothingAhead(t *testing.T) {
	ctx := context.Background()
	tb := rareTables(t)["croupier table"]
	l, err := loader.New(tb, permutation.Identity{N: tb.NumRows()}, loader.Options{GlobalBatchSize: 16, NumSplits: 1,
		ReadAhead: 4, MemoryBudget: 16 * rareCell})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s, err := l.Stream(ctx, loader.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	large := 0
	for b, err := range s.All(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		n := largeBatchBytes(b.Record)
		st := s.Stats()
		if n > st.AheadLimit {
			large++
			// The next batches may be kept, not read ahead: the share
			// counts this one alone.
			if st.AheadBytes != n {
				t.Errorf("step %d, of %d bytes, is out; the batches read ahead count %d bytes (share %d)",
					b.Step, n, st.AheadBytes, st.AheadLimit)
			}
		}
		b.Record.Release()
	}
	if large != len(rareAt) {
		t.Fatalf("%d batches larger than the read-ahead share; want %d", large, len(rareAt))
	}
	// What the bound's allowance counts (docs/tuning.md): the largest row
	// dealt (its id and its cell) and the largest page charged whole.
	st := s.Stats()
	if st.LargestRow != rareCell+8 || st.LargePage < rareCell || st.LargePage > 2*rareCell || st.LargeDictionary != 0 {
		t.Errorf("largest row %d, large page %d, large dictionary %d; want %d, about %d, 0",
			st.LargestRow, st.LargePage, st.LargeDictionary, rareCell+8, rareCell)
	}
}

// largeBatchBytes is a batch's bytes as the read-ahead share counts them:
// its rows' values.
func largeBatchBytes(rec arrow.RecordBatch) int64 {
	var n int64
	for _, col := range rec.Columns() {
		switch c := col.(type) {
		case *array.Binary:
			n += int64(len(c.ValueBytes()))
		case *array.Int64:
			n += int64(8 * c.Len())
		}
	}
	return n
}

// TestRareRowLargerThanTheBudget deals the rare-rows table with a budget
// smaller than one large cell: where the cell's page is located before it is
// read (a croupier table's offset index; the headers of a plain file's flat
// column), the first step that needs a row of that page (the large row's, or
// the one before, whose last rows share its page) is refused before the page
// is fetched, naming the step, its row, the page's rows and size and the
// budget, and every step before it is dealt; where it is not (a plain file's
// lists), the first step that needs the row group is refused by the page's
// header, before the page is decoded. In a full shuffle too the error names
// a step the order deals there.
func TestRareRowLargerThanTheBudget(t *testing.T) {
	ctx := context.Background()
	const budget = rareCell * 3 / 4
	for form, tb := range rareTables(t) {
		for name, order := range rareOrders(t, tb) {
			t.Run(form+", "+name, func(t *testing.T) {
				l, err := loader.New(tb, order, loader.Options{GlobalBatchSize: 16, NumSplits: 1, MemoryBudget: budget, ReadAhead: 2})
				if err != nil {
					t.Fatal(err)
				}
				defer l.Close()
				s, err := l.Stream(ctx, loader.StreamOptions{})
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				var dealt int64
				for {
					b, err := s.Next(ctx)
					if err == nil {
						if b.Step != dealt {
							t.Fatalf("step %d after %d steps", b.Step, dealt)
						}
						b.Record.Release()
						dealt++
						continue
					}
					if errcode.Of(err) != errcode.InvalidArgument || !strings.Contains(err.Error(), fmt.Sprintf("step %d ", dealt)) ||
						!strings.Contains(err.Error(), fmt.Sprintf("more than memory_budget %d bytes", budget)) {
						t.Fatalf("after %d steps: %v; want InvalidArgument naming step %d and the budget", dealt, err, dealt)
					}
					ids, idsErr := order.RowIDs(ctx, dealt*16, dealt*16+16)
					if idsErr != nil {
						t.Fatal(idsErr)
					}
					msg := err.Error()
					if form == "plain Parquet of lists" && strings.Contains(msg, "needs rows of a row group") {
						// Pages found as they are read: the step that first
						// needs the row group is refused, by the page's
						// header, before the page is decoded.
						if first := int64(rareAt[0] / 512 * 512 / 16); name == "stored" && dealt != first {
							t.Fatalf("refused at step %d; the large row's row group starts in step %d", dealt, first)
						}
						return
					}
					named := false // a row of the step
					for _, id := range ids {
						named = named || strings.Contains(msg, fmt.Sprintf("row id %d,", id))
					}
					if !named {
						t.Fatalf("step %d (rows %v) refused without naming a row of it: %v", dealt, ids, err)
					}
					// The page's rows: the large row's and those before it
					// in its page, the first of which the step needs.
					if !strings.Contains(msg, "holding row ids") {
						t.Fatalf("a large row refused without naming its page's rows: %v", err)
					}
					var first, last int64
					if _, scanErr := fmt.Sscanf(msg[strings.Index(msg, "holding row ids"):], "holding row ids %d to %d", &first, &last); scanErr != nil {
						t.Fatalf("a large row refused without naming its page's rows: %v", err)
					}
					if !slices.ContainsFunc(rareAt, func(at int) bool { return int64(at) >= first && int64(at) <= last }) {
						t.Fatalf("the page of rows %d to %d holds no large row: %v", first, last, err)
					}
					if name == "stored" && dealt != first/16 {
						t.Fatalf("refused at step %d; the page of the first large row starts in step %d", dealt, first/16)
					}
					return
				}
			})
		}
	}
}

// TestRunEndsAloneAtLargeRows cuts the rare-rows table's epoch into runs
// with Stream.RunEnd, as the Python package's DataLoader workers do, at
// eight steps' guessed bytes a run: over the croupier table (offset index)
// and plain Parquet of small pages (no offset index: the pages' headers
// declare them) each step holding a large cell is a run alone and every
// other run is at most eight steps; over plain Parquet whose pages of a
// megabyte hold the large cells among hundreds of small ones (no page far
// larger than the rest), and its lists (whose headers do not say their
// rows), runs are eight steps. Both workers' streams find the same runs,
// and find them again after one has read the whole epoch (which teaches a
// plain table where its pages lie).
func TestRunEndsAloneAtLargeRows(t *testing.T) {
	ctx := context.Background()
	for form, tb := range rareTables(t) {
		for name, order := range rareOrders(t, tb) {
			t.Run(form+", "+name, func(t *testing.T) {
				l, err := loader.New(tb, order, loader.Options{GlobalBatchSize: 16, NumSplits: 1, MemoryBudget: 16 * rareCell})
				if err != nil {
					t.Fatal(err)
				}
				defer l.Close()
				steps := l.StepsPerEpoch()
				large := map[int64]bool{}
				for step := range steps {
					ids, err := l.RowIDs(ctx, 0, step)
					if err != nil {
						t.Fatal(err)
					}
					for _, id := range ids {
						large[step] = large[step] || slices.Contains(rareAt, int(id))
					}
				}
				streams := make([]*loader.Stream, 2)
				for w := range streams {
					if streams[w], err = l.Stream(ctx, loader.StreamOptions{ShareSteps: true, Worker: w, NumWorkers: 2}); err != nil {
						t.Fatal(err)
					}
					defer streams[w].Close()
				}
				runBytes := 8 * streams[0].Stats().StepBytes
				runs := func(s *loader.Stream) []int64 {
					var ends []int64
					for first := int64(0); first < steps; first = ends[len(ends)-1] {
						end, err := s.RunEnd(ctx, first, 16, runBytes)
						if err != nil {
							t.Fatal(err)
						}
						if end <= first || end > steps {
							t.Fatalf("the run from step %d ends at %d, out of (%d, %d]", first, end, first, steps)
						}
						ends = append(ends, end)
					}
					return ends
				}
				want := runs(streams[0])
				if got := runs(streams[1]); !slices.Equal(got, want) {
					t.Fatalf("worker 1's runs end at %v; worker 0's at %v", got, want)
				}
				first := int64(0)
				for _, end := range want {
					seen := form == "croupier table" || form == "plain Parquet, small pages"
					for step := first; step < end; step++ {
						if seen && large[step] && end-first != 1 {
							t.Errorf("step %d holds a large row in the run [%d, %d)", step, first, end)
						}
					}
					if n := end - first; n > 8 || !seen && n != min(8, steps-first) {
						t.Errorf("the run [%d, %d) has %d steps", first, end, n)
					}
					first = end
				}
				for _, err := range streams[0].All(ctx) {
					if err != nil {
						t.Fatal(err)
					}
				}
				if got := runs(streams[1]); !slices.Equal(got, want) {
					t.Fatalf("after a read of the epoch, the runs end at %v; before, at %v", got, want)
				}
				for _, bad := range [][3]int64{{-1, 16, 0}, {steps, 16, 0}, {0, 0, 0}, {0, 16, -1}} {
					if _, err := streams[1].RunEnd(ctx, bad[0], bad[1], bad[2]); errcode.Of(err) != errcode.InvalidArgument {
						t.Errorf("RunEnd(%d, %d, %d): %v, want an invalid argument", bad[0], bad[1], bad[2], err)
					}
				}
			})
		}
	}
}

// TestRowGuessLeavesLargePagesOut guesses a row of the rare-rows table's row
// group that holds the large cells, before any row is kept: its ordinary
// rows' bytes, not the group's mean with the large cells in it, which a
// piece charged beside those cells' pages (a piece admitted before any other
// was built was charged both, and the next horizon's rows kept beside it).
func TestRowGuessLeavesLargePagesOut(t *testing.T) {
	tb := rareTables(t)["croupier table"]
	r, err := tb.NewReader(table.ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	groups, err := r.Groups([]uint64{uint64(rareAt[0])})
	if err != nil {
		t.Fatal(err)
	}
	guess, err := r.GuessRowBytes(context.Background(), groups[0])
	if err != nil {
		t.Fatal(err)
	}
	if guess > 1024 { // a row is an int64 and 100 bytes
		t.Fatalf("a row of the group holding the large cells guessed at %d bytes", guess)
	}
}
