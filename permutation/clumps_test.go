package permutation_test

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/internal/tabletest"
	"github.com/croupier-data/croupier/permutation"
)

// pageTable returns a croupier table of rows rows in row groups of 1000,
// written with pages of 512 bytes and their offset index.
func pageTable(t *testing.T, rows int64) *table.Table {
	t.Helper()
	rdr := tabletest.Reader(0, rows)
	defer rdr.Release()
	tb, err := table.Create(context.Background(), "file://"+t.TempDir(), rdr, table.WriteOptions{RowGroupRows: 1000, PageBytes: 512})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tb.Close() })
	return tb
}

// spanOf returns the page span of each row id of tb: the index of the last
// of tb's page starts at or before it.
func spanOf(t *testing.T, tb *table.Table) []int {
	t.Helper()
	starts, err := tb.PageStarts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := make([]int, tb.NumRows())
	for i, s := range starts {
		for id := s; id < tb.NumRows() && (i+1 == len(starts) || id < starts[i+1]); id++ {
			out[id] = i
		}
	}
	return out
}

// clumpSizes checks that the rows of each page span are consecutive in ids,
// in row id order, and returns the sizes of the runs.
func clumpSizes(t *testing.T, what string, ids []uint64, span []int) []int {
	t.Helper()
	seen := map[int]bool{}
	var sizes []int
	for i, id := range ids {
		if i > 0 && span[id] == span[ids[i-1]] {
			if id <= ids[i-1] {
				t.Fatalf("%s: row %d after row %d in its clump", what, id, ids[i-1])
			}
			sizes[len(sizes)-1]++
			continue
		}
		if seen[span[id]] {
			t.Fatalf("%s: the rows of page span %d are not together (row %d at %d)", what, span[id], id, i)
		}
		seen[span[id]] = true
		sizes = append(sizes, 1)
	}
	return sizes
}

