package permutation

import (
	"context"
	"encoding/binary"
	"fmt"
	"path"

	"golang.org/x/sync/errgroup"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/store"
)

// A spill holds the kept rows of a build between its scan and its ordering,
// sorted into buckets (see bucketOf), so that the build never holds every
// kept row at once. Each (part, bucket) appends its rows to a buffer in
// memory; a full buffer is written as one object under a temporary prefix
// of the permutation's own location, so that the rows of a table larger than
// the build's memory pass through the store. A bucket reads back as its
// objects, in the order written, then the rest of its buffer: the order its
// rows were added in. A small build never fills a buffer and writes nothing.
//
// A record is a row id, IDWidth bytes little endian, followed with
// Spec.Lengths by its length, 4 bytes little endian.
type spill struct {
	loc     *store.Location
	prefix  string // the key prefix of the spill objects
	width   int    // bytes of a row id
	lengths bool   // whether a record holds the row's length, 4 bytes after its id
	groups  bool   // whether a record holds a number, 4 bytes, last: its group's (see groups)
	record  int    // bytes of a record
	object  int    // bytes of a full buffer, written as one object
	buckets int    // buckets of each part

	bufs    [][]byte // of each (part, bucket), at part*buckets+bucket
	objects []int    // objects written of each (part, bucket)
	rows    []int64  // records added to each (part, bucket)

	writes  *errgroup.Group
	wctx    context.Context
	written bool         // whether any object was written
	claim   func() error // called before the first object is written: takes the lease (see lease.go)
}

// spillDir is the folder, under a permutation's location, of the spills of
// the builds in progress there; hidden from listings of tables, as a path
// element starting with "_" is.
const spillDir = "_spill"

// Spill sizes: each part's buckets share a quarter of the build's memory,
// in buffers of at least minSpillObject and at most maxSpillObject bytes,
// and at most spillWrites full buffers are being written at once.
const (
	minSpillObject = 64 << 10
	spillWrites    = 2
)

// maxSpillObject is a variable for tests, which lower it to spill small
// tables.
var maxSpillObject = 16 << 20

// newSpill returns an empty spill of parts·buckets buffers under prefix, a
// key of loc that no other build uses (see rank.spillPrefix).
func newSpill(ctx context.Context, loc *store.Location, prefix string, parts, buckets, width int, lengths, groups bool, memory int64) *spill {
	s := &spill{loc: loc, prefix: prefix, width: width, lengths: lengths, groups: groups,
		record: recordBytes(width, lengths, groups), buckets: buckets}
	n := parts * buckets
	s.object = int(min(max(memory/4/int64(n), minSpillObject), int64(maxSpillObject)))
	s.object = max(s.object-s.object%s.record, s.record) // whole records, at least one
	s.bufs, s.objects, s.rows = make([][]byte, n), make([]int, n), make([]int64, n)
	s.writes, s.wctx = errgroup.WithContext(ctx)
	s.writes.SetLimit(spillWrites)
	return s
}

// recordBytes returns the bytes of a spill record: a row id of width
// bytes, with lengths its length, with groups a number.
func recordBytes(width int, lengths, groups bool) int {
	n := width
	if lengths {
		n += LengthWidth
	}
	if groups {
		n += 4
	}
	return n
}

// add appends a record to bucket b of part p, writing the bucket's buffer
// out when it is full: id, and as the spill holds them, length and number.
func (s *spill) add(p, b int, id uint64, length, number uint32) error {
	i := p*s.buckets + b
	buf := s.bufs[i]
	if s.width == 4 {
		buf = binary.LittleEndian.AppendUint32(buf, uint32(id))
	} else {
		buf = binary.LittleEndian.AppendUint64(buf, id)
	}
	if s.lengths {
		buf = binary.LittleEndian.AppendUint32(buf, length)
	}
	if s.groups {
		buf = binary.LittleEndian.AppendUint32(buf, number)
	}
	s.bufs[i] = buf
	s.rows[i]++
	if len(buf) >= s.object {
		return s.flush(i)
	}
	return nil
}

