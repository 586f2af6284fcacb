package table

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/croupier-data/croupier/core/errcode"
)

// Keeping rows, not row groups.
//
// A row group is the smallest unit the reader decodes. A reader that kept
// whole decoded row groups around until their rows were dealt could hold a
// table that fits its memory, and no more: once the table is N times larger,
// a shuffled order evicts each row group long before its next row comes up,
// and every row costs the decode of a whole row group. But the order is
// known in advance. Keep takes the row ids of a horizon (the next steps a
// stream will deal, as many as its memory allows), decodes each row group
// they touch once, copies out just the rows the horizon names (a piece), and
// drops the rest of the group at once. A full shuffle of a table N times the
// memory given to kept rows then decodes each row group about N times an
// epoch, instead of once per row it holds.
//
// Pieces are built in the order their rows are first needed, so the first
// positions of a horizon can be read before the whole horizon is decoded,
// and each piece is freed as soon as every position that takes a row from it
// has been read.

// Kept holds, for a list of row ids, the rows of each row group they touch,
// as Keep decodes them. Read hands out rows by position in that list; each
// position once. It is safe for concurrent use; Close it when done.
type Kept struct {
	r      *Reader
	budget *Budget
	seq    uint64 // in budget: Kepts made earlier have lower numbers
	// Of each position, the index in pieces of the piece holding its row,
	// and that row's index among the piece's rows: set as the piece is
	// built, read once it is done.
	of      []int32
	rows    []int32
	pieces  []*piece
	started int   // pieces build has started; build's own
	prio    int64 // the priority of the first piece; the next ones' follow
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	mu sync.Mutex // guards pieces' rec, bytes and left after they are built
	// The positions whose rows lie in pages too large to decode, and why;
	// set before their piece is built.
	refused map[int32]error
}

// piece is the kept rows of one row group.
type piece struct {
	key   GroupRef
	start int64    // the row id of the group's first row
	sel   []uint64 // row offsets in the group << 32 | position, ascending; nil once built
	done  chan struct{}
	rec   arrow.RecordBatch // the rows of sel, in that order; nil once freed
	err   error
	// bytes charged to the budget: guessed when admitted, the record's once
	// built, 0 once freed.
	bytes int64
	left  int // positions that take a row from the piece and are not read yet
	// refused is why rows of the piece were taken out of it (Kept.refuse),
	// if any were.
	refused error
	large   bool // it keeps a row of a large page: its rows are not in GuessRowBytes's mean

}

// maxKeep bounds the ids of one Keep: positions and rows in a row group are
// packed into 32 bits each.
const maxKeep = 1<<31 - 1

// Keep starts decoding the row groups that hold ids, keeping of each only the
// rows ids name, and returns at once. Row groups are decoded in the order ids
// first need them, with as many fetched ahead as the reader allows. When
// budget is not nil, each piece is admitted to it before its row group is
// fetched (see Budget); sets sharing a budget must be read in the order they
// were made. An id outside the table is an error.
func (r *Reader) Keep(ctx context.Context, ids []uint64, budget *Budget) (*Kept, error) {
	if len(ids) > maxKeep {
		return nil, errcode.New(errcode.InvalidArgument, "read", r.t.pin.URI, "%d row ids in one read; at most %d", len(ids), maxKeep)
	}
	keys, starts, of, err := r.locate(ids)
	if err != nil {
		return nil, err
	}
	// Bucket the positions by piece (a counting sort). Each piece's rows
	// are then ordered by their offset in the group, so that building it
	// copies runs of rows, as it is built: by the decoders, side by side,
	// the first pieces while later ones wait.
	start := make([]int, len(keys)+1)
	for _, k := range of {
		start[k+1]++
	}
	for k := range keys {
		start[k+1] += start[k]
	}
	sel := make([]uint64, len(ids))
	fill := slices.Clone(start[:len(keys)])
	for pos, id := range ids {
		k := of[pos]
		row := int64(id) - starts[k]
		if row >= 1<<32 {
			return nil, errcode.New(errcode.Corrupt, "read", r.t.pin.URI, "row group %d of file %d holds more than 2^32 rows", keys[k].Group, keys[k].File)
		}
		sel[fill[k]] = uint64(row)<<32 | uint64(pos)
		fill[k]++
	}
	k := &Kept{r: r, budget: budget, of: of, rows: make([]int32, len(ids)), pieces: make([]*piece, len(keys))}
	for i, key := range keys {
		p := &piece{key: key, start: starts[i], sel: sel[start[i]:start[i+1]], done: make(chan struct{})}
		p.left = len(p.sel)
		k.pieces[i] = p
	}
	if budget != nil {
		k.seq = budget.join()
	}
	ctx, k.cancel = context.WithCancel(ctx)
	k.prio = r.planned.Add(int64(len(k.pieces))) - int64(len(k.pieces))
	if r.t.loc.Cache != nil && r.t.Remote() {
		k.wg.Add(1)
		// A copy: the pieces order their rows in place as they are built.
		go k.warm(ctx, slices.Clone(sel), start)
	}
	k.wg.Add(1)
	go k.build(ctx)
	return k, nil
}

