package loader

import (
	"context"
	"io"
	"iter"

	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/permutation"
)

// Open opens the table at uri (a croupier table, or Parquet files: see
// table.Open) and returns a loader dealing its rows in table order. The
// loader owns the table: Close closes it.
func Open(ctx context.Context, uri string, opts Options) (*Loader, error) {
	t, err := table.Open(ctx, uri)
	if err != nil {
		return nil, err
	}
	defer t.Close() // New holds its own reference
	return New(t, permutation.Identity{N: t.NumRows()}, opts)
}

// OpenSplit opens the permutation persisted at uri and returns a loader
// dealing its split called split. The loader owns the permutation: Close
// closes it.
func OpenSplit(ctx context.Context, uri, split string, opts Options) (*Loader, error) {
	p, err := permutation.Open(ctx, uri)
	if err != nil {
		return nil, err
	}
	s, err := p.Split(split)
	if err != nil {
		p.Close()
		return nil, err
	}
	l, err := New(p.Table(), s, opts)
	if err != nil {
		p.Close()
		return nil, err
	}
	l.owned = p
	return l, nil
}

// Batches iterates over this rank's batches of one epoch for one worker, from
// so.StartStep to the end of the epoch. It opens a stream when iteration
// starts and closes it when iteration stops, also early. An error, opening the
// stream or reading, is yielded once and ends the iteration. The receiver
// releases each batch's record.
func (l *Loader) Batches(ctx context.Context, so StreamOptions) iter.Seq2[Batch, error] {
	return func(yield func(Batch, error) bool) {
		s, err := l.Stream(ctx, so)
		if err != nil {
			yield(Batch{}, err)
			return
		}
		defer s.Close()
		for b, err := range s.All(ctx) {
			if !yield(b, err) {
				return
			}
		}
	}
}

var _ io.Closer = (*Loader)(nil)
