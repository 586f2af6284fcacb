// Package loader deals a pinned table's rows as deterministic, resumable
// training batches.
//
// A Loader binds an Order of row ids (a permutation, or the identity over a
// table) to the dealing parameters of a training run: global batch size G,
// number of streams S, world size W and this process's rank. What each global
// step holds is fixed by those numbers alone (see Deal), so the same samples
// make up step t whatever the world size or number of worker processes, and a
// run resumed at step t on another topology continues exactly.
//
// A Stream produces one rank's batches for an epoch, for one of K worker
// processes (worker k makes steps t0+k, t0+k+K, …, or runs of R
// consecutive steps in the same turns: see StreamOptions.Run), reading ahead
// a bounded number of steps on Go threads. Batches are Arrow record batches whose memory
// comes from Options.Allocator, so they can leave through the C Data Interface
// without copying.
package loader

import (
	"context"
	"errors"
	"io"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/croupier-data/croupier/core/cmem"
	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/permutation"
)

// Defaults for Options fields left zero, and the largest values allowed.
const (
	DefaultReadAhead    = 4         // batches in flight per stream
	DefaultMemoryBudget = 512 << 20 // bytes a stream may hold (see budget.go)

	ReadAheadLimit = 4096 // batches: each holds a channel slot and, once read, its record
	MaxReadsLimit  = 1024 // range requests in flight per stream
)

// DefaultAllocator allocates batch memory outside the Go heap (core/cmem:
// large buffers mapped on their own, small ones from C malloc), which the C Data
// Interface may hold on to after a call returns. It is invisible to the Go
// garbage collector and GOMEMLIMIT: the loader bounds it itself.
var DefaultAllocator = cmem.New()

// Options configure a Loader. JSON names match the Python keyword arguments.
type Options struct {
	GlobalBatchSize int64    `json:"global_batch_size"`
	NumSplits       int64    `json:"num_splits"` // 0 means GlobalBatchSize
	Rank            int64    `json:"rank"`
	WorldSize       int64    `json:"world_size"` // 0 means 1
	Columns         []string `json:"columns"`    // nil means every column
	ShuffleSeed     uint64   `json:"shuffle_seed"`
	DropLast        bool     `json:"drop_last"`
	ReadAhead       int      `json:"read_ahead"`    // batches; 0 means DefaultReadAhead
	MemoryBudget    int64    `json:"memory_budget"` // bytes; 0 means DefaultMemoryBudget
	MaxReads        int      `json:"max_reads"`     // range requests in flight; 0 means table.DefaultMaxReads

	// Allocator for batch memory; nil means DefaultAllocator.
	Allocator memory.Allocator `json:"-"`
}

// Loader deals batches of one table order for one rank.
type Loader struct {
	table  *table.Table
	order  permutation.Order
	deal   Deal
	opts   Options
	owned  io.Closer // what Open… opened for the loader, closed with it
	closed atomic.Bool
}

// New returns a loader dealing order's row ids of t. It validates the
// dealing parameters (docs/concepts.md, "The dealing order") and the column names.
func New(t *table.Table, order permutation.Order, opts Options) (*Loader, error) {
	// Zero asks for the default; a negative number is a mistake, not a default.
	for _, o := range []struct {
		name string
		v    int64
	}{{"num_splits", opts.NumSplits}, {"world_size", opts.WorldSize}, {"read_ahead", int64(opts.ReadAhead)},
		{"memory_budget", opts.MemoryBudget}, {"max_reads", int64(opts.MaxReads)}} {
		if o.v < 0 {
			return nil, errcode.New(errcode.InvalidArgument, "new loader", t.URI(),
				"%s is %d; it must be positive (0 for the default)", o.name, o.v)
		}
	}
	if opts.NumSplits == 0 {
		opts.NumSplits = opts.GlobalBatchSize
	}
	if opts.WorldSize == 0 {
		opts.WorldSize = 1
	}
	if opts.ReadAhead <= 0 {
		opts.ReadAhead = DefaultReadAhead
	}
	if opts.MemoryBudget <= 0 {
		opts.MemoryBudget = DefaultMemoryBudget
	}
	if opts.MaxReads <= 0 {
		opts.MaxReads = table.DefaultMaxReads
	}
	if opts.Allocator == nil {
		opts.Allocator = DefaultAllocator
	}
	if opts.ReadAhead > ReadAheadLimit || opts.MaxReads > MaxReadsLimit {
		return nil, errcode.New(errcode.InvalidArgument, "new loader", t.URI(),
			"read_ahead %d or max_reads %d too large (at most %d and %d)", opts.ReadAhead, opts.MaxReads, ReadAheadLimit, MaxReadsLimit)
	}
	if order.Len() == 0 {
		return nil, errcode.New(errcode.InvalidArgument, "new loader", t.URI(), "nothing to deal: %s has 0 rows", order.ID())
	}
	d, err := NewDeal(order.Len(), opts.NumSplits, opts.GlobalBatchSize, opts.WorldSize, opts.DropLast)
	if err != nil {
		return nil, errcode.Wrap(err, errcode.InvalidArgument, "new loader", t.URI())
	}
	if opts.Rank < 0 || opts.Rank >= opts.WorldSize {
		return nil, errcode.New(errcode.InvalidArgument, "new loader", t.URI(),
			"rank %d out of range [0, %d)", opts.Rank, opts.WorldSize)
	}
	if d.Steps() == 0 {
		return nil, errcode.New(errcode.InvalidArgument, "new loader", t.URI(),
			"no full step to deal: %d rows in %d streams give %d cycles each, a step needs %d (set drop_last=false to deal a partial step)",
			d.M, d.S, d.StreamLen(), d.CyclesPerStep())
	}
	// Resolve the columns now so that a bad name fails at construction.
	r, err := t.NewReader(table.ReaderOptions{Columns: opts.Columns})
	if err != nil {
		return nil, err
	}
	if opts.Columns == nil {
		for _, f := range r.Schema().Fields() {
			opts.Columns = append(opts.Columns, f.Name)
		}
	}
	r.Close()
	t.Retain()
	return &Loader{table: t, order: order, deal: d, opts: opts}, nil
}

