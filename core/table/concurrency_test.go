package table_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/croupier-data/croupier/core/cmem"
	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/internal/tabletest"
	"github.com/croupier-data/croupier/loader"
	"github.com/croupier-data/croupier/permutation"
)

// Lengths of TestConcurrentTableUse: it runs for concurrentFor, longer if
// needed (up to concurrentMax) until Cleanup has removed a version and an
// orphan and a build and a few streams are done. concurrentGrace is far above
// the time an append takes from listing the versions to committing (see
// CleanupOptions.Grace).
const (
	concurrentFor   = 3500 * time.Millisecond
	concurrentMax   = 30 * time.Second
	concurrentGrace = 3 * time.Second
	initialRows     = 200
)

// readRecord is what one stream over a pinned version delivered: the row ids
// it dealt and the ids it read at them.
type readRecord struct {
	version int64
	rowIDs  []uint64
	ids     []int64
}

// TestConcurrentTableUse runs on one table, at once and for a few seconds:
// appenders, writers that die leaving orphan data files, loader streams over
// pinned versions (the latest, and pins whose manifests Cleanup has since
// removed), permutation builds over pinned versions, and Cleanup keeping two
// versions. Every stream must deliver exactly its pinned version's rows, every
// build must succeed (or fail with errcode.Changed, never with corrupt data),
// and Cleanup must remove orphans but no data file of a retained version.
func TestConcurrentTableUse(t *testing.T) {
	s := startS3(t)
	for name, uri := range map[string]string{
		"file": "file://" + filepath.Join(t.TempDir(), "tbl"),
		"s3":   s.URI("bkt", "concurrent-use"),
	} {
		t.Run(name, func(t *testing.T) {
			permURI := func(i int) string {
				if name == "s3" {
					return s.URI("bkt", "perms/"+strconv.Itoa(i))
				}
				return "file://" + filepath.Join(t.TempDir(), "perm")
			}
			concurrentUse(t, uri, permURI)
		})
	}
}

