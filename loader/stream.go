package loader

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/permutation"
)

// StreamOptions choose which of a rank's batches a Stream makes.
type StreamOptions struct {
	Epoch     int64 `json:"epoch"`
	StartStep int64 `json:"start_step"` // the first global step of this iteration; ≥ −Worker

	Worker     int `json:"worker"`      // this worker's index in [0, NumWorkers)
	NumWorkers int `json:"num_workers"` // 0 behaves as 1

	// Run, when above 1, has the workers take turns at runs of Run
	// consecutive steps instead of single steps: worker k deals steps
	// StartStep + (k + j·K)·Run + i for i in [0, Run) and j = 0, 1, …, up to
	// the end of the epoch (K = NumWorkers). A worker reading consecutive
	// steps touches fewer row groups in orders with locality. Torch's
	// DataLoader takes one batch from each worker in turn and needs 0 or 1,
	// single steps; a consumer that orders the workers' steps itself may
	// ask for runs. 0 behaves as 1.
	Run int `json:"run"`

	// ShareSteps has the workers share every step instead of taking turns
	// at steps or runs: each deals all the rank's steps from StartStep,
	// but only the rows its own blocks of the table hold (see owners), and
	// each Batch says where its rows go in their steps (Batch.Places). A
	// consumer merges the workers' parts of each step. Workers taking
	// turns each decode most of the pages of the steps they deal, so K of
	// them decode up to K times what one stream does in a shuffle; workers
	// sharing steps decode each page once between them, and each keeps
	// rows for as many steps ahead in its 1/K of a budget as one stream
	// does in all of it. Run does not apply.
	ShareSteps bool `json:"share_steps"`

	// CoalesceBytes, when positive, lets one Batch hold several of the
	// worker's consecutive steps (sample-count steps only), as many as fit in about this many bytes (at
	// most MaxCoalescedSteps). Each step that crosses into Python or C costs
	// the same tens of microseconds however small it is; for rows of a few
	// dozen bytes that is most of the work. Zero: one step per Batch.
	CoalesceBytes int64 `json:"coalesce_bytes"`
}

// MaxCoalescedSteps bounds the steps of one coalesced Batch.
const MaxCoalescedSteps = 64

// Batch is one rank's share of one global step, or of Steps consecutive
// steps of the worker when the stream coalesces them: Step and the worker's
// steps after it (Step+K, … with single-step turns; see StreamOptions.Run),
// in that order in Record. With sample-count steps every step of an
// epoch has the rank's batch size in rows (Loader.RankBatchSize) except its
// last, which may have fewer when DropLast is false. A grouped deal's steps
// vary in size (Deal.Ranks), and with token-budget steps the rows of each
// step vary (TokenDeal); in both a rank's share may be empty, and each Batch
// holds one step.
type Batch struct {
	Step   int64
	Steps  int               // ≥ 1
	Record arrow.RecordBatch // released by the receiver
	// RowIDs are the table's row ids of Record's rows, in order; the
	// stream does not change them.
	RowIDs []uint64
	// Places says where each row of Record goes, in a stream whose workers
	// share steps (StreamOptions.ShareSteps); nil otherwise. Record holds
	// the worker's rows of each step, steps in order and each step's rows in
	// the order of the rank's share, and the workers' rows of a step
	// together are the rank's share of it, once each. It is not nil in a
	// shared stream, also when the worker deals no row of the steps.
	Places []Place
}

// A Place is where a row of a batch goes when workers share steps: row
// Index of the rank's share of global step Batch.Step + Step.
type Place struct{ Step, Index int32 }

type result struct {
	batch Batch
	ahead int64 // the bytes held for it in the read-ahead budget
	err   error
}

