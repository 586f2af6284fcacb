package permutation_test

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"maps"
	"math/bits"
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

// bucketed makes builds use buckets of at most ids row ids and spill
// objects of 64 bytes for the rest of the test, and returns the most records
// the last build held in one slice.
func bucketed(t *testing.T, ids int64) *int64 {
	held := new(int64)
	t.Cleanup(permutation.SetBuckets(ids, 64, func(n int64) { *held = n }))
	return held
}

// storedFiles returns the files under root, by path, but build.json.
func storedFiles(root string) map[string][]byte {
	out := map[string][]byte{}
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() != "build.json" {
			data, _ := os.ReadFile(p)
			out[strings.TrimPrefix(p, root)] = data
		}
		return nil
	})
	return out
}

// TestBuckets: with tables of several buckets, every split holds each of its
// rows once, the rows an in-memory split gives it, with their lengths and
// their clumps whole; two builds write the same bytes; no step holds more
// than about a bucket; and the spill is gone.
func TestBuckets(t *testing.T) {
	tb := openTable(t, t.TempDir(), 700, 333, 2000)
	const bucket = 100
	hash := &permutation.SplitSpec{Kind: "hash", Columns: []string{"text"}, Weights: []int64{3, 1}, DiscardWeight: 1}
	for name, spec := range map[string]permutation.Spec{
		"shuffle":    {Shuffle: &permutation.ShuffleSpec{Seed: 5}},
		"filter":     {Filter: "id % 3 != 1", Shuffle: &permutation.ShuffleSpec{Seed: 5}},
		"clumps":     {Filter: "id % 3 != 1", Shuffle: &permutation.ShuffleSpec{Seed: 5, ClumpSize: 16}},
		"hash":       {Split: hash, Shuffle: &permutation.ShuffleSpec{Seed: 2, ClumpSize: 3}},
		"calculated": {Split: &permutation.SplitSpec{Kind: "calculated", Expr: "id % 4", Names: []string{"a", "b", "c"}}, Shuffle: &permutation.ShuffleSpec{Seed: 3}},
		"lengths":    {Filter: "tokens IS NOT NULL", Lengths: "tokens", Split: hash, Shuffle: &permutation.ShuffleSpec{Seed: 8, ClumpSize: 7}},
	} {
		stored := spec
		stored.Shuffle = nil
		want := build(t, tb, stored) // one bucket, in row id order
		held := bucketed(t, bucket)
		buildTwice(t, name, tb, spec, want, held, bucket)
	}
}

// buildTwice builds spec over tb twice and checks each build against want
// (checkBucketed) when spec shuffles, that no ordering held more than twice
// bucket records (held), that the two wrote the same bytes, and that they
// left no spill.
func buildTwice(t *testing.T, name string, tb *table.Table, spec permutation.Spec, want *permutation.Permutations, held *int64, bucket int64) {
	t.Helper()
	dirs := []string{t.TempDir(), t.TempDir()}
	for _, dir := range dirs {
		p, err := permutation.Build(context.Background(), tb, spec, "file://"+dir, permutation.BuildOptions{})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if spec.Shuffle != nil {
			checkBucketed(t, name, p, want, max(spec.Shuffle.ClumpSize, 1))
		}
		p.Close()
	}
	if *held > 2*bucket {
		t.Errorf("%s: a slice of %d records held, more than twice the %d of a bucket", name, *held, bucket)
	}
	a, b := storedFiles(dirs[0]), storedFiles(dirs[1])
	if len(a) != len(b) {
		t.Errorf("%s: %d and %d files", name, len(a), len(b))
	}
	for key, data := range a {
		if !bytes.Equal(data, b[key]) {
			t.Errorf("%s: %s differs between two builds", name, key)
		}
		if strings.Contains(key, "_spill") {
			t.Errorf("%s: %s left behind", name, key)
		}
	}
}

