package table

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/store"
	"github.com/croupier-data/croupier/core/table/internal/general"
)

// ReaderOptions configure a Reader.
type ReaderOptions struct {
	// Columns to read, in output order; nil reads every column.
	Columns []string
	// Allocator for every Arrow buffer the reader creates. Memory that leaves
	// through the C Data Interface must come from a C allocator (mallocator).
	Allocator memory.Allocator
	// MaxReads bounds the range requests in flight; 0 means the table's
	// default (Table.MaxReads). Requests sent to a remote store before
	// their bytes are taken (see FetchBytes) are bounded apart, to twice
	// MaxReads.
	MaxReads int
	// FetchBytes bounds the bytes fetched from the store and not yet decoded;
	// 0 means no bound. A row group whose sections are more than a decoder's
	// part of it (FetchBytes ÷ Decoders) is read as it is decoded, a window
	// of that part at a time. A row group within its part read from a remote
	// store, not through the disk cache, takes its bytes only once the store
	// has begun to answer its requests.
	FetchBytes int64
	// Decoders bounds the row groups decoded at once; 0 means one per core
	// (GOMAXPROCS).
	Decoders int
	// DecodeBytes bounds the bytes their decoded columns hold at once (a row
	// group is decoded a column at a time, and of a column only the pages
	// that hold the rows wanted, where the file's offset index locates them),
	// at sizes guessed from the footer; a row group larger than that decodes
	// alone. 0 means no bound.
	DecodeBytes int64
	// PageBytes refuses, before it is fetched, a page that a read needs and
	// that decodes to more than this many bytes, as its offset index (or the
	// pages located so far) and its chunk's compression ratio say: a
	// PageTooLarge error. 0 means no bound.
	PageBytes int64
}

// Reader reads rows of a table by row id with a column projection. It is safe
// for concurrent use.
type Reader struct {
	t      *Table
	schema *arrow.Schema // projected, in output order
	fields []int         // table field index of each output column
	leaves [][]int       // Parquet leaf columns of each output column
	mem    memory.Allocator

	reads *slots // one per range request in flight, granted to the row group needed soonest
	// answered is reads for the requests of row groups that send them
	// before they take their bytes of fetching (fetchOnAnswer): one pool
	// apart, so that a group holding bytes never waits for a slot that a
	// group waiting for bytes holds.
	answered *slots
	maxReads int
	// fetching bounds the bytes fetched and not yet decoded (nil: no
	// bound), granted to the row group needed soonest first: horizons are
	// planned while the one before is still being fetched, and a later
	// horizon's row groups must not take the room of the next batch's.
	fetching   *slots
	fetchLimit int64 // its size
	// fetchShare is a decoder's part of fetchLimit: a row group whose
	// sections are larger is read as it is decoded, a window of that part
	// at a time, so that every decoder can have a row group to decode.
	fetchShare  int64
	decoding    *slots       // one slot per row group being decoded
	sectionBufs bufferList   // the buffers decoders read sections of pages into
	planned     atomic.Int64 // row groups Keep asked for so far: the priority of the next
	pageLimit   int64        // ReaderOptions.PageBytes
	large       sync.Map     // GroupRef -> []largePage, once every page of the group is known
	// declaredLarge holds declaredLargePages' answers: GroupRef -> []largePage.
	declaredLarge sync.Map
	// The rows kept so far, and their bytes, but those of pieces that keep
	// a row of a large page: GuessRowBytes's mean.
	typicalRows, typicalBytes atomic.Int64
	stats                     readerStats
}

// NewReader returns a reader of the given columns.
func (t *Table) NewReader(opts ReaderOptions) (*Reader, error) {
	fields, err := t.fieldIndices(opts.Columns)
	if err != nil {
		return nil, err
	}
	outFields := make([]arrow.Field, len(fields))
	for i, f := range fields {
		outFields[i] = t.schema.Field(f)
	}
	leaves := make([][]int, len(fields))
	for i, f := range fields {
		if leaves[i], err = leafColumns(t.schema, []int{f}); err != nil {
			return nil, errcode.Wrap(err, errcode.Internal, "new reader", t.pin.URI)
		}
	}
	if general.Registered() == nil {
		if err := t.checkPageDecoded(outFields, leaves); err != nil {
			return nil, errcode.Wrap(err, errcode.InvalidArgument, "new reader", t.pin.URI)
		}
	}
	mem := opts.Allocator
	if mem == nil {
		mem = memory.DefaultAllocator
	}
	if opts.MaxReads <= 0 {
		opts.MaxReads = t.MaxReads()
	}
	if opts.Decoders <= 0 {
		opts.Decoders = runtime.GOMAXPROCS(0)
	}
	r := &Reader{t: t, schema: arrow.NewSchema(outFields, nil), fields: fields, leaves: leaves,
		mem: mem, reads: newSlots(opts.MaxReads, 0), answered: newSlots(answeredPerRead*opts.MaxReads, 0), maxReads: opts.MaxReads, decoding: newSlots(opts.Decoders, opts.DecodeBytes),
		sectionBufs: bufferList{max: opts.Decoders}, pageLimit: opts.PageBytes}
	if opts.DecodeBytes <= 0 {
		r.decoding = newSlots(opts.Decoders, math.MaxInt64)
	}
	if opts.FetchBytes > 0 {
		r.fetching, r.fetchLimit = newSlots(math.MaxInt, opts.FetchBytes), opts.FetchBytes
		r.fetchShare = max(opts.FetchBytes/int64(opts.Decoders), min(opts.FetchBytes, minWindow))
	}
	return r, nil
}

