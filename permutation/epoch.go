package permutation

import (
	"context"
	"fmt"
	"slices"
	"sync"
)

// EpochOrderer is an Order whose later epochs deal a different order.
type EpochOrderer interface {
	Order
	// ForEpoch returns the order of epoch e under a run's shuffle seed.
	ForEpoch(seed uint64, e int64) Order
}

// ForEpoch returns the order split s deals in epoch e (docs/concepts.md, "Epoch orders").
//
// A split built without a shuffle deals its stored order in every epoch, and
// every split deals its stored order in epoch 0. A shuffled split's epoch e > 0
// reorders positions in two levels, so that a reader still goes through the
// persisted row ids a chunk at a time:
//
//   - the positions are cut into blocks of B = ⌊ChunkIDs / c⌋·c positions (c is
//     the clump size, 1 when unset; B = c when c > ChunkIDs), and the full
//     blocks are permuted by Bijection(n_blocks, DeriveKey(seed, "epoch/<e>/blocks"));
//   - inside each block (the final partial block too), the clumps are permuted
//     by Bijection(clumps in the block, DeriveKey(seed, "epoch/<e>/block/<b>")),
//     where b is the block's position in epoch e; a partial clump at the very
//     end stays last.
//
// So clumps stay contiguous, the order differs between epochs, and computing
// any position costs O(1) without reading the whole permutation. Rows of one
// block stay in one block in every epoch: the block was a uniform sample of the
// split when the permutation was shuffled.
//
// A split with groups returns a GroupedOrder. Its epoch e > 0, when shuffled,
// deals the stored groups in the order Bijection(n_groups,
// DeriveKey(seed, "epoch/<e>/groups")) gives: group i of the epoch is stored
// group At(i), its rows in their stored order. Finding positions needs every
// group's place, so the order holds 16 bytes a group once it is first read.
//
// A split shuffled with page-aligned clumps (ShuffleSpec.ClumpSize
// AutoClump) deals, in epoch e > 0, its clumps in the order Bijection(n_clumps,
// DeriveKey(seed, "epoch/<e>/clumps")) gives, as groups are dealt. Its clumps
// are found in the stored order as groups would be: a clump starts at
// position 0 and wherever a row lies in another page span than the row
// before (docs/spec.md, "Page-aligned clumps"). Finding them reads the
// split's row ids once and the table's page index, and the order holds 16
// bytes a clump; it is an Order of rows, not a GroupedOrder.
func (s *Split) ForEpoch(seed uint64, e int64) Order {
	sh := s.p.m.Spec.Shuffle
	if s.Grouped() && s.info.NumRows > 0 {
		if e == 0 || sh == nil {
			seed, e = 0, 0 // the stored order, whatever the seed
		}
		return s.groupedEpoch(seed, e)
	}
	if e == 0 || sh == nil || s.info.NumRows == 0 {
		return s
	}
	if sh.ClumpSize == AutoClump {
		return clumpedOrder{s.groupedEpoch(seed, e)}
	}
	c := max(sh.ClumpSize, 1)
	b := max(ChunkIDs/c*c, c)
	n := s.info.NumRows
	return &epochOrder{split: s, seed: seed, epoch: e, clump: c, block: b,
		blocks: NewBijection(uint64(n/b), DeriveKey(seed, fmt.Sprintf("epoch/%d/blocks", e)))}
}

type epochOrder struct {
	split        *Split
	seed         uint64
	epoch        int64
	clump, block int64
	blocks       Bijection // over the full blocks
}

func (o *epochOrder) ID() string     { return o.split.ID() }
func (o *epochOrder) Len() int64     { return o.split.Len() }
func (o *epochOrder) String() string { return fmt.Sprintf("%s epoch %d", o.split.ID(), o.epoch) }

// position maps a position of epoch e to a position of the stored order.
// inner caches the bijection of the last block used.
func (o *epochOrder) position(p int64, inner *struct {
	b   int64
	bij Bijection
}) int64 {
	n := o.split.info.NumRows
	b, off := p/o.block, p%o.block
	src := b // the block of the stored order that lands at block b
	if b < n/o.block {
		src = int64(o.blocks.At(uint64(b)))
	}
	size := min(o.block, n-b*o.block)
	full := size / o.clump // whole clumps in the block
	k, within := off/o.clump, off%o.clump
	if k >= full { // the partial clump at the very end
		return src*o.block + off
	}
	if inner.b != b {
		inner.b = b
		inner.bij = NewBijection(uint64(full), DeriveKey(o.seed, fmt.Sprintf("epoch/%d/block/%d", o.epoch, b)))
	}
	return src*o.block + int64(inner.bij.At(uint64(k)))*o.clump + within
}

