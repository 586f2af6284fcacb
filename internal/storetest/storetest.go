// Package storetest is the conformance suite of croupier's stores: one
// script (Run) that every driver's Bucket runs through core/store's
// Location, as gocloud.dev's drivertest is for its drivers. A table's
// commits, pins and reads rely on each store answering the same requests
// the same way (a listing in key order, an exclusive create that fails as
// AlreadyExists, a pinned read of a rewritten object that fails as Changed);
// a driver that passes the suite is one croupier can use. Only tests import
// this package.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/store"
)

// Run runs the suite on the store at uri, a prefix in an empty bucket that
// the suite may write to: writes then reads, whole and by range, a range
// that runs past an object's end, a pinned read of a rewritten object
// (Changed, or on file:// the pinned bytes), a listing in key order ("a-b"
// before "a/b", which file:// finds in the other order) that pages past
// 1,000 objects and keeps to its prefix, an exclusive create of an existing
// key (AlreadyExists) and of a new one, and the errors of a missing object:
// NotFound for Stat, ReadAll and a pinned read after a delete; deleting it
// again is no error.
func Run(t *testing.T, uri string) {
	ctx := context.Background()
	loc, err := store.OpenCreate(ctx, uri)
	if err != nil {
		t.Fatal(err)
	}
	defer loc.Close()
	t.Run("read", func(t *testing.T) { reads(ctx, t, loc, strings.HasPrefix(uri, "file:")) })
	t.Run("list", func(t *testing.T) { lists(ctx, t, loc) })
	t.Run("exclusive", func(t *testing.T) { exclusive(ctx, t, loc) })
	t.Run("missing", func(t *testing.T) { missing(ctx, t, loc) })
}

// reads writes an object and reads it whole, by range and past its end,
// then rewrites it and reads it pinned to its first version. pinnedKept
// says the store may serve the pinned bytes instead of failing (file://
// reads the file it holds open, which the rename of the rewrite leaves as
// it was), never the new ones.
func reads(ctx context.Context, t *testing.T, loc *store.Location, pinnedKept bool) {
	key := loc.Join("obj")
	data := []byte("0123456789abcdef")
	if err := loc.WriteAll(ctx, key, data, store.WriterOptions{ContentType: "text/plain"}); err != nil {
		t.Fatal(err)
	}
	obj, err := loc.Stat(ctx, key)
	if err != nil || obj.Size != int64(len(data)) || obj.Key != key || obj.ModTime.IsZero() {
		t.Fatalf("Stat: %+v, %v", obj, err)
	}
	if got, err := loc.ReadAll(ctx, key); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("ReadAll: %q, %v", got, err)
	}
	buf := make([]byte, 5)
	if _, err := loc.NewReaderAt(ctx, obj).ReadAt(buf, 10); err != nil || string(buf) != "abcde" {
		t.Fatalf("ReadAt: %q, %v", buf, err)
	}
	if n, err := loc.NewReaderAt(ctx, obj).ReadAt(buf, 13); n != 3 || !errors.Is(err, io.EOF) || string(buf[:n]) != "def" {
		t.Errorf("ReadAt of [13, 18) of 16 bytes: %d bytes %q, %v; want the 3 there and io.EOF", n, buf[:n], err)
	}
	if err := loc.WriteAll(ctx, key, bytes.ToUpper(data), store.WriterOptions{}); err != nil {
		t.Fatal(err)
	}
	clear(buf)
	_, err = loc.NewReaderAt(ctx, obj).ReadAt(buf, 10)
	switch {
	case errcode.Of(err) == errcode.Changed:
	case pinnedKept && err == nil && string(buf) == "abcde":
	default:
		t.Errorf("pinned read of a rewritten object: %q, %v; want Changed", buf, err)
	}
	if again, err := loc.Stat(ctx, key); err != nil || again.ETag == obj.ETag && again.Generation == obj.Generation && again.ModTime.Equal(obj.ModTime) {
		t.Errorf("Stat after a rewrite: %+v (before %+v), %v; want another version", again, obj, err)
	}
}

// lists writes more objects than a listing page holds, and keys that sort
// differently as paths and as strings, and lists them.
func lists(ctx context.Context, t *testing.T, loc *store.Location) {
	key := loc.Join
	keys := []string{key("l/a-b"), key("l/a/b"), key("l/a/c")}
	for i := range 1001 {
		keys = append(keys, key(fmt.Sprintf("l/n/%04d", i)))
	}
	for _, k := range append(slices.Clone(keys), key("l-after"), key("k-before")) {
		if err := loc.WriteAll(ctx, k, []byte(k), store.WriterOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	listed, err := loc.List(ctx, key("l/"), 0)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]string, len(listed))
	for i, o := range listed {
		got[i] = o.Key
		if o.Size != int64(len(o.Key)) || o.ModTime.IsZero() {
			t.Fatalf("listed %+v", o)
		}
	}
	if !slices.Equal(got, keys) {
		t.Errorf("listed %d keys %v…, want %d %v…", len(got), got[:min(4, len(got))], len(keys), keys[:4])
	}
}

// exclusive creates an existing key and a new one exclusively.
func exclusive(ctx context.Context, t *testing.T, loc *store.Location) {
	key := loc.Join
	if err := loc.WriteAll(ctx, key("x/taken"), []byte("first writer's"), store.WriterOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := loc.CreateExclusive(ctx, key("x/taken"), []byte("another writer's")); errcode.Of(err) != errcode.AlreadyExists {
		t.Errorf("exclusive create of an existing key: %v, want AlreadyExists", err)
	}
	if got, err := loc.ReadAll(ctx, key("x/taken")); err != nil || string(got) != "first writer's" {
		t.Errorf("the key after a refused exclusive create: %q, %v; want the first writer's bytes", got, err)
	}
	if err := loc.CreateExclusive(ctx, key("x/new"), []byte("mine")); err != nil {
		t.Errorf("exclusive create of a new key: %v", err)
	}
	if got, err := loc.ReadAll(ctx, key("x/new")); err != nil || string(got) != "mine" {
		t.Errorf("the key after an exclusive create: %q, %v", got, err)
	}
}

// missing reads a key never written and one deleted.
func missing(ctx context.Context, t *testing.T, loc *store.Location) {
	key := loc.Join
	if _, err := loc.Stat(ctx, key("never")); errcode.Of(err) != errcode.NotFound {
		t.Errorf("Stat of a missing object: %v, want NotFound", err)
	}
	if _, err := loc.ReadAll(ctx, key("never")); errcode.Of(err) != errcode.NotFound {
		t.Errorf("ReadAll of a missing object: %v, want NotFound", err)
	}
	if err := loc.WriteAll(ctx, key("gone"), []byte("soon gone"), store.WriterOptions{}); err != nil {
		t.Fatal(err)
	}
	obj, err := loc.Stat(ctx, key("gone"))
	if err != nil {
		t.Fatal(err)
	}
	if err := loc.Delete(ctx, key("gone")); err != nil {
		t.Fatal(err)
	}
	if err := loc.Delete(ctx, key("gone")); err != nil {
		t.Errorf("deleting a deleted object: %v", err)
	}
	if _, err := loc.ReadAll(ctx, key("gone")); errcode.Of(err) != errcode.NotFound {
		t.Errorf("ReadAll of a deleted object: %v, want NotFound", err)
	}
	if _, err := loc.NewReaderAt(ctx, obj).ReadAt(make([]byte, 4), 0); errcode.Of(err) != errcode.NotFound && errcode.Of(err) != errcode.Changed {
		t.Errorf("pinned read of a deleted object: %v, want NotFound or Changed", err)
	}
}
