package blockcache

import (
	"context"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// sweepOffset is the byte of a folder's lock file whose lock a sweep holds.
const sweepOffset = 0

// sweep deletes the least recently used segments until the folder holds at
// most the cache's bound, and what the earlier layout of the folder left
// (a folder of block files per first byte of their identity hash). It does
// nothing while another sweep of the folder runs, in this process or
// another.
func (c *Cache) sweep(ctx context.Context) {
	if !c.sweeping.TryLock() {
		return
	}
	defer c.sweeping.Unlock()
	c.added.Store(0)
	l, err := acquire(ctx, c.dir, sweepOffset, 0)
	if err != nil {
		return // another process sweeps, or the folder is not there
	}
	defer l.release()
	type seg struct {
		name string
		size int64
		used time.Time
	}
	var segs []seg
	var total int64
	ents, _ := os.ReadDir(c.dir)
	for _, e := range ents {
		name := e.Name()
		if e.IsDir() && oldLayout(name) {
			os.RemoveAll(filepath.Join(c.dir, name))
			continue
		}
		if !strings.HasSuffix(name, segSuffix) {
			continue
		}
		if fi, err := e.Info(); err == nil { // else removed meanwhile
			segs = append(segs, seg{name, fi.Size(), fi.ModTime()})
			total += fi.Size()
		}
	}
	if total <= c.max {
		return
	}
	slices.SortFunc(segs, func(a, b seg) int { return a.used.Compare(b.used) })
	var gone []string
	for _, s := range segs {
		if total <= c.max {
			break
		}
		switch err := os.Remove(filepath.Join(c.dir, s.name)); {
		case err == nil:
			gone = append(gone, s.name)
			fallthrough
		case os.IsNotExist(err): // another process's sweep was first
			total -= s.size
		}
	}
	c.drop(gone)
	c.count(Stats{Evicted: int64(len(gone))})
}

// oldLayout reports whether name is a folder of the layout before segments:
// two lowercase hex digits.
func oldLayout(name string) bool {
	b, err := hex.DecodeString(name)
	return err == nil && len(b) == 1 && strings.ToLower(name) == name
}
