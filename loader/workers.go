package loader

import (
	"context"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/table"
)

// workerSteps returns the steps of [start, end) that worker w of k deals
// when the workers take turns at runs of r consecutive steps: the epoch from
// start is cut into runs [start + i·r, start + (i+1)·r), the last clipped to
// end, and worker w deals runs w, w+k, w+2k, … With r = 1 it deals start+w,
// start+w+k, …, torch's round robin. It needs 0 ≤ w < k, r ≥ 1 and
// start ≥ −w, and does not overflow for any such k and r.
func workerSteps(start, end int64, w, k, r int64) []int64 {
	if end <= start {
		return nil
	}
	runs := (end-start-1)/r + 1 // the runs that begin before end
	var steps []int64
	// A stride of k runs or more leaves the worker only run w; capping it
	// at runs keeps run+stride from overflowing.
	for run := w; run < runs; run += min(k, runs) {
		first := start + run*r // run < runs, so run·r < end − start
		for t := first; t < first+min(r, end-first); t++ {
			steps = append(steps, t)
		}
	}
	return steps
}

// sharePages is the length of the blocks of rows that workers sharing steps
// own, in pages of the table's widest column. A page that straddles two
// blocks is decoded by both owners, about one in sharePages; shorter blocks
// spread the rows of a window or a clump over the workers more evenly.
const sharePages = 8

// owners says which rows worker w of k deals when the workers share steps
// (StreamOptions.ShareSteps). Each row group is cut into blocks of rows from
// its first, and its blocks go to the workers in turn, the first to worker
// g mod k for the table's g-th row group. So a page is decoded by the one
// worker owning its rows, but for pages that straddle blocks, and the
// consecutive rows of a window or a clump, like the rows of a full shuffle,
// go to every worker alike.
type owners struct {
	t     *table.Table
	block int64 // rows
	w, k  int64
}

// newOwners returns worker w of k's owners, with blocks of sharePages pages.
func newOwners(ctx context.Context, t *table.Table, w, k int64) (*owners, error) {
	rows, err := t.RowsPerPage(ctx)
	if err != nil {
		return nil, err
	}
	return &owners{t: t, block: max(rows*sharePages, 1), w: w, k: k}, nil
}

// keep returns the ids of a rank's share of a step that the worker deals,
// in order, and their places: row i of the share is Place{step, i}.
func (o *owners) keep(ids []uint64, step int32) ([]uint64, []Place) {
	var kept []uint64
	var places []Place
	for i, id := range ids {
		g, row := o.t.RowGroupOf(int64(id))
		if (int64(g)+row/o.block)%o.k == o.w {
			kept = append(kept, id)
			places = append(places, Place{Step: step, Index: int32(i)})
		}
	}
	return kept, places
}

// Merge puts together what the k workers sharing steps dealt of the same
// consecutive steps (StreamOptions.ShareSteps): recs[w] holds worker w's
// rows and places[w] where each goes, Place.Step counting from the first of
// the steps. It returns the rank's rows of the steps, in order, and the rows
// of each of the steps. Each value is copied once (table.Interleave). It
// fails, naming the row, unless the places give each step's rows 0, 1, …
// once, and each worker's in order.
func Merge(ctx context.Context, mem memory.Allocator, recs []arrow.RecordBatch, places [][]Place, steps int) (arrow.RecordBatch, []int64, error) {
	const op = "merge shared steps"
	if len(places) != len(recs) {
		return nil, nil, errcode.New(errcode.InvalidArgument, op, "", "%d record batches, %d lists of places", len(recs), len(places))
	}
	n := 0
	for w, rec := range recs {
		if int64(len(places[w])) != rec.NumRows() {
			return nil, nil, errcode.New(errcode.InvalidArgument, op, "", "worker %d: %d rows, %d places", w, rec.NumRows(), len(places[w]))
		}
		n += len(places[w])
	}
	sizes := make([]int64, steps)
	from := make([]int32, 0, n)
	next := make([]int, len(recs))
	for range n {
		// The worker whose next row goes first: the workers are few.
		w := -1
		for v, at := range next {
			if at < len(places[v]) && (w < 0 || before(places[v][at], places[w][next[w]])) {
				w = v
			}
		}
		p := places[w][next[w]]
		if p.Step < 0 || int(p.Step) >= steps || int64(p.Index) != sizes[p.Step] {
			return nil, nil, errcode.New(errcode.InvalidArgument, op, "", "worker %d's row %d has place %+v: outside %d steps, out of order or repeated",
				w, next[w], p, steps)
		}
		sizes[p.Step]++
		from = append(from, int32(w))
		next[w]++
	}
	rec, err := table.Interleave(ctx, mem, recs, from)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", op, err)
	}
	return rec, sizes, nil
}

// before reports whether place p comes before q.
func before(p, q Place) bool {
	return p.Step < q.Step || p.Step == q.Step && p.Index < q.Index
}
