package permutation

import (
	"context"
	"encoding/json"
	"fmt"
	"math/bits"
	"path"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"golang.org/x/sync/errgroup"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/store"
	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/internal/seal"
	"github.com/croupier-data/croupier/permutation/expr"
)

// Progress reports how far a build is.
type Progress struct {
	Phase string // "scan", "write"
	Done  int64  // rows scanned, or row ids written
	Total int64
}

// BuildOptions configure Build.
type BuildOptions struct {
	// Progress, when set, is called from the building goroutine as work is done.
	Progress func(Progress)
	// Allocator for the Arrow memory of the scan; nil means Go's.
	Allocator memory.Allocator
}

// noSplit marks a row that is in no split.
const noSplit = -1

// Build builds the permutation of t that spec describes and persists it at
// uri, which must not hold a permutation yet. It reads only the columns the
// filter, the split, the groups and the lengths need, skips row groups whose
// statistics rule the filter out, and holds in memory only the kept row ids
// (8 bytes each), with Spec.GroupBy each kept row's group key, and with
// Spec.Lengths a length per table row (4 bytes each).
func Build(ctx context.Context, t *table.Table, spec Spec, uri string, opts BuildOptions) (*Permutations, error) {
	start := time.Now()
	const op = "build permutation"
	if spec.Split != nil {
		if err := spec.Split.validate(); err != nil {
			return nil, err
		}
	}
	if err := spec.validateGroups(); err != nil {
		return nil, err
	}
	if spec.Shuffle != nil {
		sh := *spec.Shuffle
		if sh.ClumpSize == AutoClump {
			rows, err := t.RowsPerPage(ctx)
			if err != nil {
				return nil, err
			}
			sh.ClumpSize = 1 << (bits.Len64(uint64(max(rows, 1))) - 1)
		}
		if err := sh.validate(); err != nil {
			return nil, err
		}
		spec.Shuffle = &sh
	}
	b := &builder{t: t, spec: spec, opts: opts}
	if opts.Allocator == nil {
		b.opts.Allocator = memory.DefaultAllocator
	}
	if err := b.prepare(); err != nil {
		return nil, err
	}
	parts, err := b.scan(ctx)
	if err != nil {
		return nil, err
	}
	names, err := b.assign(parts)
	if err != nil {
		return nil, err
	}
	for i, s := range b.out {
		var r *Rand
		if spec.Shuffle != nil {
			r = NewRand(DeriveKey(spec.Shuffle.Seed, fmt.Sprintf("shuffle/%d", i)))
		}
		switch {
		case b.keys != nil:
			b.starts = append(b.starts, group(s, b.keys[i], r))
			b.keys[i] = nil
		case r != nil:
			shuffle(s, *spec.Shuffle, r)
		}
	}
	loc, err := store.OpenCreate(ctx, uri)
	if err != nil {
		return nil, err
	}
	m, err := b.write(ctx, loc, names)
	if err != nil {
		loc.Close()
		return nil, errcode.Wrap(err, errcode.Internal, op, uri)
	}
	p, err := open(ctx, loc, table.OpenOptions{BlockCache: t.BlockCache()})
	if err != nil {
		loc.Close()
		return nil, err
	}
	if p.ID() != m.ID {
		p.Close()
		return nil, errcode.New(errcode.Changed, op, uri,
			"the store accepted this build's exclusive create of %s and then held another permutation (%s, not %s) under it: "+
				"another build persisted there at the same time and the store does not honour conditional writes; "+
				"this build's permutation is not the one at %s", manifestKey, p.ID(), m.ID, uri)
	}
	p.build = BuildRecord{ID: m.ID, BuiltAt: start.UTC(), Seconds: time.Since(start).Seconds()}
	rec, _ := json.Marshal(p.build)
	if err := loc.WriteAll(ctx, path.Join(loc.Key, buildKey), rec, store.WriterOptions{}); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

type builder struct {
	t    *table.Table
	spec Spec
	opts BuildOptions

	filter  *expr.Expr // nil: keep every row
	calc    *expr.Expr // split_calculated's expression
	columns []string   // columns the scan reads
	lengths []uint32   // with Spec.Lengths: the length of every kept row, by row id

	stats struct {
		rows, kept, groups, skipped int64
	}
	out      [][]uint64 // row ids of each split
	keys     [][]string // with GroupBy: the group key of each row of out, until grouped
	starts   [][]uint64 // with GroupBy: where each split's groups start
	reported time.Time  // when progress was last reported
}

// prepare parses the expressions and decides which columns to read.
func (b *builder) prepare() error {
	var err error
	if b.spec.Filter != "" {
		if b.filter, err = expr.Parse(b.spec.Filter, b.t.Schema()); err != nil {
			return err
		}
		if b.filter.Type().ID() != arrow.BOOL {
			return badSpec("filter %q gives %s, not a boolean", b.spec.Filter, b.filter.Type())
		}
		b.columns = append(b.columns, b.filter.Columns()...)
	}
	for _, c := range b.spec.GroupBy {
		if len(b.t.Schema().FieldIndices(c)) == 0 {
			return badSpec("group_by: unknown column %q in table %s", c, b.t.URI())
		}
	}
	b.columns = append(b.columns, b.spec.GroupBy...)
	if s := b.spec.Split; s != nil {
		switch s.Kind {
		case SplitHash:
			for _, c := range s.Columns {
				if len(b.t.Schema().FieldIndices(c)) == 0 {
					return badSpec("split_hash: unknown column %q in table %s", c, b.t.URI())
				}
			}
			b.columns = append(b.columns, s.Columns...)
		case SplitCalculated:
			if b.calc, err = expr.Parse(s.Expr, b.t.Schema()); err != nil {
				return err
			}
			if !arrow.IsInteger(b.calc.Type().ID()) {
				return badSpec("split_calculated: %q gives %s, not an integer", s.Expr, b.calc.Type())
			}
			b.columns = append(b.columns, b.calc.Columns()...)
		}
	}
	if c := b.spec.Lengths; c != "" {
		if err := CheckLengthsColumn(b.t.Schema(), c); err != nil {
			return badSpec("lengths: %v in table %s", err, b.t.URI())
		}
		b.columns = append(b.columns, c)
	}
	slices.Sort(b.columns)
	b.columns = slices.Compact(b.columns)
	return nil
}

// groupResult is what scanning one row group yields: its kept row ids,
// ascending, in one part, or in one part per split for hash and calculated
// splits (rows in no split dropped), and with GroupBy their group keys.
type groupResult struct {
	parts [][]uint64
	keys  [][]string // the canonical encoding of each row's key (see hash.go)
	kept  int64      // rows the filter kept, whether in a split or not
}

// numParts is how many parts the scan produces.
func (b *builder) numParts() int {
	s := b.spec.Split
	switch {
	case s == nil || (s.Kind != SplitHash && s.Kind != SplitCalculated):
		return 1
	case s.Kind == SplitHash:
		return len(s.Weights)
	}
	return len(s.Names)
}

// scan visits every row group and returns the kept row ids, ascending, in
// parts (see groupResult).
func (b *builder) scan(ctx context.Context) ([][]uint64, error) {
	total := b.t.NumRows()
	for _, f := range b.t.Files() {
		b.stats.groups += int64(len(f.RowGroups))
	}
	b.stats.rows = total
	if len(b.columns) == 0 {
		// No column to read: keep every row, unless a constant filter says none.
		keepAll := true
		if b.filter != nil {
			var err error
			if keepAll, err = b.constantFilter(ctx); err != nil {
				return nil, err
			}
		}
		var ids []uint64
		if keepAll {
			ids = make([]uint64, total)
			for i := range ids {
				ids[i] = uint64(i)
			}
		}
		b.stats.kept = int64(len(ids))
		b.progress("scan", total, total)
		return [][]uint64{ids}, nil
	}
	r, err := b.t.NewReader(table.ReaderOptions{Columns: b.columns, Allocator: b.opts.Allocator})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	if b.spec.Lengths != "" {
		b.lengths = make([]uint32, total)
	}
	type job struct {
		file, group int
		first, rows int64
	}
	var jobs []job
	var first int64
	for f, file := range b.t.Files() {
		for g, n := range file.RowGroups {
			jobs = append(jobs, job{f, g, first, n})
			first += n
		}
	}
	results := make([]groupResult, len(jobs))
	var mu sync.Mutex
	var done int64
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(runtime.GOMAXPROCS(0))
	next := 0
	for next < len(jobs) {
		j, i := jobs[next], next
		next++
		if !g.TryGo(func() (err error) {
			defer errcode.Recover(&err, errcode.Internal, "scan", fmt.Sprintf("%s (file %d, row group %d)", b.t.URI(), j.file, j.group))
			res, skipped, err := b.scanGroup(gctx, r, j.file, j.group, j.first, j.rows)
			if err != nil {
				return err
			}
			results[i] = res
			mu.Lock()
			done += j.rows
			if skipped {
				b.stats.skipped++
			}
			mu.Unlock()
			return nil
		}) {
			next--
			// All workers busy: report progress from this goroutine while waiting.
			mu.Lock()
			d := done
			mu.Unlock()
			b.progress("scan", d, total)
			time.Sleep(time.Millisecond)
		}
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	b.progress("scan", total, total)
	// Join each part's pieces into one exactly sized slice, dropping each
	// group's pieces as they are copied, so the peak stays near one copy.
	out := make([][]uint64, b.numParts())
	for p := range out {
		n := 0
		for _, res := range results {
			if res.parts != nil {
				n += len(res.parts[p])
			}
		}
		out[p] = make([]uint64, 0, n)
		for i := range results {
			if results[i].parts != nil {
				out[p] = append(out[p], results[i].parts[p]...)
				results[i].parts[p] = nil
			}
		}
	}
	if len(b.spec.GroupBy) > 0 {
		b.keys = make([][]string, len(out))
		for p := range out {
			b.keys[p] = make([]string, 0, len(out[p]))
			for i := range results {
				if results[i].keys != nil {
					b.keys[p] = append(b.keys[p], results[i].keys[p]...)
					results[i].keys[p] = nil
				}
			}
		}
	}
	for _, res := range results {
		b.stats.kept += res.kept
	}
	return out, nil
}

// constantFilter evaluates a filter that reads no column.
func (b *builder) constantFilter(ctx context.Context) (bool, error) {
	rec := array.NewRecordBatch(arrow.NewSchema(nil, nil), nil, 1)
	defer rec.Release()
	keep, err := b.filter.Mask(ctx, rec, b.opts.Allocator)
	if err != nil {
		return false, errcode.Wrap(err, errcode.InvalidArgument, "filter", b.t.URI())
	}
	return keep[0], nil
}

// scanGroup filters one row group and computes its rows' splits.
func (b *builder) scanGroup(ctx context.Context, r *table.Reader, file, group int, first, rows int64) (groupResult, bool, error) {
	if b.filter != nil {
		md, err := b.t.Footer(ctx, file)
		if err != nil {
			return groupResult{}, false, err
		}
		if !b.filter.MayMatch(expr.RowGroupStats(md.RowGroup(group))) {
			return groupResult{parts: make([][]uint64, b.numParts())}, true, nil
		}
	}
	rec, err := r.ReadGroup(ctx, file, group)
	if err != nil {
		return groupResult{}, false, err
	}
	defer rec.Release()
	keep := make([]bool, rows)
	if b.filter != nil {
		if keep, err = b.filter.Mask(ctx, rec, b.opts.Allocator); err != nil {
			return groupResult{}, false, errcode.Wrap(err, errcode.InvalidArgument, "filter", fmt.Sprintf("%s (file %d, row group %d)", b.t.URI(), file, group))
		}
	} else {
		for i := range keep {
			keep[i] = true
		}
	}
	splits, err := b.rowSplits(ctx, rec)
	if err != nil {
		return groupResult{}, false, err
	}
	keys, err := b.rowKeys(rec, keep)
	if err != nil {
		return groupResult{}, false, err
	}
	if b.lengths != nil {
		col := rec.Column(rec.Schema().FieldIndices(b.spec.Lengths)[0])
		if err := rowLengths(col, keep, b.lengths[first:first+rows]); err != nil {
			return groupResult{}, false, errcode.Wrap(fmt.Errorf("row %d: lengths column %q: %w", first+int64(err.row), b.spec.Lengths, err),
				errcode.InvalidArgument, "lengths", fmt.Sprintf("%s (file %d, row group %d)", b.t.URI(), file, group))
		}
	}
	res := groupResult{parts: make([][]uint64, b.numParts())}
	if keys != nil {
		res.keys = make([][]string, b.numParts())
	}
	for i, k := range keep {
		if k {
			res.kept++
		}
		p := 0
		switch {
		case !k:
			continue
		case splits == nil:
		case splits[i] != noSplit:
			p = int(splits[i])
		default:
			continue
		}
		res.parts[p] = append(res.parts[p], uint64(first)+uint64(i))
		if keys != nil {
			res.keys[p] = append(res.keys[p], keys[i])
		}
	}
	return res, false, nil
}

// rowKeys returns the group key of each kept row with GroupBy, else nil.
func (b *builder) rowKeys(rec arrow.RecordBatch, keep []bool) ([]string, error) {
	if len(b.spec.GroupBy) == 0 {
		return nil, nil
	}
	cols := make([]arrow.Array, len(b.spec.GroupBy))
	for i, c := range b.spec.GroupBy {
		cols[i] = rec.Column(rec.Schema().FieldIndices(c)[0])
	}
	keys := make([]string, rec.NumRows())
	err := EncodeRows(cols, len(keys), func(row int, key []byte) {
		if keep[row] {
			keys[row] = string(key)
		}
	})
	if err != nil {
		return nil, badSpec("group_by: %v", err)
	}
	return keys, nil
}

// rowSplits returns each row's split for hash and calculated splits, else nil.
func (b *builder) rowSplits(ctx context.Context, rec arrow.RecordBatch) ([]int32, error) {
	s := b.spec.Split
	if s == nil || (s.Kind != SplitHash && s.Kind != SplitCalculated) {
		return nil, nil
	}
	out := make([]int32, rec.NumRows())
	if s.Kind == SplitHash {
		cols := make([]arrow.Array, len(s.Columns))
		for i, c := range s.Columns {
			cols[i] = rec.Column(rec.Schema().FieldIndices(c)[0])
		}
		hashes := make([]uint64, rec.NumRows())
		if err := HashRows(cols, hashes); err != nil {
			return nil, badSpec("split_hash: %v", err)
		}
		var total uint64
		for _, w := range s.Weights {
			total += uint64(w)
		}
		total += uint64(s.DiscardWeight)
		for i, h := range hashes {
			out[i] = weightedBucket(h%total, s.Weights)
		}
		return out, nil
	}
	v, err := b.calc.Eval(ctx, rec, b.opts.Allocator)
	if err != nil {
		return nil, err
	}
	defer v.Release()
	ints := v.(*array.Int64)
	n := int64(len(s.Names))
	for i := range out {
		out[i] = noSplit
		if ints.IsValid(i) && ints.Value(i) >= 0 && ints.Value(i) < n {
			out[i] = int32(ints.Value(i))
		}
	}
	return out, nil
}

// lengthError is a row whose length cannot be recorded.
type lengthError struct {
	row int // in the row group
	msg string
}

func (e *lengthError) Error() string { return e.msg }

// RowLengths writes the length of each row of col that keep keeps (every
// row when keep is nil) into out, as Spec.Lengths reads it: the number of
// elements of a list, or the value of an integer. It fails naming the first
// such row whose length is null, negative or above MaxLength.
func RowLengths(col arrow.Array, keep []bool, out []uint32) error {
	if keep == nil {
		keep = make([]bool, col.Len())
		for i := range keep {
			keep[i] = true
		}
	}
	if err := rowLengths(col, keep, out); err != nil {
		return fmt.Errorf("row %d: %s", err.row, err.msg)
	}
	return nil
}

// CheckLengthsColumn checks that column c of schema can give lengths (see
// Spec.Lengths).
func CheckLengthsColumn(schema *arrow.Schema, c string) error {
	idx := schema.FieldIndices(c)
	if len(idx) == 0 {
		return fmt.Errorf("unknown column %q", c)
	}
	typ := schema.Field(idx[0]).Type
	if _, list := typ.(arrow.ListLikeType); !list && !arrow.IsInteger(typ.ID()) {
		return fmt.Errorf("column %q is %s; it must be a list (its length counts) or an integer", c, typ)
	}
	return nil
}

// rowLengths writes the length of every kept row of col into out (see
// Spec.Lengths).
func rowLengths(col arrow.Array, keep []bool, out []uint32) *lengthError {
	for i, k := range keep {
		if !k {
			continue
		}
		if col.IsNull(i) {
			return &lengthError{i, "null, so its length is unknown"}
		}
		var n int64
		switch c := col.(type) {
		case array.ListLike:
			s, e := c.ValueOffsets(i)
			n = e - s
		case *array.Int8:
			n = int64(c.Value(i))
		case *array.Int16:
			n = int64(c.Value(i))
		case *array.Int32:
			n = int64(c.Value(i))
		case *array.Int64:
			n = c.Value(i)
		case *array.Uint8:
			n = int64(c.Value(i))
		case *array.Uint16:
			n = int64(c.Value(i))
		case *array.Uint32:
			n = int64(c.Value(i))
		case *array.Uint64:
			if v := c.Value(i); v > MaxLength {
				return &lengthError{i, fmt.Sprintf("length %d is above %d", v, uint64(MaxLength))}
			}
			n = int64(c.Value(i))
		default:
			return &lengthError{i, fmt.Sprintf("%s gives no length", col.DataType())}
		}
		if n < 0 || n > MaxLength {
			return &lengthError{i, fmt.Sprintf("length %d is outside [0, %d]", n, int64(MaxLength))}
		}
		out[i] = uint32(n)
	}
	return nil
}

// weightedBucket returns the index whose cumulative weight range holds x, or
// noSplit when x falls past them all (the discard range).
func weightedBucket(x uint64, weights []int64) int32 {
	var cum uint64
	for i, w := range weights {
		cum += uint64(w)
		if x < cum {
			return int32(i)
		}
	}
	return noSplit
}

// assign distributes the kept rows over the splits and returns their names.
// parts is what scan returned: one part of all kept rows, or the rows of each
// hash or calculated split.
func (b *builder) assign(parts [][]uint64) ([]string, error) {
	s := b.spec.Split
	if s == nil {
		b.out = parts
		return []string{"all"}, nil
	}
	if s.Kind == SplitHash || s.Kind == SplitCalculated {
		b.out = parts
		return s.names(len(parts)), nil
	}
	kept := parts[0]
	c := max(s.ClumpSize, 1)
	units := (int64(len(kept)) + c - 1) / c // clumps of c rows; the last may be shorter
	sizes, err := s.sizes(units)
	if err != nil {
		return nil, err
	}
	if len(s.Names) > 0 && len(s.Names) != len(sizes) {
		return nil, badSpec("%d split names for %d splits (fixed=%d of %d rows kept)", len(s.Names), len(sizes), s.Fixed, len(kept))
	}
	if s.Kind == SplitRandom {
		if c == 1 {
			Permute(NewRand(DeriveKey(s.Seed, "split_random")), kept)
		} else {
			kept = permuteClumps(kept, c, NewRand(DeriveKey(s.Seed, "split_random")))
		}
	}
	var at int64
	for _, n := range sizes {
		end := min((at+n)*c, int64(len(kept)))
		part := kept[at*c : end : end]
		slices.Sort(part) // a split's stored order is row id order until shuffled
		b.out = append(b.out, part)
		at += n
	}
	return s.names(len(sizes)), nil
}

// permuteClumps returns ids with its whole clumps of c consecutive elements
// in a random order; a shorter last clump stays last, so that clumps start at
// multiples of c.
func permuteClumps(ids []uint64, c int64, r *Rand) []uint64 {
	n := int64(len(ids))
	order := make([]int64, n/c)
	for i := range order {
		order[i] = int64(i)
	}
	Permute(r, order)
	out := make([]uint64, 0, n)
	for _, u := range order {
		out = append(out, ids[u*c:(u+1)*c]...)
	}
	return append(out, ids[n/c*c:]...)
}

// group reorders ids so that the rows of each group, those with equal keys,
// are consecutive, and returns where each group starts. Groups come in the
// order of their first rows, permuted by r when it is not nil; rows keep
// their order inside their group.
func group(ids []uint64, keys []string, r *Rand) []uint64 {
	index := map[string]int{}
	of := make([]int, len(ids)) // the group of each row
	var sizes []int64
	for i, k := range keys {
		g, ok := index[k]
		if !ok {
			g = len(sizes)
			index[k] = g
			sizes = append(sizes, 0)
		}
		of[i] = g
		sizes[g]++
	}
	order := make([]int, len(sizes))
	for i := range order {
		order[i] = i
	}
	if r != nil {
		Permute(r, order)
	}
	at := make([]int64, len(sizes)) // the next position of each group's rows
	starts := make([]uint64, len(sizes))
	var pos int64
	for i, g := range order {
		at[g], starts[i] = pos, uint64(pos)
		pos += sizes[g]
	}
	src := slices.Clone(ids)
	for i, g := range of {
		ids[at[g]] = src[i]
		at[g]++
	}
	return starts
}

// shuffle orders ids by sh with the given key (see ShuffleSpec). Only whole
// clumps move: a partial clump at the end stays last, so that clumps stay
// aligned to multiples of the clump size in every epoch's order.
func shuffle(ids []uint64, sh ShuffleSpec, r *Rand) {
	clump := max(sh.ClumpSize, 1)
	if clump == 1 && sh.Window == 0 {
		// The same swaps as permuting an index array, applied in place: the
		// result is identical and needs no second copy of the ids.
		Permute(r, ids)
		return
	}
	units := int64(len(ids)) / clump
	order := make([]int64, units)
	for i := range order {
		order[i] = int64(i)
	}
	if sh.Window > 0 {
		windows := (units + sh.Window - 1) / sh.Window
		worder := make([]int64, windows)
		for i := range worder {
			worder[i] = int64(i)
		}
		Permute(r, worder)
		at := 0
		for _, w := range worder {
			lo, hi := w*sh.Window, min((w+1)*sh.Window, units)
			win := order[at : at+int(hi-lo)]
			for i := range win {
				win[i] = lo + int64(i)
			}
			Permute(r, win)
			at += int(hi - lo)
		}
	} else {
		Permute(r, order)
	}
	src := slices.Clone(ids[:units*clump])
	for i, u := range order {
		copy(ids[int64(i)*clump:], src[u*clump:(u+1)*clump])
	}
}

// write persists the split chunks, then the manifest. Chunks go under a
// folder named by the permutation's content ID, so a concurrent build of other
// inputs at the same URI can never overwrite them: the loser of the manifest
// race leaves only unreferenced chunks behind.
//
// Unlike a table commit (core/table's checkExclusiveCreate), a build does not
// probe the store's conditional writes nor refuse a store that ignores them,
// because every object it writes but build.json is a function of its inputs
// and is never replaced by different bytes under the same key: a chunk's key
// holds the content ID, and the manifest is that ID's sealed description. Two
// builds of the same permutation at one URI, racing or repeated, write the
// same bytes to the same keys, so either order leaves one whole permutation
// that verifies (and on a store that honours the condition, CreateExclusive
// reads the manifest back and finds its own bytes). Two builds of different
// permutations at one URI on a store that ignores the condition leave the
// manifest written last, whose chunks are all there (each build writes its
// chunks first): nothing stored is corrupted, and a permutation is derived
// data that the pinned table rebuilds. Build reads the manifest back and fails
// with Changed when it holds another permutation; it cannot see a manifest
// written after that read, as docs/storage.md says.
func (b *builder) write(ctx context.Context, loc *store.Location, names []string) (Manifest, error) {
	width := 8
	if b.t.NumRows() <= 1<<32 {
		width = 4
	}
	m := Manifest{Format: sealedFormat, Table: b.t.Pin(), Spec: b.spec, IDWidth: width,
		RowsScanned: b.stats.rows, RowsKept: b.stats.kept, RowGroups: b.stats.groups, RowGroupsSkipped: b.stats.skipped}
	if b.starts != nil || b.lengths != nil {
		m.Format = FormatVersion
	}
	var total int64
	for i, ids := range b.out {
		s := SplitInfo{Name: names[i], NumRows: int64(len(ids)), ChunkSHA256: []string{}}
		forChunks(ids, func(_ int64, chunk []uint64) {
			s.ChunkSHA256 = append(s.ChunkSHA256, seal.Sum(encodeIDs(chunk, width)))
			if b.lengths != nil {
				s.LengthSHA256 = append(s.LengthSHA256, seal.Sum(b.encodeLengths(chunk)))
			}
		})
		if b.starts != nil {
			s.NumGroups, s.GroupSHA256 = int64(len(b.starts[i])), []string{}
			forChunks(b.starts[i], func(_ int64, chunk []uint64) {
				s.GroupSHA256 = append(s.GroupSHA256, seal.Sum(encodeIDs(chunk, width)))
			})
		}
		m.Splits = append(m.Splits, s)
		total += int64(len(ids))
	}
	id, err := contentID(m)
	if err != nil {
		return Manifest{}, err
	}
	m.ID = id
	if ok, err := loc.Exists(ctx, path.Join(loc.Key, manifestKey)); err == nil && ok {
		return Manifest{}, errcode.New(errcode.AlreadyExists, "write permutation", loc.URI,
			"a permutation already exists there; permutations are immutable, persist to a new URI")
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	var done int64
	for i, ids := range b.out {
		write := func(p part, c int64, data []byte) {
			key := chunkKey(loc.Key, id, i, p, c)
			g.Go(func() (err error) {
				defer errcode.Recover(&err, errcode.Internal, "write permutation", loc.ObjectURI(key))
				return loc.WriteAll(gctx, key, data, store.WriterOptions{})
			})
		}
		forChunks(ids, func(c int64, chunk []uint64) {
			write(rowIDs, c, encodeIDs(chunk, width))
			if b.lengths != nil {
				write(lengths, c, b.encodeLengths(chunk))
			}
			done += int64(len(chunk))
			b.progress("write", done, total)
		})
		if b.starts != nil {
			forChunks(b.starts[i], func(c int64, chunk []uint64) {
				write(groupStarts, c, encodeIDs(chunk, width))
			})
		}
	}
	if err := g.Wait(); err != nil {
		return Manifest{}, err
	}
	return m, writeManifest(ctx, loc, m)
}

// encodeLengths returns the persisted lengths of the rows ids.
func (b *builder) encodeLengths(ids []uint64) []byte {
	n := make([]uint64, len(ids))
	for i, id := range ids {
		n[i] = uint64(b.lengths[id])
	}
	return encodeIDs(n, LengthWidth)
}

// forChunks calls fn with each run of ChunkIDs row ids (fewer in the last).
func forChunks(ids []uint64, fn func(c int64, chunk []uint64)) {
	for c := int64(0); c*ChunkIDs < int64(len(ids)); c++ {
		fn(c, ids[c*ChunkIDs:min((c+1)*ChunkIDs, int64(len(ids)))])
	}
}

// progress reports to the callback at most ten times a second, and always
// when a phase completes.
func (b *builder) progress(phase string, done, total int64) {
	if b.opts.Progress == nil || (done < total && time.Since(b.reported) < 100*time.Millisecond) {
		return
	}
	b.reported = time.Now()
	b.opts.Progress(Progress{Phase: phase, Done: done, Total: total})
}
