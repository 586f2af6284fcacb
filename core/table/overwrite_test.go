package table_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/store"
	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/internal/azurite"
)

// randomRows yields n rows of one column of random 64-bit integers drawn
// from seed: incompressible, so that tables from two seeds have data files of
// the same size and different bytes.
func randomRows(seed uint64, n int) array.RecordReader {
	schema := arrow.NewSchema([]arrow.Field{{Name: "x", Type: arrow.PrimitiveTypes.Int64}}, nil)
	b := array.NewInt64Builder(memory.DefaultAllocator)
	defer b.Release()
	rng := rand.New(rand.NewPCG(seed, seed))
	for range n {
		b.Append(int64(rng.Uint64()))
	}
	col := b.NewArray()
	defer col.Release()
	rec := array.NewRecordBatch(schema, []arrow.Array{col}, int64(n))
	defer rec.Release()
	r, err := array.NewRecordReader(schema, []arrow.RecordBatch{rec})
	if err != nil {
		panic(err)
	}
	return r
}

// TestSameSizeRewriteIsChanged replaces a data file of a croupier table with
// one of the same size that holds other rows, and reads the table by every
// path: opening it, opening the version, and reopening a pin that went
// through its serialized form. Each must fail with Changed naming the file,
// never return the replacement's rows. On S3 and file:// the replacement
// keeps the modification time (on S3, whose Last-Modified has a resolution of
// one second, any rewrite within the second does); on GCS (fake-gcs-server)
// and Azure (Azurite) it is written by an ordinary upload, and a read of it
// must have carried the pinned generation or ETag as its condition. S3 and
// Azure refuse such a read themselves; fake-gcs-server serves it (see
// startGCS) and croupier refuses the generation it reports. The other table,
// left alone, reads on every store.
func TestSameSizeRewriteIsChanged(t *testing.T) {
	ctx := context.Background()
	s := startS3(t)
	gcs := startGCS(t)
	dir := t.TempDir()
	type target struct {
		uris      [2]string
		overwrite func(key string, data []byte)
		// conditioned, where set, reports whether a read of key carried a
		// condition on obj's version.
		conditioned func(key string, obj store.Object) bool
		// refused: the store itself refuses the conditional read (412),
		// rather than croupier finding another version in its answer.
		refused bool
	}
	targets := map[string]func(t *testing.T) target{
		"s3": func(t *testing.T) target {
			return target{uris: [2]string{s.URI("bkt", "tables/pinned"), s.URI("bkt", "tables/other")}, refused: true,
				overwrite: func(key string, data []byte) {
					if err := s.Overwrite("bkt", key, data); err != nil {
						t.Fatal(err)
					}
				}}
		},
		"file": func(t *testing.T) target {
			return target{uris: [2]string{"file://" + filepath.Join(dir, "pinned"), "file://" + filepath.Join(dir, "other")},
				overwrite: func(key string, data []byte) {
					replaceFile(t, filepath.Join(dir, "pinned", filepath.FromSlash(key)), data)
				}}
		},
		"gcs": func(t *testing.T) target {
			uri := "gs://bkt/tables/pinned"
			return target{uris: [2]string{uri, "gs://bkt/tables/other"},
				overwrite:   func(key string, data []byte) { writeObject(t, uri, key, data) },
				conditioned: gcs.conditioned}
		},
		"azure": func(t *testing.T) target {
			az := azurite.Start(t)
			azurite.Env(t)
			az.CreateContainer(t, "ctr")
			rc := newReadConditions()
			proxied := &azurite.Server{Host: rc.proxy(t, az.Host)}
			uri := proxied.URI("ctr", "tables/pinned")
			return target{uris: [2]string{uri, proxied.URI("ctr", "tables/other")}, refused: true,
				overwrite:   func(key string, data []byte) { writeObject(t, uri, key, data) },
				conditioned: rc.conditioned}
		},
	}
	for name, start := range targets {
		t.Run(name, func(t *testing.T) {
			tg := start(t)
			uris := tg.uris
			tb, err := table.Create(ctx, uris[0], randomRows(1, 1000), table.WriteOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer tb.Close()
			other, err := table.Create(ctx, uris[1], randomRows(2, 1000), table.WriteOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close()
			victim, replacement := tb.Files()[0], other.Files()[0]
			if victim.Size != replacement.Size {
				t.Fatalf("the replacement has %d bytes, the file %d: the test needs them equal", replacement.Size, victim.Size)
			}
			pin, err := json.Marshal(tb.Pin())
			if err != nil {
				t.Fatal(err)
			}
			tg.overwrite(victim.Key, readObject(t, uris[1], replacement.Object))
			if err := readRows(other); err != nil {
				t.Fatalf("reading the table left alone: %v", err)
			}
			for path, open := range map[string]func() (*table.Table, error){
				"open":         func() (*table.Table, error) { return table.Open(ctx, uris[0]) },
				"open version": func() (*table.Table, error) { return table.OpenVersion(ctx, uris[0], 1) },
				"pin": func() (*table.Table, error) {
					p, err := table.DecodePin(pin)
					if err != nil {
						return nil, err
					}
					return table.OpenPin(ctx, p)
				},
			} {
				t.Run(path, func(t *testing.T) {
					tb, err := open()
					if err == nil {
						defer tb.Close()
						err = readRows(tb)
					}
					if errcode.Of(err) != errcode.Changed || !strings.Contains(err.Error(), victim.Key) {
						t.Fatalf("reading a file rewritten with as many bytes: %v; want Changed naming %s", err, victim.Key)
					}
					if refused := strings.Contains(err.Error(), "no longer holds the pinned version"); refused != tg.refused {
						t.Errorf("the store refused the read: %v, want %v: %v", refused, tg.refused, err)
					}
				})
			}
			if tg.conditioned != nil && !tg.conditioned(victim.Key, victim.Object) {
				t.Errorf("no read of %s carried a condition on its pinned version (%s)", victim.Key, victim.Object)
			}
		})
	}
}

// readObject returns the bytes of obj in the location uri names.
func readObject(t *testing.T, uri string, obj store.Object) []byte {
	t.Helper()
	loc, err := store.Open(context.Background(), uri)
	if err != nil {
		t.Fatal(err)
	}
	defer loc.Close()
	data := make([]byte, obj.Size)
	if _, err := loc.NewReaderAt(context.Background(), obj).ReadAt(data, 0); err != nil {
		t.Fatal(err)
	}
	return data
}

// writeObject writes data to key in the location uri names, by an ordinary
// upload: a new version of the object.
func writeObject(t *testing.T, uri, key string, data []byte) {
	t.Helper()
	loc, err := store.Open(context.Background(), uri)
	if err != nil {
		t.Fatal(err)
	}
	defer loc.Close()
	if err := loc.WriteAll(context.Background(), key, data, store.WriterOptions{}); err != nil {
		t.Fatal(err)
	}
}

// replaceFile replaces the file at path with a new file (a new inode) holding
// data and the old file's modification time, to the nanosecond.
func replaceFile(t *testing.T, path string, data []byte) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	tmp := path + ".new"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(tmp, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// readRows reads every row of tb.
func readRows(tb *table.Table) error {
	r, err := tb.NewReader(table.ReaderOptions{})
	if err != nil {
		return err
	}
	defer r.Close()
	ids := make([]uint64, tb.NumRows())
	for i := range ids {
		ids[i] = uint64(i)
	}
	rec, err := r.Read(context.Background(), ids)
	if err == nil {
		rec.Release()
	}
	return err
}

// TestListingNamesVersions: a listing of gs:// gives each object the
// generation a stat gives it, and one of azblob:// the ETag, in the same form,
// so that a table opened with a catalog finds a listed file's footer by its
// whole identity without a stat of each file.
func TestListingNamesVersions(t *testing.T) {
	ctx := context.Background()
	type target struct {
		start   func(t *testing.T) string // starts the store, returns a folder's URI
		version func(o store.Object) any  // what names an object's version there
	}
	for name, tg := range map[string]target{
		"gcs": {func(t *testing.T) string {
			startGCS(t)
			return "gs://bkt/listed"
		}, func(o store.Object) any { return o.Generation }},
		"azure": {func(t *testing.T) string {
			az := azurite.Start(t)
			azurite.Env(t)
			az.CreateContainer(t, "ctr")
			return az.URI("ctr", "listed")
		}, func(o store.Object) any { return o.ETag }},
	} {
		t.Run(name, func(t *testing.T) {
			uri := tg.start(t)
			for i, key := range []string{"a.parquet", "b.parquet", "a.parquet"} { // a twice: a second version
				writeObject(t, uri, key, []byte(key+strings.Repeat("+", i)))
			}
			loc, err := store.Open(ctx, uri)
			if err != nil {
				t.Fatal(err)
			}
			defer loc.Close()
			listed, err := loc.List(ctx, "", 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(listed) != 2 {
				t.Fatalf("listed %d objects; want 2", len(listed))
			}
			for _, o := range listed {
				st, err := loc.Stat(ctx, o.Key)
				if err != nil {
					t.Fatal(err)
				}
				if v := tg.version(o); v == tg.version(store.Object{}) || v != tg.version(st) {
					t.Errorf("%s: listed as version %#v, stat'ed as %#v", o.Key, v, tg.version(st))
				}
			}
		})
	}
}
