package main

import (
	"context"
	"fmt"
	"math"
	"runtime/debug"
	"testing"

	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/internal/tabletest"
	"github.com/croupier-data/croupier/permutation"
)

// TestMemoryLimitFollowsDatasets opens and releases datasets as the exports
// do: the Go runtime's memory limit is 32 MiB and a quarter of the budgets of
// the datasets open, and no limit once none is.
func TestMemoryLimitFollowsDatasets(t *testing.T) {
	if goHeap.user {
		t.Skip("GOMEMLIMIT is set: the library leaves the limit alone")
	}
	dir := t.TempDir()
	tabletest.Write(t, dir, []int64{30, 25}, 10)
	tb, err := table.Open(context.Background(), "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	open := func(budget int64) any {
		l, err := newLoader(tb, permutation.Identity{N: tb.NumRows()}, fmt.Appendf(nil, `{"global_batch_size": 8, "memory_budget": %d}`, budget))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	want := func(limit int64) {
		t.Helper()
		if got := debug.SetMemoryLimit(-1); got != limit {
			t.Fatalf("memory limit %d, want %d", got, limit)
		}
	}
	a := open(400 << 20)
	want(32<<20 + 100<<20)
	b := open(40 << 20)
	want(32<<20 + 110<<20)
	if err := closeObject(a); err != nil {
		t.Fatal(err)
	}
	want(32<<20 + 10<<20)
	if err := closeObject(b); err != nil {
		t.Fatal(err)
	}
	want(math.MaxInt64)
}
