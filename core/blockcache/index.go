package blockcache

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// rescanAge is how old a cache's view of its folder may grow before a read
// looks at the folder again: for the blocks other processes stored, and to
// close the segments sweeps deleted, whose space the kernel frees only
// once no process holds them open.
const rescanAge = 10 * time.Second

// idleAge is how long a writer may go without appending before its next
// block starts a new segment, its old one sealed. A reader takes a segment
// whose size it has seen unchanged for twice as long as sealed: its writer
// appends to it no more, or died (a process that exits leaves its segment
// unsealed), and looking at it on every scan would cost every process a
// system call per such segment for as long as the folder keeps it. A
// variable for the tests.
var idleAge = time.Minute

// index is what a Cache knows of its folder: its segments, open, and where
// each block they hold lies.
type index struct {
	mu     sync.RWMutex
	blocks map[key]*entry
	segs   map[string]*segment
	// scanning is held by the one scan of the folder at a time.
	scanning sync.Mutex
	lastScan atomic.Int64 // when the last scan began, in Unix nanoseconds
}

// lookup returns where block k lies, nil when the cache knows of no record
// of it.
func (c *Cache) lookup(k key) *entry {
	c.ix.mu.RLock()
	defer c.ix.mu.RUnlock()
	return c.ix.blocks[k]
}

// forget drops e, a record of block k found damaged or unreadable: later
// reads miss the block until it is stored again.
func (c *Cache) forget(k key, e *entry) {
	c.ix.mu.Lock()
	defer c.ix.mu.Unlock()
	if c.ix.blocks[k] == e {
		delete(c.ix.blocks, k)
	}
}

// scanIfOld scans the folder when the last scan began more than rescanAge
// before now: once, however many reads find it old at the same moment.
func (c *Cache) scanIfOld(now time.Time) {
	old := func() bool { return now.UnixNano()-c.ix.lastScan.Load() > int64(rescanAge) }
	if !old() {
		return
	}
	c.ix.scanning.Lock()
	defer c.ix.scanning.Unlock()
	if old() {
		c.scanLocked()
	}
}

// scan brings the index up to date with the folder.
func (c *Cache) scan() {
	c.ix.scanning.Lock()
	defer c.ix.scanning.Unlock()
	c.scanLocked()
}