// fieldIndices resolves column names to field indices; nil means all.
func (t *Table) fieldIndices(columns []string) ([]int, error) {
	if columns == nil {
		idx := make([]int, t.schema.NumFields())
		for i := range idx {
			idx[i] = i
		}
		return idx, nil
	}
	if len(columns) == 0 {
		return nil, errcode.New(errcode.InvalidArgument, "select columns", t.pin.URI, "empty column list")
	}
	idx := make([]int, len(columns))
	for i, name := range columns {
		found := t.schema.FieldIndices(name)
		if len(found) == 0 {
			names := make([]string, t.schema.NumFields())
			for j, f := range t.schema.Fields() {
				names[j] = f.Name
			}
			return nil, errcode.New(errcode.InvalidArgument, "select columns", t.pin.URI,
				"unknown column %q; the table has: %s", name, strings.Join(names, ", "))
		}
		if slices.Contains(idx[:i], found[0]) {
			return nil, errcode.New(errcode.InvalidArgument, "select columns", t.pin.URI, "column %q selected twice", name)
		}
		idx[i] = found[0]
	}
	return idx, nil
}

// leafColumns returns the Parquet leaf column indices under the given
// top-level fields, in ascending order.
func leafColumns(schema *arrow.Schema, fields []int) ([]int, error) {
	var leaves []int
	next := 0
	want := map[int]bool{}
	for _, f := range fields {
		want[f] = true
	}
	for i, f := range schema.Fields() {
		n := countLeaves(f.Type)
		if want[i] {
			for j := range n {
				leaves = append(leaves, next+j)
			}
		}
		next += n
	}
	if len(leaves) == 0 {
		return nil, fmt.Errorf("no leaf columns for fields %v", fields)
	}
	return leaves, nil
}

// countLeaves is the number of Parquet leaf columns an Arrow type maps to.
func countLeaves(t arrow.DataType) int {
	if t, ok := t.(arrow.NestedType); ok {
		n := 0
		for _, f := range t.Fields() {
			n += countLeaves(f.Type)
		}
		return n
	}
	return 1
}

// Schema returns the schema of the records Read returns.
func (r *Reader) Schema() *arrow.Schema { return r.schema }

// Close releases nothing: a Reader holds no memory between calls. It is kept
// so that a Reader can be used where an io.Closer is expected.
func (r *Reader) Close() error { return nil }

// Read returns the rows with the given ids, in that order, as one record. The
// caller releases it. Ids may repeat; an id outside the table is an error.
// Each row group the ids touch is decoded once, and only the rows they name
// are kept until the record is assembled.
func (r *Reader) Read(ctx context.Context, ids []uint64) (arrow.RecordBatch, error) {
	k, err := r.Keep(ctx, ids, nil)
	if err != nil {
		return nil, err
	}
	defer k.Close()
	return k.Read(ctx, 0, len(ids))
}

// assemble builds the record of n rows that spans take from groups.
func (r *Reader) assemble(ctx context.Context, groups []arrow.RecordBatch, spans []span, n int64) (arrow.RecordBatch, error) {
	rec, err := assemble(ctx, r.mem, r.schema, groups, spans, n)
	if err != nil {
		return nil, errcode.Wrap(err, errcode.Internal, "read", r.t.pin.URI)
	}
	return rec, nil
}

// gatherColumn returns the rows spans take from srcs, arrays of output
// column c.
func (r *Reader) gatherColumn(ctx context.Context, c int, srcs []arrow.Array, spans []span) (arrow.Array, error) {
	out, err := gatherColumn(ctx, r.mem, r.schema.Field(c), srcs, spans)
	if err != nil {
		return nil, errcode.Wrap(err, errcode.Internal, "read", r.t.pin.URI)
	}
	return out, nil
}

// assemble builds the record of schema, n rows, that spans take from srcs.
func assemble(ctx context.Context, mem memory.Allocator, schema *arrow.Schema, srcs []arrow.RecordBatch, spans []span, n int64) (arrow.RecordBatch, error) {
	cols := make([]arrow.Array, schema.NumFields())
	defer func() {
		for _, c := range cols {
			if c != nil {
				c.Release()
			}
		}
	}()
	in := make([]arrow.Array, len(srcs))
	for c, field := range schema.Fields() {
		for i, src := range srcs {
			in[i] = src.Column(c)
		}
		var err error
		if cols[c], err = gatherColumn(ctx, mem, field, in, spans); err != nil {
			return nil, err
		}
	}
	return array.NewRecordBatch(schema, cols, n), nil
}

// gatherColumn returns the rows spans take from srcs, arrays of field.
func gatherColumn(ctx context.Context, mem memory.Allocator, field arrow.Field, srcs []arrow.Array, spans []span) (arrow.Array, error) {
	var out arrow.Array
	var err error
	if gatherable(field.Type) {
		out, err = gatherArray(mem, field.Type, srcs, spans)
	} else {
		out, err = take(ctx, mem, srcs, spans)
	}
	if err != nil {
		return nil, fmt.Errorf("column %q: %w", field.Name, err)
	}
	return out, nil
}

