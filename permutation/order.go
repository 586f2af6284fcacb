package permutation

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"math/bits"
	"path"
	"slices"

	"github.com/croupier-data/croupier/core/errcode"
)

// Bucketed shuffles. A full shuffle of a split larger than memory is done
// in buckets: the scan sends each kept row (each clump, with ClumpSize c > 1)
// to one of B buckets, chosen by a keyed hash; each bucket is then shuffled
// on its own, and the split's order is bucket 0's order, then bucket 1's,
// and so on (see docs/spec.md, "Bucketed shuffles"). The number of buckets
// depends on the table's row count only, never on the build's memory, so
// that a permutation stays a function of the table version and the spec.
// A table of at most bucketIDs rows has one bucket, shuffled with the
// split's key as a whole split was before buckets: its permutation is the
// one an in-memory build gives.

// bucketIDs is the most row ids per bucket: B = ⌈rows / bucketIDs⌉. It is a
// constant of the format; tests lower it to have small tables in buckets.
var bucketIDs int64 = 1 << 22

// numBuckets returns B, the buckets of each part of the scan. Only a full
// shuffle of hash, calculated or no splits has more than one: stored order
// and window shuffles read their split in order, groups are placed in
// buckets of their own (grouped), random and sequential splits are ordered
// as splits.
func (b *builder) numBuckets() int {
	sh, s := b.spec.Shuffle, b.spec.Split
	switch {
	case sh == nil || sh.Window > 0 || len(b.spec.GroupBy) > 0:
		return 1
	case s != nil && (s.Kind == SplitRandom || s.Kind == SplitSequential):
		return 1
	}
	return b.fullBuckets()
}

// fullBuckets returns B = ⌈rows / bucketIDs⌉ (at least 1), the buckets of
// a fully shuffled part of the table.
func (b *builder) fullBuckets() int {
	return int(max((b.t.NumRows()+bucketIDs-1)/bucketIDs, 1))
}

// bucketOf returns the bucket, of n, of unit u (a row id, or a clump's
// index in its split) of the part whose bucket key is key: the high word of
// x·n, where x is mix64(key + (u+1)·φ), the (u+1)th output of SplitMix64
// keyed with key.
func bucketOf(key, u uint64, n int) int {
	hi, _ := bits.Mul64(mix64(key+(u+1)*0x9E3779B97F4A7C15), uint64(n))
	return int(hi)
}

// bucketKey returns the key that sends the units of part p to buckets.
func bucketKey(seed uint64, p int) uint64 { return DeriveKey(seed, fmt.Sprintf("bucket/%d", p)) }

// shuffleKey returns the key that shuffles bucket bk of split i: the
// split's key XOR mix64(bk). mix64(0) is 0, so bucket 0's key, the one
// bucket's of a small table, is the split's.
func shuffleKey(seed uint64, i, bk int) uint64 {
	return DeriveKey(seed, fmt.Sprintf("shuffle/%d", i)) ^ mix64(uint64(bk))
}

// router sends each kept row of the scan to its bucket of the spill.
type router struct {
	sp    *spill
	keys  []uint64   // the bucket key of each part
	clump int64      // rows per unit: the shuffle's clump size, or 1
	spans *pageSpans // with AutoClump: a unit is a page span
	pos   []int64    // the rows routed to each part so far, from the split's first
}

// newRouter returns a router to sp of the rows of each part p from its
// row at[p] on, of len(at) parts.
func newRouter(b *builder, sp *spill, at []int64) *router {
	r := &router{sp: sp, clump: 1, spans: b.spans, pos: slices.Clone(at)}
	if sh := b.spec.Shuffle; sh != nil {
		r.clump = max(sh.ClumpSize, 1)
		for p := range r.pos {
			r.keys = append(r.keys, bucketKey(sh.Seed, p))
		}
	}
	return r
}

// route adds a kept row, its length and its group's number, to part p.
func (r *router) route(p int, id uint64, length, group uint32) error {
	unit := id
	switch {
	case r.spans != nil:
		unit = uint64(r.spans.of(id))
	case r.clump > 1:
		unit = uint64(r.pos[p] / r.clump)
	}
	r.pos[p]++
	bk := 0
	if r.sp.buckets > 1 {
		bk = bucketOf(r.keys[p], unit, r.sp.buckets)
	}
	return r.sp.add(p, bk, id, length, group)
}

