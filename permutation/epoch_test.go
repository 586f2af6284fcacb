package permutation_test

import (
	"context"
	"slices"
	"testing"

	"github.com/croupier-data/croupier/permutation"
)

func epochIDs(t *testing.T, s *permutation.Split, seed uint64, e int64) []uint64 {
	t.Helper()
	ids, err := s.ForEpoch(seed, e).RowIDs(context.Background(), 0, s.Len())
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// TestEpochOrders: every epoch deals each row of the split once, epoch 0 is
// the stored order, later epochs differ and are reproducible, clumps stay
// contiguous, and unshuffled splits never change. The table exceeds one block
// of ChunkIDs positions so that block permutation is exercised.
func TestEpochOrders(t *testing.T) {
	n := int64(permutation.ChunkIDs*2 + 1234)
	tb := openTable(t, t.TempDir(), n)
	for _, clump := range []int64{0, 7} {
		p := build(t, tb, permutation.Spec{Shuffle: &permutation.ShuffleSpec{Seed: 3, ClumpSize: clump}})
		s := p.Splits()[0]
		stored := allIDs(t, s)
		if !slices.Equal(epochIDs(t, s, 11, 0), stored) {
			t.Fatal("epoch 0 is not the stored order")
		}
		e1, e2 := epochIDs(t, s, 11, 1), epochIDs(t, s, 11, 2)
		if slices.Equal(e1, stored) || slices.Equal(e1, e2) {
			t.Fatal("later epochs repeat an order")
		}
		if !slices.Equal(e1, epochIDs(t, s, 11, 1)) {
			t.Fatal("epoch order is not deterministic")
		}
		if slices.Equal(e1, epochIDs(t, s, 12, 1)) {
			t.Fatal("epoch order ignores the shuffle seed")
		}
		for _, ids := range [][]uint64{e1, e2} {
			if !slices.Equal(slices.Sorted(slices.Values(ids)), slices.Sorted(slices.Values(stored))) {
				t.Fatal("an epoch order is not a permutation of the split")
			}
		}
		if clump > 1 {
			// A clump is c consecutive ids in row id order (the shuffle moved them whole).
			for i := int64(0); i+clump <= n-n%clump; i += clump {
				first := e1[i]
				if first%uint64(clump) != 0 {
					t.Fatalf("clump at %d starts at row %d", i, first)
				}
				for j := range clump {
					if e1[i+j] != first+uint64(j) {
						t.Fatalf("clump at %d broken: %v", i, e1[i:i+clump])
					}
				}
			}
		}
		// a range read agrees with the whole
		part, err := s.ForEpoch(11, 1).RowIDs(context.Background(), 70000, 70100)
		if err != nil || !slices.Equal(part, e1[70000:70100]) {
			t.Fatalf("range read differs: %v", err)
		}
	}
	unshuffled := build(t, tb, permutation.Spec{}).Splits()[0]
	if !slices.Equal(epochIDs(t, unshuffled, 11, 5), allIDs(t, unshuffled)) {
		t.Fatal("an unshuffled split changed order in a later epoch")
	}
}
