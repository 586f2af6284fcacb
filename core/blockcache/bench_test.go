package blockcache_test

import (
	"context"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/croupier-data/croupier/core/blockcache"
)

// cpuTime returns the user and system CPU time of the process so far.
func cpuTime() (user, sys time.Duration) {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}

// reportCPU reports the CPU time per block of what ran since user0, sys0.
func reportCPU(b *testing.B, blocks int, user0, sys0 time.Duration) {
	user, sys := cpuTime()
	b.ReportMetric(float64((user-user0).Microseconds())/float64(blocks), "user-µs/block")
	b.ReportMetric(float64((sys-sys0).Microseconds())/float64(blocks), "sys-µs/block")
}

// BenchmarkFill stores blocks of an object from a store in memory, one
// ReadAt of a block each, as the first epoch of a shuffle fills the cache.
func BenchmarkFill(b *testing.B) {
	src := &source{data: content("fill", 64*bs)}
	c := open(b, b.TempDir(), 1<<40)
	p := make([]byte, bs)
	user0, sys0 := cpuTime()
	b.ResetTimer()
	for i := range b.N {
		obj := blockcache.Object{ID: "fill " + string(rune('a'+i/64%26)) + string(rune(i/64/26)), Size: int64(len(src.data))}
		if _, err := c.ReadAt(context.Background(), obj, p, int64(i%64)*bs, src.fetch); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	reportCPU(b, b.N, user0, sys0)
}

// BenchmarkHit reads 16 KiB pages at random from 1,024 blocks stored by
// another Cache of the folder, as a later epoch of a shuffle does.
func BenchmarkHit(b *testing.B) {
	const blocks = 1024
	src := &source{data: content("hit", blocks*bs)}
	obj := blockcache.Object{ID: "hit", Size: int64(len(src.data))}
	dir := b.TempDir()
	if _, err := open(b, dir, 1<<40).Warm(context.Background(), obj, 0, obj.Size, src.fetch); err != nil {
		b.Fatal(err)
	}
	c := open(b, dir, 1<<40)
	p := make([]byte, 16<<10)
	for blk := range int64(blocks) { // the first hit of a block reads it whole
		if _, err := c.ReadAt(context.Background(), obj, p, blk*bs, src.fetch); err != nil {
			b.Fatal(err)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	user0, sys0 := cpuTime()
	b.ResetTimer()
	for range b.N {
		off := r.Int64N(obj.Size - int64(len(p)))
		if _, err := c.ReadAt(context.Background(), obj, p, off, src.fetch); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	reportCPU(b, b.N, user0, sys0)
	if st := c.Stats(); st.Misses != 0 {
		b.Fatalf("%d misses of blocks stored", st.Misses)
	}
}