// A layout is how records are held while they are ordered: T is uint32 for
// 4-byte row ids, uint64 for 8-byte ones or for 4-byte ones with their
// length in the high half, and wideRecord for 8-byte ones with lengths.
type layout[T any] struct {
	get    func(record []byte) T // decodes a spill record
	id     func(T) uint64
	length func(T) uint32
}

type wideRecord struct {
	id     uint64
	length uint32
}

var (
	narrowIDs = layout[uint32]{
		get:    binary.LittleEndian.Uint32,
		id:     func(v uint32) uint64 { return uint64(v) },
		length: func(uint32) uint32 { return 0 },
	}
	packedIDs = layout[uint64]{
		get:    binary.LittleEndian.Uint64,
		id:     func(v uint64) uint64 { return v & (1<<32 - 1) },
		length: func(v uint64) uint32 { return uint32(v >> 32) },
	}
	wideIDs = layout[uint64]{
		get:    binary.LittleEndian.Uint64,
		id:     func(v uint64) uint64 { return v },
		length: func(uint64) uint32 { return 0 },
	}
	wideLengths = layout[wideRecord]{
		get: func(b []byte) wideRecord {
			return wideRecord{binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint32(b[8:])}
		},
		id:     func(v wideRecord) uint64 { return v.id },
		length: func(v wideRecord) uint32 { return v.length },
	}
)

// splitSink takes each split's records in their final order: add or skip,
// any number of times, then end, split after split. skip passes over
// records that this rank does not order (see orderer.need).
type splitSink[T any] interface {
	add(records []T) error
	skip(n int64) error
	end(groupStarts []uint64) error
}

// orderer reads the spill back and puts each split in its final order.
// A build orders its splits twice, the same way (see write), and the
// spills an ordering writes from sp are written once and read by both:
// the splits dealt in a pass (dealtSp) and each grouped part's buckets
// (placed). release deletes them.
type orderer[T any] struct {
	b       *builder
	sp      spills
	l       layout[T]
	segs    map[int]segments // of each part, as owns finds them
	dealtSp *spill
	placed  map[int]*placement
	runs    int                         // the orderings run so far, this one included
	placing struct{ done, total int64 } // records the first ordering's passes read, and will
}

// advance counts n more records read by a pass that places or deals rows
// before they are ordered, reported in the first ordering only (Progress's
// "place"), about every 65,536 records.
func (o *orderer[T]) advance(n int64) {
	if o.runs != 1 || o.placing.total == 0 {
		return
	}
	before := o.placing.done
	o.placing.done += n
	if o.placing.done>>16 != before>>16 || o.placing.done == o.placing.total {
		o.b.progress(Progress{Phase: "place", Done: o.placing.done, Total: o.placing.total})
	}
}

// A placement is a grouped part's rows sent to buckets of consecutive
// positions (see grouped): the spill of the buckets, where each starts,
// and where each group starts.
type placement struct {
	sp     *spill
	cuts   []int64
	starts []uint64
}

// release deletes the spills the ordering wrote, whatever ctx's state.
func (o *orderer[T]) release(ctx context.Context) {
	o.dealtSp.remove(ctx)
	for _, pl := range o.placed {
		pl.sp.remove(ctx)
	}
	o.dealtSp, o.placed = nil, nil
}

// run gives sink every split's records in their final order.
func (o *orderer[T]) run(ctx context.Context, sink splitSink[T]) error {
	o.runs++
	if o.b.assigned() {
		return o.assigned(ctx, sink)
	}
	if len(o.b.spec.GroupBy) > 0 && o.runs == 1 { // each part counted, then placed
		for p := range o.b.numParts() {
			if n := o.sp.count(p, 0); o.need(p, 0, n) {
				o.placing.total += 2 * n
			}
		}
	}
	for p := range o.b.numParts() {
		if err := o.part(ctx, p, sink); err != nil {
			return err
		}
	}
	return nil
}