// checkBucketed checks p's splits against want's, the same splits in row
// id order: the same rows, each once, with the same lengths, in whole clumps
// of c consecutive rows of want's order, a partial clump last.
func checkBucketed(t *testing.T, name string, p, want *permutation.Permutations, c int64) {
	t.Helper()
	if len(p.Splits()) != len(want.Splits()) {
		t.Fatalf("%s: %d splits, want %d", name, len(p.Splits()), len(want.Splits()))
	}
	for i, s := range p.Splits() {
		got, stored := allIDs(t, s), allIDs(t, want.Splits()[i])
		if !slices.Equal(slices.Sorted(slices.Values(got)), stored) {
			t.Fatalf("%s: split %d holds other rows than in row id order", name, i)
		}
		if len(got) > 2*int(c) && slices.Equal(got, stored) {
			t.Fatalf("%s: split %d is not shuffled", name, i)
		}
		pos := map[uint64]int{}
		for j, id := range stored {
			pos[id] = j
		}
		for j := 0; j < len(got); j += int(c) {
			first := pos[got[j]]
			if first%int(c) != 0 || (len(got)-j < int(c) && j+int(c) < len(stored)) {
				t.Fatalf("%s: split %d: a clump starts at %d, position %d of row id order", name, i, j, first)
			}
			for k := j; k < min(j+int(c), len(got)); k++ {
				if got[k] != stored[first+k-j] {
					t.Fatalf("%s: split %d: clump at %d broken", name, i, j)
				}
			}
		}
		checkLengths(t, name, s, got)
	}
}

func checkLengths(t *testing.T, name string, s *permutation.Split, ids []uint64) {
	t.Helper()
	lo := permutation.Order(s).(permutation.LengthOrder)
	if lo.LengthsColumn() == "" {
		return
	}
	n, err := lo.Lengths(context.Background(), 0, s.Len())
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		if n[i] != uint64(len(tabletest.Tokens(int64(id)))) {
			t.Fatalf("%s: row %d has length %d", name, id, n[i])
		}
	}
}

// TestBucketsStoredOrder: a split in row id order reads its spill back one
// object at a time.
func TestBucketsStoredOrder(t *testing.T) {
	tb := openTable(t, t.TempDir(), 700, 333)
	held := bucketed(t, 100)
	p := build(t, tb, permutation.Spec{Filter: "id % 3 != 1"})
	ids := allIDs(t, p.Splits()[0])
	if len(ids) != 689 || !slices.IsSorted(ids) {
		t.Fatalf("%d rows, sorted %v", len(ids), slices.IsSorted(ids))
	}
	if *held > 16 { // 64-byte spill objects of 4-byte row ids
		t.Errorf("%d records held at once", *held)
	}
}

