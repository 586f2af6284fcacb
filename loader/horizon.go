package loader

import "time"

// A horizon decodes every page that holds one of its rows, and a page whose
// rows fall on both sides of where a horizon ends is decoded by both
// horizons. The budget says how many steps a horizon may take at most; where
// it ends within that decides how many pages are decoded twice. A window
// shuffle whose windows end a few steps before the budget's end is the case
// that matters: a horizon ending there decodes each page of its windows once,
// while one ending where the budget does takes a few rows from nearly every
// page of the next windows (their rows are spread over them) and leaves the
// rest of those pages for the next horizon to decode again.

// pagesCut is how much fewer pages for each row a shorter horizon must
// decode to be chosen over the longest the budget allows: a thirty-second.
// Orders that take pages in runs (sequential, clumped) decode about the same
// pages for each row wherever a horizon ends, and keep their longest.
const pagesCut = 32

// horizonEnd returns how many of the n steps that fit the budget a horizon
// takes: the number c, from half of n up, whose steps' rows need the fewest
// pages for each row, when that is at least a thirty-second fewer than all n
// steps need; else n. ends[i] is where step i's rows end in ids; pages are
// blocks of rowsPerPage consecutive row ids. seen is scratch of at least
// (the largest id) ÷ rowsPerPage + 1 bits, all clear; it is left clear.
func horizonEnd(ids []uint64, ends []int, rowsPerPage uint64, seen []uint64) int {
	n := len(ends)
	if n < 2 || rowsPerPage == 0 {
		return n
	}
	// pages[i] is the number of distinct pages the rows of steps 0..i hold.
	pages := make([]int, n)
	distinct, from := 0, 0
	for i, end := range ends {
		for _, id := range ids[from:end] {
			b := id / rowsPerPage
			if w, bit := b/64, uint64(1)<<(b%64); seen[w]&bit == 0 {
				seen[w] |= bit
				distinct++
			}
		}
		pages[i], from = distinct, end
	}
	for _, id := range ids {
		b := id / rowsPerPage
		seen[b/64] = 0
	}
	// The fewest pages a row, ties to the longer horizon: compare
	// pages[i] ÷ ends[i] across i without dividing.
	best := n - 1
	for i := n - 1; i >= (n-1)/2; i-- {
		if ends[i] > 0 && pages[i]*ends[best] < pages[best]*ends[i] {
			best = i
		}
	}
	last := n - 1
	if best == last || pages[best]*ends[last]*pagesCut >= pages[last]*ends[best]*(pagesCut-1) {
		return n
	}
	return best + 1
}

// The first horizons are short on a remote store. A step of a shuffle takes
// rows from nearly every row group, and each row group's piece holds the rows
// of the whole horizon, so the first batch waits until every page the first
// horizon needs is fetched and decoded: on a store 50 ms away, thousands of
// round trips. There the first horizon is the first step alone, and each
// next one may take twice as many steps as the one before: the first batch
// waits for the pages of one step, and while each horizon is dealt the next,
// twice as long, is fetched and decoded.
//
// Short horizons decode pages for fewer rows each, and a page that holds rows
// of several of them is decoded by each. The ramp ends, and horizons take
// what the budget holds, once the next would take more than a quarter of the
// table's pages' worth of rows (its rows times the rows of a page above a
// quarter of the table's rows): the ramp's horizons then decode about half
// the table's pages between them, a table that fits the budget about one and
// a half times in its first epoch instead of once, and a table N budgets
// large a fraction of that more. On local files, where a horizon costs no
// round trip, every horizon takes what the budget holds, and so it does on a
// remote store whose reads are served as fast as local files: from the disk
// cache in a second epoch, where a short horizon saves no wait and only adds
// decoding. The ramp ends once the store's reads have shown a usual latency
// under rampLatency (store.Location.ReadLatency, which counts the disk
// cache's hits), checked before each horizon after the first.

// rampLatency is the usual read latency under which a remote store is read
// as local files are: a disk cache's hit takes tens of microseconds, a
// request to an object store in the same region ten milliseconds or more.
const rampLatency = 2 * time.Millisecond

// nextRamp returns the most steps the horizon after one of ramp steps and
// rows rows may take, of left steps in all: twice ramp, or left once the
// ramp ends. fast says the store's reads are served as fast as local
// files are.
func nextRamp(ramp, left int, rows, perPage, tableRows int64, fast bool) int {
	if fast || 2*rows*perPage*4 >= tableRows {
		return left
	}
	return min(2*ramp, left)
}