// part gives sink part p of the spill ordered as a split.
func (o *orderer[T]) part(ctx context.Context, p int, sink splitSink[T]) error {
	switch {
	case len(o.b.spec.GroupBy) > 0 && o.need(p, 0, o.sp.count(p, 0)):
		return o.grouped(ctx, p, sink)
	case len(o.b.spec.GroupBy) == 0 && o.b.spec.Shuffle != nil && o.b.spec.Shuffle.Window == 0:
		return o.shuffled(ctx, p, sink)
	case !o.need(p, 0, o.sp.count(p, 0)):
		return skipSplit(sink, o.sp.count(p, 0))
	case o.b.spec.Shuffle == nil:
		return o.stored(ctx, o.whole(p), sink)
	}
	return o.windowed(ctx, o.whole(p), sink)
}

// skipSplit passes over a split of n records none of which this rank orders.
func skipSplit[T any](sink splitSink[T], n int64) error {
	if err := sink.skip(n); err != nil {
		return err
	}
	return sink.end(nil)
}

// load returns the records of bucket bk of part p, in the order added.
func (o *orderer[T]) load(ctx context.Context, p, bk int) ([]T, error) {
	out := make([]T, 0, o.sp.count(p, bk))
	o.b.held = max(o.b.held, int64(cap(out)))
	err := o.sp.read(ctx, p, bk, func(records []byte) error {
		out = o.decode(out, records)
		return nil
	})
	return out, err
}

// decode appends the records to out.
func (o *orderer[T]) decode(out []T, records []byte) []T {
	out = slices.Grow(out, len(records)/o.sp.record)
	for i := 0; i < len(records); i += o.sp.record {
		out = append(out, o.l.get(records[i:]))
	}
	return out
}

// A run is the records from..from+n of part p's one bucket, ordered as
// split i: a part, or one of the splits a sequential split cuts part 0 into.
type run struct {
	p, i    int
	from, n int64
}

// whole returns the run of part p's every record.
func (o *orderer[T]) whole(p int) run { return run{p, p, 0, o.sp.count(p, 0)} }

// stored gives run r's records in row id order, one spill object at a time.
func (o *orderer[T]) stored(ctx context.Context, r run, sink splitSink[T]) error {
	var buf []T
	err := o.sp.readRange(ctx, r.p, 0, r.from, r.from+r.n, func(records []byte) error {
		buf = o.decode(buf[:0], records)
		o.b.held = max(o.b.held, int64(cap(buf)))
		return sink.add(buf)
	})
	if err != nil {
		return err
	}
	return sink.end(nil)
}

// windowed gives run r's windows in a random order, each with its clumps
// permuted, as shuffle does (see ShuffleSpec), reading one window at a time.
func (o *orderer[T]) windowed(ctx context.Context, r run, sink splitSink[T]) error {
	sh := *o.b.spec.Shuffle
	clump, p, n := max(sh.ClumpSize, 1), r.p, r.n
	units := n / clump
	at := func(u int64) int64 { return r.from + u*clump } // where unit u starts
	if o.b.spans != nil {
		starts, err := o.clumpStarts(ctx, r)
		if err != nil {
			return err
		}
		units = int64(len(starts))
		at = func(u int64) int64 {
			if u == units {
				return r.from + n
			}
			return r.from + starts[u]
		}
	}
	var recs, out []T
	err := windowOrder(NewRand(shuffleKey(sh.Seed, r.i, 0)), units, sh.Window, func(lo, hi int64, order []int64) (err error) {
		if recs, err = o.span(ctx, p, at(lo), at(hi), recs[:0]); err != nil {
			return err
		}
		out = out[:0]
		for _, u := range order {
			out = append(out, recs[at(lo+u)-at(lo):at(lo+u+1)-at(lo)]...)
		}
		return sink.add(out)
	})
	if err != nil {
		return err
	}
	if recs, err = o.span(ctx, p, at(units), r.from+n, recs[:0]); err != nil {
		return err
	}
	if err := sink.add(recs); err != nil {
		return err
	}
	return sink.end(nil)
}

// clumpStarts returns where the page-aligned clumps of run r start, from
// the run's first record, reading it through once: 8 bytes a clump.
func (o *orderer[T]) clumpStarts(ctx context.Context, r run) ([]int64, error) {
	c := newClumpCutter(o.b.spans)
	var buf []T
	err := o.sp.readRange(ctx, r.p, 0, r.from, r.from+r.n, func(records []byte) error {
		buf = o.decode(buf[:0], records)
		for _, r := range buf {
			c.add(o.l.id(r))
		}
		return nil
	})
	return c.starts, err
}

