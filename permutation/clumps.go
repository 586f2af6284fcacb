package permutation

import (
	"context"
	"slices"

	"github.com/croupier-data/croupier/core/table"
)

// Page-aligned clumps. A shuffle with ClumpSize AutoClump clumps rows by
// the pages of the table they lie in: the table's row ids are cut at the
// start of every row group and of every data page of the row group's widest
// column (table.Table.PageStarts), and a clump is the kept rows of a split
// that fall between two such cuts, a page span. A page of the widest column
// is then read for one clump only, so by one rank, whatever the clump's
// place in the order. The cuts are a function of the table version, so the
// build recomputes them on every rank and a reader recomputes them from the
// pinned table; nothing about them is persisted (docs/spec.md, "Page-aligned
// clumps").

// pageSpans are the page spans of a table: the row id where each starts.
type pageSpans struct{ starts []int64 }

// loadPageSpans returns the page spans of t.
func loadPageSpans(ctx context.Context, t *table.Table) (*pageSpans, error) {
	starts, err := t.PageStarts(ctx)
	if err != nil {
		return nil, err
	}
	return &pageSpans{starts: starts}, nil
}

// of returns the index of the page span that holds row id.
func (s *pageSpans) of(id uint64) int64 {
	i, found := slices.BinarySearch(s.starts, int64(id))
	if !found {
		i--
	}
	return int64(i)
}

// clumpStarts returns where the clumps of recs start (see clumpCutter),
// nil when s is (clumps of a fixed size, or none).
func clumpStarts[T any](s *pageSpans, recs []T, id func(T) uint64) []int64 {
	if s == nil {
		return nil
	}
	c := newClumpCutter(s)
	for _, r := range recs {
		c.add(id(r))
	}
	return c.starts
}

// A clumpCutter finds where clumps start in a sequence of row ids in which
// the rows of each clump are consecutive, as they are in row id order and
// in any order that moves clumps whole: at its first position, and at every
// position whose row lies in another page span than the row before it.
type clumpCutter struct {
	spans  *pageSpans
	pos    int64 // the position of the next row
	prev   int64 // the page span of the row before it, −1 before the first
	starts []int64
}

func newClumpCutter(s *pageSpans) *clumpCutter { return &clumpCutter{spans: s, prev: -1} }

// add takes the next row id.
func (c *clumpCutter) add(id uint64) {
	if sp := c.spans.of(id); sp != c.prev {
		c.starts = append(c.starts, c.pos)
		c.prev = sp
	}
	c.pos++
}
