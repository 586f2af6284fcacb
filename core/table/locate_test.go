package table

import (
	"math/rand/v2"
	"testing"
)

// TestGroupOfMatchesScan checks the bucketed search for a row's group
// against a scan, over layouts with files and groups of every size,
// empty ones included.
func TestGroupOfMatchesScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	for trial := range 200 {
		var pin Pin
		for range 1 + rng.IntN(4) {
			var f File
			for range rng.IntN(6) {
				size := int64(rng.IntN(4)) * int64(rng.IntN(300)) // many empty groups
				if rng.IntN(10) == 0 {
					size = 1 + int64(rng.IntN(5000))
				}
				f.RowGroups = append(f.RowGroups, size)
				f.NumRows += size
			}
			pin.Files = append(pin.Files, f)
		}
		tb := newTable(nil, pin, nil, nil)
		g := 0
		for id := range tb.NumRows() {
			for tb.groupStarts[g+1] <= id {
				g++
			}
			if got := tb.groupOf(id); got != g {
				t.Fatalf("trial %d, layout %v: row %d is in group %d, groupOf says %d", trial, pin.Files, id, g, got)
			}
		}
	}
}