// gatherArray copies the rows spans take from srcs into a new array.
func gatherArray(mem memory.Allocator, dt arrow.DataType, srcs []arrow.Array, spans []span) (arrow.Array, error) {
	data := make([]arrow.ArrayData, len(srcs))
	for i, s := range srcs {
		data[i] = s.Data()
	}
	out, err := gather(mem, dt, data, spans)
	if err != nil {
		return nil, err
	}
	defer out.Release()
	return array.MakeFromData(out), nil
}

// take is gatherArray for the types gather does not support (dictionaries,
// maps, extension types…): it concatenates the sources and picks the rows
// with compute.Take.
func take(ctx context.Context, mem memory.Allocator, srcs []arrow.Array, spans []span) (arrow.Array, error) {
	joined, err := array.Concatenate(srcs, mem)
	if err != nil {
		return nil, err
	}
	defer joined.Release()
	base := make([]int64, len(srcs))
	for i := 1; i < len(srcs); i++ {
		base[i] = base[i-1] + int64(srcs[i-1].Len())
	}
	bld := array.NewInt64Builder(mem)
	defer bld.Release()
	for _, s := range spans {
		for k := range s.n {
			bld.Append(base[s.src] + s.off + k)
		}
	}
	indices := bld.NewArray()
	defer indices.Release()
	// Take runs on decoded memory and is short; it is not canceled because
	// arrow-go v18.8.0's executor leaks its output buffers when its context is
	// canceled mid-call (docs/upstream.md).
	return compute.TakeArray(compute.WithAllocator(context.WithoutCancel(ctx), mem), joined, indices)
}

// Interleave returns the rows of srcs, record batches of one schema, in the
// order from gives: row i of the result is the next row not yet taken of
// srcs[from[i]]. It copies each value once, consecutive rows of a source
// in one copy, as a Reader assembles the rows of several row groups. from
// must take every row of every source once.
func Interleave(ctx context.Context, mem memory.Allocator, srcs []arrow.RecordBatch, from []int32) (arrow.RecordBatch, error) {
	const op = "interleave"
	if len(srcs) == 0 {
		return nil, errcode.New(errcode.InvalidArgument, op, "", "no record batches")
	}
	schema := srcs[0].Schema()
	next := make([]int64, len(srcs))
	var spans []span
	for i, src := range from {
		if src < 0 || int(src) >= len(srcs) || next[src] == srcs[src].NumRows() {
			return nil, errcode.New(errcode.InvalidArgument, op, "", "row %d: no row left of record batch %d of %d", i, src, len(srcs))
		}
		spans = appendSpan(spans, int(src), next[src], 1)
		next[src]++
	}
	for i, src := range srcs {
		if !src.Schema().Equal(schema) {
			return nil, errcode.New(errcode.InvalidArgument, op, "", "record batch %d's schema %s differs from the first's, %s", i, src.Schema(), schema)
		}
		if next[i] != src.NumRows() {
			return nil, errcode.New(errcode.InvalidArgument, op, "", "took %d of record batch %d's %d rows", next[i], i, src.NumRows())
		}
	}
	rec, err := assemble(ctx, mem, schema, srcs, spans, int64(len(from)))
	if err != nil {
		return nil, errcode.Wrap(err, errcode.Internal, op, "")
	}
	return rec, nil
}

// GroupRef names one row group of one file of the table.
type GroupRef struct{ File, Group int }

// Groups returns the row groups that hold ids, each once, in the order they
// are first needed.
func (r *Reader) Groups(ids []uint64) ([]GroupRef, error) {
	keys, _, _, err := r.locate(ids)
	return keys, err
}

// GuessBytes guesses, from its footer and before any is decoded, the decoded
// size of row group g's projected columns, and what a decoder holds beyond
// the rows it keeps while it decodes them, a column at a time. A column chunk
// decodes to about its uncompressed size plus 4 bytes of offsets a row
// (lists, strings), or, dictionary-encoded, up to about twice that (1.85 for
// token ids). The page decoder copies out only the rows kept and holds a
// page at a time beside them, compressed and decompressed; pqarrow, which
// decodes the columns the page decoder does not handle, holds a whole
// column.
func (r *Reader) GuessBytes(ctx context.Context, g GroupRef) (group, held int64, err error) {
	sizes, _, held, err := r.guessColumns(ctx, g)
	for _, n := range sizes {
		group += n
	}
	return group, held, err
}

