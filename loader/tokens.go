package loader

import (
	"cmp"
	"container/heap"
	"context"
	"fmt"
	"slices"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/permutation"
)

// What a token-budget deal does with a row longer than the budget
// (Options.Oversize).
const (
	OversizeError    = "error"    // fail, naming the row
	OversizeTruncate = "truncate" // deal the row alone in its step; the reader cuts it to the budget
)

// TokenDeal is the dealing order of one epoch in token-budget steps
// (docs/concepts.md, "Token-budget steps"). With a budget of T tokens and the
// epoch order's lengths ℓ (recorded in the permutation, see
// permutation.Spec.Lengths), steps are cut greedily in order: step 0 starts at
// position 0, and step t, starting at position p, holds positions [p, q) for
// the largest q such that ℓ[p] + … + ℓ[q−1] ≤ T; the next step starts at q.
// A row longer than T is an error, or with OversizeTruncate a step of its
// own, counted as T tokens. The last step holds the rows left. Every row of
// the epoch order is dealt, once.
//
// A step's rows are divided among the W ranks by tokens (longest processing
// time first): taken by length descending, ties by position, each row goes to
// the rank with the fewest tokens so far, ties to the lowest rank. So the
// ranks' token loads differ by at most the longest row of the step, and a
// step with fewer rows than ranks leaves some ranks without a row. Each
// rank's rows keep the epoch order.
//
// The order of a grouped permutation (a permutation.GroupedOrder) is dealt
// in groups instead of rows: a group's tokens are its rows' lengths summed,
// a step holds whole groups, taken greedily in order while their tokens fit
// T, a group of more than T tokens is an error (or, with OversizeTruncate, a
// step of its own, each row counted as at most T), and each group goes whole
// to a rank, by the same rule as rows, so that loads differ by at most the
// step's largest group.
//
// Which positions make step t depends only on the epoch order's lengths (and
// groups) and T: never on W, the number of workers, or read-ahead.
type TokenDeal struct {
	T        int64 // tokens per global step
	W        int64 // world size
	Truncate bool  // rows (groups) longer than T are dealt alone, each row counted as at most T
	starts   []int64
}

// PlanTokens reads the lengths of the epoch order and cuts it into steps of
// at most tokens tokens for w ranks, in whole groups when order is a
// permutation.GroupedOrder. oversize is OversizeError or OversizeTruncate.
func PlanTokens(ctx context.Context, order permutation.LengthOrder, tokens, w int64, oversize string) (*TokenDeal, error) {
	const op = "plan token steps"
	d := &TokenDeal{T: tokens, W: w, Truncate: oversize == OversizeTruncate}
	switch {
	case tokens <= 0:
		return nil, errcode.New(errcode.InvalidArgument, op, "", "tokens_per_step must be positive, got %d", tokens)
	case w <= 0:
		return nil, errcode.New(errcode.InvalidArgument, op, "", "world_size must be positive, got %d", w)
	case oversize != OversizeError && oversize != OversizeTruncate:
		return nil, errcode.New(errcode.InvalidArgument, op, "", "oversize %q is neither %q nor %q", oversize, OversizeError, OversizeTruncate)
	}
	m := order.Len()
	ends, err := unitEnds(ctx, order, 0, m)
	if err != nil {
		return nil, err
	}
	var sum int64              // tokens of the step being filled
	var unit, unitTokens int64 // the unit (row or group) being summed: its start and tokens
	next := 0                  // index in ends of the end of the unit being summed
	for start := int64(0); start < m; start += permutation.ChunkIDs {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		lengths, err := order.Lengths(ctx, start, min(start+permutation.ChunkIDs, m))
		if err != nil {
			return nil, err
		}
		for i, n := range lengths {
			p := start + int64(i)
			unitTokens += int64(n)
			if ends != nil && p+1 < ends[next] {
				continue
			}
			end := p + 1
			if ends != nil {
				next++
			}
			n := unitTokens
			switch {
			case n > tokens && !d.Truncate:
				return nil, oversized(ctx, order, unit, end, n, tokens, ends != nil)
			case n > tokens:
				if len(d.starts) == 0 || d.starts[len(d.starts)-1] < unit { // the step being filled has rows
					d.starts = append(d.starts, unit)
				}
				d.starts = append(d.starts, end)
				sum = 0
			case len(d.starts) == 0 || sum+n > tokens:
				d.starts = append(d.starts, unit)
				sum = n
			default:
				sum += n
			}
			unit, unitTokens = end, 0
		}
	}
	if len(d.starts) == 0 || d.starts[len(d.starts)-1] != m {
		d.starts = append(d.starts, m)
	}
	return d, nil
}

