// Package loader deals a pinned table's rows as deterministic, resumable
// training batches.
//
// A Loader binds an Order of row ids (a permutation, or the identity over a
// table) to the dealing parameters of a training run: global batch size G,
// number of streams S, world size W and this process's rank; or, for
// token-budget steps, the tokens per step T instead of G and S. What each
// global step holds is fixed by those numbers alone (see Deal and
// TokenDeal), so the same samples make up step t whatever the world size or
// number of worker processes, and a run resumed at step t on another
// topology continues exactly.
//
// A Stream produces one rank's batches for an epoch, for one of K worker
// processes (worker k makes steps t0+k, t0+k+K, …, or runs of R
// consecutive steps in the same turns: see StreamOptions.Run), reading ahead
// a bounded number of steps on Go threads. Batches are Arrow record batches whose memory
// comes from Options.Allocator, so they can leave through the C Data Interface
// without copying.
//
// A Mixture interleaves the steps of several loaders by weight: which source
// fills each slot of a mixture step is a pure function of a seed, the step
// and the weights at that step, so a mixture, too, deals the same steps at
// every world size and number of workers, and resumes exactly.
package loader

import (
	"context"
	"errors"
	"io"
	"sync"
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
//
// A loader deals sample-count steps (GlobalBatchSize, NumSplits) or
// token-budget steps (TokensPerStep, Oversize), never both.
type Options struct {
	GlobalBatchSize int64    `json:"global_batch_size"`
	NumSplits       int64    `json:"num_splits"`      // 0 means GlobalBatchSize
	TokensPerStep   int64    `json:"tokens_per_step"` // > 0: token-budget steps of an order with lengths (see TokenDeal)
	Oversize        string   `json:"oversize"`        // OversizeError or OversizeTruncate; "" means OversizeError
	Rank            int64    `json:"rank"`
	WorldSize       int64    `json:"world_size"` // 0 means 1
	Columns         []string `json:"columns"`    // nil means every column
	ShuffleSeed     uint64   `json:"shuffle_seed"`
	DropLast        bool     `json:"drop_last"`
	ReadAhead       int      `json:"read_ahead"`    // batches; 0 means DefaultReadAhead
	MemoryBudget    int64    `json:"memory_budget"` // bytes; 0 means DefaultMemoryBudget
	MaxReads        int      `json:"max_reads"`     // range requests in flight; 0 means the table's default (table.Table.MaxReads)

	// Allocator for batch memory; nil means DefaultAllocator.
	Allocator memory.Allocator `json:"-"`
}

// Loader deals batches of one table order for one rank.
type Loader struct {
	table  *table.Table
	order  permutation.Order
	deal   Deal // of sample-count steps
	opts   Options
	owned  io.Closer // what Open… opened for the loader, closed with it
	closed atomic.Bool

	mu     sync.Mutex
	tokens map[int64]*TokenDeal // of token-budget steps, by epoch: the last few planned
	steps0 int64                // steps of epoch 0, for token-budget steps
}

// dealer is a dealing order: Deal or TokenDeal.
type dealer interface {
	// Steps is the number of global steps in the epoch.
	Steps() int64
	// Batch returns rank r's row ids for step t, drawn from order.
	Batch(ctx context.Context, order permutation.Order, t, r int64) ([]uint64, error)
	// RankRows guesses the rows of a rank's share of a step, for memory budgets.
	RankRows() int64
	// Place returns the step and rank that deal position p of order, or ok
	// false when the epoch deals it in no step.
	Place(ctx context.Context, order permutation.Order, p int64) (step, rank int64, ok bool, err error)
}

// RankRows is G/W.
func (d Deal) RankRows() int64 { return d.G / d.W }

// tokenPlansKept bounds the epochs whose token-budget plans a loader keeps:
// a stream of the next epoch may open while one of the last is still read.
const tokenPlansKept = 2

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
	splitsDefault := opts.TokensPerStep == 0 && opts.NumSplits == 0
	if splitsDefault {
		opts.NumSplits = opts.GlobalBatchSize
	}
	if opts.TokensPerStep != 0 && opts.Oversize == "" {
		opts.Oversize = OversizeError
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
		opts.MaxReads = t.MaxReads()
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
	if opts.Rank < 0 || opts.Rank >= opts.WorldSize {
		return nil, errcode.New(errcode.InvalidArgument, "new loader", t.URI(),
			"rank %d out of range [0, %d)", opts.Rank, opts.WorldSize)
	}
	if splitsDefault && opts.GlobalBatchSize > 0 && opts.GlobalBatchSize%opts.WorldSize != 0 {
		// num_splits must divide G and be a multiple of W: no value does.
		return nil, errcode.New(errcode.InvalidArgument, "new loader", t.URI(),
			"num_splits %d (its default, global_batch_size) is not a multiple of world_size %d: each rank takes "+
				"global_batch_size / world_size rows a step, so global_batch_size must be a multiple of world_size",
			opts.NumSplits, opts.WorldSize)
	}
	l := &Loader{table: t, order: order, opts: opts}
	if opts.TokensPerStep != 0 {
		if err := l.checkTokens(); err != nil {
			return nil, err
		}
		// Plan epoch 0 now, so that a row too long fails at construction.
		d, err := l.TokenDeal(context.Background(), 0)
		if err != nil {
			return nil, errcode.Wrap(err, errcode.InvalidArgument, "new loader", t.URI())
		}
		l.steps0 = d.Steps()
	} else if err := l.newDeal(); err != nil {
		return nil, err
	}
	// Resolve the columns now so that a bad name fails at construction.
	r, err := t.NewReader(table.ReaderOptions{Columns: opts.Columns})
	if err != nil {
		return nil, err
	}
	if opts.Columns == nil {
		for _, f := range r.Schema().Fields() {
			l.opts.Columns = append(l.opts.Columns, f.Name)
		}
	}
	r.Close()
	t.Retain()
	return l, nil
}

// checkTokens checks the options of token-budget steps.
func (l *Loader) checkTokens() error {
	o := l.opts
	bad := func(format string, args ...any) error {
		return errcode.New(errcode.InvalidArgument, "new loader", l.table.URI(), format, args...)
	}
	switch {
	case o.TokensPerStep < 0:
		return bad("tokens_per_step is %d; it must be positive", o.TokensPerStep)
	case o.GlobalBatchSize != 0 || o.NumSplits != 0:
		return bad("tokens_per_step %d with global_batch_size %d and num_splits %d: steps are counted in tokens or in samples, give one",
			o.TokensPerStep, o.GlobalBatchSize, o.NumSplits)
	case o.DropLast:
		return bad("drop_last does not apply to token-budget steps: every row of the epoch is dealt, the last step holds the rows left")
	case o.Oversize != OversizeError && o.Oversize != OversizeTruncate:
		return bad("oversize %q is neither %q nor %q", o.Oversize, OversizeError, OversizeTruncate)
	}
	if lo, ok := l.EpochOrder(0).(permutation.LengthOrder); !ok || lo.LengthsColumn() == "" {
		return bad("tokens_per_step needs the length of every row: %s records none; build its permutation with lengths=<column>", l.order.ID())
	}
	return nil
}

// newDeal sets the deal of sample-count steps.
func (l *Loader) newDeal() error {
	opts, t := l.opts, l.table
	d, err := NewDeal(l.order.Len(), opts.NumSplits, opts.GlobalBatchSize, opts.WorldSize, opts.DropLast)
	if err != nil {
		return errcode.Wrap(err, errcode.InvalidArgument, "new loader", t.URI())
	}
	_, d.Grouped = l.EpochOrder(0).(permutation.GroupedOrder)
	if d.Grouped && d.Steps() == 0 {
		return errcode.New(errcode.InvalidArgument, "new loader", t.URI(),
			"no full step to deal: %d rows of groups, a step needs %d (set drop_last=false to deal a partial step)", d.M, d.G)
	}
	if d.Steps() == 0 {
		return errcode.New(errcode.InvalidArgument, "new loader", t.URI(),
			"no full step to deal: %d rows in %d streams give %d cycles each, a step needs %d (set drop_last=false to deal a partial step)",
			d.M, d.S, d.StreamLen(), d.CyclesPerStep())
	}
	l.deal = d
	return nil
}

// dealer returns the dealing order of epoch: the Deal, or the TokenDeal
// planned from the epoch order's lengths.
func (l *Loader) dealer(ctx context.Context, epoch int64) (dealer, error) {
	if l.opts.TokensPerStep == 0 {
		return l.deal, nil
	}
	return l.TokenDeal(ctx, epoch)
}

// TokenDeal returns the token-budget steps of epoch, planned on first use.
// It fails for a loader of sample-count steps.
func (l *Loader) TokenDeal(ctx context.Context, epoch int64) (*TokenDeal, error) {
	if l.opts.TokensPerStep == 0 {
		return nil, errcode.New(errcode.InvalidArgument, "deal", l.table.URI(), "the loader deals sample-count steps, not token budgets")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if d, ok := l.tokens[epoch]; ok {
		return d, nil
	}
	d, err := PlanTokens(ctx, l.EpochOrder(epoch).(permutation.LengthOrder), l.opts.TokensPerStep, l.opts.WorldSize, l.opts.Oversize)
	if err != nil {
		return nil, err
	}
	if l.tokens == nil || len(l.tokens) >= tokenPlansKept {
		l.tokens = map[int64]*TokenDeal{}
	}
	l.tokens[epoch] = d
	return d, nil
}

// EpochSteps is the number of global steps in epoch: the same in every epoch
// for sample-count steps, the epoch's own for token-budget steps.
func (l *Loader) EpochSteps(ctx context.Context, epoch int64) (int64, error) {
	d, err := l.dealer(ctx, epoch)
	if err != nil {
		return 0, err
	}
	return d.Steps(), nil
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

// StepsPerEpoch is the number of global steps in every epoch, or in epoch 0
// for token-budget steps (see EpochSteps).
func (l *Loader) StepsPerEpoch() int64 {
	if l.opts.TokensPerStep != 0 {
		return l.steps0
	}
	return l.deal.Steps()
}

// RankBatchSize is the number of samples in each of this rank's full batches:
// G/W. Under a grouped deal it is the mean, and batches vary (see
// Deal.Ranks); for token-budget steps, whose rows vary, it is 0.
func (l *Loader) RankBatchSize() int64 {
	if l.opts.TokensPerStep != 0 {
		return 0
	}
	return l.deal.G / l.deal.W
}

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
	TokensPerStep   int64    `json:"tokens_per_step"` // 0 for sample-count steps
	Oversize        string   `json:"oversize"`        // "" for sample-count steps
}

// Info returns the description of l.
func (l *Loader) Info() Info {
	o := l.opts
	return Info{StepsPerEpoch: l.StepsPerEpoch(), NumRows: l.order.Len(), NumSplits: o.NumSplits,
		GlobalBatchSize: o.GlobalBatchSize, Rank: o.Rank, WorldSize: o.WorldSize, RankBatchSize: l.RankBatchSize(),
		DropLast: o.DropLast, Columns: o.Columns, ShuffleSeed: o.ShuffleSeed, TableURI: l.table.URI(),
		TableVersion: l.table.Version(), TableID: l.table.ID(), PermutationID: l.order.ID(), MemoryBudget: o.MemoryBudget,
		TokensPerStep: o.TokensPerStep, Oversize: o.Oversize}
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

// Step returns the row ids of every rank's batch at step t of epoch, rank by
// rank: the whole global step.
func (l *Loader) Step(ctx context.Context, epoch, t int64) ([][]uint64, error) {
	d, err := l.dealer(ctx, epoch)
	if err != nil {
		return nil, err
	}
	order := l.EpochOrder(epoch)
	out := make([][]uint64, l.opts.WorldSize)
	if td, ok := d.(*TokenDeal); ok { // one plan of the step for all ranks
		shares, err := td.Shares(ctx, order.(permutation.LengthOrder), t)
		if err != nil {
			return nil, err
		}
		for r, sh := range shares {
			out[r] = sh.RowIDs
		}
		return out, nil
	}
	for r := range out {
		if out[r], err = d.Batch(ctx, order, t, int64(r)); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Place returns the global step and rank that deal position p of epoch's
// order (see EpochOrder), or ok false when the epoch deals it in no step.
func (l *Loader) Place(ctx context.Context, epoch, p int64) (step, rank int64, ok bool, err error) {
	d, err := l.dealer(ctx, epoch)
	if err != nil {
		return 0, 0, false, err
	}
	return d.Place(ctx, l.EpochOrder(epoch), p)
}

// RowIDs returns the row ids of this rank's batch at step t of epoch.
func (l *Loader) RowIDs(ctx context.Context, epoch, t int64) ([]uint64, error) {
	d, err := l.dealer(ctx, epoch)
	if err != nil {
		return nil, err
	}
	return d.Batch(ctx, l.EpochOrder(epoch), t, l.opts.Rank)
}