// Stream makes one worker's batches of one epoch in step order, reading up to
// ReadAhead batches ahead. It is not safe for concurrent use; Close it when done,
// also after an early stop.
type Stream struct {
	cancel context.CancelFunc
	uri    string           // of the table, for errors
	layout table.PageLayout // of the table's widest column: the hint's, and the planner's rows per page
	reader *table.Reader
	budget *table.Budget // of the rows kept for horizons
	limit  int64         // the whole memory budget
	slots  chan struct{} // read-ahead: one per batch in pending or being taken by Next
	ahead  *aheadBudget  // read-ahead: the bytes of the batches read and not taken by Next
	step   int64         // the guessed bytes of one step of this rank's rows (budgetShares.StepBytes)
	deal   dealer        // of the epoch, whose steps the stream deals from order for rank
	order  permutation.Order
	rank   int64
	// large holds, of a stream whose workers share steps and whose
	// consumer has asked RunEnd for runs bounded in bytes (runs), the bytes
	// of large rows (table.Reader.DeclaredLargeBytes) of each step the
	// planner has taken and neither Next has returned nor RunEnd passed:
	// RunEnd reads no row ids again for them.
	largeMu  sync.Mutex
	large    map[int64]int64
	runs     atomic.Bool
	fetch    int64            // the share of the budget for bytes fetched and not yet decoded
	decoded  chan struct{}    // closed once the reader has nothing more to fetch or decode
	finished chan struct{}    // closed once decoded and every read has started
	horizons chan *horizon    // planned, in step order
	pending  chan chan result // one per batch being read, in step order
	waiting  chan result      // taken from pending by a Next that ctx interrupted
	out      int64            // the read-ahead bytes of the batch Next returned last, while it counts (see handOut)
	wg       sync.WaitGroup
	err      error // sticky: after an error or the end, Next keeps returning it

	mu    sync.Mutex
	kepts []*table.Kept // of horizons not closed yet, for Close

	steps   atomic.Int64 // steps Next returned
	rows    atomic.Int64 // rows Next returned
	stall   atomic.Int64 // nanoseconds Next waited for a batch still being read
	ready   atomic.Int64 // batches read and not yet taken by Next
	horizon atomic.Int64 // steps in the horizon planned last
	planned atomic.Int64 // horizons planned
}

// RunEnd returns where a run of the rank's steps that starts at global step
// first ends, for a consumer that sends the steps of workers sharing them
// (StreamOptions.ShareSteps) in runs, each worker its part of each: after at
// most most steps, at the epoch's end, and before the first step that would
// take the run's guessed bytes above bytes (0: no bound), unless it is the
// run's first. A step is guessed at the stream's bytes of a step
// (Stats.StepBytes) and, for each page far larger than the rest of its
// column (one charged whole to the rows kept) that holds one of its rows,
// that page's bytes more, as the table's files declare their pages: by
// their offset indexes, or a local file's flat columns by their pages'
// headers (table.Reader.DeclaredLargeBytes); a page of another chunk is not
// seen. The
// answer depends on the table version, the loader's options and the
// stream's budget alone, not on what any stream has read, so every worker
// sharing the steps finds the same runs.
func (s *Stream) RunEnd(ctx context.Context, first, most, bytes int64) (int64, error) {
	const op = "end a run of steps"
	steps := s.deal.Steps()
	switch {
	case first < 0 || first >= steps:
		return 0, errcode.New(errcode.InvalidArgument, op, s.uri, "step %d out of range [0, %d)", first, steps)
	case most < 1:
		return 0, errcode.New(errcode.InvalidArgument, op, s.uri, "a run of %d steps: it must be at least 1", most)
	case bytes < 0:
		return 0, errcode.New(errcode.InvalidArgument, op, s.uri, "a run of %d bytes: it must not be negative", bytes)
	}
	end := min(first+most, steps)
	defer func() { s.forgetLarge(first, end) }() // the runs go on from end
	if bytes == 0 {
		return end, nil
	}
	s.runs.Store(true)
	var run int64
	for t := first; t < end; t++ {
		s.largeMu.Lock()
		large, ok := s.large[t]
		s.largeMu.Unlock()
		if !ok {
			ids, err := s.deal.Batch(ctx, s.order, t, s.rank)
			if err != nil {
				return 0, err
			}
			if large, err = s.reader.DeclaredLargeBytes(ctx, ids); err != nil {
				return 0, err
			}
		}
		run += s.step + large
		if t > first && run > bytes {
			end = t
			break
		}
	}
	return end, nil
}

// noteLarge records, for RunEnd, the bytes of large rows of step, whose
// rows (every worker's) are ids, once a consumer asks for runs bounded in
// bytes.
func (s *Stream) noteLarge(ctx context.Context, step int64, ids []uint64) error {
	if !s.runs.Load() {
		return nil
	}
	large, err := s.reader.DeclaredLargeBytes(ctx, ids)
	if err != nil {
		return err
	}
	s.largeMu.Lock()
	s.large[step] = large
	s.largeMu.Unlock()
	return nil
}

