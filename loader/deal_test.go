package loader

import (
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/permutation"
)

// reference computes rank r's positions for step t straight from docs/concepts.md, "The dealing order".
func reference(m, s, g, w int64, dropLast bool, t, r int64) []uint64 {
	l := m / s
	var out []uint64
	for c := t * g / s; c < (t+1)*g/s && c < l; c++ {
		for st := r * s / w; st < (r+1)*s/w; st++ {
			out = append(out, uint64(st*l+c))
		}
	}
	return out
}

// TestDealProperties draws random parameters and checks, for every step, rank
// batches against the reference, that the union over ranks is the same set for
// every world size, and that an epoch deals every position at most once and
// leaves out exactly the documented remainder.
func TestDealProperties(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	ctx := context.Background()
	for range 200 {
		s := int64(1 + rng.IntN(12))
		k := int64(1 + rng.IntN(5))
		g := s * k
		m := s + rng.Int64N(300)
		dropLast := rng.IntN(2) == 0
		var worlds []int64
		for w := int64(1); w <= s; w++ {
			if s%w == 0 {
				worlds = append(worlds, w)
			}
		}
		order := permutation.Identity{N: m}
		var steps int64 = -1
		var stepSets [][]uint64
		for _, w := range worlds {
			d, err := NewDeal(m, s, g, w, dropLast)
			if err != nil {
				t.Fatalf("M=%d S=%d G=%d W=%d: %v", m, s, g, w, err)
			}
			if steps >= 0 && d.Steps() != steps {
				t.Fatalf("steps differ across world sizes")
			}
			steps = d.Steps()
			seen := map[uint64]bool{}
			for st := range d.Steps() {
				var set []uint64
				for r := range w {
					got, err := d.Batch(ctx, order, st, r)
					if err != nil {
						t.Fatal(err)
					}
					want := reference(m, s, g, w, dropLast, st, r)
					if !slices.Equal(got, want) {
						t.Fatalf("M=%d S=%d G=%d W=%d step %d rank %d: %v, want %v", m, s, g, w, st, r, got, want)
					}
					if st < d.Steps()-1 || dropLast || (d.StreamLen()%k == 0) {
						if int64(len(got)) != g/w {
							t.Fatalf("full step holds %d per rank, want %d", len(got), g/w)
						}
					}
					for _, id := range got {
						if seen[id] {
							t.Fatalf("position %d dealt twice", id)
						}
						seen[id] = true
					}
					set = append(set, got...)
				}
				slices.Sort(set)
				if w == 1 {
					stepSets = append(stepSets, set)
				} else if !slices.Equal(set, stepSets[st]) {
					t.Fatalf("M=%d S=%d G=%d: step %d differs between W=1 and W=%d", m, s, g, st, w)
				}
			}
			l := m / s
			want := s * l
			if dropLast {
				want = s * (l / k) * k
			}
			if int64(len(seen)) != want {
				t.Fatalf("M=%d S=%d G=%d W=%d drop_last=%v: dealt %d positions, want %d", m, s, g, w, dropLast, len(seen), want)
			}
		}
	}
}

func TestDealErrors(t *testing.T) {
	for _, tc := range []struct {
		m, s, g, w int64
		msg        string
	}{
		{100, 3, 8, 1, "global_batch_size 8 is not a multiple of num_splits 3"},
		{100, 4, 8, 3, "num_splits 4 is not a multiple of world_size 3"},
		{5, 8, 8, 1, "num_splits 8 exceeds the 5 rows"},
		{100, 0, 8, 1, "num_splits must be positive"},
	} {
		_, err := NewDeal(tc.m, tc.s, tc.g, tc.w, true)
		if err == nil || errcode.Of(err) != errcode.InvalidArgument || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("NewDeal(%d,%d,%d,%d) = %v, want %q", tc.m, tc.s, tc.g, tc.w, err, tc.msg)
		}
	}
}
