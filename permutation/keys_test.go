package permutation

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/store"
)

// TestGroupsOfRanks numbers the groups of random keys cut into runs of
// rows, as W ranks scan them: each run's groups written as a keys object,
// read back and merged in order, number every row as one pass over all the
// keys does, and group orders the rows alike. A keys object cut short, or
// naming a group it does not hold, is Corrupt.
func TestGroupsOfRanks(t *testing.T) {
	ctx := context.Background()
	loc, err := store.OpenCreate(ctx, "file://"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for iter := range 20 {
		n := 1 + rng.IntN(2000)
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprint(rng.IntN(1 + rng.IntN(300)))
		}
		one := &groups{}
		for _, k := range keys {
			if err := one.add(k); err != nil {
				t.Fatal(err)
			}
		}
		// Groups are numbered in the order of their first rows.
		order := firstKeys(keys)
		for i, k := range keys {
			if want := uint32(slices.Index(order, k)); one.of[i] != want || one.keys[want] != k {
				t.Fatalf("iter %d: row %d of key %q is group %d, want %d", iter, i, k, one.of[i], want)
			}
		}
		all := &groups{}
		for r, from := 0, 0; from < n; r++ {
			to := min(n, from+rng.IntN(n+1))
			part := &groups{}
			for _, k := range keys[from:to] {
				if err := part.add(k); err != nil {
					t.Fatal(err)
				}
			}
			sp := &spill{loc: loc, prefix: fmt.Sprintf("iter%d/%d", iter, r), claim: func() error { return nil }}
			if err := sp.writeKeys(ctx, 0, part); err != nil {
				t.Fatal(err)
			}
			got, err := readKeys(ctx, loc, sp.keysKey(0), int64(to-from))
			if err != nil {
				t.Fatal(err)
			}
			if err := all.merge(got); err != nil {
				t.Fatal(err)
			}
			from = to
		}
		if !slices.Equal(all.of, one.of) || !slices.Equal(all.keys, one.keys) {
			t.Fatalf("iter %d: the ranks' groups differ from one pass's", iter)
		}
		ids := make([]uint64, n)
		for i := range ids {
			ids[i] = uint64(i)
		}
		starts := group(ids, one.of, len(one.keys), NewRand(uint64(iter)))
		if len(starts) != len(one.keys) {
			t.Fatalf("iter %d: %d groups start, of %d", iter, len(starts), len(one.keys))
		}
		for g, s := range starts {
			end := uint64(n)
			if g+1 < len(starts) {
				end = starts[g+1]
			}
			run := ids[s:end]
			if !slices.IsSorted(run) || len(run) == 0 || slices.ContainsFunc(run, func(id uint64) bool { return keys[id] != keys[run[0]] }) {
				t.Fatalf("iter %d: group at %d holds rows %v", iter, s, run)
			}
		}
	}
	sp := &spill{loc: loc, prefix: "bad", claim: func() error { return nil }}
	g := &groups{}
	for _, k := range []string{"a", "b", "a", "c"} {
		g.add(k)
	}
	if err := sp.writeKeys(ctx, 0, g); err != nil {
		t.Fatal(err)
	}
	data, err := loc.ReadAll(ctx, sp.keysKey(0))
	if err != nil {
		t.Fatal(err)
	}
	for name, bad := range map[string][]byte{
		"cut short":  data[:len(data)-1],
		"no group":   append(slices.Clone(data[:len(data)-1]), 7),
		"empty":      nil,
		"keys short": data[:4],
	} {
		if err := loc.WriteAll(ctx, "bad/"+name, bad, store.WriterOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := readKeys(ctx, loc, "bad/"+name, 4); errcode.Of(err) != errcode.Corrupt {
			t.Errorf("%s: %v, want Corrupt", name, err)
		}
	}
}

// firstKeys returns the keys in the order of their first appearance.
func firstKeys(keys []string) []string {
	var out []string
	for i, k := range keys {
		if slices.Index(keys, k) == i {
			out = append(out, k)
		}
	}
	return out
}