// span appends the records from..to of part p's one bucket to out.
func (o *orderer[T]) span(ctx context.Context, p int, from, to int64, out []T) ([]T, error) {
	if int64(cap(out)-len(out)) < to-from {
		out = append(make([]T, 0, int64(len(out))+to-from), out...)
	}
	err := o.sp.readRange(ctx, p, 0, from, to, func(records []byte) error {
		out = o.decode(out, records)
		return nil
	})
	o.b.held = max(o.b.held, int64(cap(out)))
	return out, err
}

// shuffled gives part p's buckets, each shuffled, one after the other. Only
// the split's last clump can be partial; it stays last, after every bucket.
// A bucket none of whose records this rank orders is skipped unread.
func (o *orderer[T]) shuffled(ctx context.Context, p int, sink splitSink[T]) error {
	sh := *o.b.spec.Shuffle
	segs := o.segments(p)
	tails := make([][]T, o.sp.buckets)
	for bk, whole := range segs.whole {
		tail := segs.tail[bk]
		if !o.need(p, whole.from, whole.n) && !o.need(p, tail.from, tail.n) {
			if err := sink.skip(whole.n); err != nil {
				return err
			}
			continue
		}
		recs, err := o.load(ctx, p, bk)
		if err != nil {
			return err
		}
		shuffle(recs, sh, NewRand(shuffleKey(sh.Seed, p, bk)), clumpStarts(o.b.spans, recs, o.l.id))
		if err := o.give(sink, p, whole, recs[:whole.n]); err != nil {
			return err
		}
		tails[bk] = slices.Clone(recs[whole.n:]) // not the whole bucket
	}
	for bk, tail := range segs.tail {
		if err := o.give(sink, p, tail, tails[bk]); err != nil {
			return err
		}
	}
	return sink.end(nil)
}

// give adds the records of segment s of part p to sink, or skips them when
// this rank orders none of them.
func (o *orderer[T]) give(sink splitSink[T], p int, s segment, recs []T) error {
	if !o.need(p, s.from, s.n) {
		return sink.skip(s.n)
	}
	return sink.add(recs)
}

// A segment is records of one bucket at positions from..from+n of its
// split, and the rank that orders them.
type segment struct {
	from, n int64
	rank    int
}

// segments are a split's segments: the whole clumps of each bucket, then
// the rest of each (the partial last clump, which a single bucket has).
type segments struct{ whole, tail []segment }

// segments returns the segments of part p: with a full shuffle its
// buckets', else its one bucket's. Bucket b of part p is ordered by rank
// (p·B + b) mod W, of W ranks (see docs/spec.md, "Distributed builds").
func (o *orderer[T]) segments(p int) segments {
	var clump int64 = 1
	if sh := o.b.spec.Shuffle; sh != nil && sh.Window == 0 {
		clump = max(sh.ClumpSize, 1)
	}
	B := o.sp.buckets
	var out segments
	var at int64
	for bk := range B {
		n := o.sp.count(p, bk)
		out.whole = append(out.whole, segment{at, n - n%clump, (p*B + bk) % o.b.world})
		at += n - n%clump
	}
	for bk := range B {
		n := o.sp.count(p, bk) % clump
		out.tail = append(out.tail, segment{at, n, (p*B + bk) % o.b.world})
		at += n
	}
	return out
}

// need reports whether this rank orders any of the records at positions
// from..from+n of part p: whether any chunk that holds one is its own.
func (o *orderer[T]) need(p int, from, n int64) bool {
	if n == 0 {
		return false
	}
	if o.b.world == 1 {
		return true
	}
	for c := from / ChunkIDs; c <= (from+n-1)/ChunkIDs; c++ {
		if o.owns(p, c) {
			return true
		}
	}
	return false
}

// owns reports whether chunk c of part p is this rank's to digest and
// write: whether it orders the segment that holds the chunk's first record.
// Split i of a random or sequential split is rank i mod W's, whole.
func (o *orderer[T]) owns(p int, c int64) bool {
	if o.b.world == 1 {
		return true
	}
	if o.b.assigned() {
		return p%o.b.world == o.b.rank
	}
	if o.segs == nil {
		o.segs = map[int]segments{}
	}
	segs, ok := o.segs[p]
	if !ok {
		segs = o.segments(p)
		o.segs[p] = segs
	}
	pos := c * ChunkIDs
	for _, s := range append(segs.whole, segs.tail...) {
		if pos >= s.from && pos < s.from+s.n {
			return s.rank == o.b.rank
		}
	}
	return false
}