// LengthsColumn returns the split's.
func (o *epochOrder) LengthsColumn() string { return o.split.LengthsColumn() }

// RowIDs returns the row ids at positions [start, stop) of the epoch's order.
func (o *epochOrder) RowIDs(ctx context.Context, start, stop int64) ([]uint64, error) {
	return o.read(ctx, rowIDs, start, stop)
}

// Lengths returns the lengths of the rows at positions [start, stop) of the
// epoch's order.
func (o *epochOrder) Lengths(ctx context.Context, start, stop int64) ([]uint64, error) {
	if o.LengthsColumn() == "" {
		return o.split.Lengths(ctx, 0, 0) // the split's error
	}
	return o.read(ctx, lengths, start, stop)
}

// read returns part p of positions [start, stop) of the epoch's order.
func (o *epochOrder) read(ctx context.Context, p part, start, stop int64) ([]uint64, error) {
	if start < 0 || stop > o.Len() || start > stop {
		return nil, fmt.Errorf("positions [%d, %d) out of range [0, %d)", start, stop, o.Len())
	}
	out := make([]uint64, stop-start)
	inner := &struct {
		b   int64
		bij Bijection
	}{b: -1}
	// A block's positions lie in at most two chunks of the stored order, so
	// the last two chunks used are kept here: asking the split's chunk cache
	// (a lock and an LRU update) for every position was most of the cost of
	// dealing a shuffled epoch after the first.
	var held [2]struct {
		c   int64
		ids []uint64
	}
	held[0].c, held[1].c = -1, -1
	for i := range out {
		q := o.position(start+int64(i), inner)
		c := q / ChunkIDs
		if held[0].c != c {
			if held[1].c != c {
				ids, err := o.split.chunk(ctx, p, c)
				if err != nil {
					return nil, err
				}
				held[1].c, held[1].ids = c, ids
			}
			held[0], held[1] = held[1], held[0]
		}
		out[i] = held[0].ids[q%ChunkIDs]
	}
	return out, nil
}

// GroupedOrder is an Order whose rows come in groups that are dealt as units
// (Spec.GroupBy): each group is a run of consecutive positions.
type GroupedOrder interface {
	Order
	// Groups returns the boundaries of the groups that start at positions
	// [start, stop): the start of each, ascending, then the end of the
	// last; nothing when no group starts there.
	Groups(ctx context.Context, start, stop int64) ([]int64, error)
}

// groupedEpoch returns the grouped order of epoch e (0: the stored order),
// the one made last when it is the same: each holds its groups' places. A
// split with page-aligned clumps has its clumps for groups.
func (s *Split) groupedEpoch(seed uint64, e int64) *groupedOrder {
	s.groupsMu.Lock()
	defer s.groupsMu.Unlock()
	if o := s.epoch; o == nil || o.seed != seed || o.epoch != e {
		units := "groups"
		if !s.Grouped() {
			units = "clumps"
		}
		s.epoch = &groupedOrder{split: s, seed: seed, epoch: e, units: units}
	}
	return s.epoch
}

// groupedOrder is the order of a grouped split in one epoch.
type groupedOrder struct {
	split *Split
	seed  uint64
	epoch int64  // 0: the stored order
	units string // "groups", or "clumps" for a clumpedOrder

	mu     sync.Mutex
	starts []int64 // where group i of this order starts in it, then Len; nil until loaded
	from   []int64 // where group i of this order starts in the stored order
}

func (o *groupedOrder) ID() string { return o.split.ID() }
func (o *groupedOrder) Len() int64 { return o.split.Len() }
func (o *groupedOrder) String() string {
	return fmt.Sprintf("%s epoch %d", o.split.ID(), o.epoch)
}

