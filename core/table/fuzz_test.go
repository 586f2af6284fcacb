package table_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/store"
	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/internal/seal"
	"github.com/croupier-data/croupier/internal/tabletest"
)

// fuzzDir stands for the fuzz process's own folder in the committed seeds:
// pins name their table by URI, and each process has its own folder.
const fuzzDir = "/croupier-fuzz"

// fuzzTables lays out, in a new folder, what the fuzz targets open: a plain
// Parquet dataset plain/ of two files and a croupier table tbl/ whose
// version 1 holds one file. Modification times are fixed, so that pins and
// manifests (and the committed seeds) are the same in every process. It
// returns the folder and the croupier table's version 1 manifest.
func fuzzTables(f testing.TB) (dir string, manifest []byte) {
	dir = f.TempDir()
	mtime := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	write := func(rel string, b []byte) {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			f.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			f.Fatal(err)
		}
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			f.Fatal(err)
		}
	}
	write("plain/part-000.parquet", tabletest.Encode(f, 0, 30, 10))
	write("plain/part-001.parquet", tabletest.Encode(f, 30, 5, 10))
	write("tbl/data/a.parquet", tabletest.Encode(f, 0, 30, 10))
	src, err := table.Open(context.Background(), "file://"+filepath.Join(dir, "tbl/data/a.parquet"))
	if err != nil {
		f.Fatal(err)
	}
	defer src.Close()
	file := src.Files()[0]
	file.Key = "data/a.parquet"
	manifest, err = json.Marshal(map[string]any{
		"format": table.ManifestFormat, "version": 1, "parent": 0, "timestamp": mtime, "schema": src.Pin().Schema,
		"num_rows": src.NumRows(), "files": []table.File{file}, "added": 1,
	})
	if err != nil {
		f.Fatal(err)
	}
	manifest = seal.JSON(manifest)
	write("tbl/_versions/00000000000000000001.json", manifest)
	return dir, manifest
}

// checkOpened checks what every fuzz target checks of a table that opened:
// keys that stay in its folder, and files whose verification, footers and
// rows fail, if at all, with an error that names its cause, never Internal.
func checkOpened(t *testing.T, tb *table.Table) {
	ctx := context.Background()
	for _, f := range tb.Files() {
		if err := store.CheckKey(f.Key); err != nil {
			t.Fatalf("opened with file key %q: %v", f.Key, err)
		}
	}
	if err := tb.Verify(ctx); err != nil && errcode.Of(err) != errcode.Changed {
		t.Fatalf("verify: %v (%s)", err, errcode.Of(err))
	}
	for i := range min(len(tb.Files()), 8) {
		if _, err := tb.Footer(ctx, i); err != nil && errcode.Of(err) != errcode.Changed && errcode.Of(err) != errcode.Corrupt {
			t.Fatalf("footer %d: %v (%s)", i, err, errcode.Of(err))
		}
	}
	r, err := tb.NewReader(table.ReaderOptions{})
	if err != nil {
		if errcode.Of(err) != errcode.InvalidArgument {
			t.Fatalf("new reader: %v (%s)", err, errcode.Of(err))
		}
		return
	}
	defer r.Close()
	if n := tb.NumRows(); n > 0 {
		rec, err := r.Read(ctx, []uint64{0, uint64(n / 2), uint64(n - 1)})
		if err != nil {
			if errcode.Of(err) != errcode.Changed && errcode.Of(err) != errcode.Corrupt {
				t.Fatalf("read: %v (%s)", err, errcode.Of(err))
			}
			return
		}
		if rec.NumRows() != 3 {
			t.Fatalf("read %d rows, want 3", rec.NumRows())
		}
		rec.Release()
	}
}

