package table

import (
	"context"
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

// A set with no piece to admit ends before the sets made earlier have
// admitted theirs; the turn must still come to the sets made after it.
func TestBudgetSetEndingEarly(t *testing.T) {
	b := NewBudget(100)
	first, empty, last := b.join(), b.join(), b.join()
	b.admitted(empty) // before first: its horizon gives the rank no rows
	if err := b.admit(context.Background(), first, 60); err != nil {
		t.Fatal(err)
	}
	b.admitted(first)
	// The budget is full beyond last's bytes and first still holds its own:
	// last is admitted only in its turn, once first frees them.
	done := make(chan error, 1)
	go func() { done <- b.admit(context.Background(), last, 50) }()
	b.release(first, 60)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if now, _ := b.Used(); now != 50 {
		t.Fatalf("%d bytes used, want 50", now)
	}
}
