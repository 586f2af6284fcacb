package table_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/croupier-data/croupier/core/store"
	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/internal/s3test"
	"github.com/croupier-data/croupier/internal/tabletest"
)

// TestAppendsRideOutThrottling: with half the uploads of data files answered
// 429 Too Many Requests, every one of 20 appends succeeds and the table
// holds every row once. The data files' keys are random, so the faults
// differ from run to run; 20 attempts make a failure once in a million runs
// (without retries of 429, all 20 appends succeed once in a million).
func TestAppendsRideOutThrottling(t *testing.T) {
	prev := store.SetRetryPolicy(store.RetryPolicy{Attempts: 20, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond})
	defer store.SetRetryPolicy(prev)
	s := startS3(t)
	ctx := context.Background()
	uri := s.URI("bkt", "throttled")
	tb, err := table.Create(ctx, uri, tabletest.Reader(0, 3), table.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	s.SetFaults(s3test.Faults{Rate: 0.5, Seed: 3, Kinds: []s3test.Kind{s3test.Throttle}, Match: s3test.MatchKey("PUT", "/data/")})
	for i := range 20 {
		if _, err := tb.Append(ctx, tabletest.Reader(int64(3+3*i), 3), table.WriteOptions{}); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	if n := s.Injected()[s3test.Throttle]; n == 0 {
		t.Fatal("no upload was throttled")
	}
	s.SetFaults(s3test.Faults{})
	latest, err := table.Open(ctx, uri)
	if err != nil {
		t.Fatal(err)
	}
	defer latest.Close()
	if got := allIDs(t, latest); !slices.Equal(got, seq(0, 63)) {
		t.Fatalf("ids %v, want 0..62", got)
	}
}
