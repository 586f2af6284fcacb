package store_test

import (
	"bytes"
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/croupier-data/croupier/internal/s3test"
)

// TestLateReadHedged: once a location has learnt its store's latency, a
// range read whose first answer does not come is sent again, and the read
// returns the second answer's bytes while the first is still held.
func TestLateReadHedged(t *testing.T) {
	ctx := context.Background()
	s, loc, data := faultyStore(t)
	loc.Retry.AttemptTimeout = time.Hour // only a hedge ends the held request early
	obj, err := loc.Stat(ctx, "data/obj")
	if err != nil {
		t.Fatal(err)
	}
	// A guard: without the hedge the held read would wait an hour.
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	r := loc.NewReaderAt(ctx, obj)
	buf := make([]byte, 1000)
	for i := range 24 { // enough answers to learn the latency from
		if _, err := r.ReadAt(buf, int64(i*100)); err != nil {
			t.Fatal(err)
		}
	}
	if hedged, _ := loc.Hedges(); hedged != 0 {
		t.Fatalf("%d reads hedged on a store that answers at once", hedged)
	}
	var gets atomic.Int64 // only the first GET from now on is held
	s.SetFaults(s3test.Faults{Rate: 1, Kinds: []s3test.Kind{s3test.Spike}, Spike: time.Hour,
		Match: func(r *http.Request) bool { return r.Method == http.MethodGet && gets.Add(1) == 1 }})
	if _, err := r.ReadAt(buf, 5000); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf, data[5000:6000]) {
		t.Fatal("the hedged read returned other bytes")
	}
	if hedged, _ := loc.Hedges(); hedged != 1 || r.Hedges() != 1 || s.Injected()[s3test.Spike] != 1 {
		t.Fatalf("%d reads hedged, %d held by the server; want 1 and 1", hedged, s.Injected()[s3test.Spike])
	}
}