// FuzzManifest opens version 1 of a croupier table whose manifest is the
// input (seeds: testdata/fuzz/FuzzManifest). A manifest that does not open
// must fail with Corrupt naming it.
func FuzzManifest(f *testing.F) {
	dir, manifest := fuzzTables(f)
	f.Add(manifest)
	uri := "file://" + filepath.Join(dir, "tbl")
	path := filepath.Join(dir, "tbl/_versions/00000000000000000001.json")
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		tb, err := table.OpenVersion(context.Background(), uri, 1)
		if err != nil {
			if errcode.Of(err) != errcode.Corrupt || !strings.Contains(err.Error(), "00000000000000000001.json") {
				t.Fatalf("%v (%s), want Corrupt naming the manifest", err, errcode.Of(err))
			}
			return
		}
		defer tb.Close()
		checkOpened(t, tb)
	})
}

// FuzzPin reopens a table from a pin's JSON (seeds: testdata/fuzz/FuzzPin,
// where file:///croupier-fuzz stands for the process's folder). Pins naming
// anything outside that folder are skipped: the fuzzer must not roam the
// machine's files.
func FuzzPin(f *testing.F) {
	dir, _ := fuzzTables(f)
	ctx := context.Background()
	for _, rel := range []string{"tbl", "plain", "plain/part-001.parquet", "plain/part-*.parquet"} {
		tb, err := table.Open(ctx, "file://"+filepath.Join(dir, rel))
		if err != nil {
			f.Fatal(err)
		}
		b, _ := json.Marshal(tb.Pin())
		tb.Close()
		f.Add(bytes.ReplaceAll(b, []byte(dir), []byte(fuzzDir)))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		pin, err := table.DecodePin(bytes.ReplaceAll(b, []byte("file://"+fuzzDir), []byte("file://"+dir)))
		if err != nil {
			if errcode.Of(err) != errcode.InvalidArgument {
				t.Fatalf("decode: %v (%s)", err, errcode.Of(err))
			}
			return
		}
		if u, err := url.Parse(pin.URI); err != nil || u.Scheme != "file" || !strings.HasPrefix(filepath.Clean(u.Path), dir) {
			return
		}
		tb, err := table.OpenPin(ctx, pin)
		if err != nil {
			switch errcode.Of(err) {
			case errcode.Corrupt, errcode.InvalidArgument, errcode.NotFound:
			default:
				t.Fatalf("open: %v (%s)", err, errcode.Of(err))
			}
			return
		}
		defer tb.Close()
		checkOpened(t, tb)
	})
}

// FuzzParquetFooter opens a Parquet file whose footer is the input, between
// the pages of a valid file and a correct length and magic (seeds:
// testdata/fuzz/FuzzParquetFooter). arrow-go's Thrift decoder and metadata
// accessors panic on some hostile footers: every failure must be a Corrupt
// error naming the file.
func FuzzParquetFooter(f *testing.F) {
	valid := tabletest.Encode(f, 0, 30, 10)
	flen := int(binary.LittleEndian.Uint32(valid[len(valid)-8:]))
	pages := valid[:len(valid)-8-flen]
	f.Add(valid[len(pages) : len(valid)-8])
	path := filepath.Join(f.TempDir(), "f.parquet")
	f.Fuzz(func(t *testing.T, footer []byte) {
		b := append(append([]byte{}, pages...), footer...)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(footer)))
		if err := os.WriteFile(path, append(b, "PAR1"...), 0o644); err != nil {
			t.Fatal(err)
		}
		tb, err := table.Open(context.Background(), "file://"+path)
		if err != nil {
			if errcode.Of(err) != errcode.Corrupt || !strings.Contains(err.Error(), "f.parquet") {
				t.Fatalf("%v (%s), want Corrupt naming the file", err, errcode.Of(err))
			}
			return
		}
		defer tb.Close()
		checkOpened(t, tb)
		again, err := table.OpenPin(context.Background(), tb.Pin())
		if err != nil {
			t.Fatalf("reopen from its own pin: %v", err)
		}
		again.Close()
	})
}
