package store_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gocloud.dev/blob/fileblob"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/store"
	"github.com/croupier-data/croupier/internal/s3test"
)

// TestBucketsAlike runs one script on file://, mem:// and s3:// (the test
// server): every store's Bucket answers croupier's requests alike. Writes
// then reads, whole and by range; a pinned read of a rewritten object is
// Changed; a listing is in key order ("a-b" before "a/b", which file://
// finds in the other order) and pages past 1,000 objects; an exclusive
// create of an existing key is AlreadyExists; a missing object is NotFound,
// and deleting it is no error.
func TestBucketsAlike(t *testing.T) {
	ctx := context.Background()
	s, err := s3test.Start("bkt")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, uri := range []string{"file://" + t.TempDir(), "mem://alike/t", s.URI("bkt", "t")} {
		t.Run(strings.SplitN(uri, ":", 2)[0], func(t *testing.T) {
			loc, err := store.OpenCreate(ctx, uri)
			if err != nil {
				t.Fatal(err)
			}
			defer loc.Close()
			key := loc.Join
			data := []byte("0123456789abcdef")
			if err := loc.WriteAll(ctx, key("obj"), data, store.WriterOptions{ContentType: "text/plain"}); err != nil {
				t.Fatal(err)
			}
			obj, err := loc.Stat(ctx, key("obj"))
			if err != nil || obj.Size != int64(len(data)) || obj.Key != key("obj") || obj.ModTime.IsZero() {
				t.Fatalf("Stat: %+v, %v", obj, err)
			}
			if got, err := loc.ReadAll(ctx, key("obj")); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("ReadAll: %q, %v", got, err)
			}
			buf := make([]byte, 5)
			if _, err := loc.NewReaderAt(ctx, obj).ReadAt(buf, 10); err != nil || string(buf) != "abcde" {
				t.Fatalf("ReadAt: %q, %v", buf, err)
			}
			// A rewrite with as many bytes: a pinned read fails with Changed,
			// or on file:// returns the pinned bytes (it reads the file it
			// holds open, which the rename of the rewrite leaves as it was),
			// never the new bytes.
			if err := loc.WriteAll(ctx, key("obj"), bytes.ToUpper(data), store.WriterOptions{}); err != nil {
				t.Fatal(err)
			}
			clear(buf)
			_, err = loc.NewReaderAt(ctx, obj).ReadAt(buf, 10)
			switch {
			case errcode.Of(err) == errcode.Changed:
			case strings.HasPrefix(uri, "file:") && err == nil && string(buf) == "abcde":
			default:
				t.Errorf("pinned read of a rewritten object: %q, %v; want Changed (or, on file://, the pinned bytes)", buf, err)
			}

			keys := []string{key("l/a-b"), key("l/a/b"), key("l/a/c")}
			for i := range 1001 {
				keys = append(keys, key(fmt.Sprintf("l/n/%04d", i)))
			}
			for _, k := range keys {
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

			err = loc.CreateExclusive(ctx, key("l/a-b"), []byte("another writer's"))
			if errcode.Of(err) != errcode.AlreadyExists {
				t.Errorf("exclusive create of an existing key: %v, want AlreadyExists", err)
			}
			if err := loc.CreateExclusive(ctx, key("new"), []byte("mine")); err != nil {
				t.Errorf("exclusive create of a new key: %v", err)
			}
			if _, err := loc.Stat(ctx, key("missing")); errcode.Of(err) != errcode.NotFound {
				t.Errorf("Stat of a missing object: %v, want NotFound", err)
			}
			if err := loc.Delete(ctx, key("obj")); err != nil {
				t.Fatal(err)
			}
			if err := loc.Delete(ctx, key("obj")); err != nil {
				t.Errorf("deleting a deleted object: %v", err)
			}
			if _, err := loc.ReadAll(ctx, key("obj")); errcode.Of(err) != errcode.NotFound {
				t.Errorf("reading a deleted object: %v, want NotFound", err)
			}
		})
	}
}

// TestFilesOfEarlierVersions: tables that earlier versions wrote on file://
// through gocloud.dev's fileblob, which put a .attrs file beside each
// object, read as before: listings leave the .attrs files out, an object's
// identity (its ETag included, which pins record) is the one fileblob
// reported, and deleting an object deletes its .attrs file.
func TestFilesOfEarlierVersions(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	old, err := fileblob.OpenBucket(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	for _, k := range []string{"data/a.parquet", "_versions/00000000000000000001.json"} {
		if err := old.WriteAll(ctx, k, []byte(k), nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "a.parquet.attrs")); err != nil {
		t.Fatalf("fileblob wrote no attributes file, so this test checks nothing: %v", err)
	}
	loc, err := store.Open(ctx, "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	defer loc.Close()
	listed, err := loc.List(ctx, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := keysOf(listed); !slices.Equal(got, []string{"_versions/00000000000000000001.json", "data/a.parquet"}) {
		t.Errorf("listed %v", got)
	}
	a, err := old.Attributes(ctx, "data/a.parquet")
	if err != nil {
		t.Fatal(err)
	}
	obj, err := loc.Stat(ctx, "data/a.parquet")
	if err != nil || obj.ETag != a.ETag || obj.Size != a.Size || !obj.ModTime.Equal(a.ModTime) {
		t.Errorf("Stat %+v, %v; fileblob said %s, %d, %s", obj, err, a.ETag, a.Size, a.ModTime)
	}
	r, err := old.NewReader(ctx, "data/a.parquet", nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, r)
	r.Close()
	if err := loc.Delete(ctx, "data/a.parquet"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "a.parquet.attrs")); !os.IsNotExist(err) {
		t.Errorf("the attributes file outlived its object: %v", err)
	}
}
