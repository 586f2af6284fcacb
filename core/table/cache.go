package table

import (
	"container/list"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
)

// groupKey names one row group of one file.
type groupKey struct{ file, group int }

// groupCache holds decoded row groups, least recently used first out, within a
// budget of bytes. Loads of the same group are shared: a second caller waits
// for the first instead of decoding again. Records handed out are retained for
// the caller, so eviction never frees memory still in use.
type groupCache struct {
	budget int64

	mu    sync.Mutex
	used  int64
	lru   *list.List // of *groupEntry, most recent at the front
	byKey map[groupKey]*groupEntry
}

type groupEntry struct {
	key     groupKey
	elem    *list.Element // nil while loading or once evicted
	done    chan struct{} // closed when rec or err is set
	rec     arrow.RecordBatch
	err     error
	bytes   int64
	waiters int // callers waiting for the load
}

func newGroupCache(budget int64) *groupCache {
	return &groupCache{budget: budget, lru: list.New(), byKey: map[groupKey]*groupEntry{}}
}

// get returns the record of key, loading it with load when absent. The caller
// releases the returned record. Waiting for another caller's load is not
// cancelable; load itself honours its caller's context.
func (c *groupCache) get(key groupKey, load func() (arrow.RecordBatch, error)) (arrow.RecordBatch, error) {
	c.mu.Lock()
	e, ok := c.byKey[key]
	if ok && e.elem != nil { // loaded
		c.lru.MoveToFront(e.elem)
		e.rec.Retain()
		c.mu.Unlock()
		return e.rec, nil
	}
	if ok { // loading: the loader retains one reference for each waiter
		e.waiters++
		c.mu.Unlock()
		<-e.done
		return e.rec, e.err
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
		return nil, err
	}
	for range e.waiters + 1 {
		rec.Retain()
	}
	e.bytes = recordBytes(rec)
	e.elem = c.lru.PushFront(e)
	c.used += e.bytes
	c.evictLocked(e)
	return rec, nil
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

// close releases every cached record.
func (c *groupCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.lru.Len() > 0 {
		c.removeLocked(c.lru.Back().Value.(*groupEntry))
	}
}

// recordBytes is the size of a record's buffers.
func recordBytes(rec arrow.RecordBatch) int64 {
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
