package store_test

import (
	"context"
	"net/url"
	"sync/atomic"
	"testing"

	"github.com/croupier-data/croupier/core/store"
)

// countingDriver opens buckets that serve no request, counting the buckets
// it opens (each one a client and an HTTP transport for a real store) and
// their closes, which close their idle connections.
type countingDriver struct{ opens, idleCloses *atomic.Int64 }

func (d countingDriver) OpenBucket(context.Context, *url.URL, store.RetryPolicy) (store.Bucket, error) {
	d.opens.Add(1)
	return countingBucket{closes: d.idleCloses}, nil
}

// countingBucket counts its closes; the test makes no other request of it.
type countingBucket struct {
	store.Bucket
	closes *atomic.Int64
}

func (b countingBucket) Close() error {
	b.closes.Add(1)
	return nil
}

var opens, idleCloses atomic.Int64

func init() { store.Register("pooltest", countingDriver{&opens, &idleCloses}) }

// TestLocationsShareOneBucket: the Locations open on one bucket of a remote
// store share one bucket, opened once, whose idle connections are closed
// when the last of them closes, and not before; the next open opens it
// again. Another bucket is opened apart.
func TestLocationsShareOneBucket(t *testing.T) {
	ctx := context.Background()
	open := func(uri string) *store.Location {
		t.Helper()
		loc, err := store.Open(ctx, uri)
		if err != nil {
			t.Fatal(err)
		}
		return loc
	}
	want := func(when string, o, c int64) {
		t.Helper()
		if opens.Load() != o || idleCloses.Load() != c {
			t.Fatalf("%s: %d buckets opened and %d closes of idle connections, want %d and %d",
				when, opens.Load(), idleCloses.Load(), o, c)
		}
	}
	table, perm, again := open("pooltest://b/tbl"), open("pooltest://b/perm"), open("pooltest://b/tbl")
	want("three Locations on one bucket", 1, 0)
	other := open("pooltest://c/tbl")
	want("a Location on another bucket", 2, 0)
	table.Close()
	perm.Close()
	want("two of three closed", 2, 0)
	again.Close()
	again.Close()
	want("the last closed, twice", 2, 1)
	open("pooltest://b/tbl").Close()
	want("reopened and closed", 3, 2)
	other.Close()
	want("the other closed", 3, 3)
}
