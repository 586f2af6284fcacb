package permutation

import (
	"context"
	"encoding/json"
	"fmt"
	"math/bits"
	"path"
	"runtime"
	"slices"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"golang.org/x/sync/errgroup"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/store"
	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/permutation/expr"
)

// Progress reports how far a build is. A build scans the table ("scan"),
// then orders each split and digests its chunks ("order"), then orders it
// again and writes them ("write"). Before the first ordering hands out
// rows, the passes that place rows in buckets of positions (groups) or
// deal them to splits (splits dealt in a pass) report the records they
// have read of all they read ("place", interleaved with "order" where
// splits of both kinds follow one another).
type Progress struct {
	Phase string // "scan", "place", "order", "write"
	Done  int64  // rows scanned, records placed, or row ids ordered or written
	Total int64
	// While scanning: the rows the filter kept so far, and the bytes read.
	Kept, Bytes int64
}

// BuildOptions configure Build.
type BuildOptions struct {
	// Progress, when set, is called from the building goroutine as work is
	// done, at most ten times a second and as each phase completes.
	Progress func(Progress)
	// Allocator for the Arrow memory of the scan; nil means Go's.
	Allocator memory.Allocator
	// Memory bounds the build's memory, in bytes (see docs/tuning.md); 0
	// means DefaultBuildMemory. It changes how the kept rows pass through
	// the store while the build runs, never the permutation built.
	Memory int64
}

// DefaultBuildMemory is the memory of a build that sets none, and
// MinBuildMemory the least a build takes: it holds a bucket of up to
// 2^22 row ids (see bucketIDs) as it shuffles it, and row groups as it
// scans them.
const (
	DefaultBuildMemory = 1 << 30
	MinBuildMemory     = 256 << 20
)

// narrowRows is the most rows of a table whose row ids are persisted in 4
// bytes; a variable for tests, which lower it to have 8-byte ids.
var narrowRows int64 = 1 << 32

// built, when tests set it, is called as each build ends with the most
// records its ordering held in one slice.
var built func(held int64)

// noSplit marks a row that is in no split.
const noSplit = -1

// Build builds the permutation of t that spec describes and persists it at
// uri, which must not hold a permutation yet. It reads only the columns the
// filter, the split, the groups and the lengths need, and skips row groups
// whose statistics rule the filter out. Its memory is bounded by
// BuildOptions.Memory whatever the table's size, but with Spec.GroupBy by a
// few numbers a group beside it; random splits, and sequential splits
// fully shuffled, of a table of at most bucketIDs rows hold every kept row
// or a split (see docs/spec.md, "Building in bounded memory"). It is the
// distributed build of one rank (see Rank).
func Build(ctx context.Context, t *table.Table, spec Spec, uri string, opts BuildOptions) (*Permutations, error) {
	r, err := NewRank(ctx, t, spec, uri, opts, RankOptions{World: 1})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	report, err := r.Next(ctx, nil)
	for report != nil && err == nil {
		report, err = r.Next(ctx, [][]byte{report})
	}
	if built != nil {
		built(r.b.held)
	}
	if err != nil {
		return nil, err
	}
	return r.Permutations(), nil
}

// newBuilder checks the spec and decides what to read.
func newBuilder(ctx context.Context, t *table.Table, spec Spec, opts BuildOptions) (*builder, error) {
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
		if err := sh.validate(); err != nil {
			return nil, err
		}
		spec.Shuffle = &sh
	}
	var spans *pageSpans
	if sh := spec.Shuffle; sh != nil && sh.ClumpSize == AutoClump {
		var err error
		if spans, err = loadPageSpans(ctx, t); err != nil {
			return nil, err
		}
	}
	switch {
	case opts.Memory == 0:
		opts.Memory = DefaultBuildMemory
	case opts.Memory < MinBuildMemory:
		return nil, errcode.New(errcode.InvalidArgument, "build permutation", t.URI(),
			"build memory %d bytes is below the %d a build takes", opts.Memory, int64(MinBuildMemory))
	}
	if opts.Allocator == nil {
		opts.Allocator = memory.DefaultAllocator
	}
	b := &builder{t: t, spec: spec, opts: opts, world: 1, spans: spans}
	return b, b.prepare()
}

