// Package blockcache keeps the bytes of pinned objects of distant stores on
// local disk, so that a table read every epoch is fetched from its store once
// per node.
//
// A training run reads every table it trains on once an epoch, from stores
// that answer each request in 20–100 ms and charge for it, while each node
// has terabytes of local disk. Bytes of a pinned object cannot change (a
// changed object is another version, with another identity), so they can be
// kept on that disk and read back by every later epoch, and by every rank and
// DataLoader worker of the node, for the cost of a local read.
//
// Invariants and caveats:
//
//   - Blocks. An object is cut into aligned blocks of BlockSize bytes (its
//     last block is short). A read is served from the blocks that cover it;
//     the missing ones are fetched, consecutive missing blocks of one read in
//     one range request, stored and served.
//   - Identity. Blocks are found by a hash of Object.ID, which holds
//     everything the store records of the object's version (see
//     core/store), and their index. A changed object has another identity:
//     its old blocks are never found for it.
//   - Segments. A process appends the blocks it stores to a segment file of
//     its own (segment.go), created under a random name: appends of two
//     processes never interleave, and storing a block costs a write to an
//     open file, not a file creation (480 µs of system time on a virtual
//     disk, against 65 µs for the append). A record is never written over.
//     A writer seals its segment and starts another when it is full or
//     idle (idleAge); a segment seen unchanged for twice that is read no
//     more, as if sealed.
//   - Index. A Cache holds the folder's segments open and an index in
//     memory of where each block lies, built by reading the segments'
//     headers (index.go). It looks at the folder again after it took the
//     locks of blocks it misses, and at a read when it last looked more than
//     rescanAge ago. A hit is one pread of an open segment.
//   - Verified. Every record's header carries its own checksum and one of
//     the bytes (CRC-32C). A header that fails ends what is read of its
//     segment; bytes that fail drop the record from the index: either is a
//     miss, and the block is fetched again. The cache serves the object's
//     bytes or fetches them, never other bytes. A process reads a record
//     whole and checks it at its first hit, only the bytes it needs after.
//   - Crashes. Nothing is synced to disk. A process killed in the middle of
//     an append leaves a torn record at the end of its segment, which no one
//     appends to again and readers stop before: a miss.
//   - Processes. One folder serves every process of a node. A read about to
//     fetch a block waits for any read of its process fetching it (a
//     flight), then holds the block's range lock on the folder's lock file
//     (lock_unix.go) and looks for the block again once it holds it, so that
//     reads missing the same block fetch it once; the kernel releases the
//     locks of a process that dies. The lock only spares fetches,
//     correctness never depends on it: a wait longer than lockWait fetches
//     anyway.
//   - Size. Segments are evicted whole, least recently used first: a hit
//     sets its segment's modification time (at most once per touchAge). A
//     Cache sweeps the folder (deletes the oldest segments until the folder
//     is within its bound) at its first store and whenever what it stored
//     since its last sweep passes a sixteenth of the bound; one process
//     sweeps a folder at a time. Across processes the bound is kept
//     loosely: the folder may exceed it by what they store between sweeps.
//     A segment deleted while a process holds it open still reads whole
//     (Linux keeps an unlinked open file) until that process next looks at
//     the folder and closes it. Block files of the layout before segments
//     are deleted by the first sweep.
//   - Disks fail. A block that cannot be stored (disk full, folder
//     unwritable) is served all the same and counted (Stats.Unstored): the
//     disk never fails a read.
package blockcache

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"hash/fnv"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/croupier-data/croupier/core/errcode"
)

// BlockSize is the unit the cache fetches on a miss and keeps. A shuffle
// reads a 16 KiB page here and there; a larger block makes later reads of
// its neighbours hits, and on a store 50 ms away the extra transfer is
// almost free (256 KiB take 2 ms at 1 Gb/s), while a block per page would
// make the folder hold millions of files.
const BlockSize = 256 << 10

// DefaultMaxBytes is the bound of a Cache whose Options.MaxBytes is 0,
// unless half the space free on its filesystem is less.
const DefaultMaxBytes = 64 << 30

// Options configure a Cache.
type Options struct {
	// Dir is the folder holding the blocks, an absolute path; it is created
	// when the first block is stored.
	Dir string
	// MaxBytes bounds the bytes of the blocks in Dir; 0 is DefaultMaxBytes or
	// half the space free on Dir's filesystem at Open, whichever is less.
	MaxBytes int64
}