// sortByRow orders sel, a piece's row offsets in a group of rows rows << 32
// | positions, filled in ascending positions, by row offset, positions of a
// row in order. A piece that keeps a good part of its group is counted into
// place, in time linear in both; comparison sorting the rows of a
// table-wide horizon of 2 million took 140 ms of the 400 before its first
// batch.
func sortByRow(sel []uint64, rows int64) {
	if int64(len(sel))*8 < rows {
		slices.Sort(sel)
		return
	}
	at := make([]int32, rows+1) // where each row's entries go
	for _, v := range sel {
		at[v>>32+1]++
	}
	for i := range rows {
		at[i+1] += at[i]
	}
	out := make([]uint64, len(sel))
	for _, v := range sel {
		out[at[v>>32]] = v
		at[v>>32]++
	}
	copy(sel, out)
}

// Len is the number of positions.
func (k *Kept) Len() int { return len(k.of) }

// build decodes the pieces in order, at most r.maxReads row groups fetched
// or waiting for a core at a time: requests and decoding have bounds of their
// own, and a batch that needs many row groups from a distant store must not
// wait a round trip for every two of them. Should it stop early, the pieces
// it has not started end with its error.
func (k *Kept) build(ctx context.Context) (err error) {
	defer k.wg.Done()
	defer func() {
		if err != nil {
			k.fail(k.pieces[k.started:], err)
		}
		if k.budget != nil {
			k.budget.admitted(k.seq)
		}
	}()
	defer recoverTo(&err, "read", k.r.t.pin.URI)
	r := k.r
	prio := k.prio
	sem := make(chan struct{}, r.maxReads)
	if k.budget != nil {
		// Each piece's admission needs its file's footer: those not read
		// yet are read together, not a round trip per piece.
		files := make([]int, len(k.pieces))
		for i, p := range k.pieces {
			files[i] = p.key.File
		}
		if unread := r.t.unreadFooters(files); len(unread) > 0 {
			k.wg.Add(1)
			// A panic here is the pieces' to meet again, where they need
			// the footers.
			go func() (err error) {
				defer k.wg.Done()
				defer recoverTo(&err, "read", r.t.pin.URI)
				r.t.loadFooters(ctx, unread)
				return nil
			}()
		}
	}
	for i, p := range k.pieces {
		if k.budget != nil || r.pageLimit > 0 {
			n, err := r.pieceBytes(ctx, p, k.refuse)
			if err != nil {
				return err
			}
			if len(p.sel) == 0 { // every row refused
				k.started = i + 1
				k.finish(p, nil, p.refused)
				continue
			}
			if k.budget != nil {
				if err := k.budget.admit(ctx, k.seq, n); err != nil {
					return err
				}
				p.bytes = n
			}
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return errcode.Wrap(context.Cause(ctx), errcode.Canceled, "read", r.t.pin.URI)
		}
		k.started = i + 1
		k.wg.Add(1)
		go k.buildPiece(ctx, p, prio+int64(i), sem)
	}
	return nil
}

// fail ends the pieces not started with err, giving back what they were
// charged.
func (k *Kept) fail(pieces []*piece, err error) {
	for _, p := range pieces {
		k.finish(p, nil, err)
	}
}

// buildPiece decodes p's row group column by column (of each, only the
// pages that hold p's rows, where the file's offset index locates them),
// copying out p's rows of each column before the next is decoded, then frees
// a slot of sem.
func (k *Kept) buildPiece(ctx context.Context, p *piece, prio int64, sem <-chan struct{}) (rec arrow.RecordBatch, err error) {
	defer k.wg.Done()
	defer func() { <-sem }()
	defer func() { k.finish(p, rec, err) }()
	defer recoverTo(&err, "read", k.r.t.loc.ObjectURI(k.r.t.pin.Files[p.key.File].Key))
	r := k.r
	groupRows := r.t.pin.Files[p.key.File].RowGroups[p.key.Group]
	sortByRow(p.sel, groupRows)
	for j, v := range p.sel {
		k.rows[uint32(v)] = int32(j)
	}
	all := whole(p.sel, groupRows)
	var (
		w     wanted // p's rows, each once
		at    []span // where p's rows lie in a column of w.rows
		spans []span // where p's rows lie in a whole column
	)
	if all && r.pageLimit > 0 { // planned, so that each page is sized before it is decoded
		if w.plans, err = r.plan(ctx, p.key, nil); err != nil {
			return nil, err
		}
	}
	if !all {
		for _, v := range p.sel { // ascending rows, which may repeat
			row := int64(v >> 32)
			if n := len(w.rows); n == 0 || w.rows[n-1] != row {
				w.rows = append(w.rows, row)
			}
			at = appendSpan(at, 0, int64(len(w.rows)-1), 1)
			spans = appendSpan(spans, 0, row, 1)
		}
		if w.plans, err = r.plan(ctx, p.key, w.rows); err != nil {
			return nil, err
		}
		w.repeats = len(w.rows) != len(p.sel)
	}
	cols := make([]arrow.Array, r.schema.NumFields())
	defer func() {
		for _, c := range cols {
			if c != nil {
				c.Release()
			}
		}
	}()
	err = r.decode(ctx, p.key, prio, w, func(c int, col arrow.Array, kept bool) (err error) {
		if all || kept && len(w.rows) == len(p.sel) { // col is p's rows, in order
			col.Retain()
			cols[c] = col
			return nil
		}
		from := spans
		if kept {
			from = at
		}
		cols[c], err = r.gatherColumn(ctx, c, []arrow.Array{col}, from)
		return err
	})
	if err != nil {
		return nil, err
	}
	return array.NewRecordBatch(r.schema, cols, int64(len(p.sel))), nil
}