// guessColumns is GuessBytes by output column: the decoded size of each,
// whether the page decoder handles it, and what a decoder holds.
func (r *Reader) guessColumns(ctx context.Context, g GroupRef) (sizes []int64, fast []bool, held int64, err error) {
	md, err := r.t.Footer(ctx, g.File)
	if err != nil {
		return nil, nil, 0, err
	}
	where := r.t.loc.ObjectURI(r.t.pin.Files[g.File].Key)
	rows := r.t.pin.Files[g.File].RowGroups[g.Group]
	sizes, fast = make([]int64, len(r.leaves)), make([]bool, len(r.leaves))
	holds := make([]int64, len(r.leaves))
	// The columns the page decoder handles, and their chunks.
	var fastCols []int
	var chunks []*metadata.ColumnChunkMetaData
	for c, leaves := range r.leaves {
		for _, leaf := range leaves {
			col, err := md.RowGroup(g.Group).ColumnChunk(leaf)
			if err != nil {
				return nil, nil, 0, errcode.Wrap(err, errcode.Corrupt, "guess row group size", where)
			}
			size := col.TotalUncompressedSize()
			if dictionaryEncoded(col) {
				size *= 2
			}
			sizes[c] += size + 4*rows
			if len(leaves) == 1 && fastColumn(r.schema.Field(c), md.Schema.Column(leaf), col) != notFast {
				fastCols, chunks = append(fastCols, c), append(chunks, col)
			}
		}
		holds[c] = sizes[c]
	}
	// Their offset indexes, read together: the page plan asks for the same.
	fastLeaves := make([]int, len(fastCols))
	for i, c := range fastCols {
		fastLeaves[i] = r.leaves[c][0]
	}
	locs, err := r.t.pages(ctx, g.File, g.Group, fastLeaves)
	if err != nil {
		return nil, nil, 0, err
	}
	for i, c := range fastCols {
		fast[c], holds[c] = true, min(holds[c], 2*largestPage(chunks[i], locs[i]))
	}
	return sizes, fast, slices.Max(append(holds, 0)), nil
}

// defaultPageBytes is the page size writers use unless told otherwise
// (parquet-mr, Arrow C++ and arrow-go alike): what a guess assumes of files
// without an offset index.
const defaultPageBytes = 1 << 20

// largestPage guesses the uncompressed size of the largest page of column
// chunk col, whose pages lie at locs: from the offset index, where the file
// has one, scaled by the chunk's compression ratio, else the writers'
// default.
func largestPage(col *metadata.ColumnChunkMetaData, locs *pageLocs) int64 {
	if locs == nil || col.TotalCompressedSize() <= 0 {
		return min(col.TotalUncompressedSize(), defaultPageBytes)
	}
	return slices.Max(locs.size) * col.TotalUncompressedSize() / col.TotalCompressedSize()
}

// dictionaryBytes guesses the decoded bytes of col's dictionary page, which
// the page decoder holds while it decodes the chunk's pages: its stored
// bytes (up to the first data page) times the chunk's decoded ÷ stored.
func dictionaryBytes(col *metadata.ColumnChunkMetaData) int64 {
	dict := dictionaryOffset(col)
	if dict < 0 || col.TotalCompressedSize() <= 0 {
		return 0
	}
	return (col.DataPageOffset() - dict) * col.TotalUncompressedSize() / col.TotalCompressedSize()
}

// decodeGuess guesses the bytes a decoder holds beyond the rows it keeps,
// decoding what w wants of row group key: GuessBytes's, the largest
// dictionary page of the columns the page decoder handles (a dictionary of
// large values decodes to many times a page: the group then decodes alone),
// and the copies of the rows w wants that the caller gathers (of the columns
// pqarrow decodes whole, and of every column when w's rows repeat).
// GuessBytes leaves dictionaries out: it divides the budget (loader), whose
// share for decoding is no place for a dictionary of a few large values.
func (r *Reader) decodeGuess(ctx context.Context, key GroupRef, w wanted) (int64, error) {
	sizes, fast, held, err := r.guessColumns(ctx, key)
	if err != nil {
		return 0, err
	}
	md, err := r.t.Footer(ctx, key.File)
	if err != nil {
		return 0, err
	}
	var dict int64
	for c, leaves := range r.leaves {
		if fast[c] {
			if chunk, err := md.RowGroup(key.Group).ColumnChunk(leaves[0]); err == nil {
				dict = max(dict, dictionaryBytes(chunk))
			}
		}
	}
	held += dict
	rows := r.t.pin.Files[key.File].RowGroups[key.Group]
	if w.rows == nil || rows <= 0 {
		return held, nil
	}
	for c, n := range sizes {
		if !fast[c] || w.repeats {
			held += n * int64(len(w.rows)) / rows
		}
	}
	return held, nil
}

// dictionaryEncoded reports whether every data page of col is dictionary
// encoded. A writer whose dictionary grew too large falls back to PLAIN for
// the pages after: such a chunk decodes to about its uncompressed size.
func dictionaryEncoded(col *metadata.ColumnChunkMetaData) bool {
	stats := col.EncodingStats()
	if len(stats) == 0 {
		return col.HasDictionaryPage()
	}
	dict := false
	for _, st := range stats {
		if st.PageType.String() == "DICTIONARY_PAGE" {
			continue
		}
		switch st.Encoding {
		case parquet.Encodings.RLEDict, parquet.Encodings.PlainDict:
			dict = true
		default:
			return false
		}
	}
	return dict
}

// Stats returns what the reader has done so far.
func (r *Reader) Stats() ReaderStats {
	return ReaderStats{
		BytesRead:    r.stats.reads.Bytes.Load(),
		Requests:     r.stats.reads.Requests.Load(),
		RowGroups:    r.stats.groups.Load(),
		FetchTime:    time.Duration(r.stats.fetchNanos.Load()),
		DecodeTime:   time.Duration(r.stats.decodeNanos.Load()),
		DecodedBytes: r.stats.decoded.Load(),
		KeptRows:     r.stats.keptRows.Load(),
		KeptBytes:    r.stats.keptBytes.Load(),
		Hedged:       r.stats.reads.Hedged.Load(),
		FetchedBytes: r.stats.fetched.Load(),
		FetchedPeak:  r.stats.fetchedPeak.Load(),
		// what the disk cache served
		CacheHits:     r.stats.reads.CacheHits.Load(),
		CacheHitBytes: r.stats.reads.CacheHitBytes.Load(),
		CacheUnstored: r.stats.reads.CacheUnstored.Load(),
		LargestRow:    r.stats.largestRow.Load(),
		// pages charged whole
		LargePage:       r.stats.largePage.Load(),
		LargeDictionary: r.stats.largeDict.Load(),
	}
}