// Object is what the cache knows of one pinned object.
type Object struct {
	// ID names the object's version: its location and everything its store
	// records of the version (size, ETag, generation, modification time).
	// Two objects whose bytes may differ must have different IDs.
	ID   string
	Size int64
}

// Fetch reads the bytes of the object from off with one range request into
// bufs, one after the other, and returns an error unless it filled them all.
type Fetch func(ctx context.Context, off int64, bufs [][]byte) error

// Stats count a cache's work.
type Stats struct {
	Hits      int64 // blocks served from disk
	HitBytes  int64 // bytes of reads they served
	Misses    int64 // blocks fetched from the store
	MissBytes int64 // their bytes
	Requests  int64 // range requests made to the store
	Unstored  int64 // blocks fetched that could not be stored: disk full or unwritable
	Evicted   int64 // segments that sweeps deleted
}

func (s *Stats) add(o Stats) {
	s.Hits += o.Hits
	s.HitBytes += o.HitBytes
	s.Misses += o.Misses
	s.MissBytes += o.MissBytes
	s.Requests += o.Requests
	s.Unstored += o.Unstored
	s.Evicted += o.Evicted
}

// Cache is a folder of blocks. It is safe for concurrent use, and several
// Caches, in one process or many, may share a folder.
type Cache struct {
	dir               string
	max, step, segMax int64
	added             atomic.Int64 // bytes stored since the last sweep
	sweeping          sync.Mutex
	mu                sync.Mutex
	stats             Stats
	ix                index
	w                 writer
}

// maxSegment bounds a segment: a sweep frees space a segment at a time, and
// a segment is at most a 64th of the cache's bound, so that evicting one
// gives up little of what is still used.
const maxSegment = 256 << 20

// touchAge is how old a segment's mark of its last use may grow before a
// hit marks it again: the sweeps' order needs no finer time, and a mark is
// a system call.
const touchAge = time.Minute

// Open returns a cache of blocks in opts.Dir. It creates nothing: the folder
// is made when the first block is stored, and one that cannot be is a cache
// that stores nothing, not an error.
func Open(opts Options) (*Cache, error) {
	const op = "open block cache"
	if !filepath.IsAbs(opts.Dir) {
		return nil, errcode.New(errcode.InvalidArgument, op, opts.Dir, "the cache folder must be an absolute path")
	}
	if opts.MaxBytes < 0 {
		return nil, errcode.New(errcode.InvalidArgument, op, opts.Dir, "cache bound %d bytes is negative", opts.MaxBytes)
	}
	c := &Cache{dir: filepath.Clean(opts.Dir), max: opts.MaxBytes}
	if c.max == 0 {
		c.max = DefaultMaxBytes
		if free, ok := freeBytes(c.dir); ok {
			c.max = min(c.max, free/2)
		}
	}
	c.step = max(c.max/16, BlockSize)
	c.segMax = min(max(c.max/64, BlockSize), maxSegment)
	c.ix.blocks = map[key]*entry{}
	c.ix.segs = map[string]*segment{}
	// The first block stored sweeps: processes that each store less than a
	// step would otherwise grow the folder without bound.
	c.added.Store(c.step)
	return c, nil
}

// Dir returns the cache's folder.
func (c *Cache) Dir() string { return c.dir }

// MaxBytes returns the cache's bound.
func (c *Cache) MaxBytes() int64 { return c.max }

// Stats returns what the cache has done since it was opened.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

func (c *Cache) count(s Stats) {
	c.mu.Lock()
	c.stats.add(s)
	c.mu.Unlock()
}

// ReadAt fills p with the bytes of obj at off, [off, off+len(p)) lying within
// the object, from the blocks on disk where they are and with fetch where
// they are not, and returns what that took. Its only errors are fetch's and
// ctx's: the disk never fails a read.
func (c *Cache) ReadAt(ctx context.Context, obj Object, p []byte, off int64, fetch Fetch) (Stats, error) {
	if off < 0 || off+int64(len(p)) > obj.Size {
		return Stats{}, errcode.New(errcode.Internal, "read through block cache", c.dir,
			"bytes [%d, %d) asked of an object of %d bytes", off, off+int64(len(p)), obj.Size)
	}
	if len(p) == 0 {
		return Stats{}, nil
	}
	c.scanIfOld(time.Now())
	r := &read{c: c, obj: obj, id: sha256.Sum256([]byte(obj.ID)), p: p, off: off, fetch: fetch}
	first, last := off/BlockSize, (off+int64(len(p))-1)/BlockSize
	err := r.blocks(ctx, first, last)
	c.count(r.st)
	if r.stored > 0 && c.added.Add(r.stored) >= c.step {
		c.sweep(ctx)
	}
	return r.st, err
}