// TestPageStarts: a table's page starts are its row groups' starts and the
// first rows of the pages of its widest column, and a table without an
// offset index has spans of the estimate PageLayout makes.
func TestPageStarts(t *testing.T) {
	ctx := context.Background()
	tb := pageTable(t, 5500)
	starts, err := tb.PageStarts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	l, err := tb.PageLayout(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var first []int64 // the pages of the first row group, in rows
	for i, s := range starts {
		if i > 0 && s <= starts[i-1] {
			t.Fatalf("starts not ascending at %d: %v", i, starts)
		}
		if s < 1000 {
			end := int64(1000)
			if i+1 < len(starts) {
				end = starts[i+1]
			}
			first = append(first, end-s)
		}
	}
	for g := int64(0); g < 5500; g += 1000 {
		if _, ok := slices.BinarySearch(starts, g); !ok {
			t.Errorf("row group start %d is no page start: %v", g, starts)
		}
	}
	slices.Sort(first)
	if len(first) < 4 || first[len(first)/2] != l.Rows {
		t.Errorf("first row group's pages of %v rows; PageLayout says %d rows a page", first, l.Rows)
	}
	plain := openTable(t, t.TempDir(), 1000) // row groups of 50 rows, no offset index, a page each
	starts, err = plain.PageStarts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(starts) != 20 || starts[1] != 50 {
		t.Errorf("plain table: page starts %v, want one per row group of 50 rows", starts)
	}
}

// TestAutoClump: with clump_size auto every clump is the kept rows of one
// page span, in every epoch, whatever the split, the filter and the window;
// every kept row is dealt once; clumps vary in size with the pages, and the
// permutation records AutoClump in format 4.
func TestAutoClump(t *testing.T) {
	ctx := context.Background()
	tb := pageTable(t, 5500)
	span := spanOf(t, tb)
	hash := &permutation.SplitSpec{Kind: "hash", Columns: []string{"text"}, Weights: []int64{3, 1}}
	seq := &permutation.SplitSpec{Kind: "sequential", Ratios: []float64{0.6, 0.4}}
	for name, spec := range map[string]permutation.Spec{
		"full":       {},
		"filtered":   {Filter: "id % 3 != 1", Lengths: "tokens"},
		"hash split": {Split: hash},
		"sequential": {Split: seq, Filter: "id % 4 != 0"},
		"window":     {Filter: "id % 3 != 1", Shuffle: &permutation.ShuffleSpec{Seed: 5, ClumpSize: permutation.AutoClump, Window: 3}},
	} {
		if spec.Shuffle == nil {
			spec.Shuffle = &permutation.ShuffleSpec{Seed: 5, ClumpSize: permutation.AutoClump}
		}
		p := build(t, tb, spec)
		if m := p.Manifest(); m.Format != 4 || m.Spec.Shuffle.ClumpSize != permutation.AutoClump {
			t.Errorf("%s: format %d, clump_size %d recorded", name, m.Format, m.Spec.Shuffle.ClumpSize)
		}
		dealt := map[uint64]int{}
		sizes := map[int]bool{}
		for _, s := range p.Splits() {
			stored := allIDs(t, s)
			for _, id := range stored {
				dealt[id]++
			}
			for e := range int64(3) {
				o := s.ForEpoch(9, e)
				if _, grouped := o.(permutation.GroupedOrder); grouped {
					t.Fatalf("%s: epoch %d deals groups", name, e)
				}
				ids, err := o.RowIDs(ctx, 0, o.Len())
				if err != nil {
					t.Fatal(err)
				}
				for _, n := range clumpSizes(t, fmt.Sprintf("%s, split %s, epoch %d", name, s.Name(), e), ids, span) {
					sizes[n] = true
				}
				if e > 0 && len(ids) > 100 && slices.Equal(ids, stored) {
					t.Errorf("%s, split %s: epoch %d deals the stored order", name, s.Name(), e)
				}
				if !slices.Equal(slices.Sorted(slices.Values(ids)), slices.Sorted(slices.Values(stored))) {
					t.Errorf("%s, split %s: epoch %d deals other rows than the stored order", name, s.Name(), e)
				}
			}
		}
		for id := range tb.NumRows() {
			want := 1
			if spec.Filter != "" && !keptBy(spec.Filter, id) {
				want = 0
			}
			if dealt[uint64(id)] != want {
				t.Fatalf("%s: row %d dealt %d times, want %d", name, id, dealt[uint64(id)], want)
			}
		}
		t.Logf("%s: clump sizes %v", name, slices.Sorted(maps.Keys(sizes)))
		if len(sizes) < 3 {
			t.Errorf("%s: clumps of sizes %v only", name, sizes)
		}
	}
}

// keptBy evaluates the filters TestAutoClump uses.
func keptBy(filter string, id int64) bool {
	switch filter {
	case "id % 3 != 1":
		return id%3 != 1
	case "id % 4 != 0":
		return id%4 != 0
	}
	panic("unknown filter " + filter)
}

// TestDistributedPageClumps: a distributed build of page-aligned clumps,
// in several buckets, keeps each clump whole and writes the very objects
// one process writes.
func TestDistributedPageClumps(t *testing.T) {
	ctx := context.Background()
	tb := pageTable(t, 9000)
	span := spanOf(t, tb)
	t.Cleanup(permutation.SetBuckets(2500, 4096, nil))
	hash := &permutation.SplitSpec{Kind: "hash", Columns: []string{"text"}, Weights: []int64{3, 1}}
	for name, spec := range map[string]permutation.Spec{
		"full":   {Filter: "id % 3 != 1", Split: hash, Shuffle: &permutation.ShuffleSpec{Seed: 6, ClumpSize: permutation.AutoClump}},
		"window": {Shuffle: &permutation.ShuffleSpec{Seed: 7, ClumpSize: permutation.AutoClump, Window: 4}},
	} {
		one := t.TempDir()
		want, err := permutation.Build(ctx, tb, spec, "file://"+one, permutation.BuildOptions{})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, s := range want.Splits() {
			clumpSizes(t, name+", split "+s.Name(), allIDs(t, s), span)
		}
		sameAtRanks(t, name, tb, spec, want.ID(), storedFiles(one), 2, 3)
		want.Close()
	}
}

// TestRecordedClumpSize: a permutation that records a power-of-two clump
// size, as clump_size auto did before page-aligned clumps (it chose 32 for
// this table), is still written in format 2 and deals, in every epoch, the
// very rows that builder dealt: the digests are those of its permutations.
func TestRecordedClumpSize(t *testing.T) {
	ctx := context.Background()
	tb := pageTable(t, 5500)
	hash := &permutation.SplitSpec{Kind: "hash", Columns: []string{"text"}, Weights: []int64{3, 1}}
	for _, tc := range []struct {
		spec permutation.Spec
		want string
	}{
		{permutation.Spec{Shuffle: &permutation.ShuffleSpec{Seed: 5, ClumpSize: 32}},
			"9cdaef8cf442d7fd20533d5f1c350f75224336c6976cb293932bca457effa3b1"},
		{permutation.Spec{Filter: "id % 3 != 1", Split: hash, Shuffle: &permutation.ShuffleSpec{Seed: 5, ClumpSize: 32, Window: 3}},
			"7538c8646761c3f231e7466f0a4cde2c40a478eb6e9cf456aa4d0d0241657855"},
	} {
		p := build(t, tb, tc.spec)
		if f := p.Manifest().Format; f != 2 {
			t.Errorf("%+v: format %d, want 2", *tc.spec.Shuffle, f)
		}
		h := sha256.New()
		for _, s := range p.Splits() {
			for e := range int64(3) {
				o := s.ForEpoch(9, e)
				ids, err := o.RowIDs(ctx, 0, o.Len())
				if err != nil {
					t.Fatal(err)
				}
				for _, id := range ids {
					h.Write(binary.LittleEndian.AppendUint64(nil, id))
				}
			}
		}
		if got := fmt.Sprintf("%x", h.Sum(nil)); got != tc.want {
			t.Errorf("%+v: epochs 0 to 2 digest to %s, want %s", *tc.spec.Shuffle, got, tc.want)
		}
	}
}

// TestPageClumpsFormat: page-aligned clumps are recorded in format 4
// exactly: a manifest that records them in another format, or format 4
// without them, is Corrupt, so that no reader deals them as fixed clumps.
func TestPageClumpsFormat(t *testing.T) {
	ctx := context.Background()
	tb := pageTable(t, 2000)
	for name, tc := range map[string]struct {
		clump  int64
		format int
	}{
		"auto in format 3":  {permutation.AutoClump, 3},
		"auto in format 2":  {permutation.AutoClump, 2},
		"fixed in format 4": {8, 4},
	} {
		dir := t.TempDir()
		p, err := permutation.Build(ctx, tb, permutation.Spec{Shuffle: &permutation.ShuffleSpec{Seed: 1, ClumpSize: tc.clump}}, "file://"+dir, permutation.BuildOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Close()
		tabletest.EditJSON(t, filepath.Join(dir, "permutation.json"), func(m map[string]any) { m["format"] = tc.format })
		_, err = permutation.Open(ctx, "file://"+dir)
		if errcode.Of(err) != errcode.Corrupt || !strings.Contains(err.Error(), "page-aligned clumps") {
			t.Errorf("%s: %v, want Corrupt naming the clumps", name, err)
		}
	}
}
