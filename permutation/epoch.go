package permutation

import (
	"context"
	"fmt"
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
func (s *Split) ForEpoch(seed uint64, e int64) Order {
	sh := s.p.m.Spec.Shuffle
	if e == 0 || sh == nil || s.info.NumRows == 0 {
		return s
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