// finish records the outcome of p's build (its rows, or err), corrects what
// it was charged, and wakes its readers.
func (k *Kept) finish(p *piece, rec arrow.RecordBatch, err error) {
	k.mu.Lock()
	charged := p.bytes
	p.sel = nil
	if err != nil {
		if rec != nil {
			rec.Release()
		}
		p.err, p.bytes = err, 0
	} else {
		p.rec, p.bytes = rec, RecordBytes(rec)
		k.r.stats.keptRows.Add(rec.NumRows())
		k.r.stats.keptBytes.Add(p.bytes)
		if !p.large {
			k.r.typicalRows.Add(rec.NumRows())
			k.r.typicalBytes.Add(p.bytes)
		}
	}
	if k.budget != nil {
		k.budget.adjust(k.seq, p.bytes-charged)
	}
	k.mu.Unlock()
	close(p.done)
}

// whole reports whether sel takes each of a group's n rows once, in order.
func whole(sel []uint64, n int64) bool {
	if int64(len(sel)) != n {
		return false
	}
	for i, v := range sel {
		if v>>32 != uint64(i) {
			return false
		}
	}
	return true
}

// Read returns the rows at positions [from, to) as one record, waiting for
// the pieces that hold them. The caller releases it. Each position is read
// once: a piece is freed when the last position that takes a row from it
// has been read.
func (k *Kept) Read(ctx context.Context, from, to int) (arrow.RecordBatch, error) {
	if from < 0 || to > len(k.of) || from > to {
		return nil, errcode.New(errcode.InvalidArgument, "read", k.r.t.pin.URI, "positions [%d, %d) outside [0, %d)", from, to, len(k.of))
	}
	var (
		used   []int32 // pieces, in order of first use
		counts []int   // positions taken from each
		index  = map[int32]int{}
		spans  = make([]span, 0, 16)
	)
	last, src := int32(-1), 0
	for _, pi := range k.of[from:to] {
		if pi != last {
			i, ok := index[pi]
			if !ok {
				i = len(used)
				index[pi] = i
				used = append(used, pi)
				counts = append(counts, 0)
			}
			last, src = pi, i
		}
		counts[src]++
	}
	recs := make([]arrow.RecordBatch, len(used))
	defer func() {
		for _, rec := range recs {
			if rec != nil {
				rec.Release()
			}
		}
	}()
	for i, pi := range used {
		p := k.pieces[pi]
		select {
		case <-p.done:
		case <-ctx.Done():
			return nil, errcode.Wrap(context.Cause(ctx), errcode.Canceled, "read", k.r.t.pin.URI)
		}
		if p.err != nil {
			return nil, cmp.Or(k.refusedIn(from, to), p.err)
		}
		k.mu.Lock()
		if p.rec == nil {
			k.mu.Unlock()
			return nil, errcode.New(errcode.Internal, "read", k.r.t.pin.URI, "positions [%d, %d): row group %d of file %d was freed before all its rows were read", from, to, p.key.Group, p.key.File)
		}
		recs[i] = p.rec
		recs[i].Retain()
		k.mu.Unlock()
	}
	if err := k.refusedIn(from, to); err != nil {
		return nil, err
	}
	// The pieces are built: their rows' indices are set.
	last = -1
	for pos, pi := range k.of[from:to] {
		if pi != last {
			last, src = pi, index[pi]
		}
		spans = appendSpan(spans, src, int64(k.rows[from+pos]), 1)
	}
	out, err := k.r.assemble(ctx, recs, spans, int64(to-from))
	if err != nil {
		return nil, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for i, pi := range used {
		p := k.pieces[pi]
		if p.left -= counts[i]; p.left <= 0 {
			k.freeLocked(p)
		}
	}
	return out, nil
}

// Bytes waits for the pieces that hold the rows at positions [from, to) and
// returns the bytes of their values, each row counted as LargestRow counts
// it, and the position of the largest row and its bytes: what a record of
// those rows will hold, before Read assembles it.
func (k *Kept) Bytes(ctx context.Context, from, to int) (n int64, largest int, largestBytes int64, err error) {
	if from < 0 || to > len(k.of) || from > to {
		return 0, 0, 0, errcode.New(errcode.InvalidArgument, "read", k.r.t.pin.URI, "positions [%d, %d) outside [0, %d)", from, to, len(k.of))
	}
	var rec arrow.RecordBatch
	last := int32(-1)
	largest = from
	for pos := from; pos < to; pos++ {
		if pi := k.of[pos]; pi != last {
			p := k.pieces[pi]
			select {
			case <-p.done:
			case <-ctx.Done():
				return 0, 0, 0, errcode.Wrap(context.Cause(ctx), errcode.Canceled, "read", k.r.t.pin.URI)
			}
			if p.err != nil {
				return 0, 0, 0, cmp.Or(k.refusedIn(from, to), p.err)
			}
			k.mu.Lock()
			rec = p.rec // not freed: positions of it are still to be read
			k.mu.Unlock()
			if rec == nil {
				return 0, 0, 0, errcode.New(errcode.Internal, "read", k.r.t.pin.URI, "positions [%d, %d): row group %d of file %d was freed before all its rows were read", from, to, p.key.Group, p.key.File)
			}
			last = pi
		}
		row := int64(k.rows[pos]) // not set for a refused row: see below
		var b int64
		for _, col := range rec.Columns() {
			b += rangeBytes(col, row, row+1)
		}
		if b > largestBytes {
			largest, largestBytes = pos, b
		}
		n += b
	}
	if err := k.refusedIn(from, to); err != nil {
		return 0, 0, 0, err
	}
	return n, largest, largestBytes, nil
}

// freeLocked frees a built piece's rows and gives back its bytes.
func (k *Kept) freeLocked(p *piece) {
	if p.rec != nil {
		p.rec.Release()
		p.rec = nil
	}
	if k.budget != nil && p.bytes > 0 {
		k.budget.release(k.seq, p.bytes)
	}
	p.bytes = 0
}

// Built waits until every piece is built or has failed: from then on k
// fetches and decodes nothing.
func (k *Kept) Built(ctx context.Context) error {
	for _, p := range k.pieces {
		select {
		case <-p.done:
		case <-ctx.Done():
			return errcode.Wrap(context.Cause(ctx), errcode.Canceled, "read", k.r.t.pin.URI)
		}
	}
	return nil
}

// Close stops the decoding still to do and frees every piece. Records Read
// returned stay valid.
func (k *Kept) Close() error {
	k.cancel()
	k.wg.Wait()
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, p := range k.pieces {
		k.freeLocked(p)
	}
	if k.budget != nil {
		k.budget.leave(k.seq)
	}
	return nil
}

// GuessRowBytes guesses the bytes a kept row of row group g takes: the
// mean of the rows kept so far but those of pieces that keep a row of a
// large page (charged beside the mean: see pieceBytes), or before any,
// GuessBytes per row of the group less its large pages and their rows.
// Counted in, the large pages made each of a piece's rows as large as the
// group's mean, beside the pages charged whole: a piece of a few hundred
// rows admitted before any other was built was charged 50 MB more than it
// kept.
func (r *Reader) GuessRowBytes(ctx context.Context, g GroupRef) (int64, error) {
	if rows := r.typicalRows.Load(); rows > 0 {
		return max(r.typicalBytes.Load()/rows, 1), nil
	}
	n, _, err := r.GuessBytes(ctx, g)
	if err != nil {
		return 0, err
	}
	rows := r.t.pin.Files[g.File].RowGroups[g.Group]
	pages, err := r.largePages(ctx, g)
	if err != nil {
		return 0, err
	}
	for _, lp := range pages {
		if !lp.dict {
			n, rows = n-lp.bytes, rows-(lp.to-lp.from)
		}
	}
	return max(n/max(rows, 1), 1), nil
}

// A rare row far larger than its neighbours is not in a mean: a piece that
// keeps one row of 60 MB among thousands of 200 bytes was charged a few
// kilobytes, and the next horizon was admitted beside it. But such a row
// lies in a page of its own, or nearly: a writer ends a page once it passes
// its size, so no page of ordinary rows is more than a few times its
// neighbours, and the offset index (or the pages a read has located, in a
// file without one) says how large each page is and which rows it holds
// before anything is fetched. So a piece is charged its rows at the guess of
// a row, and beside them, whole, each large page it takes a row from: one
// whose rows average more than fatPage times its row group's mean row, in
// one column, at its stored bytes scaled by its chunk's decoded ÷ stored
// (largePages). The planner counts them too (LargeRows), so that a horizon
// ends before its large rows overrun the budget. A page that decodes to more
// than the reader's PageBytes cannot be read within the memory it bounds,
// and the rows that need it are refused before it is fetched (PageTooLarge);
// a column the page decoder does not handle is decoded a whole chunk at a
// time, and every row of the group needs each of its pages.

// fatPage is how many times the guessed bytes of a whole row a page's rows
// must average in one column for the page to be charged whole.
const fatPage = 4

// largePage is a page charged whole: rows [from, to) of its row group, of
// output column col, decoded to about bytes; whole when its column is
// decoded a whole chunk at a time, so that every row of the group needs it.
type largePage struct {
	from, to int64
	col      int
	bytes    int64
	whole    bool
	dict     bool // the chunk's dictionary page, which every row of the group needs
}

// largePages returns the pages of row group g charged whole: those whose
// rows average more than fatPage times the typical row in one column (its
// pages' median bytes a row, or the row group's mean row as its footer
// gives it, the smaller), and those larger than r.pageLimit. The pages of a
// local file without an offset index are located first by their headers,
// where its columns are flat (locatePages). Of a file without an offset index only
// the pages located so far are known; the answer is kept once every page
// of the group is.
func (r *Reader) largePages(ctx context.Context, g GroupRef) ([]largePage, error) {
	if v, ok := r.large.Load(g); ok {
		return v.([]largePage), nil
	}
	out, known, err := r.findLargePages(ctx, g, false)
	if err == nil && known {
		r.large.Store(g, out)
	}
	return out, err
}

// declaredLargePages is largePages as the files declare their pages: by
// the offset indexes of the group's chunks, and, of a local file's flat
// column without one, by its pages' headers (scanChunk), not by what reads
// have learnt. So it is the same answer for every reader of the table
// version with the same columns and page limit, in any process, at any time
// (Stream.RunEnd needs that).
func (r *Reader) declaredLargePages(ctx context.Context, g GroupRef) ([]largePage, error) {
	if v, ok := r.declaredLarge.Load(g); ok {
		return v.([]largePage), nil
	}
	out, _, err := r.findLargePages(ctx, g, true)
	if err == nil {
		r.declaredLarge.Store(g, out)
	}
	return out, err
}

// findLargePages returns the pages of row group g charged whole (see
// largePages), and whether every page of the group was known; declared
// takes only the pages the files declare (declaredLargePages).
func (r *Reader) findLargePages(ctx context.Context, g GroupRef, declared bool) ([]largePage, bool, error) {
	groupBytes, _, err := r.GuessBytes(ctx, g)
	if err != nil {
		return nil, false, err
	}
	rows := r.t.pin.Files[g.File].RowGroups[g.Group]
	mean := max(groupBytes/max(rows, 1), 1)
	md, err := r.t.Footer(ctx, g.File)
	if err != nil {
		return nil, false, err
	}
	var cols, leaves []int // every projected leaf, and its output column
	for c, ls := range r.leaves {
		for _, leaf := range ls {
			cols, leaves = append(cols, c), append(leaves, leaf)
		}
	}
	locs, err := r.t.pages(ctx, g.File, g.Group, leaves)
	if err != nil {
		return nil, false, err
	}
	if !declared {
		if err := r.locatePages(ctx, g.File, g.Group, leaves, locs); err != nil {
			return nil, false, err
		}
	}
	var out []largePage
	known := true
	for i, l := range locs {
		chunk, err := md.RowGroup(g.Group).ColumnChunk(leaves[i])
		if err != nil {
			return nil, false, errcode.Wrap(err, errcode.Corrupt, "read", r.t.loc.ObjectURI(r.t.pin.Files[g.File].Key))
		}
		if declared && !hasOffsetIndex(chunk) {
			// Only what the file says of itself, not what reads learnt:
			// the headers of its pages, where a local flat column's add up.
			if l, err = r.scanChunk(ctx, g.File, g.Group, leaves[i]); err != nil {
				return nil, false, err
			}
		}
		if l == nil || l.partial() {
			known = false
			if l == nil {
				continue
			}
		}
		stored, decoded := chunk.TotalCompressedSize(), chunk.TotalUncompressedSize()
		if stored <= 0 {
			continue
		}
		// A column the page decoder does not handle is decoded a whole
		// chunk at a time: each of its pages, whichever rows are kept.
		whole := len(r.leaves[cols[i]]) != 1 || fastColumn(r.schema.Field(cols[i]), md.Schema.Column(leaves[i]), chunk) == notFast
		scale := func(size int64) int64 { return int64(float64(size) * float64(decoded) / float64(stored)) }
		// The typical row of the column: its pages' median bytes a row
		// (the mean, over the group, counts the large rows in).
		density := make([]float64, len(l.size))
		for pg, size := range l.size {
			density[pg] = float64(scale(size)) / float64(max(l.first[pg+1]-l.first[pg], 1))
		}
		slices.Sort(density)
		typical := mean
		if len(density) > 0 {
			typical = min(typical, max(int64(density[len(density)/2]), 1))
		}
		for pg, size := range l.size {
			from, to := l.first[pg], l.first[pg+1]
			bytes := scale(size)
			if bytes > fatPage*typical*max(to-from, 1) || r.pageLimit > 0 && bytes > r.pageLimit {
				out = append(out, largePage{from: from, to: to, col: cols[i], bytes: bytes, whole: whole})
			}
		}
		// A dictionary page is decoded for every row of the group, by
		// every piece that keeps one: it is charged whole to each, like a
		// page decoded whole, when it decodes to more than fatPage times
		// the column's median page (a dictionary of a column of large
		// values, which holds some of them: 121 MB in a file of pyarrow's
		// whose pages were a megabyte), and refused when it alone is more
		// than a read may hold.
		if dict := dictionaryOffset(chunk); dict >= 0 && len(l.off) > 0 {
			pages := make([]int64, len(l.size))
			for pg, size := range l.size {
				pages[pg] = scale(size)
			}
			slices.Sort(pages)
			bytes := scale(l.off[0] - dict)
			if len(pages) > 0 && bytes > fatPage*pages[len(pages)/2] || r.pageLimit > 0 && bytes > r.pageLimit {
				out = append(out, largePage{from: 0, to: rows, col: cols[i], bytes: bytes, whole: true, dict: true})
			}
		}
	}
	return out, known, nil
}

// pieceBytes returns what piece p is charged when admitted to a budget: its
// rows at GuessRowBytes each, and, whole, each large page (largePages) that
// holds one of them. The rows that need a page that decodes to more than
// r.pageLimit (every row of the group, where its column is decoded a whole
// chunk at a time) are handed to refuse, and not charged.
func (r *Reader) pieceBytes(ctx context.Context, p *piece, refuse func(p *piece, from, to int64, page PageTooLarge)) (int64, error) {
	guess, err := r.GuessRowBytes(ctx, p.key)
	if err != nil {
		return 0, err
	}
	n := guess * int64(len(p.sel))
	pages, err := r.largePages(ctx, p.key)
	if err != nil {
		return 0, err
	}
	for _, lp := range pages {
		if !lp.whole && !takes(p.sel, lp.from, lp.to) {
			continue
		}
		if r.pageLimit > 0 && lp.bytes > r.pageLimit {
			from, to := lp.from, lp.to
			if lp.whole {
				from, to = 0, r.t.pin.Files[p.key.File].RowGroups[p.key.Group]
			}
			taken := int64(len(p.sel))
			refuse(p, from, to, PageTooLarge{First: uint64(p.start + lp.from), Rows: uint64(lp.to - lp.from),
				Column: r.schema.Field(lp.col).Name, Whole: lp.whole && !lp.dict, Dictionary: lp.dict, Bytes: lp.bytes, Limit: r.pageLimit})
			n -= guess * (taken - int64(len(p.sel)))
			continue
		}
		if takes(p.sel, lp.from, lp.to) { // else decoded, not kept: the decoding share's
			n += lp.bytes
			p.large = true
			r.stats.noteLarge(lp)
		}
	}
	return n, nil
}

// LargeRows returns the decoded bytes of the large pages (see pieceBytes)
// that rows ids need and seen does not hold, and adds them to seen: what a
// horizon that keeps ids needs beside its rows at the mean. A planner that
// counts them ends a horizon before its rows' large pages overrun the
// budget. On a remote store only row groups whose pages are known already
// are looked at: a planner waits for no request.
func (r *Reader) LargeRows(ctx context.Context, ids []uint64, seen map[LargePage]bool) (int64, error) {
	var n int64
	var pages []largePage
	last := -1
	for _, id := range ids {
		g := r.t.groupOf(int64(id))
		key := r.t.groups[g]
		if g != last {
			last, pages = g, nil
			if v, ok := r.large.Load(key); ok {
				pages = v.([]largePage)
			} else if !r.t.Remote() {
				var err error
				if pages, err = r.largePages(ctx, key); err != nil {
					return 0, err
				}
			}
		}
		row := int64(id) - r.t.groupStarts[g]
		for i, lp := range pages {
			if lp.dict {
				continue // held while a piece is decoded, not while its rows are kept
			}
			if lp.whole || row >= lp.from && row < lp.to {
				if k := (LargePage{key, i}); !seen[k] {
					seen[k] = true
					n += lp.bytes
				}
			}
		}
	}
	return n, nil
}

// DeclaredLargeBytes returns the decoded bytes of the pages far larger than
// the rest of their column that the rows ids need, each page once, as the
// files declare their pages (declaredLargePages): a step that takes one row
// of such a page is charged the whole page, whose other rows may be the
// large ones. The rows of chunks whose pages no file declares count
// nothing. Every reader of the table version with the same columns and page
// limit gives the same answer.
func (r *Reader) DeclaredLargeBytes(ctx context.Context, ids []uint64) (int64, error) {
	var n int64
	var pages []largePage
	seen := map[LargePage]bool{}
	last := -1
	for _, id := range ids {
		g := r.t.groupOf(int64(id))
		if g != last {
			var err error
			if pages, err = r.declaredLargePages(ctx, r.t.groups[g]); err != nil {
				return 0, err
			}
			last = g
		}
		row := int64(id) - r.t.groupStarts[g]
		for i, lp := range pages {
			if k := (LargePage{r.t.groups[g], i}); !lp.dict && row >= lp.from && row < lp.to && !seen[k] {
				seen[k] = true
				n += lp.bytes
			}
		}
	}
	return n, nil
}

// A LargePage names a large page of a row group, for LargeRows.
type LargePage struct {
	Group GroupRef
	Page  int
}

// refuse takes the rows of piece p at offsets [from, to) of its group, which
// need a page too large to decode, out of it: their positions are errors of
// why (page, with each position's row).
func (k *Kept) refuse(p *piece, from, to int64, page PageTooLarge) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.refused == nil {
		k.refused = map[int32]error{}
	}
	p.sel = slices.DeleteFunc(p.sel, func(v uint64) bool {
		row := int64(v >> 32)
		if row >= from && row < to {
			why := page
			why.Row = uint64(p.start + row)
			err := errcode.Wrap(&why, errcode.InvalidArgument, "read", k.r.t.pin.URI)
			k.refused[int32(uint32(v))] = err
			if p.refused == nil {
				p.refused = err
			}
			p.left--
			return true
		}
		return false
	})
}

