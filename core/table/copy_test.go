package table_test

import (
	"context"
	"encoding/binary"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/croupier-data/croupier/core/catalog"
	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/internal/tabletest"
)

// copiedTable creates a croupier table of two versions (two data files) in
// a new folder and returns the folder and the table, open.
func copiedTable(t *testing.T) (string, *table.Table) {
	t.Helper()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "orig")
	uri := "file://" + dir
	tb, err := table.Create(ctx, uri, randomRows(1, 2000), table.WriteOptions{RowGroupRows: 500})
	if err != nil {
		t.Fatal(err)
	}
	tb.Close()
	if _, err := table.Append(ctx, uri, randomRows(2, 700), table.WriteOptions{RowGroupRows: 500}); err != nil {
		t.Fatal(err)
	}
	tb, err = table.Open(ctx, uri)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tb.Close() })
	return dir, tb
}

// copyPlain copies the folder src to dst file by file, as shutil.copytree
// with shutil.copy or an rsync without -t: new files, new modification times.
func copyPlain(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		to := filepath.Join(dst, strings.TrimPrefix(path, src))
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(to, data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// column reads column x of every row of tb.
func column(t *testing.T, tb *table.Table) []int64 {
	t.Helper()
	vals, err := columnErr(tb)
	if err != nil {
		t.Fatal(err)
	}
	return vals
}

func columnErr(tb *table.Table) ([]int64, error) {
	rec, err := readEvery(tb)
	if err != nil {
		return nil, err
	}
	defer rec.Release()
	return slices.Clone(rec.Column(0).(*array.Int64).Int64Values()), nil
}

// TestCopiedTableReadsAsTheOriginal copies a croupier table on local disk as
// people stage tables: cp -a (inodes change, times kept), cp -r (new times)
// and a copy of the bytes alone. Each copy opens, at its latest version and
// at an older one, reads the original's rows, has its versions and IDs, and
// verifies, and rewrites; the original, opened first with the same catalog,
// still reads, and the catalog serves neither the other's footers.
func TestCopiedTableReadsAsTheOriginal(t *testing.T) {
	ctx := context.Background()
	src, orig := copiedTable(t)
	want := column(t, orig)
	old, err := orig.OpenVersion(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	wantOld := column(t, old)
	for name, cp := range map[string]func(dst string){
		"cp -a": func(dst string) {
			if out, err := exec.Command("cp", "-a", src, dst).CombinedOutput(); err != nil {
				t.Fatalf("cp -a: %v: %s", err, out)
			}
		},
		"cp -r": func(dst string) {
			if out, err := exec.Command("cp", "-r", src, dst).CombinedOutput(); err != nil {
				t.Fatalf("cp -r: %v: %s", err, out)
			}
		},
		"bytes only": func(dst string) { copyPlain(t, src, dst) },
	} {
		t.Run(name, func(t *testing.T) {
			cat := catalog.Open(catalog.Options{Path: filepath.Join(t.TempDir(), "catalog.db")})
			dst := filepath.Join(t.TempDir(), "copy")
			cp(dst)
			for _, uri := range []string{"file://" + src, "file://" + dst} {
				tb, err := table.OpenWith(ctx, uri, table.OpenOptions{Catalog: cat})
				if err != nil {
					t.Fatal(err)
				}
				defer tb.Close()
				if got := column(t, tb); !slices.Equal(got, want) {
					t.Fatalf("%s reads other rows than the original", uri)
				}
				if tb.ID() != orig.ID() || tb.Version() != orig.Version() {
					t.Errorf("%s is version %s, %s; the original %s, %s", uri, tb.Version(), tb.ID(), orig.Version(), orig.ID())
				}
				if err := tb.Verify(ctx); err != nil {
					t.Errorf("verifying %s: %v", uri, err)
				}
				v1, err := tb.OpenVersion(ctx, 1)
				if err != nil {
					t.Fatal(err)
				}
				defer v1.Close()
				if got := column(t, v1); !slices.Equal(got, wantOld) || v1.ID() != old.ID() {
					t.Fatalf("version 1 of %s is not the original's (%s, %s)", uri, v1.ID(), old.ID())
				}
			}
			versions, err := table.Versions(ctx, "file://"+dst)
			if err != nil || !slices.Equal(versions, []int64{1, 2}) {
				t.Errorf("the copy's versions: %v, %v", versions, err)
			}
			// The copy is a source like any table: rewritten, it holds its rows.
			cp, err := table.Open(ctx, "file://"+dst)
			if err != nil {
				t.Fatal(err)
			}
			defer cp.Close()
			re, err := table.Rewrite(ctx, cp, "file://"+filepath.Join(t.TempDir(), "rewritten"), table.RewriteOptions{})
			if err != nil {
				t.Fatalf("rewriting the copy: %v", err)
			}
			defer re.Close()
			if got := column(t, re); !slices.Equal(got, want) {
				t.Fatal("the copy rewritten holds other rows than the original")
			}
		})
	}
}

// TestChangedCopyIsRefused changes one byte of a copied table's data file,
// keeping its size: in a page, which the page's CRC refuses, and in the
// footer, which the manifest's digest of it refuses. Neither returns rows.
func TestChangedCopyIsRefused(t *testing.T) {
	ctx := context.Background()
	src, orig := copiedTable(t)
	file := orig.Files()[0]
	md, err := orig.Footer(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	chunk, err := md.RowGroup(0).ColumnChunk(0)
	if err != nil {
		t.Fatal(err)
	}
	pageByte := chunk.DataPageOffset() + chunk.TotalCompressedSize() - 1 // the last byte of its last page
	rel := "data/" + path.Base(file.Key)
	for name, tc := range map[string]struct {
		at   func(data []byte) int64
		code errcode.Code
		says string
	}{
		"page": {func([]byte) int64 { return pageByte }, errcode.Corrupt, "CRC"},
		"footer": {func(data []byte) int64 {
			n := int64(len(data))
			return n - 8 - int64(binary.LittleEndian.Uint32(data[n-8:]))/2
		}, errcode.Changed, "footer's SHA-256"},
	} {
		t.Run(name, func(t *testing.T) {
			dst := filepath.Join(t.TempDir(), "copy")
			copyPlain(t, src, dst)
			changed := filepath.Join(dst, filepath.FromSlash(rel))
			data, err := os.ReadFile(changed)
			if err != nil {
				t.Fatal(err)
			}
			data[tc.at(data)] ^= 0x10
			if err := os.WriteFile(changed, data, 0o644); err != nil {
				t.Fatal(err)
			}
			tb, err := table.Open(ctx, "file://"+dst)
			if err != nil {
				t.Fatal(err)
			}
			defer tb.Close()
			_, err = columnErr(tb)
			if errcode.Of(err) != tc.code || !strings.Contains(err.Error(), rel) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("reading a copy with a byte changed in a %s: %v; want %s naming %s and %q", name, err, tc.code, rel, tc.says)
			}
		})
	}
}

// TestFileChangedUnderOpenCopy: a copy opened binds its files to the
// versions found, so that a file rewritten in place under it (the same
// bytes, at another time), or replaced by another file (the same bytes,
// renamed over it), is refused as it is under the original.
func TestFileChangedUnderOpenCopy(t *testing.T) {
	ctx := context.Background()
	src, orig := copiedTable(t)
	want := column(t, orig)
	for name, change := range map[string]func(path string, f table.File){
		"rewritten": func(path string, f table.File) {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(path, time.Time{}, f.ModTime.Add(time.Second)); err != nil {
				t.Fatal(err)
			}
		},
		"replaced": func(path string, _ table.File) {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path+".new", data, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(path+".new", path); err != nil {
				t.Fatal(err)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			dst := filepath.Join(t.TempDir(), "copy")
			copyPlain(t, src, dst)
			tb, err := table.Open(ctx, "file://"+dst)
			if err != nil {
				t.Fatal(err)
			}
			defer tb.Close()
			if got := column(t, tb); !slices.Equal(got, want) {
				t.Fatal("the copy reads other rows than the original")
			}
			f := tb.Files()[1]
			changed := filepath.Join(dst, "data", path.Base(f.Key))
			change(changed, f)
			// A read of a file held open finds a rewrite in place; a
			// verification, as a reopened pin, a file replaced.
			if name == "rewritten" {
				_, err = columnErr(tb)
			} else {
				err = tb.Verify(ctx)
			}
			if errcode.Of(err) != errcode.Changed || !strings.Contains(err.Error(), filepath.Base(changed)) {
				t.Fatalf("a file %s under the open copy: %v; want Changed naming it", name, err)
			}
		})
	}
}

// TestManifestsWithoutFooterDigests: a manifest of format 2, written before
// manifests recorded footer digests, reads where it was written, and its
// table copied is refused as before, for nothing but the version recorded
// answers for its files' bytes; a manifest of format 2 that records digests
// is Corrupt.
func TestManifestsWithoutFooterDigests(t *testing.T) {
	ctx := context.Background()
	src, orig := copiedTable(t)
	want := column(t, orig)
	manifest := filepath.Join(src, "_versions", "00000000000000000002.json")
	format2 := func(keepDigests bool) {
		tabletest.EditJSON(t, manifest, func(m map[string]any) {
			m["format"] = 2
			for _, f := range m["files"].([]any) {
				if !keepDigests {
					delete(f.(map[string]any), "footer_sha256")
				}
			}
		})
	}
	format2(true)
	if _, err := table.Open(ctx, "file://"+src); errcode.Of(err) != errcode.Corrupt || !strings.Contains(err.Error(), "format 2 with fields of format 3") {
		t.Fatalf("opening a manifest of format 2 with footer digests: %v; want Corrupt", err)
	}
	format2(false)
	tb, err := table.Open(ctx, "file://"+src)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	if got := column(t, tb); !slices.Equal(got, want) || tb.ID() != orig.ID() {
		t.Fatal("a manifest of format 2 reads other rows than it did as format 3")
	}
	dst := filepath.Join(t.TempDir(), "copy")
	copyPlain(t, src, dst)
	cp, err := table.Open(ctx, "file://"+dst)
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Close()
	if _, err := columnErr(cp); errcode.Of(err) != errcode.Changed {
		t.Fatalf("reading a copy of a table of format 2: %v; want Changed", err)
	}
}

// TestByteChangedAnywhereInACopy changes one byte of a copied table's data
// file at a time, at positions spread through the whole file (pages, page
// headers, page indexes, footer), and reads every column of every row: each
// change is refused, or leaves the rows as they were (a byte no read uses);
// none returns other rows.
func TestByteChangedAnywhereInACopy(t *testing.T) {
	ctx := context.Background()
	src := filepath.Join(t.TempDir(), "orig")
	orig, err := table.Create(ctx, "file://"+src, tabletest.Reader(0, 300), table.WriteOptions{RowGroupRows: 100, PageBytes: 1024})
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	want, err := readEvery(orig)
	if err != nil {
		t.Fatal(err)
	}
	defer want.Release()
	dst := filepath.Join(t.TempDir(), "copy")
	copyPlain(t, src, dst)
	changed := filepath.Join(dst, "data", path.Base(orig.Files()[0].Key))
	data, err := os.ReadFile(changed)
	if err != nil {
		t.Fatal(err)
	}
	refused := 0
	for at := 0; at < len(data); at += 11 {
		b := slices.Clone(data)
		b[at] ^= 0x01
		if err := os.WriteFile(changed, b, 0o644); err != nil {
			t.Fatal(err)
		}
		tb, err := table.Open(ctx, "file://"+dst)
		if err != nil {
			t.Fatal(err)
		}
		got, err := readEvery(tb)
		tb.Close()
		if err != nil {
			refused++
			continue
		}
		if !array.RecordEqual(got, want) {
			t.Errorf("byte %d of %d changed: other rows read, no error", at, len(data))
		}
		got.Release()
	}
	if refused == 0 {
		t.Fatal("no change was refused")
	}
}

// readEvery reads every column of every row of tb.
func readEvery(tb *table.Table) (arrow.RecordBatch, error) {
	r, err := tb.NewReader(table.ReaderOptions{})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	ids := make([]uint64, tb.NumRows())
	for i := range ids {
		ids[i] = uint64(i)
	}
	return r.Read(context.Background(), ids)
}