// grouped gives part p's records with the rows of each group together, and
// where its groups start. Groups come in the order of their first rows,
// permuted with the split's shuffle key when the spec shuffles; rows keep
// row id order inside their group. It holds a few numbers a group, not the
// rows: a pass over the spill counts each group's rows, which places every
// group; a second sends each row to a bucket of consecutive positions,
// whole groups of at most bucketIDs rows together (a larger group alone),
// spilled again where there are several; each bucket is then laid out in
// memory and given to sink in turn.
func (o *orderer[T]) grouped(ctx context.Context, p int, sink splitSink[T]) error {
	pl := o.placed[p]
	if pl == nil {
		var err error
		if pl, err = o.place(ctx, p, sink); err != nil || pl == nil {
			return err
		}
	}
	for b := range len(pl.cuts) - 1 {
		err := o.layOut(sink, pl.cuts[b+1]-pl.cuts[b], pl.sp.prefix, func(put func(off int64, rec []byte) error) error {
			return pl.sp.read(ctx, 0, b, func(records []byte) error {
				for i := 0; i < len(records); i += pl.sp.record {
					rec := records[i : i+pl.sp.record]
					_, _, off := pl.sp.decodeRecord(rec)
					if err := put(int64(off), rec); err != nil {
						return err
					}
				}
				return nil
			})
		})
		if err != nil {
			return err
		}
	}
	return sink.end(pl.starts)
}

// place counts the groups of part p and sends each row to its bucket, and
// returns the placement, kept for the ordering's second time; a part of one
// bucket, or none, it gives sink itself, laid out as the spill is read, and
// returns nil.
func (o *orderer[T]) place(ctx context.Context, p int, sink splitSink[T]) (*placement, error) {
	nb := o.b.numbers[p]
	sizes := make([]int64, nb.n)
	err := o.groupRecords(ctx, p, nb, func(_ []byte, g uint32) error {
		sizes[g]++
		o.advance(1)
		return nil
	})
	if err != nil {
		return nil, err
	}
	order := identity(int64(nb.n))
	if sh := o.b.spec.Shuffle; sh != nil {
		Permute(NewRand(shuffleKey(sh.Seed, p, 0)), order)
	}
	at := make([]int64, nb.n) // the next position of each group's rows
	starts := make([]uint64, nb.n)
	bucket := make([]uint32, nb.n) // of each group
	var cuts []int64               // the first position of each bucket
	var pos, in int64
	for i, g := range order {
		at[g], starts[i] = pos, uint64(pos)
		if len(cuts) == 0 || in > 0 && in+sizes[g] > bucketIDs {
			cuts, in = append(cuts, pos), 0
		}
		bucket[g] = uint32(len(cuts) - 1)
		pos, in = pos+sizes[g], in+sizes[g]
	}
	cuts = append(cuts, pos)
	if len(cuts) <= 2 { // one bucket or none: laid out as the spill is read, as "order"
		o.advance(pos)
		err := o.layOut(sink, pos, o.own().prefix, func(put func(off int64, rec []byte) error) error {
			return o.groupRecords(ctx, p, nb, func(rec []byte, g uint32) error {
				at[g]++
				return put(at[g]-1, rec)
			})
		})
		if err != nil {
			return nil, err
		}
		return nil, sink.end(starts)
	}
	me := o.own()
	placed := newSpill(ctx, me.loc, path.Join(me.prefix, "placed", fmt.Sprint(p)), 1, len(cuts)-1, me.width, me.lengths, true, o.b.opts.Memory)
	placed.claim = me.claim
	pl := &placement{sp: placed, cuts: cuts, starts: starts}
	if o.placed == nil {
		o.placed = map[int]*placement{}
	}
	o.placed[p] = pl // released with the ordering, also when placing fails
	err = o.groupRecords(ctx, p, nb, func(rec []byte, g uint32) error {
		id, length, _ := me.decodeRecord(rec)
		b := bucket[g]
		at[g]++
		o.advance(1)
		return placed.add(0, int(b), id, length, uint32(at[g]-1-cuts[b]))
	})
	if err == nil {
		err = placed.finish(false)
	}
	return pl, err
}