// refusedIn returns the error of the first position in [from, to) whose row
// was refused, if any; the pieces of those positions are built.
func (k *Kept) refusedIn(from, to int) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.refused) == 0 {
		return nil
	}
	for pos := from; pos < to; pos++ {
		if err := k.refused[int32(pos)]; err != nil {
			return err
		}
	}
	return nil
}

// takes reports whether sel (row offsets << 32 | positions) holds a row in
// [from, to).
func takes(sel []uint64, from, to int64) bool {
	return slices.ContainsFunc(sel, func(v uint64) bool { return int64(v>>32) >= from && int64(v>>32) < to })
}

// PageTooLarge is why a read is refused whose row lies in a page that alone
// decodes to more than the reader's PageBytes: decoding it would hold more
// than the memory that bounds the read, whatever else is freed.
type PageTooLarge struct {
	Row         uint64 // the id of the row the read needs
	First, Rows uint64 // the id of the page's first row, and its rows; 0 rows: not known (see Where)
	Column      string
	// Whole is set when the column is decoded a whole column chunk at a
	// time (the page decoder does not handle its type): the row needs the
	// page whichever page the row is in.
	Whole bool
	// Dictionary is set when the page is the column chunk's dictionary,
	// which every row of the group needs.
	Dictionary bool
	Bytes      int64 // the page's, decoded, as its stored size and its chunk's ratio say
	Limit      int64 // the reader's PageBytes
}

