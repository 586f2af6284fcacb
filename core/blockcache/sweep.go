package blockcache

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// staleAge is the age past which a sweep removes a temporary file: one that
// a killed process left. Writing a block takes
// milliseconds.
const staleAge = 10 * time.Minute

// sweepOffset is the byte of a folder's lock file whose lock a sweep holds.
const sweepOffset = 0

// sweep deletes the least recently used blocks until the folder holds at
// most the cache's bound, and the files killed processes left behind. It
// does nothing while another sweep of the folder runs, in this process or
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
	type block struct {
		path string
		size int64
		used time.Time
	}
	var blocks []block
	var total int64
	now := time.Now()
	subs, _ := os.ReadDir(c.dir)
	for _, sub := range subs {
		if !sub.IsDir() {
			continue
		}
		files, _ := os.ReadDir(filepath.Join(c.dir, sub.Name()))
		for _, e := range files {
			fi, err := e.Info()
			if err != nil {
				continue // removed meanwhile
			}
			path := filepath.Join(c.dir, sub.Name(), e.Name())
			stale := now.Sub(fi.ModTime()) > staleAge
			switch name := e.Name(); {
			case strings.HasSuffix(name, blockSuffix):
				blocks = append(blocks, block{path, fi.Size(), fi.ModTime()})
				total += fi.Size()
			case strings.Contains(name, blockSuffix+tempInfix):
				if stale {
					os.Remove(path)
				} else {
					total += fi.Size()
				}
			}
		}
	}
	if total <= c.max {
		return
	}
	slices.SortFunc(blocks, func(a, b block) int { return a.used.Compare(b.used) })
	var evicted int64
	for _, b := range blocks {
		if total <= c.max {
			break
		}
		switch err := os.Remove(b.path); {
		case err == nil:
			evicted++
			fallthrough
		case os.IsNotExist(err): // another process's sweep was first
			total -= b.size
		}
	}
	c.count(Stats{Evicted: evicted})
}
