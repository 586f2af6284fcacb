// Package permutation provides the orders in which a table's rows are dealt.
//
// An Order is a sequence of row ids of one pinned table version. The loader
// deals every epoch from an Order; it never needs the whole sequence at once,
// only ranges of it, so an Order answers RowIDs(start, stop) in time
// proportional to stop − start.
package permutation

import (
	"context"
	"fmt"
)

// Order is a sequence of row ids.
type Order interface {
	// ID names the order, for checkpoints: resuming needs the same order.
	ID() string
	// Len is the number of row ids in the order.
	Len() int64
	// RowIDs returns the row ids at positions [start, stop).
	RowIDs(ctx context.Context, start, stop int64) ([]uint64, error)
}

// LengthOrder is an Order that knows the length of each of its rows without
// reading them: a split of a permutation built with Spec.Lengths, and its
// epoch orders.
type LengthOrder interface {
	Order
	// LengthsColumn names the column the lengths come from; "" when the
	// order records none, and Lengths fails.
	LengthsColumn() string
	// Lengths returns the lengths of the rows at positions [start, stop).
	Lengths(ctx context.Context, start, stop int64) ([]uint64, error)
}

// Identity is the order of a table's own rows: row ids 0, 1, …, N−1.
type Identity struct{ N int64 }

// ID returns "identity".
func (Identity) ID() string { return "identity" }

// Len returns N.
func (o Identity) Len() int64 { return o.N }

// RowIDs returns start, …, stop−1.
func (o Identity) RowIDs(_ context.Context, start, stop int64) ([]uint64, error) {
	if start < 0 || stop > o.N || start > stop {
		return nil, fmt.Errorf("positions [%d, %d) out of range [0, %d)", start, stop, o.N)
	}
	ids := make([]uint64, stop-start)
	for i := range ids {
		ids[i] = uint64(start) + uint64(i)
	}
	return ids, nil
}