// Where says where the row lies and how large the page is, after "row id
// N, which lies in".
func (e *PageTooLarge) Where() string {
	switch {
	case e.Rows == 0:
		return fmt.Sprintf("a row group whose column %q has a page (found as it was read, not by an offset index) that decodes to about %d bytes",
			e.Column, e.Bytes)
	case e.Dictionary:
		return fmt.Sprintf("a row group holding row ids %d to %d whose column %q has a dictionary page that decodes to about %d bytes",
			e.First, e.First+e.Rows-1, e.Column, e.Bytes)
	}
	where := fmt.Sprintf("a page of column %q", e.Column)
	if e.Whole {
		where = fmt.Sprintf("a row group whose column %q is decoded a whole column chunk at a time, with a page", e.Column)
	}
	return fmt.Sprintf("%s holding row ids %d to %d that decodes to about %d bytes", where, e.First, e.First+e.Rows-1, e.Bytes)
}

func (e *PageTooLarge) Error() string {
	if e.Rows == 0 {
		return fmt.Sprintf("rows of %s, more than %d", e.Where(), e.Limit)
	}
	return fmt.Sprintf("row id %d, which lies in %s, more than %d", e.Row, e.Where(), e.Limit)
}

// Budget bounds the bytes of rows that the Kept sets sharing it hold. A
// stream keeps rows for its next horizon while the one before is still being
// read, so pieces are admitted one by one: all of one Kept set's pieces
// before any of the next set's (sets in the order they were made), each when
// the budget has room for it or when no set made earlier holds anything. A
// set never waits on pieces of its own or of later sets, whose rows are read
// after its own: the wait always ends.
//
// Sizes are guessed when a piece is admitted and corrected once it is built,
// so the budget can be exceeded by the error of the guess; the guess is the
// mean bytes of the rows kept so far.
type Budget struct {
	limit int64

	mu      sync.Mutex
	used    int64
	peak    int64            // the most used at any time
	held    map[uint64]int64 // bytes held by each Kept set still open
	next    uint64           // the number of the last set made
	turn    uint64           // the set whose pieces are being admitted
	ended   map[uint64]bool  // sets after turn that admit no more pieces
	changed chan struct{}    // closed and replaced whenever used falls or turn moves
}