// decodeRecord returns what a record of s holds (see add): 0 for a
// length or a number it does not.
func (s *spill) decodeRecord(rec []byte) (id uint64, length, number uint32) {
	if s.width == 4 {
		id = uint64(binary.LittleEndian.Uint32(rec))
	} else {
		id = binary.LittleEndian.Uint64(rec)
	}
	if s.lengths {
		length = binary.LittleEndian.Uint32(rec[s.width:])
	}
	if s.groups {
		number = binary.LittleEndian.Uint32(rec[s.record-4:])
	}
	return id, length, number
}

// flush writes the buffer of (part, bucket) i as its next object.
func (s *spill) flush(i int) error {
	if err := s.wctx.Err(); err != nil {
		if werr := s.finish(false); werr != nil {
			return werr // the write that failed says why
		}
		return err
	}
	if err := s.claimFirst(); err != nil {
		return err
	}
	data, key := s.bufs[i], s.key(i, s.objects[i])
	s.bufs[i], s.written = nil, true
	s.objects[i]++
	s.writes.Go(func() (err error) {
		defer errcode.Recover(&err, errcode.Internal, "spill", s.loc.ObjectURI(key))
		return s.loc.WriteAll(s.wctx, key, data, store.WriterOptions{})
	})
	return nil
}

func (s *spill) key(i, object int) string {
	return path.Join(s.prefix, fmt.Sprint(i/s.buckets), fmt.Sprint(i%s.buckets), fmt.Sprintf("%08d", object))
}

// finish waits for the objects being written; call it before reading back.
// With share, it first writes out every buffer that holds records, the last
// object of its (part, bucket), shorter than the others, so that other
// ranks read the whole spill from the store.
func (s *spill) finish(share bool) error {
	for i, buf := range s.bufs {
		if share && len(buf) > 0 {
			if err := s.flush(i); err != nil {
				return err
			}
		}
	}
	if err := s.writes.Wait(); err != nil {
		return errcode.Wrap(err, errcode.Unavailable, "spill", s.loc.ObjectURI(s.prefix))
	}
	return nil
}

// count returns the records of bucket b of part p.
func (s *spill) count(p, b int) int64 { return s.rows[p*s.buckets+b] }

// read calls fn with the records of bucket b of part p, in the order they
// were added, one object's worth at a time.
func (s *spill) read(ctx context.Context, p, b int, fn func(records []byte) error) error {
	return s.readRange(ctx, p, b, 0, s.count(p, b), fn)
}

// readRange calls fn with the records from..to (exclusive) of bucket b of
// part p, in the order they were added, one object's worth at a time. Every
// object written but a shared spill's last holds the same number of records,
// so it reads only the objects that hold them.
func (s *spill) readRange(ctx context.Context, p, b int, from, to int64, fn func(records []byte) error) error {
	i, per, rec := p*s.buckets+b, int64(s.object/s.record), int64(s.record)
	for o := from / per; o < int64(s.objects[i]) && o*per < to; o++ {
		want := min(per, s.rows[i]-o*per)
		lo, hi := max(from-o*per, 0), min(to-o*per, want)
		data, err := s.readObject(ctx, s.key(i, int(o)), want*rec, lo*rec, (hi-lo)*rec)
		if err != nil {
			return err
		}
		if err := fn(data); err != nil {
			return err
		}
	}
	if start := int64(s.objects[i]) * per; to > start {
		return fn(s.bufs[i][max(from-start, 0)*int64(s.record) : (to-start)*int64(s.record)])
	}
	return nil
}

// readObject returns n bytes at off of the spill object at key, which holds
// size bytes: the whole object when asked for all of it, its length checked,
// else one range request, so that a window of a few records does not read
// an object of megabytes.
func (s *spill) readObject(ctx context.Context, key string, size, off, n int64) ([]byte, error) {
	if off == 0 && n == size {
		data, err := s.loc.ReadAll(ctx, key)
		if err == nil && int64(len(data)) != size {
			err = errcode.New(errcode.Corrupt, "spill", s.loc.ObjectURI(key),
				"%d bytes, not the %d of its %d records", len(data), size, size/int64(s.record))
		}
		return data, err
	}
	data := make([]byte, n)
	if _, err := s.loc.NewReaderAt(ctx, store.Object{Key: key, Size: size}).ReadAt(data, off); err != nil {
		return nil, errcode.Wrap(err, errcode.Of(err), "spill", s.loc.ObjectURI(key))
	}
	return data, nil
}