func concurrentUse(t *testing.T, uri string, permURI func(int) string) {
	ctx := context.Background()
	initial := seq(1_000_000, initialRows)
	tb, err := table.Create(ctx, uri, tabletest.Reader(initial[0], initialRows), table.WriteOptions{RowGroupRows: 32})
	if err != nil {
		t.Fatal(err)
	}
	tb.Close()
	mem := memory.NewCheckedAllocator(cmem.New())
	defer mem.AssertSize(t, 0)

	var (
		mu        sync.Mutex
		errs      []error
		committed = map[int64][]int64{1: initial} // version -> ids it added
		slowest   time.Duration                   // the longest append
		reads     []readRecord
		deleted   []string // object URIs Cleanup deleted
		removed   []int64  // versions Cleanup deleted
		pins      []table.Pin
		builds    int
		orphans   int
		start     = time.Now()
		fail      = func(err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() }
		locked    = func(fn func()) { mu.Lock(); fn(); mu.Unlock() }
	)
	enough := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(removed) > 0 && len(deleted) > 0 && builds > 0 && len(reads) >= 4
	}
	running := func() bool {
		mu.Lock()
		failed := len(errs) > 0
		mu.Unlock()
		since := time.Since(start)
		return !failed && since < concurrentMax && (since < concurrentFor || !enough())
	}
	var wg sync.WaitGroup
	for w := range 2 { // appenders
		wg.Go(func() {
			for j := 0; running(); j++ {
				began := time.Now()
				v, err := table.Append(ctx, uri, tabletest.Reader(writerID(w, j, 0), rowsPerAppend), table.WriteOptions{})
				// A failed append counts too: one slower than the grace
				// period may find its parent cleaned up.
				took := time.Since(began)
				locked(func() { slowest = max(slowest, took) })
				if err != nil {
					fail(fmt.Errorf("append (after %s): %w", took.Round(time.Millisecond), err))
					return
				}
				locked(func() { committed[v] = seq(writerID(w, j, 0), rowsPerAppend) })
			}
		})
	}
	wg.Go(func() { // writers killed between their data and their manifest
		for i := 0; running(); i++ {
			if err := table.WriteOrphan(ctx, uri, tabletest.Reader(int64(5e8+i), 2)); err != nil {
				fail(fmt.Errorf("orphan: %w", err))
				return
			}
			locked(func() { orphans++ })
			time.Sleep(20 * time.Millisecond)
		}
	})
	cleanup := func() {
		res, err := table.Cleanup(ctx, uri, table.CleanupOptions{KeepLast: 2, Grace: concurrentGrace})
		if err != nil {
			fail(fmt.Errorf("cleanup: %w", err))
			return
		}
		locked(func() {
			deleted = append(deleted, res.DeletedFiles...)
			removed = append(removed, res.DeletedVersions...)
		})
	}
	wg.Go(func() {
		for running() {
			cleanup()
			time.Sleep(50 * time.Millisecond)
		}
	})
	for r := range 2 { // streams over the latest version, or an older pin
		wg.Go(func() {
			for i := 0; running(); i++ {
				var pin *table.Pin
				locked(func() {
					if i%2 == 1 && len(pins) > 0 {
						pin = &pins[(r+i)%len(pins)]
					}
				})
				var tb *table.Table
				var err error
				if pin != nil {
					tb, err = table.OpenPin(ctx, *pin)
				} else if tb, err = table.Open(ctx, uri); err == nil {
					locked(func() { pins = append(pins, tb.Pin()) })
				}
				if err != nil {
					fail(fmt.Errorf("reader: %w", err))
					return
				}
				rec, err := streamAll(ctx, tb, permutation.Identity{N: tb.NumRows()}, mem)
				tb.Close()
				if err != nil {
					fail(fmt.Errorf("stream over version %s: %w", tb.Version(), err))
					return
				}
				locked(func() { reads = append(reads, rec) })
			}
		})
	}
	wg.Go(func() { // permutation builds over the latest version, then a stream over each
		for i := 0; running(); i++ {
			tb, err := table.Open(ctx, uri)
			if err != nil {
				fail(fmt.Errorf("builder: %w", err))
				return
			}
			p, err := permutation.Build(ctx, tb, permutation.Spec{Shuffle: &permutation.ShuffleSpec{Seed: uint64(i)}},
				permURI(i), permutation.BuildOptions{})
			tb.Close()
			if errcode.Of(err) == errcode.Changed {
				continue
			}
			if err != nil {
				fail(fmt.Errorf("build over version %s: %w", tb.Version(), err))
				return
			}
			rec, err := streamAll(ctx, p.Table(), p.Splits()[0], mem)
			p.Close()
			if err != nil {
				fail(fmt.Errorf("stream of a permutation of version %s: %w", tb.Version(), err))
				return
			}
			locked(func() { reads = append(reads, rec); builds++ })
		}
	})
	wg.Wait()
	cleanup()
	if slowest >= concurrentGrace {
		// The guarantees below hold for appends shorter than the grace period.
		t.Skipf("an append took %s, longer than the grace period %s: the machine is too busy to check (errors: %v)",
			slowest, concurrentGrace, errs)
	}
	if len(errs) > 0 {
		t.Fatal(errors.Join(errs...))
	}
	slices.Sort(removed)
	if len(slices.Compact(slices.Clone(removed))) != len(removed) {
		t.Errorf("cleanup deleted versions %v: one was committed again after its deletion", removed)
	}

	// Every version from 2 on was committed by one appender: the rows of
	// version v are the initial ones, then those of 2…v in version order.
	versions, err := table.Versions(ctx, uri)
	if err != nil {
		t.Fatal(err)
	}
	last := versions[len(versions)-1]
	if len(versions) < 2 || !slices.Equal(versions, seq(versions[0], int64(len(versions)))) || int64(len(committed)) != last {
		t.Fatalf("versions %v after the run, %d commits reported; want the last ≥ 2 of 1…%d", versions, len(committed), last)
	}
	rowsOf := make([][]int64, last+1)
	for v := int64(1); v <= last; v++ {
		rowsOf[v] = append(slices.Clone(rowsOf[v-1]), committed[v]...)
	}
	for _, r := range reads {
		want := rowsOf[r.version]
		if len(r.rowIDs) != len(want)/8*8 { // 8 streams: the remainder is not dealt
			t.Fatalf("a stream over version %d dealt %d of its %d rows", r.version, len(r.rowIDs), len(want))
		}
		seen := map[uint64]bool{}
		for i, id := range r.rowIDs {
			if seen[id] || id >= uint64(len(want)) || r.ids[i] != want[id] {
				t.Fatalf("a stream over version %d read id %d at row id %d (seen before: %t); want %v",
					r.version, r.ids[i], id, seen[id], want)
			}
			seen[id] = true
		}
	}
	latest := open(t, uri)
	if got := allIDs(t, latest); !slices.Equal(got, rowsOf[last]) {
		t.Fatalf("latest version %d reads %d rows, want %d", last, len(got), len(rowsOf[last]))
	}
	loc := mustLoc(t, uri)
	for _, f := range latest.Files() {
		if slices.Contains(deleted, loc.ObjectURI(f.Key)) {
			t.Errorf("cleanup deleted %s, a file of the retained version %d", f.Key, last)
		}
	}
	if !enough() {
		t.Errorf("in %s cleanup deleted %d versions and %d orphans of %d, %d builds, %d streams: the test checks too little",
			concurrentMax, len(removed), len(deleted), orphans, builds, len(reads))
	}
	t.Logf("%s: %d versions (%d deleted), %d streams, %d builds, %d of %d orphans deleted, slowest append %s",
		time.Since(start).Round(time.Millisecond), last, len(removed), len(reads), builds, len(deleted), orphans,
		slowest.Round(time.Millisecond))
}