// locate returns the row groups holding ids, each once in the order they
// are first needed, the row id each of them starts at, and of each id the
// index in keys of its group.
func (r *Reader) locate(ids []uint64) (keys []GroupRef, starts []int64, of []int32, err error) {
	n := r.t.NumRows()
	// First each id's group, a loop of independent searches the processor
	// overlaps; then the groups in order of need.
	of = make([]int32, len(ids))
	g := 0
	for i, id := range ids {
		if id >= uint64(n) {
			return nil, nil, nil, errcode.New(errcode.InvalidArgument, "read", r.t.pin.URI, "row id %d out of range [0, %d)", id, n)
		}
		// Consecutive ids mostly fall in the group of the one before.
		if int64(id) < r.t.groupStarts[g] || int64(id) >= r.t.groupStarts[g+1] {
			g = r.t.groupOf(int64(id))
		}
		of[i] = int32(g)
	}
	index := r.t.keyIndex() // group in r.t.groups -> 1 + its index in keys
	var used []int32        // the groups of keys
	defer func() { r.t.putKeyIndex(index, used) }()
	last, k := int32(-1), int32(0)
	for i, g := range of {
		if g != last {
			if k = index[g] - 1; k < 0 {
				k = int32(len(keys))
				index[g] = k + 1
				keys = append(keys, r.t.groups[g])
				starts = append(starts, r.t.groupStarts[g])
				used = append(used, g)
			}
			last = g
		}
		of[i] = k
	}
	return keys, starts, of, nil
}

// wanted is what decode keeps of a row group: rows (ascending, distinct), or
// all of them when rows is nil; of an output column c with plans[c] set
// (plans may be nil), only the planned pages are fetched and decoded.
// repeats says that the caller takes some of rows more than once, gathering
// them into copies of the columns.
type wanted struct {
	rows    []int64
	plans   []*pagePlan
	repeats bool
}

// decode fetches the projected columns of one row group and decodes them one
// after the other, handing each to each, which may retain it: a row group is
// never decoded whole at once unless each keeps every column. The columns
// the page decoder handles hold only the rows w wants (kept is true); the
// others, all of the group's rows.
func (r *Reader) decode(ctx context.Context, key GroupRef, prio int64, w wanted, each func(c int, col arrow.Array, kept bool) error) (err error) {
	plans := w.plans
	f := r.t.pin.Files[key.File]
	where := r.t.loc.ObjectURI(f.Key)
	defer errcode.Recover(&err, errcode.Corrupt, fmt.Sprintf("decode row group %d of", key.Group), where)
	md, err := r.t.Footer(ctx, key.File)
	if err != nil {
		return err
	}
	sections, ranges, err := r.requests(md, key.Group, plans)
	if err != nil {
		return errcode.Wrap(fmt.Errorf("row group %d: %w", key.Group, err), errcode.Corrupt, "decode", where)
	}
	ra := r.t.loc.NewReaderAt(ctx, f.Object).CountInto(&r.stats.reads)
	var src *fetched
	if r.fetching != nil {
		var n int64
		for _, rg := range ranges {
			n += rg.n
		}
		switch streamed := n > r.fetchShare; {
		case !streamed && ra.Direct() && len(ranges) <= r.answered.total:
			got, held, err := r.fetchOnAnswer(ctx, ra, ranges, n, prio, where)
			if err != nil {
				return err
			}
			defer r.fetching.release(held)
			src = got
			defer src.release()
		default:
			n, err := r.fetching.acquire(ctx, prio, min(n, r.fetchShare))
			if err != nil {
				return errcode.Wrap(err, errcode.Canceled, "read", where)
			}
			defer r.fetching.release(n)
			if !streamed {
				break
			}
			// A row group larger than a decoder's part of the bound is
			// read as it is decoded, a column after the other, its
			// sections fetched in windows ahead of the reads
			// (prefetch.go): the first read of a large column chunk
			// without an offset index (a plain dataset's) locates its
			// pages (learnPages), and holds no more than the windows, the
			// stream's buffer (a window) and a page. Its windows are
			// fetched once the bound has room for them: a prefetch
			// started before, by each of the row groups waiting for
			// room, held 125 MiB of windows on Go's heap under a share
			// of 15.
			win := prefetchWindow(r.fetchShare)
			open := func(ctx context.Context) *store.ReaderAt {
				return r.t.loc.NewReaderAt(ctx, f.Object).CountInto(&r.stats.reads)
			}
			ahead := newPrefetch(ctx, open, where, ranges, win, max(r.fetchShare-win, 0), r.reads, prio, &r.stats)
			src = &fetched{ReaderAt: ra, ahead: ahead, stats: &r.stats}
			defer src.release()
		}
	}
	if src == nil {
		if src, err = fetch(ctx, ra, ranges, r.reads, prio, &r.stats, where); err != nil {
			return err
		}
		defer src.release()
	}
	for _, s := range sections {
		if src.ahead != nil {
			src.crcs = append(src.crcs, newPageCRCs(s)) // checked as they stream by
		} else if err := checkPageCRCs(src, s); err != nil {
			return errcode.Wrap(fmt.Errorf("row group %d: %w", key.Group, err), errcode.Corrupt, "decode", where)
		}
	}
	slices.SortFunc(src.crcs, func(a, b *pageCRCs) int { return cmp.Compare(a.s.off, b.s.off) })
	held, err := r.decodeGuess(ctx, key, w)
	if err != nil {
		return err
	}
	held, err = r.decoding.acquire(ctx, prio, held)
	if err != nil {
		return errcode.Wrap(err, errcode.Canceled, "decode", where)
	}
	defer r.decoding.release(held)
	start := time.Now()
	if err := r.decodeFrom(ctx, src, md, key, where, w, each); err != nil {
		return err
	}
	r.stats.decodeNanos.Add(int64(time.Since(start)))
	r.stats.groups.Add(1)
	return nil
}