// claimFirst calls claim before the spill's first object is written.
func (s *spill) claimFirst() error {
	if s.written || s.claim == nil {
		return nil
	}
	return s.claim()
}

// remove deletes the spill's objects, whatever ctx's state: it runs when the
// build ends, failed or canceled as well as committed.
func (s *spill) remove(ctx context.Context) error {
	if s == nil {
		return nil
	}
	s.writes.Wait() // a failed write's error was reported by finish
	if !s.written {
		return nil
	}
	return removePrefix(ctx, s.loc, s.prefix+"/")
}

// spills are the spills of every rank of a build, in rank order (see
// docs/spec.md, "Distributed builds"): bucket b of part p is the records of
// each rank's bucket b of part p, rank after rank, which is the order a
// single scan of the whole table adds them in. A rank holds its own spill;
// the others' are read from the store, where they wrote them out whole.
type spills struct {
	ranks                  []*spill
	width, record, buckets int
	lengths                bool
}

func newSpills(ranks []*spill) spills {
	s := ranks[0]
	return spills{ranks: ranks, width: s.width, record: s.record, buckets: s.buckets, lengths: s.lengths}
}

// count returns the records of bucket b of part p.
func (v spills) count(p, b int) int64 {
	var n int64
	for _, s := range v.ranks {
		n += s.count(p, b)
	}
	return n
}

// total returns the records of every bucket of every part.
func (v spills) total() int64 {
	var n int64
	for _, s := range v.ranks {
		for _, c := range s.rows {
			n += c
		}
	}
	return n
}

// read calls fn with the records of bucket b of part p, in order.
func (v spills) read(ctx context.Context, p, b int, fn func(records []byte) error) error {
	return v.readRange(ctx, p, b, 0, v.count(p, b), fn)
}

// readRange calls fn with the records from..to (exclusive) of bucket b of
// part p, in order, reading each rank's that holds some of them.
func (v spills) readRange(ctx context.Context, p, b int, from, to int64, fn func(records []byte) error) error {
	var at int64 // the first record of this rank's
	for _, s := range v.ranks {
		n := s.count(p, b)
		if lo, hi := max(from-at, 0), min(to-at, n); lo < hi {
			if err := s.readRange(ctx, p, b, lo, hi, fn); err != nil {
				return err
			}
		}
		at += n
	}
	return nil
}

// spillReport describes a rank's spill to the others once it is written out.
type spillReport struct {
	Prefix  string  `json:"prefix"`
	Width   int     `json:"width"`
	Lengths bool    `json:"lengths"`
	Groups  bool    `json:"groups"`
	Record  int     `json:"record"`
	Object  int     `json:"object"`
	Buckets int     `json:"buckets"`
	Objects []int   `json:"objects"`
	Rows    []int64 `json:"rows"`
}

func (s *spill) report() spillReport {
	return spillReport{Prefix: s.prefix, Width: s.width, Lengths: s.lengths, Groups: s.groups, Record: s.record,
		Object: s.object, Buckets: s.buckets, Objects: s.objects, Rows: s.rows}
}

// remoteSpill returns the spill another rank reported, read from loc.
func remoteSpill(loc *store.Location, r spillReport) (*spill, error) {
	n := len(r.Rows)
	if r.Buckets < 1 || n%r.Buckets != 0 || len(r.Objects) != n || r.Record != recordBytes(r.Width, r.Lengths, r.Groups) || r.Object < r.Record {
		return nil, errcode.New(errcode.Internal, "spill", loc.URI, "a rank reported an inconsistent spill")
	}
	return &spill{loc: loc, prefix: r.Prefix, width: r.Width, lengths: r.Lengths, groups: r.Groups, record: r.Record,
		object: r.Object, buckets: r.Buckets, bufs: make([][]byte, n), objects: r.Objects, rows: r.Rows}, nil
}