// unitEnds returns the ends of the groups starting in positions [p0, p1)
// of a permutation.GroupedOrder, ascending; nil for an order of rows, each
// its own unit.
func unitEnds(ctx context.Context, order permutation.Order, p0, p1 int64) ([]int64, error) {
	g, ok := order.(permutation.GroupedOrder)
	if !ok {
		return nil, nil
	}
	bounds, err := g.Groups(ctx, p0, p1)
	if err != nil {
		return nil, fmt.Errorf("groups of positions [%d, %d): %w", p0, p1, err)
	}
	if len(bounds) == 0 {
		return []int64{}, nil
	}
	return bounds[1:], nil
}

// oversized is the error of a row, or a group (of positions [p, end)),
// longer than the budget.
func oversized(ctx context.Context, order permutation.LengthOrder, p, end, n, tokens int64, grouped bool) error {
	const op = "plan token steps"
	ids, err := order.RowIDs(ctx, p, p+1)
	if err != nil {
		return err
	}
	what := fmt.Sprintf("row %d (position %d of %s)", ids[0], p, order.ID())
	if grouped {
		what = fmt.Sprintf("the group of %d rows from row %d (position %d of %s)", end-p, ids[0], p, order.ID())
	}
	return errcode.New(errcode.InvalidArgument, op, "",
		"%s is %d long in %q, more than tokens_per_step %d: raise tokens_per_step, "+
			`or pass oversize="truncate" to deal it in a step of its own, cut to %d`,
		what, n, order.LengthsColumn(), tokens, tokens)
}

// Steps is the number of global steps in the epoch.
func (d *TokenDeal) Steps() int64 { return int64(len(d.starts) - 1) }

// Positions returns the positions [p0, p1) of the epoch order step t holds.
func (d *TokenDeal) Positions(t int64) (p0, p1 int64) { return d.starts[t], d.starts[t+1] }

// RankRows guesses the rows of a rank's share of a step, for memory budgets:
// the rows of the epoch's largest step divided among the ranks.
func (d *TokenDeal) RankRows() int64 {
	var most int64
	for t := range d.Steps() {
		p0, p1 := d.Positions(t)
		most = max(most, p1-p0)
	}
	return (most + d.W - 1) / d.W
}

// Share is one rank's part of a token-budget step.
type Share struct {
	RowIDs  []uint64 `json:"row_ids"` // in epoch order
	Lengths []uint64 `json:"lengths"` // of those rows, as recorded
	Tokens  int64    `json:"tokens"`  // their lengths summed, each at most T
}