// decodeFrom decodes the projected columns of row group key of the file src
// reads, one after the other, and hands each to each (see decode).
func (r *Reader) decodeFrom(ctx context.Context, src parquet.ReaderAtSeeker, md *metadata.FileMetaData, key GroupRef, where string,
	w wanted, each func(c int, col arrow.Array, kept bool) error) error {
	// The page decoder copies what it keeps out of the pages, so their
	// buffers are scratch; pqarrow's arrays may hold memory of the reader's
	// allocator, so it gets r.mem.
	open := func(mem memory.Allocator) (*file.Reader, error) {
		props := parquet.NewReaderProperties(mem)
		// Column chunks are in memory already (src serves them from the
		// fetch): streamed, each page is copied once out of them, where
		// unbuffered arrow-go would first copy each whole column chunk.
		// Those src streams from the store are read a window at a time.
		props.BufferedStreamEnabled = true
		props.BufferSize = streamBufferSize(src)
		BoundPages(props, md, r.t.pin.Files[key.File].Size, key.Group)
		pf, err := file.NewParquetReader(src, file.WithMetadata(md), file.WithReadProps(props))
		if err != nil {
			return nil, errcode.Wrap(err, errcode.Corrupt, "open", where)
		}
		return pf, nil
	}
	pf, err := open(scratch{})
	if err != nil {
		return err
	}
	defer pf.Close()
	var slow *file.Reader // for the columns left to pqarrow, opened once needed
	defer func() {
		if slow != nil {
			slow.Close()
		}
	}()
	groupRows := r.t.pin.Files[key.File].RowGroups[key.Group]
	for i, field := range r.schema.Fields() {
		var plan *pagePlan // only the columns the page decoder handles have one
		if w.plans != nil {
			plan = w.plans[i]
		}
		col, decoded, err := r.decodeFast(key, pf.RowGroup(key.Group), md, field, r.leaves[i], src, plan, w.rows)
		kept, rows := w.rows != nil, int64(len(w.rows))
		if err == nil && col == nil {
			if slow == nil {
				if slow, err = open(r.mem); err != nil {
					return err
				}
			}
			kept = false
			if col, err = r.decodeSlow(ctx, slow, key.Group, i); err == nil {
				decoded = dataBytes(col.Data())
			}
		}
		if err != nil {
			return errcode.Wrap(fmt.Errorf("row group %d, column %q: %w", key.Group, field.Name, err), errcode.Corrupt, "decode", where)
		}
		if !kept {
			rows = groupRows
		}
		if int64(col.Len()) != rows {
			col.Release()
			return errcode.New(errcode.Corrupt, "decode", where, "row group %d, column %q: %d values, %d expected",
				key.Group, field.Name, col.Len(), rows)
		}
		r.stats.decoded.Add(decoded)
		err = each(i, col, kept)
		col.Release()
		if err != nil {
			return err
		}
	}
	return nil
}

