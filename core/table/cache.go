package table

import (
	"container/list"
	"context"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/croupier-data/croupier/core/errcode"
)

// groupCache holds decoded row groups, least recently used first out, within a
// budget of bytes. Loads of the same group are shared: a second caller waits
// for the first instead of decoding again. Records handed out are retained for
// the caller, so eviction never frees memory still in use.
type groupCache struct {
	budget int64

	mu   sync.Mutex
	used int64
	lru  *list.List // of *groupEntry, most recent at the front

	loads, loaded int64 // entries loaded and their bytes, for the mean size
	hits          int64 // gets served by an entry loaded or being loaded
	byKey         map[GroupRef]*groupEntry
}

type groupEntry struct {
	key     GroupRef
	elem    *list.Element // nil while loading or once evicted
	done    chan struct{} // closed when rec or err is set
	rec     arrow.RecordBatch
	err     error
	bytes   int64
	waiters int // callers waiting for the load
}

func newGroupCache(budget int64) *groupCache {
	return &groupCache{budget: budget, lru: list.New(), byKey: map[GroupRef]*groupEntry{}}
}

// get returns the record of key, loading it with load when absent. The caller
// releases the returned record. A caller waiting for another caller's load
// retries the load itself if that one was canceled while its own ctx was not:
// one request's cancellation never fails another.
func (c *groupCache) get(ctx context.Context, key GroupRef, load func() (arrow.RecordBatch, error)) (arrow.RecordBatch, error) {
	for {
		rec, retry, err := c.tryGet(ctx, key, load)
		if !retry {
			return rec, err
		}
	}
}

func (c *groupCache) tryGet(ctx context.Context, key GroupRef, load func() (arrow.RecordBatch, error)) (_ arrow.RecordBatch, retry bool, _ error) {
	c.mu.Lock()
	e, ok := c.byKey[key]
	if ok {
		c.hits++
	}
	if ok && e.elem != nil { // loaded
		c.lru.MoveToFront(e.elem)
		e.rec.Retain()
		c.mu.Unlock()
		return e.rec, false, nil
	}
	if ok { // loading: the loader retains one reference for each waiter
		e.waiters++
		c.mu.Unlock()
		<-e.done
		if e.err != nil && errcode.Of(e.err) == errcode.Canceled && ctx.Err() == nil {
			return nil, true, nil
		}
		return e.rec, false, e.err
	}
	e = &groupEntry{key: key, done: make(chan struct{})}
	c.byKey[key] = e
	c.mu.Unlock()

	rec, err := load()
	c.mu.Lock()
	defer c.mu.Unlock()
	defer close(e.done)
	e.rec, e.err = rec, err
	if err != nil {
		delete(c.byKey, key) // a later get retries
		return nil, false, err
	}
	for range e.waiters + 1 {
		rec.Retain()
	}
	e.bytes = RecordBytes(rec)
	c.loads++
	c.loaded += e.bytes
	e.elem = c.lru.PushFront(e)
	c.used += e.bytes
	c.evictLocked(e)
	return rec, false, nil
}

// evictLocked drops least recently used entries, never keep, until the cache
// fits its budget.
func (c *groupCache) evictLocked(keep *groupEntry) {
	for c.used > c.budget {
		back := c.lru.Back()
		if back == nil || back.Value.(*groupEntry) == keep {
			return
		}
		c.removeLocked(back.Value.(*groupEntry))
	}
}

func (c *groupCache) removeLocked(e *groupEntry) {
	c.lru.Remove(e.elem)
	e.elem = nil
	delete(c.byKey, e.key)
	c.used -= e.bytes
	e.rec.Release()
}

// stats returns the bytes cached, the mean bytes of the entries loaded, and
// the number of gets served without a load of their own.
func (c *groupCache) stats() (used, mean, hits int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.loads > 0 {
		mean = c.loaded / c.loads
	}
	return c.used, mean, c.hits
}

// close releases every cached record.
func (c *groupCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.lru.Len() > 0 {
		c.removeLocked(c.lru.Back().Value.(*groupEntry))
	}
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