// Holds says whether the block of obj that holds byte off is on disk, as far
// as the cache knows: a block found damaged when read is still a miss then.
func (c *Cache) Holds(obj Object, off int64) bool {
	c.scanIfOld(time.Now())
	return c.lookup(key{sha256.Sum256([]byte(obj.ID)), off / BlockSize}) != nil
}

// Warm fetches into the cache the blocks of obj that hold [off, off+n) and
// are not on disk, as ReadAt would, and returns what that took. A block
// on disk is not read: it is checked when it is read.
func (c *Cache) Warm(ctx context.Context, obj Object, off, n int64, fetch Fetch) (Stats, error) {
	var st Stats
	c.scanIfOld(time.Now())
	id := sha256.Sum256([]byte(obj.ID))
	end := min(off+n, obj.Size)
	for b := max(off, 0) / BlockSize; b*BlockSize < end; {
		if c.lookup(key{id, b}) != nil {
			b++
			continue
		}
		e := b + 1
		for e*BlockSize < end && c.lookup(key{id, e}) == nil {
			e++
		}
		from, to := b*BlockSize, min(e*BlockSize, obj.Size)
		buf := blockBufs.Get().(*[]byte)
		p := *buf
		if int64(cap(p)) < to-from {
			p = make([]byte, to-from)
		}
		s, err := c.ReadAt(ctx, obj, p[:to-from], from, fetch)
		blockBufs.Put(buf)
		st.add(s)
		if err != nil {
			return st, err
		}
		b = e
	}
	return st, nil
}

// read is one ReadAt.
type read struct {
	c      *Cache
	obj    Object
	id     [sha256.Size]byte
	p      []byte
	off    int64
	fetch  Fetch
	st     Stats
	stored int64 // bytes of the blocks it stored
}

// blocks serves blocks first to last: the hits from disk, each run of
// consecutive misses with one fetch.
func (r *read) blocks(ctx context.Context, first, last int64) error {
	for b := first; b <= last; {
		if r.serve(b) {
			b++
			continue
		}
		e := b + 1
		for e <= last && !r.serve(e) {
			e++
		}
		if err := r.fill(ctx, b, e-1); err != nil {
			return err
		}
		b = e + 1 // e, when there is one, was a hit
	}
	return nil
}

// fill fetches and stores blocks b0 to b1, none of which was on disk. It
// takes their locks first, in order (so that reads sharing blocks never wait
// on each other in a cycle): of each block, its flight in this process,
// then its lock among processes. Then it serves from disk what another
// goroutine or process stored meanwhile and fetches the rest.
func (r *read) fill(ctx context.Context, b0, b1 int64) error {
	var (
		flown []*flight
		held  []*lock
	)
	defer func() {
		for _, l := range held {
			l.release()
		}
		for _, f := range flown {
			f.land()
		}
	}()
	for b := b0; b <= b1; b++ {
		k := key{r.id, b}
		f, err := fly(ctx, k)
		if err != nil {
			return errcode.Wrap(err, errcode.Canceled, "wait for a block another read fetches", r.c.dir)
		}
		flown = append(flown, f)
		l, err := acquire(ctx, r.c.dir, lockOffset(k), lockWait)
		if err == nil {
			held = append(held, l)
		} // else fetched without its lock: twice at worst
		if ctx.Err() != nil {
			return errcode.Wrap(context.Cause(ctx), errcode.Canceled, "wait for a block another process fetches", r.c.dir)
		}
	}
	r.c.scan() // for the blocks other processes stored meanwhile
	for b := b0; b <= b1; {
		if r.serve(b) {
			b++
			continue
		}
		e := b + 1
		for e <= b1 && !r.serve(e) {
			e++
		}
		if err := r.fetchRun(ctx, b, e-1); err != nil {
			return err
		}
		b = e + 1
	}
	return nil
}

// A flight is a block being fetched by a read of this process: other reads
// of the process that miss it wait for it to land, and find it on disk, not
// each taking the lock among processes (which does not exclude them) and
// fetching it again.
type flight struct {
	k    key
	done chan struct{}
}

// flights holds the blocks in flight in this process, by key. Two Caches
// of one folder share them; two of different folders only wait for each
// other when they miss one block of one object at once.
var flights sync.Map