// places returns starts and from (see groupedOrder), computing them on the
// first call that succeeds.
func (o *groupedOrder) places(ctx context.Context) (starts, from []int64, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.starts != nil {
		return o.starts, o.from, nil
	}
	stored, err := o.split.unitStarts(ctx)
	if err != nil {
		return nil, nil, err
	}
	n := len(stored) - 1
	if o.epoch == 0 {
		o.starts, o.from = stored, stored[:n]
		return o.starts, o.from, nil
	}
	bij := NewBijection(uint64(n), DeriveKey(o.seed, fmt.Sprintf("epoch/%d/%s", o.epoch, o.units)))
	starts, from = make([]int64, n+1), make([]int64, n)
	var at int64
	for i := range n {
		g := bij.At(uint64(i))
		starts[i], from[i] = at, stored[g]
		at += stored[g+1] - stored[g]
	}
	starts[n] = at
	o.starts, o.from = starts, from
	return starts, from, nil
}

// Groups returns the boundaries of the groups starting in [start, stop).
func (o *groupedOrder) Groups(ctx context.Context, start, stop int64) ([]int64, error) {
	if start < 0 || stop > o.Len() || start > stop {
		return nil, fmt.Errorf("positions [%d, %d) out of range [0, %d)", start, stop, o.Len())
	}
	starts, _, err := o.places(ctx)
	if err != nil {
		return nil, err
	}
	n := len(starts) - 1
	i, _ := slices.BinarySearch(starts[:n], start)
	j, _ := slices.BinarySearch(starts[:n], stop)
	if i == j {
		return nil, nil
	}
	return slices.Clone(starts[i : j+1]), nil
}

// RowIDs returns the row ids at positions [start, stop) of the epoch's order.
func (o *groupedOrder) RowIDs(ctx context.Context, start, stop int64) ([]uint64, error) {
	return o.read(ctx, rowIDs, start, stop)
}

// LengthsColumn returns the column the split's lengths come from, or "".
func (o *groupedOrder) LengthsColumn() string { return o.split.LengthsColumn() }

// Lengths returns the lengths of the rows at positions [start, stop) of the
// epoch's order.
func (o *groupedOrder) Lengths(ctx context.Context, start, stop int64) ([]uint64, error) {
	return o.read(ctx, lengths, start, stop)
}

// read returns part p of positions [start, stop) of the epoch's order: of
// the stored positions its groups come from.
func (o *groupedOrder) read(ctx context.Context, p part, start, stop int64) ([]uint64, error) {
	stored := o.split.RowIDs
	if p == lengths {
		stored = o.split.Lengths
	}
	if o.epoch == 0 {
		return stored(ctx, start, stop)
	}
	if start < 0 || stop > o.Len() || start > stop {
		return nil, fmt.Errorf("positions [%d, %d) out of range [0, %d)", start, stop, o.Len())
	}
	starts, from, err := o.places(ctx)
	if err != nil {
		return nil, err
	}
	g, found := slices.BinarySearch(starts[:len(starts)-1], start)
	if !found {
		g-- // start is inside group g
	}
	out := make([]uint64, 0, stop-start)
	for pos := start; pos < stop; g++ {
		end := min(stop, starts[g+1])
		vals, err := stored(ctx, from[g]+pos-starts[g], from[g]+end-starts[g])
		if err != nil {
			return nil, err
		}
		out = append(out, vals...)
		pos = end
	}
	return out, nil
}

// clumpedOrder is the order of a split with page-aligned clumps in an epoch
// after the first: its clumps permuted as a groupedOrder permutes groups,
// dealt as rows.
type clumpedOrder struct{ o *groupedOrder }

func (c clumpedOrder) ID() string            { return c.o.ID() }
func (c clumpedOrder) Len() int64            { return c.o.Len() }
func (c clumpedOrder) String() string        { return c.o.String() }
func (c clumpedOrder) LengthsColumn() string { return c.o.LengthsColumn() }

// RowIDs returns the row ids at positions [start, stop) of the epoch's order.
func (c clumpedOrder) RowIDs(ctx context.Context, start, stop int64) ([]uint64, error) {
	return c.o.RowIDs(ctx, start, stop)
}

// Lengths returns the lengths of the rows at positions [start, stop) of the
// epoch's order.
func (c clumpedOrder) Lengths(ctx context.Context, start, stop int64) ([]uint64, error) {
	if c.LengthsColumn() == "" {
		return c.o.split.Lengths(ctx, 0, 0) // the split's error
	}
	return c.o.Lengths(ctx, start, stop)
}