// NewBudget returns a budget of limit bytes.
func NewBudget(limit int64) *Budget {
	return &Budget{limit: limit, held: map[uint64]int64{}, ended: map[uint64]bool{}, turn: 1, changed: make(chan struct{})}
}

// Limit is the budget's size in bytes.
func (b *Budget) Limit() int64 { return b.limit }

// Used returns the bytes held now, and the most held at any time.
func (b *Budget) Used() (now, peak int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used, b.peak
}

func (b *Budget) join() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.next++
	b.held[b.next] = 0
	return b.next
}

// leave gives back what set seq holds, for good.
func (b *Budget) leave(seq uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= b.held[seq]
	delete(b.held, seq)
	b.signalLocked()
}

// admit waits until n more bytes of set seq fit.
func (b *Budget) admit(ctx context.Context, seq uint64, n int64) error {
	for {
		b.mu.Lock()
		if b.turn == seq && (b.used+n <= b.limit || !b.earlierHoldLocked(seq)) {
			b.addLocked(seq, n)
			b.mu.Unlock()
			return nil
		}
		changed := b.changed
		b.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return errcode.Wrap(context.Cause(ctx), errcode.Canceled, "read", "")
		}
	}
}

// admitted records that set seq admits no more pieces: once the sets before
// it have admitted theirs, the next set's turn. A set with no piece to admit
// (a horizon whose steps give the rank no rows) may end before the sets made
// earlier.
func (b *Budget) admitted(seq uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if seq < b.turn {
		return
	}
	b.ended[seq] = true
	for b.ended[b.turn] {
		delete(b.ended, b.turn)
		b.turn++
	}
	b.signalLocked()
}

