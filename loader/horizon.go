package loader

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