// forgetLarge lets go of what noteLarge recorded of steps [from, to), which
// Next has returned or RunEnd has passed.
func (s *Stream) forgetLarge(from, to int64) {
	s.largeMu.Lock()
	defer s.largeMu.Unlock()
	if len(s.large) == 0 {
		return
	}
	for t := from; t < to; t++ {
		delete(s.large, t)
	}
}

// Stats describe what a stream has done so far, for monitoring and tuning.
type Stats struct {
	table.ReaderStats
	Steps        int64         `json:"steps"`                 // steps Next returned
	Rows         int64         `json:"rows"`                  // rows in them
	StallTime    time.Duration `json:"stall_ns"`              // time Next waited for a batch still being read
	Ready        int64         `json:"ready"`                 // batches read ahead, waiting for Next
	HeldBytes    int64         `json:"held_bytes"`            // bytes of rows kept now for steps ahead
	HeldPeak     int64         `json:"held_peak"`             // the most bytes of rows kept at any time
	HeldLimit    int64         `json:"held_limit"`            // the share of the memory budget for kept rows
	AheadBytes   int64         `json:"ahead_bytes"`           // bytes of the batches read ahead now
	AheadPeak    int64         `json:"ahead_peak"`            // the most bytes of batches read ahead at any time
	AheadLimit   int64         `json:"ahead_limit"`           // the share of the memory budget for them
	FetchLimit   int64         `json:"fetch_limit"`           // the share of the memory budget for bytes fetched and not yet decoded (FetchedBytes)
	StepBytes    int64         `json:"step_bytes"`            // the guessed bytes of one step of this rank's rows, as the budget is divided
	HorizonSteps int64         `json:"horizon_steps"`         // steps in the horizon planned last
	Horizons     int64         `json:"horizons"`              // horizons planned so far
	LayoutHint   string        `json:"layout_hint,omitempty"` // see layoutHint
}

// Stats returns the stream's counters. It is safe to call at any time, also
// concurrently with Next.
func (s *Stream) Stats() Stats {
	held, peak := s.budget.Used()
	ahead, aheadPeak := s.ahead.Used()
	st := Stats{ReaderStats: s.reader.Stats(), Steps: s.steps.Load(), Rows: s.rows.Load(),
		StallTime: time.Duration(s.stall.Load()), Ready: s.ready.Load(), HeldBytes: held, HeldPeak: peak, HeldLimit: s.budget.Limit(),
		AheadBytes: ahead, AheadPeak: aheadPeak, AheadLimit: s.ahead.limit, FetchLimit: s.fetch, StepBytes: s.step,
		HorizonSteps: s.horizon.Load(), Horizons: s.planned.Load()}
	st.LayoutHint = layoutHint(s.uri, s.layout, st)
	return st
}

// A table laid out in large pages (a pyarrow export: 1 MiB pages, often
// without a page index) makes a shuffled read decode a whole page for each
// row it takes, tens of times what it deals, where a rewrite into croupier's
// layout would decode a few times. Nothing fails, so the stream says so, in
// its stats: once it has dealt hintSteps steps, when the table's widest
// column has coarse pages (table.PageLayout.Coarse) and the stream has
// decoded at least hintDecoded times the bytes of the rows it kept. An order
// that reads pages whole (stored order, most of a window shuffle) decodes
// about what it keeps, and gets no hint whatever the layout.
const (
	hintSteps   = 16
	hintDecoded = 4
)

// layoutHint returns the hint for a stream over the table at uri, laid out
// as l, whose counters are st; "" for none.
func layoutHint(uri string, l table.PageLayout, st Stats) string {
	if st.Steps < hintSteps || !l.Coarse() || st.KeptBytes == 0 || st.DecodedBytes < hintDecoded*st.KeptBytes {
		return ""
	}
	return fmt.Sprintf("%s: this read decoded %.1f bytes for each byte it kept, as pages of column %q hold %d rows "+
		"where croupier's layout would hold %d; rewrite the table once for shuffled reads "+
		"(croupier rewrite SRC DST, or croupier.rewrite) and read the copy",
		uri, float64(st.DecodedBytes)/float64(st.KeptBytes), l.Column, l.Rows, max(1, table.DefaultPageBytes/l.RowBytes))
}

// Stream starts producing the batches of worker so.Worker: steps
// so.StartStep + so.Worker, + so.NumWorkers, … up to the end of the epoch,
// runs of so.Run consecutive steps taken in the same turns, or, with
// so.ShareSteps, the worker's rows of every step from so.StartStep.
// The stream stops when ctx is canceled or Close is called. It fails when
// the memory budget cannot hold one step (see budget.go).
func (l *Loader) Stream(ctx context.Context, so StreamOptions) (*Stream, error) {
	return l.streamAfter(ctx, so, nil)
}

