package loader_test

import (
	"bytes"
	"context"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/arrow/memory/mallocator"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/store"
	"github.com/croupier-data/croupier/core/table"
	_ "github.com/croupier-data/croupier/drivers/s3" // s3://
	"github.com/croupier-data/croupier/internal/s3test"
	"github.com/croupier-data/croupier/internal/tabletest"
	"github.com/croupier-data/croupier/loader"
	"github.com/croupier-data/croupier/permutation"
)

// faultPolicy is the retry policy of the fault tests: few attempts, short
// waits, a per-attempt deadline well above a loopback request under -race.
var faultPolicy = store.RetryPolicy{Attempts: 4, BaseDelay: 5 * time.Millisecond, MaxDelay: 50 * time.Millisecond,
	AttemptTimeout: 500 * time.Millisecond}

// s3Permutation starts an S3 server and writes to it, without faults, a
// croupier table of three appends in small row groups and a shuffled
// permutation of it. It returns the server and the permutation's URI.
func s3Permutation(t *testing.T) (*s3test.Server, string) {
	t.Helper()
	ctx := context.Background()
	s, err := s3test.Start("bkt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	uri := s.URI("bkt", "tbl")
	opts := table.WriteOptions{RowGroupRows: 25, PageBytes: 4 << 10}
	var tb *table.Table
	for i, n := range []int64{300, 250, 200} {
		r := tabletest.Reader(int64(i)*1000, n)
		var err error
		if i == 0 {
			tb, err = table.Create(ctx, uri, r, opts)
		} else {
			_, err = tb.Append(ctx, r, opts)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	tb.Close()
	if tb, err = table.Open(ctx, uri); err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	perms, err := permutation.Build(ctx, tb, permutation.Spec{Shuffle: &permutation.ShuffleSpec{Seed: 5}},
		s.URI("bkt", "perm"), permutation.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	perms.Close()
	return s, s.URI("bkt", "perm")
}

// epochs opens the permutation at uri and deals four epochs of it with a
// small cache (so that row groups are read again and again), returning each
// batch as Arrow IPC bytes.
func epochs(t *testing.T, uri string) ([][]byte, error) {
	t.Helper()
	ctx := context.Background()
	perms, err := permutation.Open(ctx, uri)
	if err != nil {
		return nil, err
	}
	defer perms.Close()
	l, err := loader.New(perms.Table(), perms.Splits()[0], loader.Options{GlobalBatchSize: 24, NumSplits: 8,
		ReadAhead: 2, MemoryBudget: 32 << 10})
	if err != nil {
		return nil, err
	}
	defer l.Close()
	var out [][]byte
	for epoch := range int64(4) {
		s, err := l.Stream(ctx, loader.StreamOptions{Epoch: epoch})
		if err != nil {
			return nil, err
		}
		for b, err := range s.All(ctx) {
			if err != nil {
				s.Close()
				return nil, err
			}
			var buf bytes.Buffer
			w := ipc.NewWriter(&buf, ipc.WithSchema(b.Record.Schema()))
			err = w.Write(b.Record)
			if err == nil {
				err = w.Close()
			}
			b.Record.Release()
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, buf.Bytes())
		}
		s.Close()
	}
	return out, nil
}

// TestLoaderUnderFaults deals four epochs from a croupier table on an S3
// server that injects every kind of fault into 5% of the requests: the
// batches are exactly those of a clean run, byte for byte, and the faults
// did happen.
func TestLoaderUnderFaults(t *testing.T) {
	defer store.SetRetryPolicy(store.SetRetryPolicy(faultPolicy))
	s, uri := s3Permutation(t)
	want, err := epochs(t, uri)
	if err != nil {
		t.Fatal(err)
	}
	s.ResetCounts()
	s.SetFaults(s3test.Faults{Rate: 0.05, Seed: 3, Stall: 30 * time.Second, Spike: 20 * time.Millisecond})
	got, err := epochs(t, uri)
	if err != nil {
		t.Fatalf("loader under 5%% faults: %v", err)
	}
	if len(got) != len(want) || len(want) == 0 {
		t.Fatalf("%d batches under faults, %d clean", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("batch %d differs from the clean run's", i)
		}
	}
	// Which requests a run makes depends on timing (read coalescing and
	// cache evictions), so the faults vary a little from run to run: about
	// 35 in some 700 requests. Fewer than 3 faults, or of fewer than 3 kinds, is all but
	// impossible (p < 1e-5) unless the injection is broken.
	injected := s.Injected()
	var total int64
	for _, n := range injected {
		total += n
	}
	t.Logf("%d requests, faults injected: %v", s.Requests(), injected)
	if total < 3 || len(injected) < 3 {
		t.Errorf("faults injected: %v; want at least 3, of at least 3 kinds", injected)
	}
}

// TestLoaderFailsAfterBound: when every request fails, opening the table and
// dealing from an opened loader both fail with Unavailable after the retry
// bound, naming the object, within the bound's worst-case time.
func TestLoaderFailsAfterBound(t *testing.T) {
	defer store.SetRetryPolicy(store.SetRetryPolicy(faultPolicy))
	s, uri := s3Permutation(t)
	ctx := context.Background()
	perms, err := permutation.Open(ctx, uri)
	if err != nil {
		t.Fatal(err)
	}
	defer perms.Close()
	l, err := loader.New(perms.Table(), perms.Splits()[0], loader.Options{GlobalBatchSize: 24, NumSplits: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s.SetFaults(s3test.Faults{Rate: 1, Stall: time.Minute})
	// Worst case of one request: every attempt times out, every wait is
	// the longest; allow as much again for the requests a step waits on.
	bound := 2 * (time.Duration(faultPolicy.Attempts)*faultPolicy.AttemptTimeout +
		time.Duration(faultPolicy.Attempts-1)*faultPolicy.MaxDelay)

	start := time.Now()
	_, err = table.Open(ctx, s.URI("bkt", "tbl"))
	checkBound(t, "open table", err, "s3://bkt/tbl/_versions/", time.Since(start), bound)

	start = time.Now()
	// A stream reads its first row ids and footer when it opens.
	stream, err := l.Stream(ctx, loader.StreamOptions{})
	if err == nil {
		_, err = stream.Next(ctx)
		stream.Close()
	}
	// The first request a step waits on is for row ids or for rows.
	checkBound(t, "deal", err, "s3://bkt/", time.Since(start), bound)
}

func checkBound(t *testing.T, what string, err error, object string, took, bound time.Duration) {
	t.Helper()
	if errcode.Of(err) != errcode.Unavailable {
		t.Fatalf("%s: %v, want Unavailable", what, err)
	}
	if msg := err.Error(); !strings.Contains(msg, object) || !strings.Contains(msg, ": unavailable after 4 attempts in ") {
		t.Errorf("%s: message %q does not name %s and the attempts", what, msg, object)
	}
	if took > bound {
		t.Errorf("%s failed after %s, more than %s", what, took, bound)
	}
}

// TestPlannerFillsItsWindowAtOnce streams a table from a store with 2 s to
// the first byte. Before any row group is decoded, the stream already has as
// many requests in flight as it may (MaxReads): waiting for one to decode
// before fetching more would cost a round trip at the start of every stream.
func TestPlannerFillsItsWindowAtOnce(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	ctx := context.Background()
	s, uri := s3Permutation(t)
	perms, err := permutation.Open(ctx, uri)
	if err != nil {
		t.Fatal(err)
	}
	defer perms.Close()
	const maxReads = 8
	l, err := loader.New(perms.Table(), permutation.Identity{N: perms.Table().NumRows()},
		loader.Options{GlobalBatchSize: 25, NumSplits: 1, MaxReads: maxReads}) // a row group a step
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s.SetFaults(s3test.Faults{FirstByte: 2 * time.Second})
	s.ResetCounts()
	st, err := l.Stream(ctx, loader.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var inFlight int64
	for inFlight < maxReads && st.Stats().DecodedBytes == 0 {
		inFlight = max(inFlight, s.PeakInFlight())
		time.Sleep(time.Millisecond)
	}
	s.SetFaults(s3test.Faults{})
	if inFlight < maxReads {
		t.Errorf("before the first row group was decoded %d requests were in flight, want at least %d", inFlight, maxReads)
	}
	var rows int64
	for b, err := range st.All(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		rows += b.Record.NumRows()
		b.Record.Release()
	}
	if rows != perms.Table().NumRows() {
		t.Errorf("%d rows, want %d", rows, perms.Table().NumRows())
	}
}

// TestCloseWithReadsStalled closes a stream whose reads of rows the store
// holds for ten minutes: Close cancels them rather than waiting, and frees
// everything. The bound on Close is one of liveness, a tenth of the stall.
func TestCloseWithReadsStalled(t *testing.T) {
	ctx := context.Background()
	s, uri := s3Permutation(t)
	perms, err := permutation.Open(ctx, uri)
	if err != nil {
		t.Fatal(err)
	}
	defer perms.Close()
	mem := memory.NewCheckedAllocator(mallocator.NewMallocator())
	l, err := loader.New(perms.Table(), perms.Splits()[0], loader.Options{GlobalBatchSize: 24, NumSplits: 8, Allocator: mem})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// A first stream reads the files' footers, which the table keeps: the
	// second one's only reads of the table's files are of rows.
	first, err := l.Stream(ctx, loader.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := first.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b.Record.Release()
	first.Close()
	const stall = 10 * time.Minute
	s.SetFaults(s3test.Faults{Rate: 1, Kinds: []s3test.Kind{s3test.Stall}, Stall: stall,
		Match: s3test.MatchKey(http.MethodGet, "/tbl/data/")})
	st, err := l.Stream(ctx, loader.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for s.Injected()[s3test.Stall] == 0 { // the stream's first reads are held
		time.Sleep(time.Millisecond)
	}
	closed := make(chan error, 1)
	go func() { closed <- st.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(stall / 10):
		t.Fatalf("Close still waits %s after it was called, with reads stalled for %s", stall/10, stall)
	}
	if _, err := st.Next(ctx); errcode.Of(err) != errcode.Closed {
		t.Fatalf("Next after Close = %v, want Closed", err)
	}
	mem.AssertSize(t, 0)
}
