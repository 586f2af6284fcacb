package loader_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/internal/bigtest"
	"github.com/croupier-data/croupier/loader"
	"github.com/croupier-data/croupier/permutation"
)

// TestWideRowsWithinTheBudget deals a full shuffle of a table of wide rows
// (lists of 2,000 to 20,000 int32 values, 5 times the budget) in this
// process, with the Go memory limit the C ABI sets for it: the resident
// memory it adds at its peak stays within 1.25 times the budget. A piece's
// values grow by doubling as they are decoded; copied at each growth, one
// of 32 MiB held 64 at once (measured: 83 to 88 MiB at the peak, 50 to 60
// since a growing buffer moves its pages).
func TestWideRowsWithinTheBudget(t *testing.T) {
	const rows, budget = 8192, 64 << 20
	bigtest.Skip(t, 5*budget)
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc/self/status")
	}
	s := shuffledStream(t, wideTable(t, rows, table.WriteOptions{}), loader.Options{GlobalBatchSize: 64, MemoryBudget: budget, ShuffleSeed: 7})
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(loader.GoHeapBase + loader.GoHeap(budget))) // as the C ABI sets it
	runtime.GC()
	debug.FreeOSMemory()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Skip("cannot reset the peak resident memory: ", err)
	}
	before := statusBytes(t, "VmHWM")
	if n := dealtRows(t, s); n != rows {
		t.Fatalf("dealt %d rows of %d", n, rows)
	}
	added := statusBytes(t, "VmHWM") - before
	t.Logf("peak resident memory over the start: %d MiB with a budget of %d MiB", added>>20, budget>>20)
	if added > budget*5/4 {
		t.Errorf("the read added %d MiB resident at its peak, more than 1.25 times its budget of %d MiB", added>>20, budget>>20)
	}
}

// TestFetchedWithinItsShare deals full shuffles of a table whose row groups
// are each larger than a decoder's part of the fetch share, so that every
// one is streamed in windows, and of one whose row groups are fetched whole,
// with one range request in flight, the default and the most allowed: the
// bytes fetched and not yet decoded never pass the share, though every row
// group of a horizon is wanted at once (streamed ones used to start
// fetching their windows before their part had room), and none are left
// once the stream has ended.
func TestFetchedWithinItsShare(t *testing.T) {
	tables := map[string]*table.Table{
		"streamed": wideTable(t, 512, table.WriteOptions{RowGroupRows: 32}),
		"whole":    wideTable(t, 512, table.WriteOptions{RowGroupRows: 4}),
	}
	for name, tb := range tables {
		for _, reads := range []int{1, 0, loader.MaxReadsLimit} {
			t.Run(fmt.Sprintf("%s, max_reads %d", name, reads), func(t *testing.T) {
				s := shuffledStream(t, tb, loader.Options{GlobalBatchSize: 8, MemoryBudget: 16 << 20, ShuffleSeed: 3, MaxReads: reads})
				n := dealtRows(t, s)
				st := s.Stats()
				if n != 512 || st.RowGroups < 16 {
					t.Fatalf("dealt %d rows of 512, decoding %d row groups", n, st.RowGroups)
				}
				if st.FetchedPeak == 0 || st.FetchedPeak > st.FetchLimit {
					t.Errorf("%d bytes fetched and not yet decoded at once; the share is %d", st.FetchedPeak, st.FetchLimit)
				}
				if st.FetchedBytes != 0 {
					t.Errorf("%d bytes fetched still held after the last step", st.FetchedBytes)
				}
			})
		}
	}
}

// shuffledStream opens a stream of epoch 0 of tb, in one split shuffled by
// opts.ShuffleSeed, closed when the test ends.
func shuffledStream(t *testing.T, tb *table.Table, opts loader.Options) *loader.Stream {
	t.Helper()
	opts.NumSplits = 1
	l, err := loader.New(tb, permutation.Identity{N: tb.NumRows()}, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	s, err := l.Stream(context.Background(), loader.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// dealtRows reads s to its end and returns the rows it dealt.
func dealtRows(t *testing.T, s *loader.Stream) int {
	t.Helper()
	n := 0
	for {
		b, err := s.Next(context.Background())
		if err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatal(err)
			}
			return n
		}
		n += int(b.Record.NumRows())
		b.Record.Release()
	}
}

// wideTable creates a croupier table of rows rows of an id and a list of
// 2,000 to 20,000 int32 values.
func wideTable(t *testing.T, rows int, opts table.WriteOptions) *table.Table {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "tokens", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32)},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	ids, lists := b.Field(0).(*array.Int64Builder), b.Field(1).(*array.ListBuilder)
	values := lists.ValueBuilder().(*array.Int32Builder)
	for i := range rows {
		ids.Append(int64(i))
		lists.Append(true)
		for range 2000 + rng.IntN(18001) {
			values.Append(rng.Int32N(1 << 20))
		}
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	r, err := array.NewRecordReader(schema, []arrow.RecordBatch{rec})
	if err != nil {
		t.Fatal(err)
	}
	tb, err := table.Create(context.Background(), "file://"+filepath.Join(t.TempDir(), "wide"), r, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tb.Close() })
	return tb
}

// statusBytes is a size field of /proc/self/status (VmRSS, VmHWM) in bytes.
func statusBytes(t *testing.T, field string) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			var kb int64
			if _, err := fmt.Sscan(v, &kb); err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/self/status", field)
	return 0
}
