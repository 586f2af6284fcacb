package permutation

import (
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// Go's collector lets the heap grow to twice what is live before it runs
// (GOGC=100), so a build whose live data stays within its memory could still
// take twice that. While builds run, limitMemory sets the runtime's soft
// memory limit (debug.SetMemoryLimit) to what the process held when the
// first of them began plus the memory of each build running, or leaves the
// limit that was set when it is lower; the last build to end restores it.
// The collector then runs as that limit nears instead of at twice the live
// heap; the limit is soft, so a process that needs more still gets it.
var memoryLimit struct {
	sync.Mutex
	builds int   // builds running
	sum    int64 // their memory
	base   int64 // the Go memory of the process as the first began
	saved  int64 // the limit before
}

// limitMemory counts a build of memory bytes in the limit until the returned
// function is called.
func limitMemory(memory int64) (restore func()) {
	l := &memoryLimit
	l.Lock()
	defer l.Unlock()
	if l.builds == 0 {
		l.saved, l.base = debug.SetMemoryLimit(-1), goMemory()
	}
	l.builds++
	l.sum += memory
	debug.SetMemoryLimit(min(l.saved, l.base+l.sum))
	return func() {
		l.Lock()
		defer l.Unlock()
		l.builds--
		l.sum -= memory
		if l.builds == 0 {
			debug.SetMemoryLimit(l.saved)
			return
		}
		debug.SetMemoryLimit(min(l.saved, l.base+l.sum))
	}
}

// goMemory returns the memory the Go runtime holds from the system, as its
// memory limit counts it.
func goMemory() int64 {
	s := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64()) - int64(s[1].Value.Uint64())
}
