package permutation_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/internal/tabletest"
	"github.com/croupier-data/croupier/permutation"
)

// buildRanks builds spec at uri with w ranks, each step of every rank run
// in its own goroutine and their reports gathered in rank order, as the
// processes of a distributed build exchange them. It returns each rank's
// permutation, or each rank's error.
func buildRanks(t *testing.T, tb *table.Table, spec permutation.Spec, uri string, w int) ([]*permutation.Permutations, []error) {
	t.Helper()
	ctx := context.Background()
	ranks := make([]*permutation.Rank, w)
	errs := make([]error, w)
	for i := range ranks {
		r, err := permutation.NewRank(ctx, tb, spec, uri, permutation.BuildOptions{}, permutation.RankOptions{Rank: i, World: w})
		if err != nil {
			errs[i] = err
			continue
		}
		ranks[i] = r
		t.Cleanup(func() { r.Close() })
	}
	if errors.Join(errs...) != nil {
		return nil, errs
	}
	var gathered [][]byte
	for {
		reports := make([][]byte, w)
		var wg sync.WaitGroup
		for i, r := range ranks {
			wg.Add(1)
			go func() {
				defer wg.Done()
				reports[i], errs[i] = r.Next(ctx, gathered)
			}()
		}
		wg.Wait()
		ended := 0
		for _, rep := range reports {
			if rep == nil {
				ended++
			}
		}
		if ended == w {
			break
		}
		if ended > 0 {
			t.Fatalf("%d of %d ranks ended a step before the others", ended, w)
		}
		gathered = reports
	}
	perms := make([]*permutation.Permutations, w)
	for i, r := range ranks {
		if perms[i] = r.Permutations(); perms[i] != nil {
			t.Cleanup(func() { perms[i].Close() })
		}
	}
	return perms, errs
}