// streamAll deals every step of epoch 0 of order over tb, through a loader
// stream, and returns the row ids dealt and the ids read at them.
func streamAll(ctx context.Context, tb *table.Table, order permutation.Order, mem memory.Allocator) (readRecord, error) {
	v, _ := strconv.ParseInt(tb.Version(), 10, 64)
	out := readRecord{version: v}
	l, err := loader.New(tb, order, loader.Options{GlobalBatchSize: 16, NumSplits: 8, Columns: []string{"id"},
		ReadAhead: 2, MemoryBudget: 64 << 10, Allocator: mem})
	if err != nil {
		return out, err
	}
	defer l.Close()
	s, err := l.Stream(ctx, loader.StreamOptions{})
	if err != nil {
		return out, err
	}
	defer s.Close()
	for b, err := range s.All(ctx) {
		if err != nil {
			return out, err
		}
		rowIDs, err := l.RowIDs(ctx, 0, b.Step)
		if err != nil {
			b.Record.Release()
			return out, err
		}
		ids := b.Record.Column(0).(*array.Int64).Int64Values()
		if len(ids) != len(rowIDs) {
			b.Record.Release()
			return out, fmt.Errorf("step %d: %d rows for %d row ids", b.Step, len(ids), len(rowIDs))
		}
		out.rowIDs = append(out.rowIDs, rowIDs...)
		out.ids = append(out.ids, ids...)
		b.Record.Release()
	}
	return out, nil
}

// TestAppendOutlivesItsParent appends to a table whose only version is a
// day old. Between the append's data and its manifest, two other appends
// commit versions 2 and 3, and a Cleanup keeping one version runs: it removes
// version 1, the append's parent, but not version 2, which the append is
// about to try; had it removed it, the append would commit a version 2 without
// the rows of 3, behind the latest. The append builds on version 3 instead.
func TestAppendOutlivesItsParent(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "tbl")
	uri := "file://" + dir
	tb, err := table.Create(ctx, uri, tabletest.Reader(0, 2), table.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tb.Close()
	dayAgo := time.Now().Add(-24 * time.Hour)
	if err := os.Chtimes(filepath.Join(dir, "_versions", "00000000000000000001.json"), dayAgo, dayAgo); err != nil {
		t.Fatal(err)
	}
	fired := false
	table.SetCommitHook(func(phase string) {
		if phase != "data-written" || fired {
			return
		}
		fired = true
		for i := range int64(2) {
			if _, err := table.Append(ctx, uri, tabletest.Reader(10+i, 1), table.WriteOptions{}); err != nil {
				t.Error(err)
			}
		}
		res, err := table.Cleanup(ctx, uri, table.CleanupOptions{KeepLast: 1, Grace: time.Hour})
		if err != nil || !slices.Equal(res.DeletedVersions, []int64{1}) {
			t.Errorf("cleanup deleted versions %v, %v; want [1]", res.DeletedVersions, err)
		}
	})
	defer table.SetCommitHook(nil)
	v, err := table.Append(ctx, uri, tabletest.Reader(20, 1), table.WriteOptions{})
	if err != nil || v != 4 {
		t.Fatalf("append: version %d, %v; want 4", v, err)
	}
	if got := allIDs(t, open(t, uri)); !slices.Equal(got, []int64{0, 1, 10, 11, 20}) {
		t.Errorf("version 4 reads %v", got)
	}
	if vs, err := table.Versions(ctx, uri); err != nil || !slices.Equal(vs, []int64{2, 3, 4}) {
		t.Errorf("versions %v, %v; want [2 3 4]", vs, err)
	}
}
