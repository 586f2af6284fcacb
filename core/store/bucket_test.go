package store_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gocloud.dev/blob/fileblob"

	"github.com/croupier-data/croupier/core/store"
	"github.com/croupier-data/croupier/internal/storetest"
)

// TestBucketsAlike runs the stores' conformance suite (internal/storetest)
// on file:// and mem://; each driver runs it in its own package.
func TestBucketsAlike(t *testing.T) {
	for _, uri := range []string{"file://" + t.TempDir(), "mem://alike/t"} {
		t.Run(strings.SplitN(uri, ":", 2)[0], func(t *testing.T) { storetest.Run(t, uri) })
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