// streamAfter is Stream for a stream whose batches a consumer takes after
// those of stream prev, if not nil: the two share prev's memory budget for
// kept rows and its read-ahead slots, so that the new stream reads ahead
// while prev is dealt without the two holding more than one stream does:
// its rows are kept as room is made by reading prev's (see table.Budget),
// and it starts reads once prev has started all of its own, so that it
// never holds a slot prev needs. Open it once prev has decoded all its
// rows (Stream.decoded), so that the readers' fetch and decoding shares do
// not overlap either.
func (l *Loader) streamAfter(ctx context.Context, so StreamOptions, prev *Stream) (*Stream, error) {
	const op = "open stream"
	k := max(so.NumWorkers, 1)
	switch {
	case l.closed.Load():
		return nil, errcode.New(errcode.Closed, op, l.table.URI(), "the loader is closed")
	case so.Worker < 0 || so.Worker >= k:
		return nil, errcode.New(errcode.InvalidArgument, op, "", "worker %d out of range [0, %d)", so.Worker, k)
	case so.Epoch < 0:
		return nil, errcode.New(errcode.InvalidArgument, op, "", "epoch %d is negative", so.Epoch)
	case so.CoalesceBytes < 0:
		return nil, errcode.New(errcode.InvalidArgument, op, "", "coalesce_bytes %d is negative", so.CoalesceBytes)
	case so.Run < 0:
		return nil, errcode.New(errcode.InvalidArgument, op, "", "run %d is negative", so.Run)
	case so.ShareSteps && so.StartStep < 0:
		return nil, errcode.New(errcode.InvalidArgument, op, "", "start step %d is negative", so.StartStep)
	case so.CoalesceBytes > 0 && l.opts.TokensPerStep != 0:
		return nil, errcode.New(errcode.InvalidArgument, op, "",
			"coalesce_bytes %d does not apply to token-budget steps: their rows vary, so a batch is one step", so.CoalesceBytes)
	}
	d, err := l.dealer(ctx, so.Epoch)
	if err != nil {
		return nil, err
	}
	if so.StartStep+int64(so.Worker) < 0 || so.StartStep > d.Steps() {
		return nil, errcode.New(errcode.InvalidArgument, op, "", "start step %d of worker %d out of range [%d, %d]",
			so.StartStep, so.Worker, -so.Worker, d.Steps())
	}
	if so.ShareSteps {
		own, err := newOwners(ctx, l.table, int64(so.Worker), int64(k))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		steps := workerSteps(so.StartStep, d.Steps(), 0, 1, 1)
		return l.stepStream(ctx, so.Epoch, d, steps, so.CoalesceBytes, own, prev)
	}
	steps := workerSteps(so.StartStep, d.Steps(), int64(so.Worker), int64(k), int64(max(so.Run, 1)))
	return l.stepStream(ctx, so.Epoch, d, steps, so.CoalesceBytes, nil, prev)
}