// fly waits until no other read of the process fetches block k, and
// returns the flight of this one.
func fly(ctx context.Context, k key) (*flight, error) {
	f := &flight{k: k, done: make(chan struct{})}
	for {
		was, loaded := flights.LoadOrStore(k, f)
		if !loaded {
			return f, nil
		}
		select {
		case <-was.(*flight).done:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
}

// land ends the flight.
func (f *flight) land() {
	flights.Delete(f.k)
	close(f.done)
}

// lockOffset is the byte of a folder's lock file that the lock of block k
// takes: 1 + the top 40 bits of the FNV-1a hash (64 bits) of the first 16
// bytes of its identity hash followed by its index as 8 little-endian
// bytes; byte 0 is the sweeps'.
func lockOffset(k key) int64 {
	h := fnv.New64a()
	h.Write(k.id[:16])
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(k.b))
	h.Write(b[:])
	return 1 + int64(h.Sum64()>>24)
}

// fetchRun fetches blocks b0 to b1 with one request, then stores them.
func (r *read) fetchRun(ctx context.Context, b0, b1 int64) error {
	start, end := b0*BlockSize, min((b1+1)*BlockSize, r.obj.Size)
	bufs, free := r.pieces(start, end)
	defer free()
	r.st.Requests++
	if err := r.fetch(ctx, start, bufs); err != nil {
		return err
	}
	r.st.Misses += b1 - b0 + 1
	r.st.MissBytes += end - start
	for b := b0; b <= b1; b++ {
		bs, be := b*BlockSize, min((b+1)*BlockSize, r.obj.Size)
		if err := r.c.store(key{r.id, b}, cut(bufs, bs-start, be-bs)); err != nil {
			r.st.Unstored++
			continue
		}
		r.stored += be - bs
	}
	return nil
}

// serve copies block b into p from disk, and reports whether it could: a
// block the cache holds no record of, or whose record fails a check or a
// read, is a miss, and a record that fails is forgotten.
func (r *read) serve(b int64) bool {
	k := key{r.id, b}
	e := r.c.lookup(k)
	if e == nil {
		return false
	}
	bs, be := b*BlockSize, min((b+1)*BlockSize, r.obj.Size)
	lo, hi := max(bs, r.off), min(be, r.off+int64(len(r.p)))
	switch {
	case e.n != be-bs:
		r.c.forget(k, e)
		return false
	case e.ok.Load() && lo < hi:
		if _, err := e.seg.f.ReadAt(r.p[lo-r.off:hi-r.off], e.off+lo-bs); err != nil {
			r.c.forget(k, e)
			return false
		}
	default:
		bufs, free := r.pieces(bs, be)
		defer free()
		if !readEntry(e, bufs) {
			r.c.forget(k, e)
			return false
		}
		e.ok.Store(true)
	}
	e.seg.touch(r.c.dir, time.Now())
	r.st.Hits++
	r.st.HitBytes += hi - lo
	return true
}

// pieces returns buffers for the bytes [start, end) of the object, one
// after the other: the part of p they overlap, and scratch for what lies
// before and after p; free returns the scratch.
func (r *read) pieces(start, end int64) (bufs [][]byte, free func()) {
	var scratch []*[]byte
	take := func(n int64) []byte {
		b := blockBufs.Get().(*[]byte)
		scratch = append(scratch, b)
		return (*b)[:n]
	}
	pend := r.off + int64(len(r.p))
	if start < r.off {
		bufs = append(bufs, take(min(r.off, end)-start))
	}
	if lo, hi := max(start, r.off), min(end, pend); lo < hi {
		bufs = append(bufs, r.p[lo-r.off:hi-r.off])
	}
	if end > pend {
		bufs = append(bufs, take(end-max(start, pend)))
	}
	return bufs, func() {
		for _, b := range scratch {
			blockBufs.Put(b)
		}
	}
}

// blockBufs are scratch buffers of a block's size: the parts of blocks that
// lie outside the read that needs them. A read takes two at most.
var blockBufs = sync.Pool{New: func() any { b := make([]byte, BlockSize); return &b }}

// cut returns the bytes [from, from+n) of bufs taken end to end.
func cut(bufs [][]byte, from, n int64) [][]byte {
	var out [][]byte
	for _, b := range bufs {
		if n == 0 {
			break
		}
		if from >= int64(len(b)) {
			from -= int64(len(b))
			continue
		}
		k := min(int64(len(b))-from, n)
		out = append(out, b[from:from+k])
		from, n = 0, n-k
	}
	return out
}

// Names of the files in a cache folder: <dir>/<24 random hex digits>.seg
// are the segments, <dir>/locks holds the locks of the folder's processes
// (lock_unix.go).
const lockFile = "locks"