// decodeFast decodes the given rows (nil: all) of one column of row group
// key with decodeColumn, and says how many bytes of pages that decoded; it
// returns a nil column when decodeColumn does not handle it. With a plan, it
// decodes only the planned pages, read from src. A whole chunk of a file
// without an offset index teaches the table where its pages lie.
func (r *Reader) decodeFast(key GroupRef, rg *file.RowGroupReader, md *metadata.FileMetaData, field arrow.Field, leaves []int,
	src parquet.ReaderAtSeeker, plan *pagePlan, rows []int64) (arrow.Array, int64, error) {
	if len(leaves) != 1 {
		return nil, 0, nil
	}
	chunk, err := rg.MetaData().ColumnChunk(leaves[0])
	if err != nil {
		return nil, 0, err
	}
	col := md.Schema.Column(leaves[0])
	kind := fastColumn(field, col, chunk)
	if kind == notFast {
		return nil, 0, nil
	}
	if plan != nil {
		var keep []int64 // nil: every row
		if rows != nil {
			keep = make([]int64, len(rows))
		}
		for i, row := range rows {
			keep[i] = plan.row(row)
		}
		n := plan.rows
		if plan.tail {
			n = openRows
		}
		pages := plan.read(src, chunk, &r.sectionBufs)
		defer pages.Close()
		arr, did, err := decodeColumn(r.mem, field, col, kind, chunk, pages, n, keep)
		if err != nil || !plan.tail {
			return arr, did.bytes, err
		}
		if err := checkCounts(chunk, did, plan, rg.NumRows()); err != nil {
			arr.Release()
			return nil, did.bytes, err
		}
		if did.pageRows != nil {
			r.t.learnPages(pageKey{key.File, key.Group, leaves[0]}, pages.readFrom(plan.locs.rest.off), plan.locs,
				chunk.HasDictionaryPage(), did.pageRows[len(plan.pages):], did.pageEntries[len(plan.pages):], did.ended)
		}
		return arr, did.bytes, nil
	}
	pr, err := rg.GetColumnPageReader(leaves[0])
	if err != nil {
		return nil, 0, err
	}
	defer pr.Close()
	arr, did, err := decodeColumn(r.mem, field, col, kind, chunk, pr, rg.NumRows(), rows)
	if err == nil {
		if err = checkCounts(chunk, did, nil, rg.NumRows()); err != nil {
			arr.Release()
			return nil, did.bytes, err
		}
	}
	if err == nil && did.pageRows != nil && !hasOffsetIndex(chunk) {
		chunks, err := leafChunks(md, key.Group, leaves)
		if err == nil {
			rest := unlocated(chunks[0])
			r.t.learnPages(pageKey{key.File, key.Group, leaves[0]}, pagesAt(src, rest.rest, len(did.pageRows)+btoi(chunk.HasDictionaryPage())),
				rest, chunk.HasDictionaryPage(), did.pageRows, did.pageEntries, true)
		}
	}
	return arr, did.bytes, err
}

// BoundPages bounds the pages that arrow-go's readers with props read of
// the row groups groups (all when none) of a file of size bytes whose
// footer is md, by what the footer says instead of arrow-go's fixed bounds
// (64 MiB stored, 256 MiB decoded), which one cell of a training table can
// pass: stored, a page lies within its column chunk, which lies within the
// file; decoded, it is no larger than its column chunk decoded (see
// decodedBound). arrow-go
// takes one bound for all the chunks it reads, the largest; croupier's own
// page reader bounds each chunk's pages by that chunk (see sectionPages).
func BoundPages(props *parquet.ReaderProperties, md *metadata.FileMetaData, size int64, groups ...int) {
	if len(groups) == 0 {
		groups = make([]int, md.NumRowGroups())
		for i := range groups {
			groups[i] = i
		}
	}
	var stored, decoded int64
	for _, g := range groups {
		rg := md.RowGroup(g)
		for i := range rg.NumColumns() {
			if chunk, err := rg.ColumnChunk(i); err == nil {
				stored, decoded = max(stored, chunk.TotalCompressedSize()), max(decoded, chunk.TotalUncompressedSize())
			}
		}
	}
	props.MaxCompressedPageSize = max(1, min(stored, size)) // 0 or less is taken for arrow-go's bound
	props.MaxUncompressedPageSize = decodedBound(decoded)
}

// checkCounts checks what a decode of column chunk chunk, of a row group of
// rows rows, read to the chunk's end (whole when plan is nil, else its tail),
// against the chunk's metadata: the rows its pages hold, and their level
// entries (a tail's, with those its located pages were learnt to hold). A
// page header is not under its page's CRC: one whose count of level entries
// is off cuts a list short, or decodes values that are not the page's,
// without any other sign.
func checkCounts(chunk *metadata.ColumnChunkMetaData, did decodeInfo, plan *pagePlan, rows int64) error {
	if !did.ended {
		return nil
	}
	held, entries := did.rows, did.entries(0)
	if plan != nil {
		held += plan.locs.known() - plan.rows
		entries = plan.locs.entries + did.entries(len(plan.pages))
	}
	if held != rows {
		return fmt.Errorf("column chunk %s: its pages hold %d rows, its row group %d", chunk.PathInSchema(), held, rows)
	}
	if entries != chunk.NumValues() {
		return fmt.Errorf("column chunk %s: its pages hold %d level entries, its metadata says %d",
			chunk.PathInSchema(), entries, chunk.NumValues())
	}
	return nil
}

// sections returns the byte ranges decode reads of row group g: each output
// column's chunks, or the sections of its plan. Each begins at a page header
// and holds whole pages.
func (r *Reader) sections(md *metadata.FileMetaData, g int, plans []*pagePlan) ([]byteRange, error) {
	var all []byteRange
	for c, leaves := range r.leaves {
		if plans == nil || plans[c] == nil {
			chunks, err := leafChunks(md, g, leaves)
			if err != nil {
				return nil, err
			}
			all = append(all, chunks...)
			continue
		}
		chunk, err := md.RowGroup(g).ColumnChunk(leaves[0])
		if err != nil {
			return nil, err
		}
		all = append(all, plans[c].sections(dictionaryOffset(chunk))...)
	}
	return all, nil
}

// requests returns the sections a decode of row group g reads (see
// sections), and the ranges it requests them in: merged across the holes
// worth reading on the table's store (holeFor) and within the fetch share
// (holeShare), in parts.
func (r *Reader) requests(md *metadata.FileMetaData, g int, plans []*pagePlan) (sections, ranges []byteRange, err error) {
	if sections, err = r.sections(md, g, plans); err != nil {
		return nil, nil, err
	}
	hole := holeFor(r.t.loc)
	if r.fetchShare > 0 {
		hole = min(hole, max(r.fetchShare/holeShare, holeBytes))
	}
	return sections, mergeRanges(slices.Clone(sections), hole), nil
}

