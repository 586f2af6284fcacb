package loader

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestHorizonEnd checks where horizonEnd ends a horizon of 8 streams taking
// 2 rows each a step: at the end of the last windows of a window shuffle
// that end within the last half of the steps that fit, and at the last step
// that fits for a horizon within one window, a full shuffle and a
// sequential order. The scratch is left clear.
func TestHorizonEnd(t *testing.T) {
	const streams, perStep, window, perPage = 8, 2, 128, 4
	rng := rand.New(rand.NewPCG(1, 2))
	// deal lays out steps steps whose stream s takes the rows of order(s)
	// in turn, and returns the ids and where each step's rows end.
	deal := func(steps int, order func(s int) []uint64) ([]uint64, []int) {
		var ids []uint64
		var ends []int
		orders := make([][]uint64, streams)
		for s := range orders {
			orders[s] = order(s)
		}
		for i := range steps {
			for s := range streams {
				ids = append(ids, orders[s][i*perStep:(i+1)*perStep]...)
			}
			ends = append(ends, len(ids))
		}
		return ids, ends
	}
	const streamRows = 10 * window
	windows := func(s int) []uint64 { // windows of a stream in turn, rows shuffled in each
		var ids []uint64
		for w := range streamRows / window {
			win := make([]uint64, window)
			for i := range win {
				win[i] = uint64(s*streamRows + w*window + i)
			}
			rng.Shuffle(len(win), func(i, j int) { win[i], win[j] = win[j], win[i] })
			ids = append(ids, win...)
		}
		return ids
	}
	full := rng.Perm(streams * streamRows)
	seen := make([]uint64, streams*streamRows/perPage/64+1)
	for _, c := range []struct {
		name  string
		steps int
		order func(s int) []uint64
		want  int
	}{
		{"window ending in the last half", 80, windows, 64}, // a window is 64 steps
		{"a horizon within a window", 60, windows, 60},
		{"two windows and some", 150, windows, 128},
		{"full shuffle", 80, func(s int) []uint64 {
			ids := make([]uint64, streamRows)
			for i := range ids {
				ids[i] = uint64(full[s*streamRows+i])
			}
			return ids
		}, 80},
		{"sequential", 80, func(s int) []uint64 {
			ids := make([]uint64, streamRows)
			for i := range ids {
				ids[i] = uint64(s*streamRows + i)
			}
			return ids
		}, 80},
	} {
		ids, ends := deal(c.steps, c.order)
		if got := horizonEnd(ids, ends, perPage, seen); got != c.want {
			t.Errorf("%s: a horizon of %d steps ends after %d, want %d", c.name, c.steps, got, c.want)
		}
		if slices.ContainsFunc(seen, func(w uint64) bool { return w != 0 }) {
			t.Fatalf("%s: scratch left set", c.name)
		}
	}
	if got := horizonEnd(nil, []int{0}, perPage, seen); got != 1 {
		t.Errorf("one step: %d", got)
	}
}

// TestNextRamp checks the ramp of horizons on a remote store: each next one
// twice as long, until it would cover a quarter of the table's pages or the
// store's reads come as fast as local files do.
func TestNextRamp(t *testing.T) {
	for _, c := range []struct {
		ramp, left    int
		rows, perPage int64
		tableRows     int64
		fast          bool
		want          int
	}{
		{ramp: 1, left: 100, rows: 64, perPage: 10, tableRows: 100_000, want: 2},
		{ramp: 8, left: 100, rows: 512, perPage: 10, tableRows: 100_000, want: 16},
		{ramp: 8, left: 12, rows: 512, perPage: 10, tableRows: 100_000, want: 12},
		{ramp: 16, left: 100, rows: 1_250, perPage: 10, tableRows: 100_000, want: 100},
		{ramp: 16, left: 100, rows: 1_249, perPage: 10, tableRows: 100_000, want: 32},
		{ramp: 1, left: 100, rows: 64, perPage: 10, tableRows: 100_000, fast: true, want: 100},
	} {
		if got := nextRamp(c.ramp, c.left, c.rows, c.perPage, c.tableRows, c.fast); got != c.want {
			t.Errorf("nextRamp(%+v) = %d, want %d", c, got, c.want)
		}
	}
}