// stepStream starts producing this rank's batches of steps, steps of epoch
// (whose dealing order is d) in [0, d.Steps()), in that order: each once,
// in any order a consumer asks for (a Stream's worker turns, a Mixture's
// draws). own, if not nil, keeps the rows of one of the workers sharing the
// steps (StreamOptions.ShareSteps). prev is nil, or as streamAfter says.
func (l *Loader) stepStream(ctx context.Context, epoch int64, d dealer, steps []int64, coalesce int64, own *owners, prev *Stream) (*Stream, error) {
	order := l.EpochOrder(epoch)
	// The sizes of rows are guessed from the first the stream deals, or the
	// epoch's first when the rank's first step has none.
	first, err := order.RowIDs(ctx, 0, 1)
	if err != nil {
		return nil, err
	}
	if len(steps) > 0 {
		ids, err := d.Batch(ctx, order, steps[0], l.opts.Rank)
		if err != nil {
			return nil, err
		}
		if len(ids) > 0 {
			first = ids
		}
	}
	m, err := l.shares(ctx, first[0], d.RankRows(), coalesce)
	if err != nil {
		return nil, err
	}
	r, err := l.table.NewReader(table.ReaderOptions{Columns: l.opts.Columns, Allocator: l.opts.Allocator,
		MaxReads: l.opts.MaxReads, FetchBytes: m.Fetch, Decoders: m.Decoders, DecodeBytes: m.Decoding,
		PageBytes: l.opts.MemoryBudget})
	if err != nil {
		return nil, err
	}
	layout, err := l.table.PageLayout(ctx)
	if err != nil {
		return nil, err
	}
	budget, slots, ahead := table.NewBudget(m.Kept), make(chan struct{}, l.opts.ReadAhead), newAheadBudget(m.ReadAhead)
	if prev != nil {
		budget, slots, ahead = prev.budget, prev.slots, prev.ahead
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &Stream{cancel: cancel, uri: l.table.URI(), layout: layout, reader: r, budget: budget, limit: l.opts.MemoryBudget, slots: slots, ahead: ahead, step: m.StepBytes, fetch: m.Fetch,
		deal: d, order: order, rank: l.opts.Rank, large: map[int64]int64{},
		decoded: make(chan struct{}), finished: make(chan struct{}),
		horizons: make(chan *horizon, 1), pending: make(chan chan result, l.opts.ReadAhead)}
	s.wg.Add(2)
	go s.plan(ctx, l, steps, coalesce, own)
	var after <-chan struct{}
	if prev != nil {
		after = prev.finished
	}
	go s.produce(ctx, after)
	return s, nil
}

// batch is one batch of a horizon: steps, whose rows are positions
// [from, to) of the horizon's kept rows.
type batch struct {
	steps    []int64
	from, to int
}

// horizon is a run of the worker's steps and the rows kept for them; it is
// closed once its last batch has been read.
type horizon struct {
	kept    *table.Kept
	ids     []uint64 // of the kept rows, in order
	places  []Place  // of the kept rows when workers share steps, Step counting from their batch's first
	batches []batch
	left    atomic.Int64 // batches not read yet
	err     error        // the planner's, in place of any batch
}

// plan lays out the worker's steps as horizons, each as many steps as the
// memory budget keeps rows for (the first ones fewer: horizon.go),
// keeps their rows (table.Reader.Keep) and
// hands them to produce in order. It plans a horizon as soon as produce has
// taken the one before, so that the next horizon's rows are decoded while
// the one before is read, as fast as the budget frees room for them. Once
// the last horizon's rows are decoded it closes decoded. With own, it keeps
// only the rows own deals, and their places.
func (s *Stream) plan(ctx context.Context, l *Loader, steps []int64, coalesce int64, own *owners) (err error) {
	defer func() {
		if err != nil {
			select {
			case s.horizons <- &horizon{err: err}:
			case <-ctx.Done():
			}
		}
		close(s.horizons)
		s.wg.Done()
	}()
	defer errcode.Recover(&err, errcode.Internal, "plan", l.table.URI())
	var last *table.Kept
	var seen []uint64 // horizonEnd's, and the rows of a page it assumes
	perPage := uint64(max(s.layout.Rows, 1))
	// The most steps the next horizon may take: on a remote store one at
	// first, doubling while its reads are slow (horizon.go).
	ramp := len(steps)
	if l.table.Remote() {
		ramp = 1
	}
	for len(steps) > 0 {
		t, err := s.take(ctx, l, steps[:min(len(steps), ramp)], own)
		if err != nil {
			return err
		}
		if ramp < len(steps) {
			lat, known := l.table.ReadLatency()
			ramp = nextRamp(ramp, len(steps), int64(len(t.ids)), int64(perPage), l.table.NumRows(), known && lat < rampLatency)
		}
		if t.full { // not the last: end it where fewest pages are decoded twice
			if seen == nil {
				seen = make([]uint64, uint64(l.table.NumRows())/perPage/64+1)
			}
			t.cut(horizonEnd(t.ids, t.ends, perPage, seen))
		}
		kept, err := s.reader.Keep(ctx, t.ids, s.budget)
		if err != nil {
			return err
		}
		last = kept
		s.mu.Lock()
		s.kepts = append(s.kepts, kept)
		s.mu.Unlock()
		h := s.horizonOf(l, kept, t, steps, coalesce, own)
		select {
		case s.horizons <- h:
		case <-ctx.Done():
			return nil
		}
		s.horizon.Store(int64(len(t.ends)))
		s.planned.Add(1)
		steps = steps[len(t.ends):]
	}
	if last != nil && last.Built(ctx) != nil {
		return nil // canceled
	}
	close(s.decoded)
	return nil
}

// taken is the rows of the steps a horizon takes: ends[i] is where step
// i's rows end in ids (and places, with owners); rowBytes is the guessed
// bytes of a row, from the first; full says the budget, not the ramp or the
// steps, ended them.
type taken struct {
	ids      []uint64
	places   []Place
	ends     []int
	rowBytes int64
	full     bool
}

// cut keeps the first n steps.
func (t *taken) cut(n int) {
	t.ids, t.ends = t.ids[:t.ends[n-1]], t.ends[:n]
	if t.places != nil {
		t.places = t.places[:len(t.ids)]
	}
}

// take takes steps, in order, while their rows fit the budget, at least
// one. rowBytes is guessed from the first row: a step of a grouped deal or
// of token budgets may give this rank none. Beside their rows at rowBytes
// each, the steps are charged the bytes of the large pages their rows need
// (table.LargeRows).
func (s *Stream) take(ctx context.Context, l *Loader, steps []int64, own *owners) (taken, error) {
	var t taken
	var large int64
	counted := map[table.LargePage]bool{}
	for len(t.ends) < len(steps) {
		more, err := s.deal.Batch(ctx, s.order, steps[len(t.ends)], s.rank)
		if err != nil {
			return t, err
		}
		var placed []Place
		if own != nil {
			if err := s.noteLarge(ctx, steps[len(t.ends)], more); err != nil {
				return t, err
			}
			more, placed = own.keep(more, int32(len(t.ends)))
		}
		if t.rowBytes == 0 && len(more) > 0 {
			groups, err := s.reader.Groups(more[:1])
			if err != nil {
				return t, err
			}
			if t.rowBytes, err = s.reader.GuessRowBytes(ctx, groups[0]); err != nil {
				return t, err
			}
		}
		extra, err := s.reader.LargeRows(ctx, more, counted)
		if err != nil {
			return t, err
		}
		if len(t.ends) > 0 && int64(len(t.ids)+len(more))*t.rowBytes+large+extra > s.budget.Limit() {
			t.full = true
			break
		}
		large += extra
		if t.ids == nil && len(more) > 0 {
			// Room for the rows the horizon will take, as far as the
			// first step tells: growing by doubling copied a table-wide
			// horizon's ids several times over, in fresh memory, and
			// the collector spun waiting for each copy to end.
			fit := s.budget.Limit()/max(t.rowBytes, 1)/int64(len(more)) + 1
			t.ids = make([]uint64, 0, min(int64(len(steps)), fit)*int64(len(more)))
			if own != nil {
				t.places = make([]Place, 0, cap(t.ids))
			}
		}
		t.ids = append(t.ids, more...)
		t.places = append(t.places, placed...)
		t.ends = append(t.ends, len(t.ids))
	}
	if own != nil && t.places == nil {
		t.places = []Place{} // a shared stream's batches have places, also when it deals none of their rows
	}
	return t, nil
}

// horizonOf lays out the horizon of the steps t took, the first of steps,
// whose rows kept holds, as batches: one step each, or as many as fit
// coalesce bytes. Steps of a grouped deal vary in size and go one by one,
// so that a batch's rows say its step's.
func (s *Stream) horizonOf(l *Loader, kept *table.Kept, t taken, steps []int64, coalesce int64, own *owners) *horizon {
	h := &horizon{kept: kept, ids: t.ids, places: t.places}
	per := 1
	if coalesce > 0 && !l.deal.Grouped {
		rows := l.RankBatchSize()
		if own != nil {
			rows = (rows + own.k - 1) / own.k
		}
		per = int(min(max(coalesce/max(t.rowBytes*rows, 1), 1), MaxCoalescedSteps))
	}
	n, from := len(t.ends), 0
	for i := 0; i < n; i += per {
		j := min(i+per, n)
		h.batches = append(h.batches, batch{steps: steps[i:j], from: from, to: t.ends[j-1]})
		if own != nil { // places count steps from the horizon's first until now
			for k := from; k < t.ends[j-1]; k++ {
				t.places[k].Step -= int32(i)
			}
		}
		from = t.ends[j-1]
	}
	h.left.Store(int64(len(h.batches)))
	return h
}

// produce starts one read per batch, at most ReadAhead at a time (the
// capacity of pending), and hands them to Next in step order. The planner's
// error, or a panic here, takes the place of the next batch. It starts none
// before after is closed, if not nil. Once every read has started and the
// planner has decoded every row, it closes finished: the stream fetches,
// decodes and takes read-ahead slots no more.
func (s *Stream) produce(ctx context.Context, after <-chan struct{}) (err error) {
	defer func() {
		if err != nil {
			ch := make(chan result, 1)
			ch <- result{err: err}
			s.ready.Add(1)
			s.enqueue(ctx, ch)
		}
		close(s.pending)
		s.wg.Done()
	}()
	defer errcode.Recover(&err, errcode.Internal, "read ahead", s.uri)
	if after != nil {
		select {
		case <-after:
		case <-ctx.Done():
			return nil
		}
	}
	for h := range s.horizons {
		if h.err != nil {
			return h.err
		}
		for _, b := range h.batches {
			ch := make(chan result, 1)
			if !s.enqueue(ctx, ch) {
				return nil
			}
			s.wg.Add(1)
			go s.read(ctx, h, b, s.ahead.take(), ch)
		}
	}
	select {
	case <-s.decoded:
		close(s.finished)
	case <-ctx.Done():
	}
	return nil
}

// enqueue hands ch to Next in turn once a read-ahead slot is free, and
// reports whether it did before ctx ended. Next frees the slot when it takes
// the batch.
func (s *Stream) enqueue(ctx context.Context, ch chan result) bool {
	select {
	case s.slots <- struct{}{}:
	case <-ctx.Done():
		return false
	}
	select {
	case s.pending <- ch:
		return true
	case <-ctx.Done():
		<-s.slots
		return false
	}
}

// read makes batch b of h and sends it on ch; a panic becomes the result's
// error. Once the batch's rows are kept it waits for turn, and room for
// them among the batches read ahead (aheadBudget), before it assembles them.
// The last batch of a horizon closes it.
func (s *Stream) read(ctx context.Context, h *horizon, b batch, turn uint64, ch chan<- result) (res result) {
	defer func() {
		if res.ahead == 0 {
			s.ahead.pass(turn)
		}
		s.ready.Add(1)
		ch <- res
		if h.left.Add(-1) == 0 {
			s.closeKept(h.kept)
		}
		s.wg.Done()
	}()
	defer errcode.Recover(&res.err, errcode.Internal, fmt.Sprintf("read step %d of", b.steps[0]), s.uri)
	n, largest, size, err := h.kept.Bytes(ctx, b.from, b.to)
	if err != nil {
		return result{err: s.tooLarge(err, b)}
	}
	if err := s.fits(n, largest, size, h, b); err != nil {
		return result{err: err}
	}
	s.reader.NoteRow(size)
	if err := s.ahead.admit(ctx, turn, n); err != nil {
		return result{err: err}
	}
	res.ahead = n
	rec, err := h.kept.Read(ctx, b.from, b.to)
	if err != nil {
		s.ahead.release(n)
		return result{err: err}
	}
	out := Batch{Step: b.steps[0], Steps: len(b.steps), Record: rec, RowIDs: h.ids[b.from:b.to:b.to]}
	if h.places != nil {
		out.Places = h.places[b.from:b.to:b.to]
	}
	return result{batch: out, ahead: n}
}

// fits refuses batch b of h, whose rows hold n bytes, the largest at
// position largest with size, if it alone holds more than the memory
// budget: its rows are as large as they are, and a batch the budget cannot
// hold is an error that names its step, its largest row and their sizes,
// never an overrun nobody is told of. It is refused before it is
// assembled.
func (s *Stream) fits(n int64, largest int, size int64, h *horizon, b batch) error {
	if n <= s.limit {
		return nil
	}
	return errcode.New(errcode.InvalidArgument, "read", s.uri,
		"%s %d bytes of this rank in %d rows, more than memory_budget %d bytes; the largest row, row id %d, holds %d:"+
			" raise memory_budget above %d, or read fewer columns or smaller steps, or leave rows that large out with a filter",
		stepsHold(b), n, b.to-b.from, s.limit, h.ids[largest], size, n)
}

// stepsHold names batch b's steps, as the subject of "hold".
func stepsHold(b batch) string {
	if len(b.steps) > 1 {
		return fmt.Sprintf("steps %d to %d hold", b.steps[0], b.steps[len(b.steps)-1])
	}
	return fmt.Sprintf("step %d holds", b.steps[0])
}

// tooLarge names, in err, batch b's step, where err refuses a row of it
// in a page too large to decode within the memory budget
// (table.PageTooLarge): the row's page was not fetched.
func (s *Stream) tooLarge(err error, b batch) error {
	var big *table.PageTooLarge
	if !errors.As(err, &big) {
		return err
	}
	what := fmt.Sprintf("%s row id %d, which lies in", stepsHold(b), big.Row)
	if big.Rows == 0 {
		what = strings.Replace(stepsHold(b), "hold", "need", 1) + " rows of"
	}
	return errcode.New(errcode.InvalidArgument, "read", s.uri,
		"%s %s, more than memory_budget %d bytes: the page cannot be decoded within the budget;"+
			" raise memory_budget above %d, or leave rows that large out with a filter",
		what, big.Where(), s.limit, big.Bytes)
}

// closeKept closes a horizon's kept rows once.
func (s *Stream) closeKept(k *table.Kept) {
	s.mu.Lock()
	i := slices.Index(s.kepts, k)
	if i >= 0 {
		s.kepts = slices.Delete(s.kepts, i, i+1)
	}
	s.mu.Unlock()
	if i >= 0 {
		k.Close()
	}
}

// Next returns the next batch, or io.EOF after the last one. If ctx ends
// first, Next returns its error and a later Next returns the same step.
func (s *Stream) Next(ctx context.Context) (Batch, error) {
	if s.err != nil {
		return Batch{}, s.err
	}
	if err := ctx.Err(); err != nil {
		return Batch{}, err
	}
	s.takeBack()
	if s.waiting == nil {
		select {
		case c, ok := <-s.pending:
			if !ok {
				s.err = io.EOF
				return Batch{}, s.err
			}
			s.waiting = c
		case <-ctx.Done():
			return Batch{}, ctx.Err()
		}
	}
	var res result
	select {
	case res = <-s.waiting:
	default:
		start := time.Now()
		select {
		case res = <-s.waiting:
		case <-ctx.Done():
			s.stall.Add(int64(time.Since(start)))
			return Batch{}, ctx.Err()
		}
		s.stall.Add(int64(time.Since(start)))
	}
	s.waiting = nil
	<-s.slots
	s.handOut(res.ahead)
	s.ready.Add(-1)
	if res.err != nil {
		s.err = res.err
		s.cancel()
		return res.batch, res.err
	}
	s.rows.Add(res.batch.Record.NumRows())
	s.steps.Add(int64(res.batch.Steps))
	s.forgetLarge(res.batch.Step, res.batch.Step+int64(res.batch.Steps))
	return res.batch, nil
}

// handOut gives back the read-ahead bytes of a batch Next hands over, n,
// but for a batch larger than the whole read-ahead share: that one counts
// until the consumer asks for the next batch (or closes the stream), so that
// nothing else is read ahead while it is out. A step that holds a row
// hundreds of times the mean is held by the consumer (and converted, to
// torch or numpy) as it is: reading the next such step ahead beside it held
// two of them, and their copies, where the budget had room for none.
func (s *Stream) handOut(n int64) {
	if n > s.ahead.limit {
		s.out = n
		return
	}
	s.ahead.release(n)
}

// takeBack gives back what the batch Next returned last still counts
// (handOut): the consumer is done with it.
func (s *Stream) takeBack() {
	s.ahead.release(s.out)
	s.out = 0
}

// All iterates over the remaining batches. Iteration stops at the first error,
// which it yields.
func (s *Stream) All(ctx context.Context) iter.Seq2[Batch, error] { return all(ctx, s.Next) }

// all iterates over the batches next returns until io.EOF, or its first
// error, which it yields.
func all(ctx context.Context, next func(context.Context) (Batch, error)) iter.Seq2[Batch, error] {
	return func(yield func(Batch, error) bool) {
		for {
			b, err := next(ctx)
			if err == io.EOF {
				return
			}
			if !yield(b, err) || err != nil {
				return
			}
		}
	}
}

// Close stops the stream, waits for its goroutines and frees what it holds,
// including batches read ahead but not yet returned.
func (s *Stream) Close() error {
	s.cancel()
	s.takeBack()
	// Drain: reads in flight finish (canceled) and their batches are freed.
	drain := func(ch chan result) {
		res := <-ch
		if res.batch.Record != nil {
			res.batch.Record.Release()
		}
		s.ahead.release(res.ahead)
		<-s.slots
	}
	if s.waiting != nil {
		drain(s.waiting)
		s.waiting = nil
	}
	for ch := range s.pending {
		drain(ch)
	}
	s.wg.Wait()
	for _, k := range slices.Clone(s.kepts) {
		s.closeKept(k)
	}
	if s.err == nil {
		s.err = errcode.New(errcode.Closed, "next", "", "stream is closed")
	}
	return s.reader.Close()
}
