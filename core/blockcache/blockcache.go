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
//   - Verified. Every block file starts with a header (magic, format version,
//     the identity hash, the block index, the length) followed by a CRC-32C
//     of header and bytes. A file that fails any check is deleted and counts
//     as a miss: the cache serves the object's bytes or fetches them, never
//     other bytes.
//   - Crashes. A block is written to a temporary file in its folder and
//     renamed into place, so a reader finds a whole block or none. Nothing is
//     synced to disk: a block torn by a power loss fails its checksum, and is
//     a miss. Temporary files that a killed process left are removed by the
//     next sweep once older than staleAge.
//   - Processes. One folder serves every process of a node. A read about to
//     fetch a block waits for any read of its process fetching it (a
//     flight), then holds the block's range lock on the folder's lock file
//     (lock_unix.go) and looks for the block again once it holds it, so that
//     reads missing the same block fetch it once; the kernel releases the
//     locks of a process that dies. The lock only spares fetches,
//     correctness never depends on it: a wait longer than lockWait fetches
//     anyway.
//   - Size. The blocks are evicted least recently used first: a hit sets its
//     block's modification time. A Cache sweeps the folder (deletes the
//     oldest blocks until the folder is within its bound) at its first store
//     and whenever what it stored since its last sweep passes a sixteenth of
//     the bound; one process sweeps a folder at a time. Across processes the
//     bound is kept loosely: the folder may exceed it by what they store
//     between sweeps. A block deleted while a reader has it open still reads
//     whole (Linux keeps an unlinked open file), and its checksum is checked
//     all the same.
//   - Disks fail. A block that cannot be stored (disk full, folder
//     unwritable) is served all the same and counted (Stats.Unstored): the
//     disk never fails a read.
package blockcache

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strconv"
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
	Evicted   int64 // blocks that sweeps deleted
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
	dir       string
	max, step int64
	added     atomic.Int64 // bytes stored since the last sweep
	sweeping  sync.Mutex
	mu        sync.Mutex
	stats     Stats
	// checked holds the block files this cache has read whole and found
	// intact, by path, with what fstat said of them (os.FileInfo): a later
	// hit on the same file, unchanged (the same inode, size and modification
	// time: a block stored again is a new file, and a write in place moves
	// the time) reads only the bytes it needs. A shuffle needs a 16 KiB page of a
	// block at a time: reading and summing all 256 KiB of it on every hit
	// took the second epoch of a full shuffle to 0.4 of the rate of the same
	// read of local files. At most maxChecked files are held.
	checked  sync.Map
	nchecked atomic.Int64
}

// maxChecked bounds the block files a cache remembers as checked: 64 Ki of
// them, 16 GiB of blocks, in a few MiB.
const maxChecked = 64 << 10

// touchAge is how old a block's mark of its last use may grow before a hit
// marks it again: the sweeps' order needs no finer time, and a mark is a
// system call.
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
// as its file's presence says: a block found damaged when read is still a
// miss then.
func (c *Cache) Holds(obj Object, off int64) bool {
	_, err := os.Stat(c.path(sha256.Sum256([]byte(obj.ID)), off/BlockSize))
	return err == nil
}

