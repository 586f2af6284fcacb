package store_test

import (
	"context"
	"net/url"
	"sync/atomic"
	"testing"

	"gocloud.dev/blob"
	"gocloud.dev/blob/memblob"

	"github.com/croupier-data/croupier/core/store"
)

// countingDriver opens in-memory buckets, counting the buckets it opens
// (each one a client and an HTTP transport for a real store) and the calls
// that close their idle connections.
type countingDriver struct{ opens, idleCloses *atomic.Int64 }

func (d countingDriver) OpenBucket(context.Context, *url.URL, store.RetryPolicy) (*blob.Bucket, func(), error) {
	d.opens.Add(1)
	return memblob.OpenBucket(nil), func() { d.idleCloses.Add(1) }, nil
}

func (countingDriver) Identify(*store.Object, func(any) bool) {}
func (countingDriver) Condition(store.Object, func(any) bool) {}
func (countingDriver) Observe(*store.Object, func(any) bool)  {}

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
	if table.Bucket != perm.Bucket || perm.Bucket != again.Bucket {
		t.Error("Locations on one bucket hold different buckets")
	}
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