// distributedTable returns a table of 200,000 rows in 40 row groups of 3
// files, which splits into several chunks of several buckets.
func distributedTable(t *testing.T) *table.Table {
	dir := t.TempDir()
	tabletest.Write(t, dir, []int64{70000, 50000, 80000}, 5000)
	tb, err := table.Open(context.Background(), "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tb.Close() })
	return tb
}

// TestDistributedBuild: whatever the number of ranks, a distributed build
// writes the very objects of a single-process build, with its ID, and leaves
// no spill.
func TestDistributedBuild(t *testing.T) {
	ctx := context.Background()
	tb, small := distributedTable(t), openTable(t, t.TempDir(), 120, 30)
	t.Cleanup(permutation.SetBuckets(30000, 4096, nil))
	hash := &permutation.SplitSpec{Kind: "hash", Columns: []string{"text"}, Weights: []int64{3, 1}, DiscardWeight: 1}
	specs := map[string]permutation.Spec{
		"stored":     {Filter: "id % 3 != 1"},
		"shuffle":    {Shuffle: &permutation.ShuffleSpec{Seed: 5}},
		"filter":     {Filter: "id % 3 != 1", Shuffle: &permutation.ShuffleSpec{Seed: 5}},
		"clumps":     {Filter: "id % 3 != 1", Shuffle: &permutation.ShuffleSpec{Seed: 5, ClumpSize: 16}},
		"hash":       {Split: hash, Shuffle: &permutation.ShuffleSpec{Seed: 2, ClumpSize: 3}},
		"calculated": {Split: &permutation.SplitSpec{Kind: "calculated", Expr: "id % 4", Names: []string{"a", "b", "c"}}, Shuffle: &permutation.ShuffleSpec{Seed: 3}},
		"window":     {Split: hash, Shuffle: &permutation.ShuffleSpec{Seed: 4, Window: 1000, ClumpSize: 4}},
		"lengths":    {Lengths: "tokens", Split: hash, Shuffle: &permutation.ShuffleSpec{Seed: 8, ClumpSize: 7}},
	}
	for name, spec := range specs {
		for _, tc := range []struct {
			what string
			tb   *table.Table
		}{{"large", tb}, {"small", small}} {
			dir := t.TempDir()
			want, err := permutation.Build(ctx, tc.tb, spec, "file://"+dir, permutation.BuildOptions{})
			if err != nil {
				t.Fatalf("%s %s: %v", name, tc.what, err)
			}
			wantFiles := storedFiles(dir)
			want.Close()
			for _, w := range []int{1, 2, 3, 4, 8} {
				at := t.TempDir()
				perms, errs := buildRanks(t, tc.tb, spec, "file://"+at, w)
				if err := errors.Join(errs...); err != nil {
					t.Fatalf("%s %s, %d ranks: %v", name, tc.what, w, err)
				}
				for i, p := range perms {
					if p.ID() != want.ID() {
						t.Errorf("%s %s, %d ranks: rank %d built %s, one process %s", name, tc.what, w, i, p.ID(), want.ID())
					}
				}
				got := storedFiles(at)
				if len(got) != len(wantFiles) {
					t.Errorf("%s %s, %d ranks: %d files, one process %d", name, tc.what, w, len(got), len(wantFiles))
				}
				for key, data := range wantFiles {
					if !bytes.Equal(got[key], data) {
						t.Errorf("%s %s, %d ranks: %s differs from one process's", name, tc.what, w, key)
					}
				}
				noSpill(t, at)
			}
		}
	}
}

// noSpill fails unless nothing is left of dir's spill folder, not even
// empty folders.
func noSpill(t *testing.T, dir string) {
	t.Helper()
	filepath.WalkDir(filepath.Join(dir, "_spill"), func(p string, d os.DirEntry, err error) error {
		if err == nil {
			t.Errorf("%s left behind", p)
		}
		return nil
	})
}

// TestDistributedFailure: when a rank fails, at any step before the commit
// or rank 0 at the commit, every rank fails naming it, nothing is committed
// and the spill is gone; a build again at the same place succeeds. The
// steps of the spec: hello, scan, route, digest, write, commit, open.
func TestDistributedFailure(t *testing.T) {
	tb := distributedTable(t)
	t.Cleanup(permutation.SetBuckets(30000, 4096, nil))
	failures(t, tb, permutation.Spec{Filter: "id % 3 != 1", Shuffle: &permutation.ShuffleSpec{Seed: 5, ClumpSize: 16}},
		[][2]int{{1, 0}, {1, 1}, {2, 2}, {1, 3}, {0, 4}, {2, 4}, {0, 5}})
	// Splits dealt in a pass, without the route step.
	failures(t, tb, permutation.Spec{Split: &permutation.SplitSpec{Kind: "random", Ratios: []float64{0.5, 0.3, 0.2}, Seed: 1}, Shuffle: &permutation.ShuffleSpec{Seed: 3}},
		[][2]int{{1, 2}, {2, 2}, {0, 3}, {1, 3}, {0, 4}})
}

// failures builds spec over tb with 3 ranks, faults[i][0] of which fails
// at step faults[i][1], and checks the build failed as
// TestDistributedFailure says.
func failures(t *testing.T, tb *table.Table, spec permutation.Spec, faults [][2]int) {
	t.Helper()
	ctx := context.Background()
	want, err := permutation.Build(ctx, tb, spec, "file://"+t.TempDir(), permutation.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer want.Close()
	for _, fault := range faults {
		rank, step := fault[0], fault[1]
		dir := t.TempDir()
		restore := permutation.SetRankFault(rank, step, errcode.New(errcode.Unavailable, "test", "", "injected at step %d", step))
		_, errs := buildRanks(t, tb, spec, "file://"+dir, 3)
		restore()
		for i, err := range errs {
			if errcode.Of(err) != errcode.Unavailable || !strings.Contains(err.Error(), fmt.Sprintf("rank %d of 3 failed", rank)) ||
				!strings.Contains(err.Error(), "injected") {
				t.Errorf("step %d: rank %d: %v, want rank 1's Unavailable error", step, i, err)
			}
		}
		if _, err := os.Stat(filepath.Join(dir, "permutation.json")); !os.IsNotExist(err) {
			t.Errorf("step %d: a manifest is committed (%v)", step, err)
		}
		noSpill(t, dir)
		perms, errs := buildRanks(t, tb, spec, "file://"+dir, 3)
		if err := errors.Join(errs...); err != nil || perms[2].ID() != want.ID() {
			t.Fatalf("step %d: the build again: %v", step, err)
		}
	}
}

// TestDistributedMismatch: ranks that build different permutations fail.
func TestDistributedMismatch(t *testing.T) {
	tb := openTable(t, t.TempDir(), 300)
	dir := t.TempDir()
	ctx := context.Background()
	var ranks [2]*permutation.Rank
	for i := range ranks {
		spec := permutation.Spec{Shuffle: &permutation.ShuffleSpec{Seed: uint64(i)}}
		r, err := permutation.NewRank(ctx, tb, spec, "file://"+dir, permutation.BuildOptions{}, permutation.RankOptions{Rank: i, World: 2})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		ranks[i] = r
	}
	var gathered [][]byte
	for step := 0; ; step++ {
		var reports [][]byte
		var errs []error
		for _, r := range ranks {
			rep, err := r.Next(ctx, gathered)
			reports, errs = append(reports, rep), append(errs, err)
		}
		if errs[0] != nil || errs[1] != nil {
			for i, err := range errs {
				if !strings.Contains(err.Error(), "rank 1 builds another permutation than rank 0") {
					t.Errorf("rank %d: %v", i, err)
				}
			}
			break
		}
		if step > 2 {
			t.Fatal("ranks of different seeds built a permutation")
		}
		gathered = reports
	}
	noSpill(t, dir)
}

// TestLeftRankSpill: a rank that leaves a build whose other rank died after
// both spilled deletes the whole build's spill, the dead rank's too.
func TestLeftRankSpill(t *testing.T) {
	ctx := context.Background()
	tb := distributedTable(t)
	spec := permutation.Spec{Filter: "id % 3 != 1", Shuffle: &permutation.ShuffleSpec{Seed: 5}}
	dir := t.TempDir()
	var ranks [2]*permutation.Rank
	for i := range ranks {
		r, err := permutation.NewRank(ctx, tb, spec, "file://"+dir, permutation.BuildOptions{}, permutation.RankOptions{Rank: i, World: 2})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		ranks[i] = r
	}
	var gathered [][]byte
	for range 2 { // hello, scan: every rank's spill is written out
		reports := make([][]byte, 2)
		for i, r := range ranks {
			rep, err := r.Next(ctx, gathered)
			if err != nil {
				t.Fatal(err)
			}
			reports[i] = rep
		}
		gathered = reports
	}
	if len(storedFiles(filepath.Join(dir, "_spill"))) < 4 {
		t.Fatalf("the ranks spilled %d objects and leases, want at least 4", len(storedFiles(filepath.Join(dir, "_spill"))))
	}
	ranks[0].Close() // rank 1 is gone: rank 0 lost the group
	noSpill(t, dir)
}

// TestSpillSweep: a build that commits deletes the spill of every other
// build at its location none of whose objects was written for an hour, and
// keeps the others'.
func TestSpillSweep(t *testing.T) {
	tb := openTable(t, t.TempDir(), 300)
	dir := t.TempDir()
	old := time.Now().Add(-2 * time.Hour)
	plant := func(key string, at time.Time) {
		p := filepath.Join(dir, "_spill", key)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, at, at); err != nil {
			t.Fatal(err)
		}
	}
	plant("dead/0/0/0/00000000", old)
	plant("dead/1-scanned/0/0/00000000", old)
	plant("dead/lease-0", old)
	plant("leased/0/0/0/00000000", old)
	plant("leased/lease-0", time.Now())
	plant("running/0/0/0/00000000", time.Now())
	for w := range 3 {
		if w > 0 {
			dir = t.TempDir()
			plant("dead/0/0/0/00000000", old)
			plant("dead/lease-0", old)
			plant("running/0/0/0/00000000", time.Now())
		}
		_, errs := buildRanks(t, tb, permutation.Spec{Shuffle: &permutation.ShuffleSpec{Seed: 1}}, "file://"+dir, w+1)
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		left := storedFiles(filepath.Join(dir, "_spill"))
		want := []string{"/running/0/0/0/00000000"}
		if w == 0 {
			want = []string{"/leased/0/0/0/00000000", "/leased/lease-0", "/running/0/0/0/00000000"}
		}
		if got := slices.Sorted(maps.Keys(left)); !slices.Equal(got, want) {
			t.Errorf("%d ranks: left %q, want %q", w+1, got, want)
		}
	}
}

// TestDistributedWhole: builds that order every kept row at once, groups
// and random and sequential splits, are built by 1, 2 and 3 ranks into the
// very objects of a single-process build, with its ID, and leave no spill.
func TestDistributedWhole(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	keys := make([]int64, 20000)
	for i := range keys {
		keys[i] = int64((i*7919)%3001) / 3 // groups of scattered rows
	}
	tabletest.WriteGroups(t, dir, keys, 1500)
	groups, err := table.Open(ctx, "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	defer groups.Close()
	tb := distributedTable(t)
	byKey := &permutation.SplitSpec{Kind: "hash", Columns: []string{"problem"}, Weights: []int64{3, 1, 1}}
	for name, tc := range map[string]struct {
		tb   *table.Table
		spec permutation.Spec
	}{
		"group_by":          {groups, permutation.Spec{GroupBy: []string{"problem_id"}}},
		"group_by shuffled": {groups, permutation.Spec{GroupBy: []string{"problem", "problem_id"}, Filter: "id % 5 != 2", Shuffle: &permutation.ShuffleSpec{Seed: 3}}},
		"group_by split":    {groups, permutation.Spec{GroupBy: []string{"problem"}, Split: byKey, Shuffle: &permutation.ShuffleSpec{Seed: 4}}},
		"random":            {tb, permutation.Spec{Split: &permutation.SplitSpec{Kind: "random", Ratios: []float64{0.8, 0.15}, Seed: 1}}},
		"random clumps":     {tb, permutation.Spec{Filter: "id % 3 != 1", Lengths: "tokens", Split: &permutation.SplitSpec{Kind: "random", Counts: []int64{12000, 3000, 1}, Seed: 2, ClumpSize: 8}, Shuffle: &permutation.ShuffleSpec{Seed: 6, ClumpSize: 4}}},
		"sequential":        {tb, permutation.Spec{Split: &permutation.SplitSpec{Kind: "sequential", Fixed: 30000}, Shuffle: &permutation.ShuffleSpec{Seed: 7}}},
		"sequential window": {tb, permutation.Spec{Filter: "id % 4 != 0", Split: &permutation.SplitSpec{Kind: "sequential", Ratios: []float64{0.5, 0.5}}, Shuffle: &permutation.ShuffleSpec{Seed: 8, Window: 100}}},
	} {
		one := t.TempDir()
		want, err := permutation.Build(ctx, tc.tb, tc.spec, "file://"+one, permutation.BuildOptions{})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		sameAtRanks(t, name, tc.tb, tc.spec, want.ID(), storedFiles(one), 1, 2, 3)
		want.Close()
	}
}

// TestDistributedDealtSplits: random splits, and sequential splits with a
// full shuffle, dealt in a pass (tables of several buckets) are the same
// at every number of ranks.
func TestDistributedDealtSplits(t *testing.T) {
	ctx := context.Background()
	tb := distributedTable(t)
	t.Cleanup(permutation.SetBuckets(20_000, 4096, nil))
	for name, spec := range map[string]permutation.Spec{
		"random":        {Split: &permutation.SplitSpec{Kind: "random", Ratios: []float64{0.8, 0.15}, Seed: 1}, Shuffle: &permutation.ShuffleSpec{Seed: 3}},
		"random clumps": {Filter: "id % 3 != 1", Lengths: "tokens", Split: &permutation.SplitSpec{Kind: "random", Counts: []int64{12000, 3000, 1}, Seed: 2, ClumpSize: 8}, Shuffle: &permutation.ShuffleSpec{Seed: 6, ClumpSize: 4}},
		"random window": {Split: &permutation.SplitSpec{Kind: "random", Fixed: 30000, Seed: 4}, Shuffle: &permutation.ShuffleSpec{Seed: 5, Window: 50}},
		"sequential":    {Split: &permutation.SplitSpec{Kind: "sequential", Fixed: 30000}, Shuffle: &permutation.ShuffleSpec{Seed: 7}},
	} {
		one := t.TempDir()
		want, err := permutation.Build(ctx, tb, spec, "file://"+one, permutation.BuildOptions{})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		sameAtRanks(t, name, tb, spec, want.ID(), storedFiles(one), 2, 3)
		want.Close()
	}
}

// sameAtRanks builds spec over tb with each of worlds ranks and checks that
// every rank's permutation has the ID of one process's, id, that the
// objects are wantFiles byte for byte, and that no spill is left.
func sameAtRanks(t *testing.T, name string, tb *table.Table, spec permutation.Spec, id string, wantFiles map[string][]byte, worlds ...int) {
	t.Helper()
	for _, w := range worlds {
		at := t.TempDir()
		perms, errs := buildRanks(t, tb, spec, "file://"+at, w)
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("%s, %d ranks: %v", name, w, err)
		}
		for i, p := range perms {
			if p.ID() != id {
				t.Errorf("%s, %d ranks: rank %d built %s, one process %s", name, w, i, p.ID(), id)
			}
		}
		got := storedFiles(at)
		if len(got) != len(wantFiles) {
			t.Errorf("%s, %d ranks: %d files, one process %d", name, w, len(got), len(wantFiles))
		}
		for key, data := range wantFiles {
			if !bytes.Equal(got[key], data) {
				t.Errorf("%s, %d ranks: %s differs from one process's", name, w, key)
			}
		}
		noSpill(t, at)
	}
}

// TestLeaseLapsed: a rank that could not renew its spill's lease for half
// the time after which a spill is taken for a dead build's fails the build
// at its next step, and the build leaves no spill.
func TestLeaseLapsed(t *testing.T) {
	tb := distributedTable(t)
	t.Cleanup(permutation.SetLease(time.Hour, time.Nanosecond)) // the leases are never renewed, and lapse at once
	dir := t.TempDir()
	_, errs := buildRanks(t, tb, permutation.Spec{Shuffle: &permutation.ShuffleSpec{Seed: 5}}, "file://"+dir, 2)
	for i, err := range errs {
		if errcode.Of(err) != errcode.Unavailable || !strings.Contains(err.Error(), "could not renew its spill's lease") {
			t.Errorf("rank %d: %v", i, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "permutation.json")); !os.IsNotExist(err) {
		t.Errorf("a manifest is committed (%v)", err)
	}
	noSpill(t, dir)
}