// Warm fetches into the cache the blocks of obj that hold [off, off+n) and
// are not on disk, as ReadAt would, and returns what that took. A block
// whose file is there is not read: it is checked when it is read.
func (c *Cache) Warm(ctx context.Context, obj Object, off, n int64, fetch Fetch) (Stats, error) {
	var st Stats
	id := sha256.Sum256([]byte(obj.ID))
	end := min(off+n, obj.Size)
	for b := max(off, 0) / BlockSize; b*BlockSize < end; {
		if _, err := os.Stat(c.path(id, b)); err == nil {
			b++
			continue
		}
		e := b + 1
		for e*BlockSize < end {
			if _, err := os.Stat(c.path(id, e)); err == nil {
				break
			}
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
		path := r.path(b)
		f, err := fly(ctx, path)
		if err != nil {
			return errcode.Wrap(err, errcode.Canceled, "wait for a block another read fetches", r.c.dir)
		}
		flown = append(flown, f)
		l, err := acquire(ctx, r.c.dir, lockOffset(path), lockWait)
		if err == nil {
			held = append(held, l)
		} // else fetched without its lock: twice at worst
		if ctx.Err() != nil {
			return errcode.Wrap(context.Cause(ctx), errcode.Canceled, "wait for a block another process fetches", r.c.dir)
		}
	}
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
	path string
	done chan struct{}
}

// flights holds the blocks in flight in this process, by path.
var flights sync.Map

// fly waits until no other read of the process fetches the block at path,
// and returns the flight of this one.
func fly(ctx context.Context, path string) (*flight, error) {
	f := &flight{path: path, done: make(chan struct{})}
	for {
		was, loaded := flights.LoadOrStore(path, f)
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
	flights.Delete(f.path)
	close(f.done)
}

// lockOffset is the byte of a folder's lock file that the lock of the
// block at path takes: from 1 on, byte 0 being the sweeps'.
func lockOffset(path string) int64 {
	h := fnv.New64a()
	h.Write([]byte(path))
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
		if err := r.c.store(r.path(b), r.id, b, cut(bufs, bs-start, be-bs)); err != nil {
			r.st.Unstored++
			continue
		}
		r.stored += be - bs
	}
	return nil
}

// serve copies block b into p from disk, and reports whether it could: a
// block absent or failing a check is a miss, and one that fails a check is
// deleted.
func (r *read) serve(b int64) bool {
	path := r.path(b)
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return false
	}
	bs, be := b*BlockSize, min((b+1)*BlockSize, r.obj.Size)
	lo, hi := max(bs, r.off), min(be, r.off+int64(len(r.p)))
	if !r.readChecked(f, fi, path, lo, hi, bs) {
		bufs, free := r.pieces(bs, be)
		defer free()
		if !readBlock(f, r.id, b, be-bs, bufs) {
			r.c.checked.Delete(path)
			os.Remove(path) // a block stored again meanwhile goes too: a miss, no more
			return false
		}
		r.c.check(path, fi)
	}
	if time.Since(fi.ModTime()) > touchAge {
		touch(path)
		if now, err := f.Stat(); err == nil {
			r.c.check(path, now) // its new time is its own mark
		}
	}
	r.st.Hits++
	r.st.HitBytes += hi - lo
	return true
}

// check records that the block file at path, as fi describes it, is intact.
func (c *Cache) check(path string, fi os.FileInfo) {
	if c.nchecked.Load() >= maxChecked {
		return
	}
	if _, had := c.checked.Swap(path, fi); !had {
		c.nchecked.Add(1)
	}
}

// readChecked reads bytes [lo, hi) of the object, of block file f starting
// at object offset bs, into p where the cache has read f whole before and
// found it intact (the file at path is still the one it checked), and
// reports whether it did.
func (r *read) readChecked(f *os.File, fi os.FileInfo, path string, lo, hi, bs int64) bool {
	v, ok := r.c.checked.Load(path)
	if !ok || lo >= hi {
		return false
	}
	if was := v.(os.FileInfo); !os.SameFile(was, fi) || was.Size() != fi.Size() || !was.ModTime().Equal(fi.ModTime()) {
		return false
	}
	_, err := f.ReadAt(r.p[lo-r.off:hi-r.off], headerSize+lo-bs)
	return err == nil
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

// Names of the files in a cache folder. Block b of the object whose identity
// hashes to id is <dir>/<id[0] in hex>/<id[:16] in hex>-<b>.blk; a process
// storing it writes <that>.tmp<random> first. <dir>/locks holds the locks of
// the folder's processes (lock_unix.go).
const (
	blockSuffix = ".blk"
	tempInfix   = ".tmp"
	lockFile    = "locks"
)

// path returns the file of block b.
func (r *read) path(b int64) string { return r.c.path(r.id, b) }

// path returns the file of block b of the object whose identity hashes to
// id.
func (c *Cache) path(id [sha256.Size]byte, b int64) string {
	return filepath.Join(c.dir, hex.EncodeToString(id[:1]), hex.EncodeToString(id[:16])+"-"+strconv.FormatInt(b, 10)+blockSuffix)
}

// store writes a block to a temporary file beside path and renames it into
// place.
func (c *Cache) store(path string, id [sha256.Size]byte, b int64, bufs [][]byte) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, filepath.Base(path)+tempInfix+"*")
	if os.IsNotExist(err) {
		if err = os.MkdirAll(dir, 0o755); err == nil {
			f, err = os.CreateTemp(dir, filepath.Base(path)+tempInfix+"*")
		}
	}
	if err != nil {
		return err
	}
	err = writeBlock(f, id, b, bufs)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("store block %d: %w", b, err)
	}
	return nil
}
