package main

import (
	"math"
	"os"
	"runtime/debug"
	"sync"

	"github.com/croupier-data/croupier/loader"
)

// The Go heap under the datasets' memory budgets.
//
// A stream's memory_budget counts the bytes it holds: rows kept for steps
// ahead and batches read ahead (in C memory, freed when done), compressed
// pages fetched and pages being decoded (on the Go heap). Between two
// collections the Go heap also holds garbage: with Go's default GOGC of 100
// it grows to about twice what is live, and a process reading a table many
// times its budget held 50–60 MiB more than its budget allows (measured
// with a 121 MiB budget: 266 MiB resident above imports, 203 MiB with this).
// The library owns the Go runtime of the process it is loaded in, so it sets
// the runtime's soft memory limit (debug.SetMemoryLimit) to what the open
// datasets let the Go heap hold: loader.GoHeapBase, plus loader.GoHeap of
// each open dataset and follower (a quarter of its budget: the fetch and
// decoding shares), plus the build_memory of each permutation build
// running, whose memory is all Go heap. The collector then runs more often only when the heap nears that, never
// while it is well below it. An application that sets GOMEMLIMIT keeps its
// own limit. The Go packages set none: a Go service decides its own.
var goHeap struct {
	sync.Mutex
	held int64 // Go heap the open datasets and running builds may hold
	user bool  // GOMEMLIMIT was set: leave the limit alone
}

func init() { _, goHeap.user = os.LookupEnv("GOMEMLIMIT") }

// holdHeap adds n bytes that a dataset or follower opened (a quarter of its
// budget) or a build started (its memory) may hold on the Go heap, or,
// negative, gives them back, and sets the Go runtime's memory limit to
// match.
func holdHeap(n int64) {
	goHeap.Lock()
	defer goHeap.Unlock()
	if goHeap.user {
		return
	}
	goHeap.held += n
	limit := int64(math.MaxInt64) // nothing open: no limit
	if goHeap.held > 0 {
		limit = loader.GoHeapBase + goHeap.held
	}
	debug.SetMemoryLimit(limit)
}

// heapOf is what an open dataset or follower may hold on the Go heap
// (loader.GoHeap); 0 for other objects.
func heapOf(v any) int64 {
	switch o := v.(type) {
	case *loader.Loader:
		return loader.GoHeap(o.Options().MemoryBudget)
	case *loader.Follower:
		return loader.GoHeap(o.Options().MemoryBudget)
	}
	return 0
}