// TestSpillRemoved: a build that fails or is canceled after spilling leaves
// no spill behind.
func TestSpillRemoved(t *testing.T) {
	tb := openTable(t, t.TempDir(), 700, 333)
	bucketed(t, 100)
	spec := permutation.Spec{Shuffle: &permutation.ShuffleSpec{Seed: 1}}
	dir := t.TempDir()
	spilled := 0
	p, err := permutation.Build(context.Background(), tb, spec, "file://"+dir, permutation.BuildOptions{
		Progress: func(pr permutation.Progress) {
			if pr.Phase == "order" {
				for key := range storedFiles(dir) {
					if strings.Contains(key, "_spill") {
						spilled++
					}
				}
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	if spilled == 0 {
		t.Fatal("no spill object seen while the build ordered its splits")
	}
	// A second build at the same place fails as it writes, after its scan.
	_, err = permutation.Build(context.Background(), tb, spec, "file://"+dir, permutation.BuildOptions{})
	if errcode.Of(err) != errcode.AlreadyExists {
		t.Fatalf("second build: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	canceled := t.TempDir()
	_, err = permutation.Build(ctx, tb, spec, "file://"+canceled, permutation.BuildOptions{
		Progress: func(pr permutation.Progress) {
			if pr.Phase == "scan" && pr.Done > 0 {
				cancel()
			}
		}})
	if errcode.Of(err) != errcode.Canceled {
		t.Fatalf("canceled build: %v", err)
	}
	for _, d := range []string{dir, canceled} {
		for key := range storedFiles(d) {
			if strings.Contains(key, "_spill") {
				t.Errorf("%s left behind", key)
			}
		}
	}
	if len(storedFiles(canceled)) != 0 {
		t.Errorf("a canceled build left %d files", len(storedFiles(canceled)))
	}
}

// TestWindowsFromSpill: a window shuffle reads its windows back from the
// spill one at a time, and orders them as in memory.
func TestWindowsFromSpill(t *testing.T) {
	tb := openTable(t, t.TempDir(), 700, 333)
	for _, spec := range []permutation.Spec{
		{Shuffle: &permutation.ShuffleSpec{Seed: 5, ClumpSize: 4, Window: 8}},
		{Filter: "id % 3 != 1", Shuffle: &permutation.ShuffleSpec{Seed: 6, ClumpSize: 3, Window: 5}},
		{Split: &permutation.SplitSpec{Kind: "hash", Columns: []string{"id"}, Weights: []int64{1, 1}}, Shuffle: &permutation.ShuffleSpec{Seed: 7, Window: 50}},
	} {
		want := build(t, tb, spec).ID()
		restore := permutation.SetBuckets(100, 64, func(n int64) {
			if w := spec.Shuffle.Window * max(spec.Shuffle.ClumpSize, 1); n > w {
				t.Errorf("%d records held, more than a window's %d", n, w)
			}
		})
		got := build(t, tb, spec).ID()
		restore()
		if got != want {
			t.Errorf("window %d, clumps %d: %s from the spill, %s in memory", spec.Shuffle.Window, spec.Shuffle.ClumpSize, got, want)
		}
	}
}

// TestBucketedOrderAsSpecified rebuilds the order of a bucketed shuffle from
// the rule docs/spec.md states ("Bucketed shuffles"), with this test's own
// bucket hash.
func TestBucketedOrderAsSpecified(t *testing.T) {
	tb := openTable(t, t.TempDir(), 700, 333)
	const bucketIDs = 100
	bucketed(t, bucketIDs)
	for _, c := range []int64{1, 3} {
		seed := uint64(11)
		p := build(t, tb, permutation.Spec{Filter: "id % 5 != 2", Shuffle: &permutation.ShuffleSpec{Seed: seed, ClumpSize: c}})
		var kept []uint64
		for id := range uint64(tb.NumRows()) {
			if id%5 != 2 {
				kept = append(kept, id)
			}
		}
		nb := uint64((tb.NumRows() + bucketIDs - 1) / bucketIDs) // 11
		if got := allIDs(t, p.Splits()[0]); !slices.Equal(got, bucketRule(kept, seed, 0, nb, c)) {
			t.Errorf("clumps of %d: the build's order is not the one the rule gives", c)
		}
	}
}

// bucketRule returns the order docs/spec.md's "Bucketed shuffles" gives
// part p's kept rows, in row id order, in nb buckets with clumps of c.
func bucketRule(kept []uint64, seed uint64, p int, nb uint64, c int64) []uint64 {
	key := permutation.DeriveKey(seed, fmt.Sprintf("bucket/%d", p))
	buckets := make([][][]uint64, nb) // clumps of each bucket, in row id order
	for u := int64(0); u < int64(len(kept))/c; u++ {
		unit := uint64(u)
		if c == 1 {
			unit = kept[u]
		}
		hi, _ := bits.Mul64(mix(key+(unit+1)*0x9E3779B97F4A7C15), nb)
		buckets[hi] = append(buckets[hi], kept[u*c:(u+1)*c])
	}
	var want []uint64
	for b, clumps := range buckets {
		permutation.Permute(permutation.NewRand(permutation.DeriveKey(seed, fmt.Sprintf("shuffle/%d", p))^mix(uint64(b))), clumps)
		for _, cl := range clumps {
			want = append(want, cl...)
		}
	}
	return append(want, kept[int64(len(kept))/c*c:]...)
}

// mix is SplitMix64's output function, as docs/spec.md states it.
func mix(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

// TestSplitsDealtInPass: with tables of several buckets, a random split, and
// a sequential split with a full shuffle, deal their kept rows in one pass.
// Each split holds as many rows as a split of every kept row at once gives
// it (a sequential split the same rows), no row is in two splits, a random
// split's clumps are whole, and a shuffled split is its rows in stored
// order, shuffled in whole clumps; two builds write the same bytes; no step
// holds more than about a bucket; no spill is left. A random split's rows
// and order are the ones docs/spec.md's rule gives, rebuilt here.
func TestSplitsDealtInPass(t *testing.T) {
	tb := openTable(t, t.TempDir(), 700, 333, 2000)
	const bucket = 100
	random := func(c int64, ratios ...float64) *permutation.SplitSpec {
		return &permutation.SplitSpec{Kind: "random", Ratios: ratios, Seed: 3, ClumpSize: c}
	}
	for name, spec := range map[string]permutation.Spec{
		"random":             {Split: random(1, 0.7, 0.2), Shuffle: &permutation.ShuffleSpec{Seed: 4}},
		"random clumps":      {Filter: "tokens IS NOT NULL", Lengths: "tokens", Split: &permutation.SplitSpec{Kind: "random", Counts: []int64{400, 190, 1}, Seed: 2, ClumpSize: 5}, Shuffle: &permutation.ShuffleSpec{Seed: 6, ClumpSize: 4}},
		"random stored":      {Filter: "id % 3 != 1", Split: &permutation.SplitSpec{Kind: "random", Fixed: 500, Seed: 9}},
		"random window":      {Split: random(7, 0.5, 0.5), Shuffle: &permutation.ShuffleSpec{Seed: 8, ClumpSize: 2, Window: 10}},
		"sequential":         {Filter: "id % 3 != 1", Split: &permutation.SplitSpec{Kind: "sequential", Ratios: []float64{0.3, 0.7}}, Shuffle: &permutation.ShuffleSpec{Seed: 10, ClumpSize: 6}},
		"sequential lengths": {Filter: "tokens IS NOT NULL", Lengths: "tokens", Split: &permutation.SplitSpec{Kind: "sequential", Fixed: 300}, Shuffle: &permutation.ShuffleSpec{Seed: 1}},
	} {
		stored := spec
		stored.Shuffle = nil
		whole := build(t, tb, stored) // every kept row at once, one bucket
		kept := map[uint64]bool{}
		for _, s := range build(t, tb, permutation.Spec{Filter: spec.Filter}).Splits() {
			for _, id := range allIDs(t, s) {
				kept[id] = true
			}
		}
		held := bucketed(t, bucket)
		want := build(t, tb, stored) // dealt in a pass, in row id order
		seen := map[uint64]bool{}
		for i, s := range want.Splits() {
			ids := allIDs(t, s)
			if s.Len() != whole.Splits()[i].Len() {
				t.Fatalf("%s: split %d holds %d rows, %d when drawn at once", name, i, s.Len(), whole.Splits()[i].Len())
			}
			if spec.Split.Kind == "sequential" && !slices.Equal(ids, allIDs(t, whole.Splits()[i])) {
				t.Fatalf("%s: split %d holds other rows than when cut at once", name, i)
			}
			for _, id := range ids {
				if !kept[id] || seen[id] {
					t.Fatalf("%s: row %d in split %d: kept %v, in another split %v", name, id, i, kept[id], seen[id])
				}
				seen[id] = true
			}
		}
		if c := spec.Split.ClumpSize; c > 1 {
			checkSplitClumps(t, name, want, kept, c)
		}
		buildTwice(t, name, tb, spec, want, held, bucket)
	}

	// The rule: each kept row, in row id order, is drawn from an urn of the
	// splits' sizes and the rows in none; each split is then a part of a
	// bucketed shuffle.
	spec := permutation.Spec{Filter: "id % 5 != 2", Split: random(1, 0.6, 0.3), Shuffle: &permutation.ShuffleSpec{Seed: 12}}
	p := build(t, tb, spec)
	var kept []uint64
	for id := range uint64(tb.NumRows()) {
		if id%5 != 2 {
			kept = append(kept, id)
		}
	}
	left := []int64{0, 0, 0}
	for i, s := range p.Splits() {
		left[i] = int64(s.Len())
	}
	left[2] = int64(len(kept)) - left[0] - left[1]
	r := permutation.NewRand(permutation.DeriveKey(3, "split_random"))
	drawn := make([][]uint64, 3)
	for _, id := range kept {
		x := int64(r.Uint64n(uint64(left[0] + left[1] + left[2])))
		i := 0
		for x >= left[i] {
			x -= left[i]
			i++
		}
		left[i]--
		drawn[i] = append(drawn[i], id)
	}
	nb := uint64((tb.NumRows() + bucket - 1) / bucket)
	for i, s := range p.Splits() {
		if !slices.Equal(allIDs(t, s), bucketRule(drawn[i], 12, i, nb, 1)) {
			t.Errorf("split %d is not the one the rule gives", i)
		}
	}
}

// checkSplitClumps checks that p's splits take the kept rows in whole clumps
// of c consecutive kept rows (in row id order).
func checkSplitClumps(t *testing.T, name string, p *permutation.Permutations, kept map[uint64]bool, c int64) {
	t.Helper()
	of := map[uint64]int{}
	for i, s := range p.Splits() {
		for _, id := range allIDs(t, s) {
			of[id] = i
		}
	}
	ids := slices.Sorted(maps.Keys(kept))
	for u := 0; u < len(ids); u += int(c) {
		first, in := of[ids[u]]
		for _, id := range ids[u:min(u+int(c), len(ids))] {
			if split, ok := of[id]; ok != in || split != first {
				t.Fatalf("%s: the clump of kept rows from %d is cut between splits", name, ids[u])
			}
		}
	}
}

// TestWideIDs: 8-byte row ids, with and without lengths, give the order
// 4-byte ones do.
func TestWideIDs(t *testing.T) {
	tb := openTable(t, t.TempDir(), 700, 333)
	bucketed(t, 100)
	hash := &permutation.SplitSpec{Kind: "hash", Columns: []string{"text"}, Weights: []int64{3, 1}}
	for _, spec := range []permutation.Spec{
		{Split: hash, Shuffle: &permutation.ShuffleSpec{Seed: 2, ClumpSize: 3}},
		{Filter: "tokens IS NOT NULL", Lengths: "tokens", Split: hash, Shuffle: &permutation.ShuffleSpec{Seed: 8}},
		{Filter: "tokens IS NOT NULL", Lengths: "tokens", Shuffle: &permutation.ShuffleSpec{Seed: 8, ClumpSize: 2, Window: 5}},
	} {
		narrow := build(t, tb, spec)
		restore := permutation.SetWideIDs()
		wide := build(t, tb, spec)
		restore()
		if w := wide.Manifest().IDWidth; w != 8 {
			t.Fatalf("id width %d", w)
		}
		for i, s := range wide.Splits() {
			ids := allIDs(t, s)
			if !slices.Equal(ids, allIDs(t, narrow.Splits()[i])) {
				t.Errorf("split %d: 8-byte ids in another order than 4-byte ones", i)
			}
			checkLengths(t, "wide", s, ids)
		}
	}
}

// TestSequentialSplitsFromSpill: a sequential split reads its runs back from
// the spill, one spill object at a time in stored order, one window at a
// time with a window shuffle, and one split at a time with a full shuffle,
// never every kept row at once; and it builds the permutation it builds in
// memory.
func TestSequentialSplitsFromSpill(t *testing.T) {
	tb := openTable(t, t.TempDir(), 700, 333)
	seq := func(ratios ...float64) *permutation.SplitSpec {
		return &permutation.SplitSpec{Kind: "sequential", Ratios: ratios}
	}
	for name, tc := range map[string]struct {
		spec permutation.Spec
		most int64 // records held at once
	}{
		"stored":  {permutation.Spec{Filter: "id % 3 != 1", Split: seq(0.6, 0.3)}, 16},
		"lengths": {permutation.Spec{Lengths: "tokens", Filter: "tokens IS NOT NULL", Split: seq(0.5, 0.5)}, 8},
		"window":  {permutation.Spec{Split: seq(0.5, 0.5), Shuffle: &permutation.ShuffleSpec{Seed: 9, ClumpSize: 3, Window: 10}}, 30},
		"shuffle": {permutation.Spec{Split: seq(0.2, 0.8), Shuffle: &permutation.ShuffleSpec{Seed: 10, ClumpSize: 6}}, 827}, // of 1,033 rows
	} {
		want := splitsDigest(t, build(t, tb, tc.spec))
		var held int64
		restore := permutation.SetBuckets(1<<22, 64, func(n int64) { held = n })
		got := splitsDigest(t, build(t, tb, tc.spec))
		restore()
		if got != want {
			t.Errorf("%s: splits digest %s from the spill, %s in memory", name, got, want)
		}
		if held > tc.most {
			t.Errorf("%s: %d records held at once, more than %d", name, held, tc.most)
		}
	}
}

// TestPlaceProgress: the passes that place groups in buckets and deal
// splits report their records as the "place" phase, in the build's first
// ordering only, up to their total, before any row is written.
func TestPlaceProgress(t *testing.T) {
	tb := openTable(t, t.TempDir(), 700, 333, 2000)
	gtb, keys := groupedTable(t, 3, 400, 9)
	bucketed(t, 100)
	for name, tc := range map[string]struct {
		tb   *table.Table
		spec permutation.Spec
		rows int64 // records the passes read
	}{
		"random": {tb, permutation.Spec{Split: &permutation.SplitSpec{Kind: "random", Ratios: []float64{0.7, 0.2}}, Shuffle: &permutation.ShuffleSpec{Seed: 1}}, tb.NumRows()},
		"groups": {gtb, permutation.Spec{GroupBy: []string{"problem_id"}, Shuffle: &permutation.ShuffleSpec{Seed: 2}}, 2 * int64(len(keys))},
	} {
		var calls []permutation.Progress
		p, err := permutation.Build(context.Background(), tc.tb, tc.spec, "file://"+t.TempDir(), permutation.BuildOptions{
			Progress: func(pr permutation.Progress) { calls = append(calls, pr) }})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		p.Close()
		var last permutation.Progress
		writing := false
		for _, pr := range calls {
			switch pr.Phase {
			case "write":
				writing = true
			case "place":
				if writing || pr.Done < last.Done || pr.Done > pr.Total || pr.Total != tc.rows {
					t.Fatalf("%s: place %d of %d after %d of %d, writing %v", name, pr.Done, pr.Total, last.Done, last.Total, writing)
				}
				last = pr
			}
		}
		if last.Done != tc.rows {
			t.Errorf("%s: the passes reported %d records of %d", name, last.Done, tc.rows)
		}
	}
}