// earlierHoldLocked reports whether a set made before seq holds bytes.
func (b *Budget) earlierHoldLocked(seq uint64) bool {
	for s, n := range b.held {
		if s < seq && n > 0 {
			return true
		}
	}
	return false
}

func (b *Budget) adjust(seq uint64, delta int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.addLocked(seq, delta)
	if delta < 0 {
		b.signalLocked()
	}
}

func (b *Budget) addLocked(seq uint64, n int64) {
	b.used += n
	b.held[seq] += n
	b.peak = max(b.peak, b.used)
}

func (b *Budget) release(seq uint64, n int64) { b.adjust(seq, -n) }

func (b *Budget) signalLocked() {
	close(b.changed)
	b.changed = make(chan struct{})
}

// LargestRow returns the row of rec whose values take the most bytes, and
// those bytes: a string's or a binary's bytes, a list's elements', a fixed
// width; offsets and validity bits are not counted.
func LargestRow(rec arrow.RecordBatch) (row int, bytes int64) {
	for i := range int(rec.NumRows()) {
		var n int64
		for _, col := range rec.Columns() {
			n += rangeBytes(col, int64(i), int64(i)+1)
		}
		if n > bytes || i == 0 {
			row, bytes = i, n
		}
	}
	return row, bytes
}

// rangeBytes is the bytes of the values of rows [from, to) of a.
func rangeBytes(a arrow.Array, from, to int64) int64 {
	if to <= from {
		return 0
	}
	switch a := a.(type) {
	case array.BinaryLike:
		return a.ValueOffset64(int(to-1)) + int64(a.ValueLen(int(to-1))) - a.ValueOffset64(int(from))
	case array.ListLike:
		start, _ := a.ValueOffsets(int(from))
		_, end := a.ValueOffsets(int(to - 1))
		return rangeBytes(a.ListValues(), start, end)
	case *array.Struct:
		var n int64
		for i := range a.NumField() {
			n += rangeBytes(a.Field(i), from, to)
		}
		return n
	case *array.Dictionary:
		return rangeBytes(a.Indices(), from, to)
	}
	if t, ok := a.DataType().(arrow.FixedWidthDataType); ok {
		return (to - from) * int64(max(t.BitWidth()/8, 1))
	}
	return 0
}

// RecordBytes is the size of a record's buffers, children included.
func RecordBytes(rec arrow.RecordBatch) int64 {
	var n int64
	for _, col := range rec.Columns() {
		n += dataBytes(col.Data())
	}
	return n
}

func dataBytes(d arrow.ArrayData) int64 {
	var n int64
	for _, b := range d.Buffers() {
		if b != nil {
			n += int64(b.Len())
		}
	}
	for _, c := range d.Children() {
		n += dataBytes(c)
	}
	if d.DataType().ID() == arrow.DICTIONARY {
		n += dataBytes(d.Dictionary())
	}
	return n
}
