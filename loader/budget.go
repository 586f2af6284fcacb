package loader

import (
	"context"
	"runtime"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/table"
)

// A stream's memory budget (Options.MemoryBudget) bounds everything the
// stream holds, not only the rows it keeps for steps ahead:
//
//   - compressed pages fetched from the store and not yet decoded: an
//     eighth of the budget, a quarter on a remote store whose disk cache
//     does not hold the table (table.Table.Cached), a decoder's part
//     of it each (a row group larger than its part is read as it is
//     decoded, a window of half the part at a time). Far away, bytes in
//     flight are what hides the round trips: a full shuffle of a table 4
//     times its budget, 50 ms from its store, ran at 5.4 k rows/s with a
//     quarter and 216 with an eighth, whose row groups waited for room to
//     be fetched one or two at a time;
//   - row groups being decoded, a column at a time: up to one per core, as
//     many as fit a quarter of the budget, and at least one. The page
//     decoder copies out only the rows kept (charged to the share below)
//     and holds a page beside them; a column it does not handle is decoded
//     whole by pqarrow, and its rows kept copied out of it, as are every
//     column's when a piece takes a row more than once. Sizes are guessed
//     from the footer;
//   - batches read ahead: ReadAhead of them, at the size of one step's rows
//     (or of CoalesceBytes when steps are coalesced);
//   - rows kept for the steps ahead (table.Keep): all the rest. A stream
//     keeps rows for a horizon of as many steps as that holds, so this is
//     what decides how often a row group is decoded in a shuffled epoch:
//     about (bytes of the epoch's rows) ÷ (this part) times.
//
// Arrow memory comes from a C allocator the Go runtime does not see, and
// batches handed to the caller are the caller's: a stream can only bound what
// it holds itself. A budget that cannot hold one step after the other parts
// is an error that gives the numbers.

// GoHeapBase is the Go heap a process reading tables holds beside what its
// streams hold there (GoHeap): footers, page indexes, permutations,
// goroutines.
const GoHeapBase = 32 << 20

// GoHeap is what the streams of a loader or follower whose memory budget
// is budget bytes (0: DefaultMemoryBudget) may hold on the Go heap: a
// quarter of the budget, for the compressed pages fetched and the pages
// being decoded (rows kept and batches read ahead are C memory). Between
// two collections the Go heap also holds garbage, about as much again as
// what is live with Go's default GOGC, so a program that owns its runtime
// sets the runtime's soft memory limit (debug.SetMemoryLimit) to
// GoHeapBase plus GoHeap of each loader open: the collector then runs more
// often only as the heap nears what the budgets allow.
func GoHeap(budget int64) int64 {
	if budget <= 0 {
		budget = DefaultMemoryBudget
	}
	return budget / 4
}

// budgetShares is how a stream divides its budget; the sizes are guesses made from
// the footer of the row group that holds the stream's first row.
type budgetShares struct {
	Fetch     int64 // compressed bytes fetched and not yet decoded
	Decoders  int   // row groups decoded at once, at most
	Decoding  int64 // bytes they hold
	ReadAhead int64 // bytes of the batches read ahead
	Kept      int64 // bytes of rows kept for the steps ahead
	StepBytes int64 // bytes of one step of this rank's rows
	// Distant says that the table's reads wait for a remote store: it is
	// on one, and its disk cache does not hold it. A table read once
	// through the cache, as a second epoch reads it, gives fetched bytes an
	// eighth, as local files do: a quarter shortens its horizons, and a
	// window shuffle's horizons then end inside windows. (Its first
	// horizon is still one step: the ramp ends at the next, once reads
	// come back from the disk within 2 ms; see horizon.go.)
	Distant bool
}

// shares divides the budget for a stream whose first row is first and whose
// rank's steps hold about rankRows rows.
func (l *Loader) shares(ctx context.Context, first uint64, rankRows, coalesce int64) (budgetShares, error) {
	const op = "open stream"
	r, err := l.table.NewReader(table.ReaderOptions{Columns: l.opts.Columns})
	if err != nil {
		return budgetShares{}, err
	}
	defer r.Close()
	groups, err := r.Groups([]uint64{first})
	if err != nil {
		return budgetShares{}, err
	}
	_, held, err := r.GuessBytes(ctx, groups[0])
	if err != nil {
		return budgetShares{}, err
	}
	row, err := r.GuessRowBytes(ctx, groups[0])
	if err != nil {
		return budgetShares{}, err
	}
	budget := l.opts.MemoryBudget
	m := budgetShares{Fetch: budget / 8, StepBytes: row * rankRows, Distant: l.table.Remote() && !l.table.Cached()}
	if m.Distant {
		m.Fetch = budget / 4
	}
	m.Decoders = runtime.GOMAXPROCS(0)
	// A decoder holds a page or, for the columns pqarrow decodes, a column,
	// and may copy a piece's rows (about a step's) once.
	decoder := held + m.StepBytes
	m.Decoding = max(min(budget/4, int64(m.Decoders)*decoder), decoder)
	batch := m.StepBytes
	if coalesce > 0 {
		batch = max(batch, min(coalesce, MaxCoalescedSteps*m.StepBytes))
	}
	m.ReadAhead = int64(l.opts.ReadAhead) * batch
	m.Kept = budget - m.Fetch - m.Decoding - m.ReadAhead
	if m.Kept < m.StepBytes {
		need := (m.StepBytes + decoder + m.ReadAhead) * 8 / 7
		return budgetShares{}, errcode.New(errcode.InvalidArgument, op, l.table.URI(),
			"memory_budget %d bytes cannot hold one step: a step of this rank is about %d bytes (%d rows of about %d bytes),"+
				" a decoder holds about %d beside the rows it keeps, reads from the store may hold %d and %d batches read ahead about %d;"+
				" raise memory_budget to at least %d, or read fewer columns, smaller steps or less ahead",
			budget, m.StepBytes, rankRows, row, decoder, m.Fetch, l.opts.ReadAhead, m.ReadAhead, need)
	}
	return m, nil
}
