package permutation_test

import (
	"context"
	"errors"
	"math/rand/v2"
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

// groupedTable writes a table of rows in groups of 1 to maxSize rows, the
// rows of each group scattered over the table, and returns it with each
// row's key (the row ids are the positions in keys).
func groupedTable(t *testing.T, seed uint64, groups, maxSize int) (*table.Table, []int64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	var keys []int64
	for g := range groups {
		for range 1 + rng.IntN(maxSize) {
			keys = append(keys, int64(g)*7919%100003) // distinct, not in row order
		}
	}
	rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	dir := t.TempDir()
	tabletest.WriteGroups(t, dir, keys, 64)
	tb, err := table.Open(context.Background(), "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tb.Close() })
	return tb, keys
}

// checkGroups checks that order holds every row of rows exactly once, and
// that its groups (from Groups over the whole order) are exactly the rows of
// each key, each in row id order.
func checkGroups(t *testing.T, what string, order permutation.Order, keys []int64, rows []uint64) {
	t.Helper()
	ctx := context.Background()
	ids, err := order.RowIDs(ctx, 0, order.Len())
	if err != nil {
		t.Fatal(err)
	}
	if got := slices.Sorted(slices.Values(ids)); !slices.Equal(got, rows) {
		t.Fatalf("%s: %d row ids, not the %d rows of the split each once", what, len(ids), len(rows))
	}
	bounds, err := order.(permutation.GroupedOrder).Groups(ctx, 0, order.Len())
	if err != nil {
		t.Fatal(err)
	}
	if bounds[0] != 0 || bounds[len(bounds)-1] != order.Len() {
		t.Fatalf("%s: groups span [%d, %d), want [0, %d)", what, bounds[0], bounds[len(bounds)-1], order.Len())
	}
	seen := map[int64]bool{}
	for g := range len(bounds) - 1 {
		rows := ids[bounds[g]:bounds[g+1]]
		k := keys[rows[0]]
		if seen[k] {
			t.Fatalf("%s: key %d in two groups", what, k)
		}
		seen[k] = true
		if !slices.IsSorted(rows) {
			t.Fatalf("%s: group %d's rows %v are not in row id order", what, g, rows)
		}
		for _, id := range rows {
			if keys[id] != k {
				t.Fatalf("%s: group %d holds keys %d and %d", what, g, k, keys[id])
			}
		}
	}
	for _, id := range rows {
		if !seen[keys[id]] {
			t.Fatalf("%s: key %d of row %d in no group", what, keys[id], id)
		}
	}
}

// TestGroupBy builds grouped permutations over integer and string keys, with
// and without a shuffle and a hash split on the key: each split's stored
// order and its later epochs hold every row once, in whole groups, and the
// shuffle moves whole groups.
func TestGroupBy(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	tb, keys := groupedTable(t, seed, 300, 7)
	all := make([]uint64, len(keys))
	for i := range all {
		all[i] = uint64(i)
	}
	for _, key := range []string{"problem_id", "problem"} {
		for _, spec := range []permutation.Spec{
			{GroupBy: []string{key}},
			{GroupBy: []string{key}, Shuffle: &permutation.ShuffleSpec{Seed: 5}},
			{GroupBy: []string{key}, Shuffle: &permutation.ShuffleSpec{Seed: 5},
				Split: &permutation.SplitSpec{Kind: "hash", Columns: []string{key}, Weights: []int64{3, 1}}},
		} {
			p := build(t, tb, spec)
			if p.Manifest().Format != 3 { // groups and lengths are format 3
				t.Errorf("format %d, want 3", p.Manifest().Format)
			}
			var rows []uint64
			var perSplit [][]uint64
			for _, s := range p.Splits() {
				ids := slices.Sorted(slices.Values(allIDs(t, s)))
				perSplit = append(perSplit, ids)
				rows = append(rows, ids...)
				for e := range int64(3) {
					checkGroups(t, s.ID(), s.ForEpoch(11, e), keys, ids)
				}
				starts, err := s.GroupStarts(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				if int64(len(starts)) != s.NumGroups()+1 {
					t.Errorf("%d group starts for %d groups", len(starts), s.NumGroups())
				}
			}
			if slices.Sort(rows); !slices.Equal(rows, all) {
				t.Fatalf("%v: the splits do not hold every row once", spec)
			}
			if len(perSplit) == 2 {
				for _, id := range perSplit[1] {
					for _, other := range perSplit[0] {
						if keys[id] == keys[other] {
							t.Fatalf("key %d in both splits", keys[id])
						}
					}
				}
			}
			s := p.Splits()[0]
			e0, _ := s.ForEpoch(11, 0).RowIDs(context.Background(), 0, s.Len())
			e1, _ := s.ForEpoch(11, 1).RowIDs(context.Background(), 0, s.Len())
			if shuffled := spec.Shuffle != nil; shuffled == slices.Equal(e0, e1) {
				t.Errorf("%v: epoch 1 equal to epoch 0: %t, want %t", spec, !shuffled, !shuffled)
			}
		}
	}
	// Without a shuffle, groups come in the order of their first rows.
	p := build(t, tb, permutation.Spec{GroupBy: []string{"problem_id"}})
	ids := allIDs(t, p.Splits()[0])
	starts, _ := p.Splits()[0].GroupStarts(context.Background())
	for g := 1; g < len(starts)-1; g++ {
		if ids[starts[g]] < ids[starts[g-1]] {
			t.Fatalf("group %d's first row %d comes after group %d's first row %d", g, ids[starts[g]], g-1, ids[starts[g-1]])
		}
	}
}

// TestGroupByReproducible: the same inputs give the same permutation; a
// permutation without groups is still of format 2, so its id is unchanged.
func TestGroupByReproducible(t *testing.T) {
	tb, _ := groupedTable(t, 1, 50, 4)
	spec := permutation.Spec{GroupBy: []string{"problem"}, Shuffle: &permutation.ShuffleSpec{Seed: 9}}
	a, b := build(t, tb, spec), build(t, tb, spec)
	if a.ID() != b.ID() || !slices.Equal(allIDs(t, a.Splits()[0]), allIDs(t, b.Splits()[0])) {
		t.Fatalf("two builds differ: %s, %s", a.ID(), b.ID())
	}
	if p := build(t, tb, permutation.Spec{Shuffle: &permutation.ShuffleSpec{Seed: 9}}); p.Manifest().Format != 2 {
		t.Fatalf("a permutation without groups is of format %d, want 2", p.Manifest().Format)
	}
}

// TestGroupBySpecs: what could cut a group is refused, naming the rule.
func TestGroupBySpecs(t *testing.T) {
	tb, _ := groupedTable(t, 2, 20, 3)
	g := []string{"problem_id"}
	for _, tc := range []struct {
		spec permutation.Spec
		want string
	}{
		{permutation.Spec{GroupBy: g, Split: &permutation.SplitSpec{Kind: "random", Ratios: []float64{0.5, 0.5}}}, "split_random could cut a group"},
		{permutation.Spec{GroupBy: g, Split: &permutation.SplitSpec{Kind: "hash", Columns: []string{"id"}, Weights: []int64{1, 1}}}, "hash only columns of the group key"},
		{permutation.Spec{GroupBy: g, Shuffle: &permutation.ShuffleSpec{Seed: 1, ClumpSize: 4}}, "clump_size and window do not apply"},
		{permutation.Spec{GroupBy: g, Shuffle: &permutation.ShuffleSpec{Seed: 1, Window: 4}}, "clump_size and window do not apply"},
		{permutation.Spec{GroupBy: []string{"nope"}}, `unknown column "nope"`},
		{permutation.Spec{GroupBy: []string{"id", "id"}}, "distinct and non-empty"},
	} {
		_, err := permutation.Build(context.Background(), tb, tc.spec, "file://"+t.TempDir(), permutation.BuildOptions{})
		if errcode.Of(err) != errcode.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want InvalidArgument naming %q", tc.spec, err, tc.want)
		}
	}
}

// TestGroupChunkDigests: a changed group chunk is Corrupt, naming it.
func TestGroupChunkDigests(t *testing.T) {
	tb, _ := groupedTable(t, 3, 40, 3)
	dir := t.TempDir()
	p, err := permutation.Build(context.Background(), tb, permutation.Spec{GroupBy: []string{"problem_id"}, Shuffle: &permutation.ShuffleSpec{Seed: 1}},
		"file://"+dir, permutation.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	chunk := filepath.Join(dir, p.ID(), "0", "groups", "00000000.ids")
	p.Close()
	b, err := os.ReadFile(chunk)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-1] ^= 1
	os.WriteFile(chunk, b, 0o644)
	p, err = permutation.Open(context.Background(), "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	_, err = p.Splits()[0].GroupStarts(context.Background())
	wantCorrupt(t, "flipped bit", err, "groups/00000000.ids", "group chunk 0")
}

// TestGroupsFromSpill places the rows of grouped splits in buckets of at
// most 40 positions, spilled, as a build whose split does not fit one
// bucket does, with 4- and 8-byte row ids, with and without lengths: the
// permutation is the one placed in memory, by one process and by 3 ranks,
// and no slice held more than a bucket or the largest group.
func TestGroupsFromSpill(t *testing.T) {
	tb, _ := groupedTable(t, 5, 300, 60) // groups of 1 to 60 rows
	const bucket = 40
	for name, spec := range map[string]permutation.Spec{
		"stored":        {GroupBy: []string{"problem_id"}},
		"shuffled":      {Filter: "id % 5 != 2", GroupBy: []string{"problem"}, Shuffle: &permutation.ShuffleSpec{Seed: 11}},
		"hashed":        {GroupBy: []string{"problem"}, Split: &permutation.SplitSpec{Kind: "hash", Columns: []string{"problem"}, Weights: []int64{3, 1}}, Shuffle: &permutation.ShuffleSpec{Seed: 6}},
		"lengths":       {GroupBy: []string{"problem_id"}, Lengths: "id", Shuffle: &permutation.ShuffleSpec{Seed: 7}},
		"wide":          {GroupBy: []string{"problem_id"}, Shuffle: &permutation.ShuffleSpec{Seed: 8}},
		"wide, lengths": {GroupBy: []string{"problem_id"}, Lengths: "id", Shuffle: &permutation.ShuffleSpec{Seed: 9}},
	} {
		t.Run(name, func(t *testing.T) {
			if strings.HasPrefix(name, "wide") {
				t.Cleanup(permutation.SetWideIDs()) // for this case alone
			}
			want := splitsDigest(t, build(t, tb, spec))
			var held int64
			restore := permutation.SetBuckets(bucket, 1<<10, func(n int64) { held = max(held, n) })
			got := splitsDigest(t, build(t, tb, spec))
			perms, errs := buildRanks(t, tb, spec, "file://"+t.TempDir(), 3)
			restore()
			if err := errors.Join(errs...); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if got != want {
				t.Errorf("%s: splits digest %s placed in buckets, %s in memory", name, got, want)
			}
			if ranks := splitsDigest(t, perms[0]); ranks != want {
				t.Errorf("%s: splits digest %s by 3 ranks, %s in memory", name, ranks, want)
			}
			if held > 60 {
				t.Errorf("%s: %d records held at once, more than the largest group's 60", name, held)
			}
		})
	}
}
