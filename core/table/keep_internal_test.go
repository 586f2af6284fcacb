package table

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/croupier-data/croupier/internal/seedtest"
)

// TestSortByRow checks that sortByRow orders a piece's entries as a full
// sort does, for pieces keeping few of their group's rows (sorted) and many
// (counted), rows repeated or not.
func TestSortByRow(t *testing.T) {
	rng := rand.New(rand.NewPCG(seedtest.Seed(t), 5))
	for range 200 {
		rows := int64(1 + rng.IntN(5000))
		n := rng.IntN(int(rows) * 2)
		sel := make([]uint64, n)
		for pos := range sel { // filled in ascending positions, as Keep fills them
			sel[pos] = uint64(rng.Int64N(rows))<<32 | uint64(pos)
		}
		want := slices.Clone(sel)
		slices.Sort(want)
		if sortByRow(sel, rows); !slices.Equal(sel, want) {
			t.Fatalf("%d entries of a group of %d rows sort to another order", n, rows)
		}
	}
}
