package loader_test

import (
	"context"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/loader"
	"github.com/croupier-data/croupier/permutation"
)

// held returns this process's open file descriptors and goroutines.
func held(t *testing.T) (fds, goroutines int) {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd to count descriptors with")
	}
	return len(entries), runtime.NumGoroutine()
}

// TestOpenCloseCyclesHoldFlat opens and closes a table, a permutation and a
// loader over them 200 times against the S3 test server, which keeps idle
// connections open as MinIO does, dealing a batch each time: afterwards the
// process holds the descriptors and goroutines it held after the first
// cycle, give or take a small slack that does not grow with the cycles.
// The last Location open on the server closes the idle connections of its
// transport: without that, the kept-alive connections run the process out
// of its 256 descriptors within the cycles and the test fails. That the
// Locations share one transport, which this count cannot tell apart from
// one transport per Location each closing its own, is
// core/store's TestLocationsShareOneBucket.
func TestOpenCloseCyclesHoldFlat(t *testing.T) {
	const slack = 4
	ctx := context.Background()
	s, permURI := s3Permutation(t)
	tableURI := s.URI("bkt", "tbl")
	cycle := func(i int) {
		tb, err := table.Open(ctx, tableURI)
		if err != nil {
			t.Fatal(err)
		}
		defer tb.Close()
		perms, err := permutation.Open(ctx, permURI)
		if err != nil {
			t.Fatal(err)
		}
		defer perms.Close()
		l, err := loader.New(perms.Table(), perms.Splits()[0], loader.Options{GlobalBatchSize: 24, NumSplits: 8})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		st, err := l.Stream(ctx, loader.StreamOptions{Epoch: int64(i % 3)})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		for b, err := range st.All(ctx) {
			if err != nil {
				t.Fatal(err)
			}
			b.Record.Release()
			break
		}
	}
	// As under `ulimit -n 256`: leaked connections would run out of
	// descriptors long before 200 cycles end.
	var limit syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &limit); err != nil {
		t.Fatal(err)
	}
	low := limit
	low.Cur = min(limit.Cur, 256)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	defer syscall.Setrlimit(syscall.RLIMIT_NOFILE, &limit)
	cycle(0)
	fds0, g0 := held(t)
	for i := 1; i <= 200; i++ {
		cycle(i)
	}
	// Connections and their goroutines end shortly after they are closed;
	// wait for them, up to a bound far above what that takes.
	var fds, g int
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if fds, g = held(t); fds <= fds0+slack && g <= g0+2*slack {
			return
		}
	}
	t.Fatalf("after 200 open/close cycles: %d descriptors and %d goroutines, %d and %d after the first",
		fds, g, fds0, g0)
}
