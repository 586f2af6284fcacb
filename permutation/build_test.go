package permutation_test

import (
	"bytes"
	"context"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/internal/tabletest"
	"github.com/croupier-data/croupier/permutation"
)

func openTable(t *testing.T, dir string, sizes ...int64) *table.Table {
	t.Helper()
	tabletest.Write(t, dir, sizes, 50)
	tb, err := table.Open(context.Background(), "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tb.Close() })
	return tb
}

func build(t *testing.T, tb *table.Table, spec permutation.Spec) *permutation.Permutations {
	t.Helper()
	p, err := permutation.Build(context.Background(), tb, spec, "file://"+t.TempDir(), permutation.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func allIDs(t *testing.T, s *permutation.Split) []uint64 {
	t.Helper()
	ids, err := s.RowIDs(context.Background(), 0, s.Len())
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func TestIdentityBuild(t *testing.T) {
	tb := openTable(t, t.TempDir(), 120, 80)
	p := build(t, tb, permutation.Spec{})
	if len(p.Splits()) != 1 || p.Splits()[0].Name() != "all" {
		t.Fatalf("splits = %v", p.Manifest().Splits)
	}
	ids := allIDs(t, p.Splits()[0])
	for i, id := range ids {
		if id != uint64(i) {
			t.Fatalf("position %d holds %d", i, id)
		}
	}
	if len(ids) != 200 {
		t.Fatalf("%d ids, want 200", len(ids))
	}
}

// TestSplitsPartition: every kept row is in exactly one split, sizes follow the
// rounding rule, and random splits are reproducible.
func TestSplitsPartition(t *testing.T) {
	tb := openTable(t, t.TempDir(), 333, 100)
	for _, tc := range []struct {
		split permutation.SplitSpec
		sizes []int64
	}{
		{permutation.SplitSpec{Kind: "random", Ratios: []float64{0.9, 0.1}, Seed: 7}, []int64{390, 43}},
		{permutation.SplitSpec{Kind: "random", Ratios: []float64{1.0 / 3, 1.0 / 3, 1.0 / 3}}, []int64{144, 145, 144}},
		{permutation.SplitSpec{Kind: "random", Ratios: []float64{0.5, 0.25}}, []int64{217, 108}}, // round(216.5)=217, round(324.75)=325
		{permutation.SplitSpec{Kind: "random", Counts: []int64{10, 20}}, []int64{10, 20}},
		{permutation.SplitSpec{Kind: "sequential", Fixed: 100}, []int64{100, 100, 100, 100}},
		{permutation.SplitSpec{Kind: "sequential", Ratios: []float64{0.5, 0.5}, Names: []string{"a", "b"}}, []int64{217, 216}},
		// 433 rows in 44 clumps of 10 (the last of 3): 22 clumps each
		{permutation.SplitSpec{Kind: "random", Ratios: []float64{0.5, 0.5}, ClumpSize: 10, Seed: 1}, []int64{-1, -1}},
	} {
		p := build(t, tb, permutation.Spec{Split: &tc.split})
		var got []int64
		seen := map[uint64]bool{}
		for _, s := range p.Splits() {
			got = append(got, s.Len())
			for _, id := range allIDs(t, s) {
				if seen[id] {
					t.Fatalf("%+v: row %d in two splits", tc.split, id)
				}
				seen[id] = true
			}
		}
		if tc.split.ClumpSize > 1 {
			for _, s := range p.Splits() {
				ids := allIDs(t, s)
				for i := 0; i < len(ids); i++ {
					// a clump is whole: rows 10k..10k+9 are all in this split
					clumpStart := ids[i] / 10 * 10
					for r := clumpStart; r < min(clumpStart+10, 433); r++ {
						if !slices.Contains(ids, r) {
							t.Fatalf("clump of row %d split across splits", ids[i])
						}
					}
				}
			}
			if got[0]+got[1] != 433 || (got[0] != 220 && got[1] != 220) {
				t.Errorf("clumped sizes %v", got)
			}
			continue
		}
		if !slices.Equal(got, tc.sizes) {
			t.Errorf("%+v: sizes %v, want %v", tc.split, got, tc.sizes)
		}
	}
	// sequential splits are consecutive row ranges
	p := build(t, tb, permutation.Spec{Split: &permutation.SplitSpec{Kind: "sequential", Counts: []int64{5, 5}}})
	if ids := allIDs(t, p.Splits()[1]); !slices.Equal(ids, []uint64{5, 6, 7, 8, 9}) {
		t.Errorf("second sequential split = %v", ids)
	}
}

func TestHashSplitStableAcrossVersions(t *testing.T) {
	dir := t.TempDir()
	small := openTable(t, dir, 200)
	spec := permutation.Spec{Split: &permutation.SplitSpec{Kind: "hash", Columns: []string{"text"}, Weights: []int64{3, 1}, DiscardWeight: 1}}
	before := build(t, small, spec)
	// a later version: more rows appended (a second file)
	os.WriteFile(filepath.Join(dir, "part-001.parquet"), tabletest.Encode(t, 200, 300, 50), 0o644)
	bigger, err := table.Open(context.Background(), "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	defer bigger.Close()
	after := build(t, bigger, spec)
	splitOf := func(p *permutation.Permutations) map[uint64]int {
		out := map[uint64]int{}
		for i, s := range p.Splits() {
			for _, id := range allIDs(t, s) {
				out[id] = i
			}
		}
		return out
	}
	a, b := splitOf(before), splitOf(after)
	for id, s := range a {
		if b[id] != s {
			t.Fatalf("row %d moved from split %d to %d after an append", id, s, b[id])
		}
	}
	var discarded int
	for id := range uint64(500) {
		if _, ok := b[id]; !ok {
			discarded++
		}
	}
	if discarded < 60 || discarded > 140 { // expect 100 of 500 (weight 1 of 5)
		t.Errorf("%d of 500 rows discarded, expected about 100", discarded)
	}
	if n0, n1 := after.Splits()[0].Len(), after.Splits()[1].Len(); n0 < 2*n1 {
		t.Errorf("weights 3:1 gave %d and %d rows", n0, n1)
	}
}

func TestShuffles(t *testing.T) {
	tb := openTable(t, t.TempDir(), 1000)
	full := allIDs(t, build(t, tb, permutation.Spec{Shuffle: &permutation.ShuffleSpec{Seed: 1}}).Splits()[0])
	again := allIDs(t, build(t, tb, permutation.Spec{Shuffle: &permutation.ShuffleSpec{Seed: 1}}).Splits()[0])
	other := allIDs(t, build(t, tb, permutation.Spec{Shuffle: &permutation.ShuffleSpec{Seed: 2}}).Splits()[0])
	if !slices.Equal(full, again) || slices.Equal(full, other) {
		t.Fatal("shuffle is not a function of its seed")
	}
	sorted := slices.Sorted(slices.Values(full))
	for i, id := range sorted {
		if id != uint64(i) {
			t.Fatal("shuffle lost or repeated rows")
		}
	}
	clumped := allIDs(t, build(t, tb, permutation.Spec{Shuffle: &permutation.ShuffleSpec{Seed: 1, ClumpSize: 10}}).Splits()[0])
	for i := 0; i < len(clumped); i += 10 {
		if clumped[i]%10 != 0 || clumped[i+9] != clumped[i]+9 {
			t.Fatalf("clump at %d broken: %v", i, clumped[i:i+10])
		}
	}
	windowed := allIDs(t, build(t, tb, permutation.Spec{Shuffle: &permutation.ShuffleSpec{Seed: 1, Window: 100}}).Splits()[0])
	for i := 0; i < len(windowed); i += 100 {
		w := windowed[i] / 100
		for _, id := range windowed[i : i+100] {
			if id/100 != w {
				t.Fatalf("window at %d mixes rows of windows %d and %d", i, w, id/100)
			}
		}
	}
}

// TestByteIdentical: two builds of the same inputs persist the same bytes.
func TestByteIdentical(t *testing.T) {
	tb := openTable(t, t.TempDir(), 300, 200)
	spec := permutation.Spec{Split: &permutation.SplitSpec{Kind: "random", Ratios: []float64{0.8, 0.2}, Seed: 3},
		Shuffle: &permutation.ShuffleSpec{Seed: 9}}
	a, b := t.TempDir(), t.TempDir()
	for _, dir := range []string{a, b} {
		p, err := permutation.Build(context.Background(), tb, spec, "file://"+dir, permutation.BuildOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Close()
	}
	files := func(root string) map[string][]byte {
		out := map[string][]byte{}
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && !strings.HasPrefix(d.Name(), "build.json") {
				data, _ := os.ReadFile(p)
				out[strings.TrimPrefix(p, root)] = data
			}
			return nil
		})
		return out
	}
	fa, fb := files(a), files(b)
	if len(fa) < 3 || len(fa) != len(fb) {
		t.Fatalf("%d and %d files", len(fa), len(fb))
	}
	for name, data := range fa {
		if !bytes.Equal(data, fb[name]) {
			t.Errorf("%s differs between two builds", name)
		}
	}
}

func TestOpenChecksTable(t *testing.T) {
	dir := t.TempDir()
	tb := openTable(t, dir, 100)
	uri := "file://" + t.TempDir()
	p, err := permutation.Build(context.Background(), tb, permutation.Spec{}, uri, permutation.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	q, err := permutation.Open(context.Background(), uri)
	if err != nil {
		t.Fatal(err)
	}
	if q.ID() != p.ID() || q.Table().Version() != tb.Version() {
		t.Fatalf("reopened %s over %s", q.ID(), q.Table().Version())
	}
	if b := q.Build(); b.ID != p.ID() || b.BuiltAt.IsZero() {
		t.Fatalf("build record %+v", b)
	}
	q.Close()
	_, err = permutation.Build(context.Background(), tb, permutation.Spec{}, uri, permutation.BuildOptions{})
	if errcode.Of(err) != errcode.AlreadyExists || !strings.Contains(err.Error(), "immutable") {
		t.Fatalf("second build at the same URI = %v", err)
	}
	os.Remove(filepath.Join(dir, "part-000.parquet"))
	_, err = permutation.Open(context.Background(), uri)
	if errcode.Of(err) != errcode.Changed || !strings.Contains(err.Error(), "part-000.parquet") {
		t.Fatalf("open over a vanished table version = %v", err)
	}
	_, err = permutation.Open(context.Background(), "file://"+t.TempDir())
	if errcode.Of(err) != errcode.NotFound {
		t.Fatalf("open of an empty folder = %v", err)
	}
}

func TestSpecErrors(t *testing.T) {
	tb := openTable(t, t.TempDir(), 100)
	for _, tc := range []struct {
		spec permutation.Spec
		msg  string
	}{
		{permutation.Spec{Split: &permutation.SplitSpec{Kind: "random", Counts: []int64{80, 30}}}, "sum to 110, more than the 100 rows"},
		{permutation.Spec{Split: &permutation.SplitSpec{Kind: "random", Ratios: []float64{0.7, 0.4}}}, "ratios sum to"},
		{permutation.Spec{Split: &permutation.SplitSpec{Kind: "random"}}, "exactly one of ratios, counts or fixed"},
		{permutation.Spec{Split: &permutation.SplitSpec{Kind: "hash", Columns: []string{"nope"}, Weights: []int64{1}}}, `unknown column "nope"`},
		{permutation.Spec{Split: &permutation.SplitSpec{Kind: "hash", Columns: []string{"tokens"}, Weights: []int64{1}}}, "cannot hash values of type list"},
		{permutation.Spec{Split: &permutation.SplitSpec{Kind: "bogus"}}, "unknown split kind"},
		{permutation.Spec{Split: &permutation.SplitSpec{Kind: "random", Ratios: []float64{0.5, 0.5}, Names: []string{"a"}}}, "1 split names for 2 splits"},
		{permutation.Spec{Filter: "nope > 1"}, "nope"},
		{permutation.Spec{Filter: "id + 1"}, "not a boolean"},
		{permutation.Spec{Split: &permutation.SplitSpec{Kind: "sequential", Fixed: 30, Names: []string{"a", "b"}}}, "2 split names for 3 splits"},
		{permutation.Spec{Split: &permutation.SplitSpec{Kind: "hash", Columns: []string{"id"}, Weights: []int64{0, 0}}}, "weights [0 0] sum to 0: they are integer shares"},
		{permutation.Spec{Split: &permutation.SplitSpec{Kind: "hash", Columns: []string{"id"}, Weights: []int64{0}, DiscardWeight: 5}}, "weights [0] sum to 0"},
		{permutation.Spec{Split: &permutation.SplitSpec{Kind: "hash", Columns: []string{"id"}, Weights: []int64{math.MaxInt64, 1}}}, "sum beyond"},
		{permutation.Spec{Split: &permutation.SplitSpec{Kind: "hash", Columns: []string{"id"}, Weights: []int64{1}, DiscardWeight: -1}}, "discard_weight is negative"},
		{permutation.Spec{Split: &permutation.SplitSpec{Kind: "random", Counts: []int64{math.MaxInt64, math.MaxInt64}}}, "sum beyond"},
		{permutation.Spec{Split: &permutation.SplitSpec{Kind: "random", Ratios: make([]float64, permutation.MaxSplits+1)}}, "65537 splits, more than the 65536 allowed"},
	} {
		_, err := permutation.Build(context.Background(), tb, tc.spec, "file://"+t.TempDir(), permutation.BuildOptions{})
		if errcode.Of(err) != errcode.InvalidArgument || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%+v: error %v, want InvalidArgument with %q", tc.spec.Split, err, tc.msg)
		}
	}
}

func TestConstantFilters(t *testing.T) {
	tb := openTable(t, t.TempDir(), 60, 40)
	for filter, want := range map[string]int64{"1 = 0": 0, "FALSE": 0, "NULL": 0, "1 = 1": 100, "length('ab') > 1": 100} {
		p := build(t, tb, permutation.Spec{Filter: filter})
		if got := p.Splits()[0].Len(); got != want {
			t.Errorf("filter %q kept %d rows, want %d", filter, got, want)
		}
		if m := p.Manifest(); m.RowGroups != 3 || m.RowsScanned != 100 {
			t.Errorf("filter %q: %d row groups, %d rows scanned", filter, m.RowGroups, m.RowsScanned)
		}
	}
}
