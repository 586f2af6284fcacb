package loader

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/permutation"
)

// Deal is the dealing order of one epoch (docs/concepts.md, "The dealing order"). An epoch order of M row
// ids is cut into S streams of L = ⌊M/S⌋ consecutive positions; the last
// M − S·L positions are not dealt. Global step t holds cycles
// [t·G/S, (t+1)·G/S) of every stream, and rank r of W owns streams
// [r·S/W, (r+1)·S/W). Rank r's batch for step t lists stream_s[c] for each
// cycle c, and inside a cycle for each owned stream s, in that order.
//
// Nothing here depends on the number of ranks beyond which streams a rank
// owns: the set of positions in a global step is the same for every W.
//
// A grouped deal (docs/concepts.md, "Groups") deals the groups of a
// permutation.GroupedOrder whole instead: global step t holds the groups that
// start at positions [t·G, (t+1)·G) of the epoch order, and each goes whole
// to one rank (see Ranks). S only has to fit G and W as above.
type Deal struct {
	M        int64 // rows in the epoch order
	S        int64 // number of streams (num_splits)
	G        int64 // samples per global step, all ranks together
	W        int64 // world size
	DropLast bool  // drop the final partial step
	Grouped  bool  // deal the groups of a permutation.GroupedOrder whole
}

// NewDeal validates the parameters and returns the deal.
func NewDeal(m, s, g, w int64, dropLast bool) (Deal, error) {
	const op = "deal"
	bad := func(format string, args ...any) (Deal, error) {
		return Deal{}, errcode.New(errcode.InvalidArgument, op, "", format, args...)
	}
	switch {
	case g <= 0:
		return bad("global_batch_size must be positive, got %d", g)
	case s <= 0:
		return bad("num_splits must be positive, got %d", s)
	case w <= 0:
		return bad("world_size must be positive, got %d", w)
	case g%s != 0:
		return bad("global_batch_size %d is not a multiple of num_splits %d", g, s)
	case s%w != 0:
		return bad("num_splits %d is not a multiple of world_size %d", s, w)
	case s > m:
		return bad("num_splits %d exceeds the %d rows to deal", s, m)
	}
	return Deal{M: m, S: s, G: g, W: w, DropLast: dropLast}, nil
}

// StreamLen is L, the positions in each stream.
func (d Deal) StreamLen() int64 { return d.M / d.S }

// CyclesPerStep is G/S.
func (d Deal) CyclesPerStep() int64 { return d.G / d.S }

// Steps is the number of global steps in an epoch: ⌊M/G⌋ when grouped, one
// more for the positions left when DropLast is false.
func (d Deal) Steps() int64 {
	if d.Grouped {
		if !d.DropLast && d.M%d.G != 0 {
			return d.M/d.G + 1
		}
		return d.M / d.G
	}
	l, k := d.StreamLen(), d.CyclesPerStep()
	if !d.DropLast && l%k != 0 {
		return l/k + 1
	}
	return l / k
}

// Cycles returns the cycles [c0, c1) of step t.
func (d Deal) Cycles(t int64) (c0, c1 int64) {
	k := d.CyclesPerStep()
	return t * k, min((t+1)*k, d.StreamLen())
}

// Streams returns the streams [s0, s1) that rank r owns.
func (d Deal) Streams(r int64) (s0, s1 int64) {
	per := d.S / d.W
	return r * per, (r + 1) * per
}

// Batch returns rank r's row ids for step t, drawn from order.
func (d Deal) Batch(ctx context.Context, order permutation.Order, t, r int64) ([]uint64, error) {
	if t < 0 || t >= d.Steps() {
		return nil, errcode.New(errcode.InvalidArgument, "deal", "", "step %d out of range [0, %d)", t, d.Steps())
	}
	if r < 0 || r >= d.W {
		return nil, errcode.New(errcode.InvalidArgument, "deal", "", "rank %d out of range [0, %d)", r, d.W)
	}
	if d.Grouped {
		return d.groupedBatch(ctx, order, t, r)
	}
	c0, c1 := d.Cycles(t)
	s0, s1 := d.Streams(r)
	l, owned := d.StreamLen(), s1-s0
	out := make([]uint64, (c1-c0)*owned)
	for s := s0; s < s1; s++ {
		ids, err := order.RowIDs(ctx, s*l+c0, s*l+c1)
		if err != nil {
			return nil, fmt.Errorf("stream %d, cycles [%d, %d): %w", s, c0, c1, err)
		}
		for c, id := range ids {
			out[int64(c)*owned+(s-s0)] = id
		}
	}
	return out, nil
}