// own returns the spill of the rank o orders for.
func (o *orderer[T]) own() *spill { return o.sp.ranks[o.b.rank] }

// layOut gives sink n records in one slice, each where fill puts it (off,
// from 0), read from the spill under where.
func (o *orderer[T]) layOut(sink splitSink[T], n int64, where string, fill func(put func(off int64, rec []byte) error) error) error {
	recs := make([]T, n)
	o.b.held = max(o.b.held, n)
	err := fill(func(off int64, rec []byte) error {
		if off < 0 || off >= n {
			return errcode.New(errcode.Corrupt, "spill", o.own().loc.ObjectURI(where), "a record placed at %d of %d", off, n)
		}
		recs[off] = o.l.get(rec)
		return nil
	})
	if err != nil {
		return err
	}
	return sink.add(recs)
}

// groupRecords calls fn with each record of part p, every rank's in rank
// order, which is row id order, and the number of its group in the part.
func (o *orderer[T]) groupRecords(ctx context.Context, p int, nb numbering, fn func(rec []byte, g uint32) error) error {
	for r, s := range o.sp.ranks {
		to := []uint32(nil)
		if nb.to != nil {
			to = nb.to[r]
		}
		err := s.read(ctx, p, 0, func(records []byte) error {
			for i := 0; i < len(records); i += s.record {
				rec := records[i : i+s.record]
				_, _, g := s.decodeRecord(rec)
				switch {
				case to != nil && int(g) < len(to):
					g = to[g]
				case to != nil || int(g) >= nb.n:
					return errcode.New(errcode.Corrupt, "spill", s.loc.ObjectURI(s.prefix), "a record of split %d names group %d of rank %d, which has no such group", p, g, r)
				}
				if err := fn(rec, g); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// assigned reports whether the spec's split is random or sequential.
func (b *builder) assigned() bool {
	s := b.spec.Split
	return s != nil && (s.Kind == SplitRandom || s.Kind == SplitSequential)
}

// assigned gives the splits of a random or sequential split: a rank that
// orders none of them skips them unread. A random split's are drawn from all
// the kept rows at once, which a rank that orders any of them reads whole; a
// sequential split's are runs of them, each read on its own (see sequential).
func (o *orderer[T]) assigned(ctx context.Context, sink splitSink[T]) error {
	rows, err := o.b.spec.Split.splitRows(o.sp.count(0, 0))
	if err != nil {
		return err
	}
	mine := false
	for i := range rows {
		mine = mine || o.need(i, 0, rows[i])
	}
	if !mine {
		for _, n := range rows {
			if err := skipSplit(sink, n); err != nil {
				return err
			}
		}
		return nil
	}
	if o.b.dealsSplits() {
		return o.dealt(ctx, rows, sink)
	}
	if o.b.spec.Split.Kind == SplitSequential {
		return o.sequential(ctx, rows, sink)
	}
	kept, err := o.load(ctx, 0, 0)
	if err != nil {
		return err
	}
	splits, err := assign(o.b.spec.Split, kept, o.l.id)
	if err != nil {
		return err
	}
	for i, recs := range splits {
		if !o.need(i, 0, int64(len(recs))) {
			if err := skipSplit(sink, int64(len(recs))); err != nil {
				return err
			}
			continue
		}
		if sh := o.b.spec.Shuffle; sh != nil {
			shuffle(recs, *sh, NewRand(shuffleKey(sh.Seed, i, 0)), clumpStarts(o.b.spans, recs, o.l.id))
		}
		if err := sink.add(recs); err != nil {
			return err
		}
		if err := sink.end(nil); err != nil {
			return err
		}
	}
	return nil
}

// Splits dealt in a pass. A random split of a table of more than bucketIDs
// rows is not drawn from all its kept rows at once, nor is a sequential
// split with a full shuffle shuffled a whole split at a time: one pass over
// the kept rows, in row id order, deals each to its split (a random split
// draws its units from an urn of the splits' sizes; a sequential split's
// are runs), writing the rows of the splits this rank orders to a spill of
// their own, a part a split, in the buckets a full shuffle of a hash
// split's part has. Each split is then ordered from it as such a part is.
// The build holds the splits' counts and a bucket at a time, whatever the
// table's size (see docs/spec.md, "Splits dealt in a pass").

// dealsSplits reports whether the spec's random or sequential split is
// dealt in a pass.
func (b *builder) dealsSplits() bool {
	s, sh := b.spec.Split, b.spec.Shuffle
	return b.t.NumRows() > bucketIDs && (s.Kind == SplitRandom || sh != nil && sh.Window == 0)
}

// dealt gives the splits of a random or sequential split dealt in a pass,
// of rows[i] rows each: see dealsSplits.
func (o *orderer[T]) dealt(ctx context.Context, rows []int64, sink splitSink[T]) error {
	if o.dealtSp == nil {
		if err := o.deal(ctx, rows); err != nil {
			return err
		}
	}
	sp, me := o.dealtSp, o.own()
	// The spills of a build whose rank o's alone holds records.
	ranks := make([]*spill, o.b.world)
	for r := range ranks {
		ranks[r] = newSpill(ctx, me.loc, "", len(rows), sp.buckets, me.width, me.lengths, false, minSpillObject)
	}
	ranks[o.b.rank] = sp
	d := &orderer[T]{b: o.b, sp: newSpills(ranks), l: o.l}
	for p, n := range rows {
		var err error
		if o.need(p, 0, n) {
			err = d.part(ctx, p, sink)
		} else {
			err = skipSplit(sink, n) // another rank's: not in sp
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// deal deals the kept rows to the splits of rows[i] rows each, the rows of
// the splits this rank orders into a spill of their own (o.dealtSp), a part
// a split, in the buckets of a full shuffle of a hash split's part.
func (o *orderer[T]) deal(ctx context.Context, rows []int64) error {
	me, buckets := o.own(), 1
	if sh := o.b.spec.Shuffle; sh != nil && sh.Window == 0 {
		buckets = o.b.fullBuckets()
	}
	sp := newSpill(ctx, me.loc, path.Join(me.prefix, "dealt"), len(rows), buckets, me.width, me.lengths, false, o.b.opts.Memory)
	sp.claim = me.claim
	o.dealtSp = sp // released with the ordering, also when dealing fails
	rt := newRouter(o.b, sp, make([]int64, len(rows)))
	route := func(split func() int) func(records []byte) error {
		return func(records []byte) error {
			o.advance(int64(len(records) / me.record))
			for i := 0; i < len(records); i += me.record {
				id, length, _ := me.decodeRecord(records[i : i+me.record])
				if p := split(); p < len(rows) && o.need(p, 0, rows[p]) {
					if err := rt.route(p, id, length, 0); err != nil {
						return err
					}
				}
			}
			return nil
		}
	}
	if o.b.spec.Split.Kind == SplitSequential {
		for p, n := range rows {
			if o.need(p, 0, n) {
				o.placing.total += n
			}
		}
		var at int64
		for p, n := range rows {
			if o.need(p, 0, n) {
				if err := o.sp.readRange(ctx, 0, 0, at, at+n, route(func() int { return p })); err != nil {
					return err
				}
			}
			at += n
		}
	} else {
		o.placing.total = o.sp.count(0, 0)
		draw, err := o.b.spec.Split.drawer(o.sp.count(0, 0))
		if err != nil {
			return err
		}
		if err := o.sp.read(ctx, 0, 0, route(draw)); err != nil {
			return err
		}
	}
	return sp.finish(false)
}

// drawer returns, for a random split of kept rows, a function that gives
// the split of each kept row in row id order, as an urn draws them: each
// unit (a row, or a clump of ClumpSize rows) takes a split, or none (the
// units beyond the splits' total), at random; a shorter last clump takes
// the one that holds the last unit's position in the splits' order
// (splitRows), as a draw of all the units at once leaves it last. A split
// of len(sizes) or more is none.
func (s *SplitSpec) drawer(kept int64) (func() int, error) {
	c := max(s.ClumpSize, 1)
	sizes, err := s.unitSizes(kept)
	if err != nil {
		return nil, err
	}
	units := (kept + c - 1) / c
	counts := append(slices.Clone(sizes), 0) // the last: no split
	var sum int64
	for _, n := range sizes {
		sum += n
	}
	counts[len(sizes)] = units - sum
	last := len(sizes) // of a shorter last clump
	if kept%c != 0 {
		var at int64
		for i, n := range sizes {
			if at += n; at >= units {
				last = i
				break
			}
		}
	}
	u := newUrn(NewRand(DeriveKey(s.Seed, "split_random")), counts)
	if kept%c != 0 {
		u.take(last)
	}
	var row int64
	split := 0
	return func() int {
		if row%c == 0 {
			if row/c == units-1 && kept%c != 0 {
				split = last
			} else {
				split = u.draw()
			}
		}
		row++
		return split
	}, nil
}

// sequential gives the splits of a sequential split, each the run of kept
// rows, in row id order, after the previous split's: read one spill object
// at a time in stored order, one window at a time with a window shuffle, and
// whole, the split alone, with a full shuffle. A split this rank does not
// order is skipped unread.
func (o *orderer[T]) sequential(ctx context.Context, rows []int64, sink splitSink[T]) error {
	var at int64
	for i, n := range rows {
		r := run{0, i, at, n}
		at += n
		var err error
		switch sh := o.b.spec.Shuffle; {
		case !o.need(i, 0, n):
			err = skipSplit(sink, n)
		case sh == nil:
			err = o.stored(ctx, r, sink)
		case sh.Window > 0:
			err = o.windowed(ctx, r, sink)
		default:
			err = o.shuffledRun(ctx, r, sink)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// shuffledRun gives run r's records shuffled whole, as split i.
func (o *orderer[T]) shuffledRun(ctx context.Context, r run, sink splitSink[T]) error {
	recs, err := o.span(ctx, r.p, r.from, r.from+r.n, nil)
	if err != nil {
		return err
	}
	sh := *o.b.spec.Shuffle
	shuffle(recs, sh, NewRand(shuffleKey(sh.Seed, r.i, 0)), clumpStarts(o.b.spans, recs, o.l.id))
	if err := sink.add(recs); err != nil {
		return err
	}
	return sink.end(nil)
}

// splitRows returns the rows of each split of a random or sequential split
// of kept rows, as assign cuts them.
func (s *SplitSpec) splitRows(kept int64) ([]int64, error) {
	c := max(s.ClumpSize, 1)
	sizes, err := s.unitSizes(kept)
	if err != nil {
		return nil, err
	}
	rows := make([]int64, len(sizes))
	var at int64
	for i, n := range sizes {
		rows[i] = min((at+n)*c, kept) - min(at*c, kept)
		at += n
	}
	return rows, nil
}

// assign draws the kept rows, in row id order, into the splits of a random
// split, each in row id order.
func assign[T any](s *SplitSpec, kept []T, id func(T) uint64) ([][]T, error) {
	c := max(s.ClumpSize, 1)
	sizes, err := s.unitSizes(int64(len(kept)))
	if err != nil {
		return nil, err
	}
	if c == 1 {
		Permute(NewRand(DeriveKey(s.Seed, "split_random")), kept)
	} else {
		kept = permuteClumps(kept, c, NewRand(DeriveKey(s.Seed, "split_random")))
	}
	var out [][]T
	var at int64
	for _, n := range sizes {
		end := min((at+n)*c, int64(len(kept)))
		part := kept[at*c : end : end]
		// A split's stored order is row id order until shuffled.
		slices.SortFunc(part, func(a, b T) int { return cmp.Compare(id(a), id(b)) })
		out = append(out, part)
		at += n
	}
	return out, nil
}

// unitSizes returns the sizes, in clumps, of the splits of a random or
// sequential split of kept rows.
func (s *SplitSpec) unitSizes(kept int64) ([]int64, error) {
	c := max(s.ClumpSize, 1)
	units := (kept + c - 1) / c // clumps of c rows; the last may be shorter
	sizes, err := s.sizes(units)
	if err != nil {
		return nil, err
	}
	if len(s.Names) > 0 && len(s.Names) != len(sizes) {
		return nil, badSpec("%d split names for %d splits (fixed=%d of %d rows kept)", len(s.Names), len(sizes), s.Fixed, kept)
	}
	return sizes, nil
}

// splitNames returns the names of the splits.
func (b *builder) splitNames(sp spills) ([]string, error) {
	s := b.spec.Split
	switch {
	case s == nil:
		return []string{"all"}, nil
	case s.Kind == SplitHash || s.Kind == SplitCalculated:
		return s.names(b.numParts()), nil
	}
	sizes, err := s.unitSizes(sp.count(0, 0))
	if err != nil {
		return nil, err
	}
	return s.names(len(sizes)), nil
}