// plan returns, for each output column of row group key, the pages that hold
// the given rows (ascending offsets in the group; nil: every row), or nil
// where the page decoder does not handle the column, or where the rows need
// every page and the reader refuses no page (PageBytes is 0). It returns nil
// when no column has a plan.
//
// A reader with a page limit plans every column it decodes page by page,
// whichever rows it needs: the planned pages are read by croupier's page
// reader, which sizes each by its header before decoding it and refuses one
// over the limit. Without a plan a whole chunk went through arrow-go's, which
// decodes every page: a page not located before it was read (lists in a file
// without an offset index) was refused when a piece needed some of the
// chunk's pages and decoded when it needed them all, which made the error a
// read met depend on how the rows before it were kept.
func (r *Reader) plan(ctx context.Context, key GroupRef, rows []int64) ([]*pagePlan, error) {
	md, err := r.t.Footer(ctx, key.File)
	if err != nil {
		return nil, err
	}
	var cols, leaves []int // the columns the page decoder handles, and their leaves
	for c, field := range r.schema.Fields() {
		if len(r.leaves[c]) != 1 {
			continue
		}
		chunk, err := md.RowGroup(key.Group).ColumnChunk(r.leaves[c][0])
		if err != nil {
			return nil, errcode.Wrap(err, errcode.Corrupt, "plan pages", r.t.loc.ObjectURI(r.t.pin.Files[key.File].Key))
		}
		if fastColumn(field, md.Schema.Column(r.leaves[c][0]), chunk) != notFast {
			cols = append(cols, c)
			leaves = append(leaves, r.leaves[c][0])
		}
	}
	if len(cols) == 0 {
		return nil, nil
	}
	locs, err := r.t.pages(ctx, key.File, key.Group, leaves)
	if err != nil {
		return nil, err
	}
	var plans []*pagePlan
	for i, c := range cols {
		if locs[i] == nil {
			// No offset index, and no page located yet: the plan reads
			// from the chunk's start as far as rows need.
			chunks, err := leafChunks(md, key.Group, leaves[i:i+1])
			if err != nil {
				return nil, errcode.Wrap(err, errcode.Corrupt, "plan pages", r.t.loc.ObjectURI(r.t.pin.Files[key.File].Key))
			}
			locs[i] = unlocated(chunks[0])
		}
		var p *pagePlan
		if rows != nil {
			p = planPages(locs[i], rows)
		}
		if p == nil && r.pageLimit > 0 {
			p = allPages(locs[i])
		}
		if p == nil {
			continue
		}
		p.limit, p.column = r.pageLimit, r.schema.Field(c).Name
		if plans == nil {
			plans = make([]*pagePlan, len(r.leaves))
		}
		plans[c] = p
	}
	return plans, nil
}

// decodeSlow decodes output column c of row group g with the general codec.
func (r *Reader) decodeSlow(ctx context.Context, pf *file.Reader, g, c int) (arrow.Array, error) {
	codec, err := generalCodec("decoding " + r.schema.Field(c).Type.String())
	if err != nil {
		return nil, err
	}
	tbl, err := codec.ReadColumn(ctx, pf, r.leaves[c], g, r.mem)
	if err != nil {
		return nil, err
	}
	defer tbl.Release()
	name := r.schema.Field(c).Name
	found := tbl.Schema().FieldIndices(name)
	if len(found) == 0 {
		return nil, fmt.Errorf("no column %q", name)
	}
	chunks := tbl.Column(found[0]).Data().Chunks()
	// A damaged page can decode to inconsistent buffers without an error;
	// gather would then read out of bounds or copy wrong rows.
	for _, c := range chunks {
		if err := array.ValidateFull(c); err != nil {
			return nil, err
		}
	}
	if len(chunks) == 1 {
		chunks[0].Retain()
		return chunks[0], nil
	}
	return array.Concatenate(chunks, r.mem)
}

// ReadGroup decodes the projected columns of one whole row group: for scans
// that visit each row group once.
func (r *Reader) ReadGroup(ctx context.Context, file, group int) (rec arrow.RecordBatch, err error) {
	defer recoverTo(&err, "read", r.t.loc.ObjectURI(r.t.pin.Files[file].Key))
	cols := make([]arrow.Array, r.schema.NumFields())
	defer func() {
		for _, c := range cols {
			if c != nil {
				c.Release()
			}
		}
	}()
	err = r.decode(ctx, GroupRef{file, group}, 0, wanted{}, func(c int, col arrow.Array, _ bool) error {
		col.Retain()
		cols[c] = col
		return nil
	})
	if err != nil {
		return nil, err
	}
	return array.NewRecordBatch(r.schema, cols, r.t.pin.Files[file].RowGroups[group]), nil
}

// recoverTo turns a panic in a decoding goroutine into an error: a panic in a
// goroutine of a shared library would kill the host process.
func recoverTo(err *error, op, where string) {
	if p := recover(); p != nil {
		*err = errcode.New(errcode.Corrupt, op, where, "decoder panic: %v\n%s", p, debug.Stack())
	}
}