// Shares divides step t among the ranks (see TokenDeal): rows, or the
// groups of a permutation.GroupedOrder whole.
func (d *TokenDeal) Shares(ctx context.Context, order permutation.LengthOrder, t int64) ([]Share, error) {
	if t < 0 || t >= d.Steps() {
		return nil, errcode.New(errcode.InvalidArgument, "deal", "", "step %d out of range [0, %d)", t, d.Steps())
	}
	p0, p1 := d.Positions(t)
	ids, err := order.RowIDs(ctx, p0, p1)
	if err != nil {
		return nil, fmt.Errorf("step %d, positions [%d, %d): %w", t, p0, p1, err)
	}
	lengths, err := order.Lengths(ctx, p0, p1)
	if err != nil {
		return nil, fmt.Errorf("step %d, positions [%d, %d): %w", t, p0, p1, err)
	}
	ends, err := unitEnds(ctx, order, p0, p1)
	if err != nil {
		return nil, fmt.Errorf("step %d: %w", t, err)
	}
	// The units, rows or groups: unit u is positions [from[u], from[u+1]) of
	// the step, of tokens[u] tokens, each row counted at most T.
	from := make([]int, 0, len(ids)+1)
	var tokens []int64
	for i, n := range lengths {
		if len(from) == 0 || ends == nil || p0+int64(i) == ends[len(from)-1] {
			from = append(from, i)
			tokens = append(tokens, 0)
		}
		tokens[len(tokens)-1] += min(int64(n), d.T)
	}
	from = append(from, len(ids))
	units := make([]int, len(tokens)) // indexes of units, most tokens first
	for u := range units {
		units[u] = u
	}
	slices.SortStableFunc(units, func(a, b int) int { return cmp.Compare(tokens[b], tokens[a]) })
	ranks := make(loads, d.W)
	for r := range ranks {
		ranks[r].rank = int64(r)
	}
	owner := make([]int64, len(tokens))
	for _, u := range units {
		owner[u] = ranks[0].rank
		ranks[0].tokens += tokens[u]
		heap.Fix(&ranks, 0)
	}
	shares := make([]Share, d.W)
	for u, r := range owner {
		s := &shares[r]
		s.RowIDs = append(s.RowIDs, ids[from[u]:from[u+1]]...)
		s.Lengths = append(s.Lengths, lengths[from[u]:from[u+1]]...)
		s.Tokens += tokens[u]
	}
	return shares, nil
}

// Batch returns rank r's row ids for step t, drawn from order.
func (d *TokenDeal) Batch(ctx context.Context, order permutation.Order, t, r int64) ([]uint64, error) {
	if r < 0 || r >= d.W {
		return nil, errcode.New(errcode.InvalidArgument, "deal", "", "rank %d out of range [0, %d)", r, d.W)
	}
	lo, ok := order.(permutation.LengthOrder)
	if !ok {
		return nil, errcode.New(errcode.InvalidArgument, "deal", "", "%s records no lengths", order.ID())
	}
	shares, err := d.Shares(ctx, lo, t)
	if err != nil {
		return nil, err
	}
	return shares[r].RowIDs, nil
}

// Place returns the step and rank that deal position p of order. Every
// position is dealt, so ok is true for any p in range.
func (d *TokenDeal) Place(ctx context.Context, order permutation.Order, p int64) (step, rank int64, ok bool, err error) {
	if p < 0 || p >= d.starts[len(d.starts)-1] {
		return 0, 0, false, errcode.New(errcode.InvalidArgument, "deal", "", "position %d out of range [0, %d)", p, d.starts[len(d.starts)-1])
	}
	lo, isLength := order.(permutation.LengthOrder)
	if !isLength {
		return 0, 0, false, errcode.New(errcode.InvalidArgument, "deal", "", "%s records no lengths", order.ID())
	}
	// The step is the last that starts at or before p.
	i, found := slices.BinarySearch(d.starts, p)
	if !found {
		i--
	}
	step = int64(i)
	shares, err := d.Shares(ctx, lo, step)
	if err != nil {
		return 0, 0, false, err
	}
	id, err := order.RowIDs(ctx, p, p+1)
	if err != nil {
		return 0, 0, false, err
	}
	for r, sh := range shares {
		if slices.Contains(sh.RowIDs, id[0]) {
			return step, int64(r), true, nil
		}
	}
	return 0, 0, false, errcode.New(errcode.Internal, "deal", "", "position %d (row %d) is in no share of step %d", p, id[0], step)
}

// loads is a min-heap of ranks by tokens, then rank.
type loads []struct{ tokens, rank int64 }

func (h loads) Len() int { return len(h) }
func (h loads) Less(i, j int) bool {
	return h[i].tokens < h[j].tokens || (h[i].tokens == h[j].tokens && h[i].rank < h[j].rank)
}
func (h loads) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (loads) Push(any)        { panic("loads: fixed size") }
func (loads) Pop() any        { panic("loads: fixed size") }