// commit opens the permutation just written and records the build beside it.
func (b *builder) commit(ctx context.Context, loc *store.Location, m Manifest, start time.Time) (*Permutations, error) {
	const op = "build permutation"
	p, err := open(ctx, loc, table.OpenOptions{BlockCache: b.t.BlockCache()})
	if err != nil {
		loc.Close()
		return nil, err
	}
	if p.ID() != m.ID {
		p.Close()
		return nil, errcode.New(errcode.Changed, op, loc.URI,
			"the store accepted this build's exclusive create of %s and then held another permutation (%s, not %s) under it: "+
				"another build persisted there at the same time and the store does not honour conditional writes; "+
				"this build's permutation is not the one at %s", manifestKey, p.ID(), m.ID, loc.URI)
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
	t           *table.Table
	spec        Spec
	opts        BuildOptions
	rank, world int        // this build's rank of its ranks (see Rank)
	spans       *pageSpans // with AutoClump: the table's page spans, else nil
	jobs        []scanJob  // the row groups this rank scans

	filter  *expr.Expr // nil: keep every row
	calc    *expr.Expr // split_calculated's expression
	columns []string   // columns the scan reads

	stats struct {
		rows, groups, skipped int64
		kept, done            atomic.Int64 // rows kept and scanned, as the scan goes
	}
	keys     []*groups   // with GroupBy: the groups of each part's rows, as the scan numbers them
	numbers  []numbering // with GroupBy: of each part this rank orders, its groups' numbers (gatherKeys)
	held     int64       // the most records the ordering held in one slice
	reported time.Time   // when progress was last reported
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

// groupResult is what scanning one row group yields: the part of each of
// its rows, with Spec.Lengths their lengths, and with GroupBy their group
// keys. Parts are the splits of hash and calculated splits, else one part
// of all kept rows.
type groupResult struct {
	first   int64    // the row id of its first row
	parts   []int32  // the part of each row, or noSplit for a row in none
	lengths []uint32 // of each row the filter kept, by its index in the group
	keys    []string // the canonical encoding of each kept row's key (see hash.go), likewise
	kept    int64    // rows the filter kept, whether in a split or not
	rows    int64    // rows of the row group
	skipped bool     // whether its statistics ruled the filter out
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

// scanJob is one row group to scan.
type scanJob struct {
	file, group int
	first, rows int64
}

// rankJobs returns the row groups that rank r of w scans: those whose
// first row's index f in the table of N rows has ⌊f·w/N⌋ = r, a run of
// consecutive row groups that holds about N/w rows (see docs/spec.md,
// "Distributed builds"). It also returns the number of row groups.
func rankJobs(t *table.Table, r, w int) ([]scanJob, int64) {
	var jobs []scanJob
	var first, all int64
	for f, file := range t.Files() {
		for g, n := range file.RowGroups {
			var q uint64 // a table of no rows has only empty row groups, rank 0's
			if t.NumRows() > 0 {
				hi, lo := bits.Mul64(uint64(first), uint64(w))
				q, _ = bits.Div64(hi, lo, uint64(t.NumRows()))
			}
			if int(q) == r {
				jobs = append(jobs, scanJob{f, g, first, n})
			}
			first += n
			all++
		}
	}
	return jobs, all
}

// scan visits this rank's row groups and routes their kept rows, in row id
// order, to the spill. Row groups are scanned in parallel, scanWorkers at a
// time, and routed in order, at most twice as many of them held at once.
func (b *builder) scan(ctx context.Context, rt *router) error {
	jobs := b.jobs
	b.stats.rows, b.stats.groups = 0, int64(len(jobs))
	for _, j := range jobs {
		b.stats.rows += j.rows
	}
	if len(jobs) == 0 {
		return nil
	}
	if len(b.columns) == 0 {
		return b.scanNone(ctx, rt)
	}
	r, err := b.t.NewReader(table.ReaderOptions{Columns: b.columns, Allocator: b.opts.Allocator})
	if err != nil {
		return err
	}
	defer r.Close()
	if len(b.spec.GroupBy) > 0 {
		b.keys = make([]*groups, b.numParts())
		for p := range b.keys {
			b.keys[p] = &groups{}
		}
	}
	results := make([]chan groupResult, len(jobs))
	for i := range results {
		results[i] = make(chan groupResult, 1)
	}
	g, gctx := errgroup.WithContext(ctx)
	n := b.scanWorkers()
	ahead, workers := make(chan struct{}, 2*n), make(chan struct{}, n)
	g.Go(func() (err error) {
		defer errcode.Recover(&err, errcode.Internal, "scan", b.t.URI())
		for i, j := range jobs {
			select {
			case ahead <- struct{}{}:
			case <-gctx.Done():
				return gctx.Err()
			}
			workers <- struct{}{}
			g.Go(func() (err error) {
				defer errcode.Recover(&err, errcode.Internal, "scan", fmt.Sprintf("%s (file %d, row group %d)", b.t.URI(), j.file, j.group))
				defer func() { <-workers }()
				res, err := b.scanGroup(gctx, r, j)
				results[i] <- res
				return err
			})
		}
		return nil
	})
	finished := make(chan struct{})
	g.Go(func() (err error) {
		defer errcode.Recover(&err, errcode.Internal, "scan", b.t.URI())
		defer close(finished)
		for i := range jobs {
			select {
			case res := <-results[i]:
				if err := b.take(res, rt); err != nil {
					return err
				}
				<-ahead
			case <-gctx.Done():
				return gctx.Err()
			}
		}
		return nil
	})
	return b.waitScan(gctx, g, finished, r)
}

// waitScan waits for the scan, whose routing closes finished as it ends,
// reporting its progress from the calling goroutine ten times a second.
func (b *builder) waitScan(gctx context.Context, g *errgroup.Group, finished <-chan struct{}, r *table.Reader) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for running := true; running; {
		select {
		case <-finished:
			running = false
		case <-gctx.Done():
			running = false
		case <-tick.C:
			b.scanned(r.Stats().BytesRead)
		}
	}
	if err := g.Wait(); err != nil {
		return err
	}
	b.scanned(r.Stats().BytesRead)
	return nil
}

// scanRowBytes is about what scanning a row takes while its row group is
// scanned: its keep flag, split, hash, row id and a value or two decoded.
const scanRowBytes = 48

// scanWorkers returns how many row groups are scanned at once: GOMAXPROCS,
// or fewer when a quarter of the build's memory holds fewer of the largest.
func (b *builder) scanWorkers() int {
	var rows int64 = 1
	for _, f := range b.t.Files() {
		for _, n := range f.RowGroups {
			rows = max(rows, n)
		}
	}
	return int(min(max(b.opts.Memory/4/(rows*scanRowBytes), 1), int64(runtime.GOMAXPROCS(0))))
}

// scanned reports the progress of the scan.
func (b *builder) scanned(bytes int64) {
	b.progress(Progress{Phase: "scan", Done: b.stats.done.Load(), Total: b.stats.rows, Kept: b.stats.kept.Load(), Bytes: bytes})
}

// take routes the kept rows of one row group.
func (b *builder) take(res groupResult, rt *router) error {
	defer b.stats.done.Add(res.rows)
	b.stats.kept.Add(res.kept)
	if res.skipped {
		b.stats.skipped++
	}
	for i, p := range res.parts {
		if p == noSplit {
			continue
		}
		var n, g uint32
		if res.lengths != nil {
			n = res.lengths[i]
		}
		if b.keys != nil {
			var err error
			if g, err = b.keys[p].number(res.keys[i]); err != nil {
				return err
			}
		}
		if err := rt.route(int(p), uint64(res.first)+uint64(i), n, g); err != nil {
			return err
		}
	}
	return nil
}

// scanNone routes every row of this rank's row groups, unless a constant
// filter keeps none: a scan that reads no column.
func (b *builder) scanNone(ctx context.Context, rt *router) error {
	if b.filter != nil {
		keep, err := b.constantFilter(ctx)
		if err != nil || !keep {
			b.stats.done.Store(b.stats.rows)
			b.scanned(0)
			return err
		}
	}
	first := uint64(b.jobs[0].first)
	for id := first; id < first+uint64(b.stats.rows); id++ {
		if err := rt.route(0, id, 0, 0); err != nil {
			return err
		}
	}
	b.stats.kept.Store(b.stats.rows)
	b.stats.done.Store(b.stats.rows)
	b.scanned(0)
	return nil
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
func (b *builder) scanGroup(ctx context.Context, r *table.Reader, j scanJob) (groupResult, error) {
	res := groupResult{first: j.first, rows: j.rows}
	where := func() string { return fmt.Sprintf("%s (file %d, row group %d)", b.t.URI(), j.file, j.group) }
	if b.filter != nil {
		md, err := b.t.Footer(ctx, j.file)
		if err != nil {
			return res, err
		}
		if !b.filter.MayMatch(expr.RowGroupStats(md.RowGroup(j.group))) {
			res.skipped = true
			return res, nil
		}
	}
	rec, err := r.ReadGroup(ctx, j.file, j.group)
	if err != nil {
		return res, err
	}
	defer rec.Release()
	keep := make([]bool, j.rows)
	if b.filter != nil {
		if keep, err = b.filter.Mask(ctx, rec, b.opts.Allocator); err != nil {
			return res, errcode.Wrap(err, errcode.InvalidArgument, "filter", where())
		}
	} else {
		for i := range keep {
			keep[i] = true
		}
	}
	splits, err := b.rowSplits(ctx, rec)
	if err != nil {
		return res, err
	}
	keys, err := b.rowKeys(rec, keep)
	if err != nil {
		return res, err
	}
	if b.spec.Lengths != "" {
		res.lengths = make([]uint32, j.rows)
		col := rec.Column(rec.Schema().FieldIndices(b.spec.Lengths)[0])
		if err := rowLengths(col, keep, res.lengths); err != nil {
			return res, errcode.Wrap(fmt.Errorf("row %d: lengths column %q: %w", j.first+int64(err.row), b.spec.Lengths, err),
				errcode.InvalidArgument, "lengths", where())
		}
	}
	res.keys = keys
	res.parts = splits
	if splits == nil {
		res.parts = make([]int32, j.rows)
	}
	for i, k := range keep {
		if k {
			res.kept++
		} else {
			res.parts[i] = noSplit
		}
	}
	return res, nil
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

// permuteClumps returns ids with its whole clumps of c consecutive elements
// in a random order; a shorter last clump stays last, so that clumps start at
// multiples of c.
func permuteClumps[T any](ids []T, c int64, r *Rand) []T {
	n := int64(len(ids))
	order := identity(n / c)
	Permute(r, order)
	out := make([]T, 0, n)
	for _, u := range order {
		out = append(out, ids[u*c:(u+1)*c]...)
	}
	return append(out, ids[n/c*c:]...)
}

// shuffle orders ids by sh with the given key (see ShuffleSpec). Only whole
// clumps move. With AutoClump, starts are where the clumps of ids start
// (clumpStarts), each whole; else they are nil and clumps hold ClumpSize
// rows: a partial clump at the end stays last, so that clumps stay aligned
// to multiples of the clump size in every epoch's order.
func shuffle[T any](ids []T, sh ShuffleSpec, r *Rand, starts []int64) {
	if starts != nil {
		order := unitOrder(r, int64(len(starts)), sh.Window)
		src := slices.Clone(ids)
		at := ids[:0]
		for _, u := range order {
			end := int64(len(src))
			if u+1 < int64(len(starts)) {
				end = starts[u+1]
			}
			at = append(at, src[starts[u]:end]...)
		}
		return
	}
	clump := max(sh.ClumpSize, 1)
	if clump == 1 && sh.Window == 0 {
		// The same swaps as permuting an index array, applied in place: the
		// result is identical and needs no second copy of the ids.
		Permute(r, ids)
		return
	}
	units := int64(len(ids)) / clump
	order := unitOrder(r, units, sh.Window)
	src := slices.Clone(ids[:units*clump])
	for i, u := range order {
		copy(ids[int64(i)*clump:], src[u*clump:(u+1)*clump])
	}
}

// unitOrder returns the order of units units that a shuffle with window
// window (0: none) draws from r.
func unitOrder(r *Rand, units, window int64) []int64 {
	if window == 0 {
		order := identity(units)
		Permute(r, order)
		return order
	}
	order := make([]int64, 0, units)
	windowOrder(r, units, window, func(lo, _ int64, win []int64) error {
		for _, u := range win {
			order = append(order, lo+u)
		}
		return nil
	})
	return order
}

// identity returns 0, 1, …, n−1.
func identity(n int64) []int64 {
	s := make([]int64, n)
	for i := range s {
		s[i] = int64(i)
	}
	return s
}

// windowOrder calls fn with each window of a window shuffle of units units
// (see ShuffleSpec), in the windows' shuffled order: its units [lo, hi), and
// their order, as offsets from lo. It draws from r the windows' order, then
// each window's in turn, as they come.
func windowOrder(r *Rand, units, window int64, fn func(lo, hi int64, order []int64) error) error {
	windows := identity((units + window - 1) / window)
	Permute(r, windows)
	for _, w := range windows {
		lo, hi := w*window, min((w+1)*window, units)
		order := identity(hi - lo)
		Permute(r, order)
		if err := fn(lo, hi, order); err != nil {
			return err
		}
	}
	return nil
}

// progress reports to the callback at most ten times a second, and always
// when a phase completes.
func (b *builder) progress(p Progress) {
	if b.opts.Progress == nil || (p.Done < p.Total && time.Since(b.reported) < 100*time.Millisecond) {
		return
	}
	b.reported = time.Now()
	b.opts.Progress(p)
}