// Groups returns the boundaries of step t's groups in order, a grouped deal's
// epoch order (see permutation.GroupedOrder.Groups): the groups starting at
// positions [t·G, (t+1)·G), which may end past (t+1)·G.
func (d Deal) Groups(ctx context.Context, order permutation.Order, t int64) ([]int64, error) {
	g, ok := order.(permutation.GroupedOrder)
	if !ok {
		return nil, errcode.New(errcode.Internal, "deal", "", "order %s has no groups", order.ID())
	}
	bounds, err := g.Groups(ctx, t*d.G, min((t+1)*d.G, d.M))
	if err != nil {
		return nil, fmt.Errorf("groups of step %d: %w", t, err)
	}
	return bounds, nil
}

// Ranks returns the rank of each group of a step whose boundaries are bounds
// (see Groups). The groups are taken largest first, the earlier of equal
// ones first, and each goes to the rank holding the fewest samples so far,
// the lowest of equal ones. So the ranks' sample counts differ by at most the
// largest group, and a rank gets none when the step has fewer groups than
// ranks.
func (d Deal) Ranks(bounds []int64) []int64 {
	n := max(len(bounds)-1, 0)
	size := func(g int) int64 { return bounds[g+1] - bounds[g] }
	bySize := make([]int, n)
	for g := range bySize {
		bySize[g] = g
	}
	slices.SortStableFunc(bySize, func(a, b int) int { return cmp.Compare(size(b), size(a)) })
	load := make([]int64, d.W)
	owner := make([]int64, n)
	for _, g := range bySize {
		r := slices.Index(load, slices.Min(load))
		owner[g] = int64(r)
		load[r] += size(g)
	}
	return owner
}

// groupedBatch returns rank r's row ids for step t of a grouped deal: its
// groups in epoch order, each group's rows in order.
func (d Deal) groupedBatch(ctx context.Context, order permutation.Order, t, r int64) ([]uint64, error) {
	bounds, err := d.Groups(ctx, order, t)
	if err != nil {
		return nil, err
	}
	out := []uint64{}
	for g, owner := range d.Ranks(bounds) {
		if owner != r {
			continue
		}
		ids, err := order.RowIDs(ctx, bounds[g], bounds[g+1])
		if err != nil {
			return nil, fmt.Errorf("step %d, group at position %d: %w", t, bounds[g], err)
		}
		out = append(out, ids...)
	}
	return out, nil
}

// Place returns where position p of order, an epoch order, is dealt: its
// global step and rank, or ok false when the epoch deals it in no step (the
// positions past the streams, a partial step dropped).
func (d Deal) Place(ctx context.Context, order permutation.Order, p int64) (step, rank int64, ok bool, err error) {
	if p < 0 || p >= d.M {
		return 0, 0, false, errcode.New(errcode.InvalidArgument, "deal", "", "position %d out of range [0, %d)", p, d.M)
	}
	if !d.Grouped {
		l := d.StreamLen()
		s := p / l
		if s >= d.S {
			return 0, 0, false, nil
		}
		step = p % l / d.CyclesPerStep()
		return step, s / (d.S / d.W), step < d.Steps(), nil
	}
	g, isGrouped := order.(permutation.GroupedOrder)
	if !isGrouped {
		return 0, 0, false, errcode.New(errcode.Internal, "deal", "", "order %s has no groups", order.ID())
	}
	before, err := g.Groups(ctx, 0, p+1) // the last group starting at or before p holds it
	if err != nil {
		return 0, 0, false, err
	}
	start := before[len(before)-2]
	step = start / d.G
	if step >= d.Steps() {
		return 0, 0, false, nil
	}
	bounds, err := d.Groups(ctx, order, step)
	if err != nil {
		return 0, 0, false, err
	}
	i, _ := slices.BinarySearch(bounds, start)
	return step, d.Ranks(bounds)[i], true, nil
}