// Close releases the loader's reference to its table, and closes what Open…
// opened for it. Streams already open keep working until they are closed.
func (l *Loader) Close() error {
	if l.closed.Swap(true) {
		return nil
	}
	err := l.table.Close()
	if l.owned != nil {
		err = errors.Join(err, l.owned.Close())
	}
	return err
}

// Options returns the options with defaults filled in.
func (l *Loader) Options() Options { return l.opts }

// Deal returns the dealing order.
func (l *Loader) Deal() Deal { return l.deal }

// StepsPerEpoch is the number of global steps in every epoch.
func (l *Loader) StepsPerEpoch() int64 { return l.deal.Steps() }

// RankBatchSize is the number of samples in each of this rank's full batches.
func (l *Loader) RankBatchSize() int64 { return l.deal.G / l.deal.W }

// Table returns the table the loader reads.
func (l *Loader) Table() *table.Table { return l.table }

// Info describes what a loader deals, and how, as the C library and
// Python's StreamingDataset report it.
type Info struct {
	StepsPerEpoch   int64    `json:"steps_per_epoch"`
	NumRows         int64    `json:"num_rows"` // of the order dealt
	NumSplits       int64    `json:"num_splits"`
	GlobalBatchSize int64    `json:"global_batch_size"`
	Rank            int64    `json:"rank"`
	WorldSize       int64    `json:"world_size"`
	RankBatchSize   int64    `json:"rank_batch_size"`
	DropLast        bool     `json:"drop_last"`
	Columns         []string `json:"columns"` // nil: every column
	ShuffleSeed     uint64   `json:"shuffle_seed"`
	TableURI        string   `json:"table_uri"`
	TableVersion    string   `json:"table_version"`
	TableID         string   `json:"table_id"`
	PermutationID   string   `json:"permutation_id"`
	MemoryBudget    int64    `json:"memory_budget"`
}

// Info returns the description of l.
func (l *Loader) Info() Info {
	o := l.opts
	return Info{StepsPerEpoch: l.StepsPerEpoch(), NumRows: l.order.Len(), NumSplits: o.NumSplits,
		GlobalBatchSize: o.GlobalBatchSize, Rank: o.Rank, WorldSize: o.WorldSize, RankBatchSize: l.RankBatchSize(),
		DropLast: o.DropLast, Columns: o.Columns, ShuffleSeed: o.ShuffleSeed, TableURI: l.table.URI(),
		TableVersion: l.table.Version(), TableID: l.table.ID(), PermutationID: l.order.ID(), MemoryBudget: o.MemoryBudget}
}

// Order returns the order the loader deals.
func (l *Loader) Order() permutation.Order { return l.order }

// Schema returns the schema of the batches.
func (l *Loader) Schema() (*arrow.Schema, error) {
	r, err := l.table.NewReader(table.ReaderOptions{Columns: l.opts.Columns})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return r.Schema(), nil
}

// EpochOrder returns the order dealt in epoch: an EpochOrderer's order for
// the run's shuffle seed, else the order itself.
func (l *Loader) EpochOrder(epoch int64) permutation.Order {
	if o, ok := l.order.(permutation.EpochOrderer); ok {
		return o.ForEpoch(l.opts.ShuffleSeed, epoch)
	}
	return l.order
}

// RowIDs returns the row ids of this rank's batch at step t of epoch.
func (l *Loader) RowIDs(ctx context.Context, epoch, t int64) ([]uint64, error) {
	return l.deal.Batch(ctx, l.EpochOrder(epoch), t, l.opts.Rank)
}