// scanLocked, holding scanning, opens the segments other processes
// created, reads the records appended to those not sealed since it last
// looked, and closes the segments that are gone.
func (c *Cache) scanLocked() {
	c.ix.lastScan.Store(time.Now().UnixNano())
	d, err := os.Open(c.dir)
	if err != nil {
		return
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	present := make(map[string]bool, len(names))
	for _, name := range names {
		if strings.HasSuffix(name, segSuffix) {
			present[name] = true
		}
	}
	c.ix.mu.RLock()
	var gone []string
	var grow []*segment
	for name, s := range c.ix.segs {
		if !present[name] {
			gone = append(gone, name)
		} else if !s.sealed {
			grow = append(grow, s)
		}
		delete(present, name)
	}
	c.ix.mu.RUnlock()
	// A segment this cache's writer created since the listing is not gone.
	gone = slices.DeleteFunc(gone, func(name string) bool {
		_, err := os.Stat(filepath.Join(c.dir, name))
		return !os.IsNotExist(err)
	})
	c.drop(gone)
	for name := range present {
		if s := c.open(name); s != nil {
			grow = append(grow, s)
		}
	}
	for _, s := range grow {
		c.ix.mu.RLock()
		from, was := s.scanned, s.size
		c.ix.mu.RUnlock()
		found, end, size, sealed := scanFrom(s, from)
		now := time.Now()
		c.ix.mu.Lock()
		c.addLocked(found)
		s.scanned = max(s.scanned, end)
		if size != was {
			s.size, s.grew = size, now
		}
		s.sealed = s.sealed || sealed || now.Sub(s.grew) > 2*idleAge
		c.ix.mu.Unlock()
	}
}

// open opens the segment name that another writer created, and returns it,
// or nil where it is gone or this cache's writer created it meanwhile.
func (c *Cache) open(name string) *segment {
	f, err := os.Open(filepath.Join(c.dir, name))
	if err != nil {
		return nil // deleted meanwhile
	}
	s := &segment{name: name, f: f, grew: time.Now()}
	if fi, err := f.Stat(); err == nil {
		s.used.Store(fi.ModTime().UnixNano())
	}
	c.ix.mu.Lock()
	defer c.ix.mu.Unlock()
	if _, had := c.ix.segs[name]; had {
		f.Close()
		return nil
	}
	c.ix.segs[name] = s
	return s
}

// addLocked indexes the blocks found, but those the index holds already.
func (c *Cache) addLocked(found []kv) {
	for _, f := range found {
		if _, had := c.ix.blocks[f.k]; !had {
			c.ix.blocks[f.k] = f.e
		}
	}
}

// drop forgets the segments named, deleted from the folder, and closes
// them.
func (c *Cache) drop(names []string) {
	if len(names) == 0 {
		return
	}
	c.ix.mu.Lock()
	defer c.ix.mu.Unlock()
	var segs []*segment
	for _, name := range names {
		if s, ok := c.ix.segs[name]; ok {
			segs = append(segs, s)
			delete(c.ix.segs, name)
		}
	}
	for k, e := range c.ix.blocks {
		for _, s := range segs {
			if e.seg == s {
				delete(c.ix.blocks, k)
			}
		}
	}
	for _, s := range segs {
		s.f.Close() // reads under way finish first (os.File counts them)
	}
}

// writer appends the blocks a Cache stores to its segment.
type writer struct {
	mu   sync.Mutex
	seg  *segment  // nil before the first block, and after a failed append
	off  int64     // the end of seg
	last time.Time // of the last append
}

// store appends block k, whose bytes are bufs end to end, to the cache's
// segment, and indexes it.
func (c *Cache) store(k key, bufs [][]byte) error {
	var n int64
	for _, b := range bufs {
		n += int64(len(b))
	}
	sum := sumOf(bufs)
	w := &c.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := c.ready(headerSize + n); err != nil {
		return fmt.Errorf("store block %d: %w", k.b, err)
	}
	h := header(k, n, sum)
	off, s := w.off, w.seg
	_, err := s.f.WriteAt(h[:], off)
	at := off + headerSize
	for _, b := range bufs {
		if err != nil {
			break
		}
		_, err = s.f.WriteAt(b, at)
		at += int64(len(b))
	}
	if err != nil {
		s.f.Truncate(off) // best effort: a torn record ends the segment for readers anyway
		w.seg = nil
		return fmt.Errorf("store block %d in %s: %w", k.b, filepath.Join(c.dir, s.name), err)
	}
	w.off, w.last = at, time.Now()
	e := &entry{seg: s, off: off + headerSize, n: n, sum: sum}
	e.ok.Store(true)
	c.ix.mu.Lock()
	c.ix.blocks[k] = e
	s.scanned = max(s.scanned, at)
	s.size, s.grew = max(s.size, at), w.last
	c.ix.mu.Unlock()
	return nil
}

// ready makes sure the writer has a segment with room for a record of n
// bytes: it seals a full one, or one idle for longer than idleAge, and
// starts another, and starts another when a sweep deleted it.
func (c *Cache) ready(n int64) error {
	w := &c.w
	if w.seg != nil && w.off > 0 && (w.off+n > c.segMax || time.Since(w.last) > idleAge) {
		h := header(key{}, sealLength, 0)
		w.seg.f.WriteAt(h[:], w.off) // best effort: without it readers keep looking for more
		w.seg = nil
	}
	if w.seg != nil && deleted(w.seg.f) {
		w.seg = nil
	}
	if w.seg != nil {
		return nil
	}
	name := newSegmentName()
	path := filepath.Join(c.dir, name)
	// Under the index's lock, so that a scan that lists the new file finds
	// it known, and opens it no second time.
	c.ix.mu.Lock()
	defer c.ix.mu.Unlock()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if os.IsNotExist(err) {
		if err = os.MkdirAll(c.dir, 0o755); err == nil {
			f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		}
	}
	if err != nil {
		return err
	}
	s := &segment{name: name, f: f, grew: time.Now()}
	s.used.Store(time.Now().UnixNano())
	c.ix.segs[name] = s
	w.seg, w.off = s, 0
	return nil
}
