package table_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/google/uuid"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/internal/seedtest"
	"github.com/croupier-data/croupier/internal/tabletest"
)

// escapes are keys a tampered manifest or pin could hold to read outside its
// table's folder; outside.parquet, beside the table, is a valid data file.
var escapes = []string{
	"../outside.parquet", "data/../../outside.parquet", "data/./x.parquet", "/outside.parquet",
	"s3://other-bucket/outside.parquet", `..\outside.parquet`, "%2e%2e/outside.parquet",
	"data/%2E%2E/%2e%2e/outside.parquet", "data//x.parquet", "",
}

// croupierTable creates a croupier table of n rows at dir/tbl and puts a copy
// of its data file at dir/outside.parquet. It returns the table's URI and the
// path of its version 1 manifest.
func croupierTable(t *testing.T, n int64) (dir, uri, manifest string) {
	t.Helper()
	dir = t.TempDir()
	uri = "file://" + filepath.Join(dir, "tbl")
	tb, err := table.Create(context.Background(), uri, tabletest.Reader(0, n), table.WriteOptions{RowGroupRows: 10})
	if err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "tbl", tb.Files()[0].Key)
	tb.Close()
	b, err := os.ReadFile(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "outside.parquet"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, uri, filepath.Join(dir, "tbl", "_versions", "00000000000000000001.json")
}

func TestManifestKeysStayInTable(t *testing.T) {
	_, uri, manifest := croupierTable(t, 25)
	orig, _ := os.ReadFile(manifest)
	for _, key := range escapes {
		os.WriteFile(manifest, orig, 0o644)
		tabletest.EditJSON(t, manifest, func(m map[string]any) {
			m["files"].([]any)[0].(map[string]any)["key"] = key
		})
		_, err := table.Open(context.Background(), uri)
		wantErr(t, err, errcode.Corrupt, "00000000000000000001.json", "corrupt manifest", fmt.Sprintf("%q", key))
	}
}

func TestPinKeysStayInTable(t *testing.T) {
	ctx := context.Background()
	_, uri, _ := croupierTable(t, 25)
	plainDir, _ := writeDir(t, 20, 20)
	// Two croupier tables side by side in one bucket.
	memBase := "mem://hostile/" + uuid.NewString()
	var otherKey string
	for _, name := range []string{"other", "tbl"} {
		tb, err := table.Create(ctx, memBase+"/"+name, tabletest.Reader(0, 5), table.WriteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		otherKey = tb.Files()[0].Key
		tb.Close()
	}
	otherKey = strings.Replace(otherKey, "/tbl/", "/other/", 1)
	for _, tc := range []struct {
		uri     string
		outside []string // keys of real objects outside the table, in its bucket
	}{
		{uri, []string{"../outside.parquet"}},
		{memBase + "/tbl", []string{otherKey, strings.Replace(otherKey, "/other/", "/tbl/../other/", 1)}},
		{"file://" + plainDir + "/part-000.parquet", []string{"part-001.parquet"}},
		{"file://" + plainDir + "/part-00[0].parquet", []string{"part-001.parquet"}},
	} {
		tb := open(t, tc.uri)
		keys := slices.Concat(escapes, tc.outside)
		for _, k := range escapes {
			keys = append(keys, tb.Files()[0].Key+"/../"+k) // inside, then out
		}
		for _, key := range keys {
			pin := tb.Pin()
			pin.Files = slices.Clone(pin.Files)
			pin.Files[0].Key = key
			_, err := table.OpenPin(ctx, pin)
			wantErr(t, err, errcode.Corrupt, "corrupt pin", fmt.Sprintf("%q", key), tc.uri)
			// Through JSON, as another process reopens it.
			b, _ := json.Marshal(pin)
			p, err := table.DecodePin(b)
			if err != nil {
				t.Fatal(err)
			}
			_, err = table.OpenPin(ctx, p)
			wantErr(t, err, errcode.Corrupt, "corrupt pin")
		}
		// The untouched pin still opens and reads.
		again, err := table.OpenPin(ctx, tb.Pin())
		if err != nil {
			t.Fatal(err)
		}
		checkRowsOf(t, again, []uint64{0, 1})
		again.Close()
	}
}

func TestCorruptPin(t *testing.T) {
	ctx := context.Background()
	_, uri, _ := croupierTable(t, 25)
	tb := open(t, uri)
	for _, tc := range []struct {
		name string
		edit func(p *table.Pin)
		want string
	}{
		{"negative rows", func(p *table.Pin) { p.Files[0].NumRows = -1; p.Files[0].RowGroups = []int64{-1} }, "row group sizes"},
		{"rows disagree", func(p *table.Pin) { p.Files[0].NumRows++ }, "in its row groups"},
		{"row groups overflow", func(p *table.Pin) {
			p.Files[0].RowGroups = []int64{1 << 62, 1 << 62, 1 << 62, 1 << 62}
			p.Files[0].NumRows = 0
		}, "row group sizes"},
		{"files overflow", func(p *table.Pin) {
			p.Files = append(p.Files, p.Files[0], p.Files[0])
			for i := range p.Files {
				p.Files[i].Key = fmt.Sprintf("%s.%d.parquet", p.Files[0].Key, i)
				p.Files[i].NumRows, p.Files[i].RowGroups = 1<<62, []int64{1 << 62}
			}
		}, "overflows"},
		{"file twice", func(p *table.Pin) { p.Files = append(p.Files, p.Files[0]) }, "listed twice"},
		{"no size", func(p *table.Pin) { p.Files[0].Size = 0 }, "0 bytes"},
		{"unknown kind", func(p *table.Pin) { p.Kind = "iceberg" }, "unknown table kind"},
		{"bad version", func(p *table.Pin) { p.Version = "../2" }, "not a positive integer"},
		{"garbled schema", func(p *table.Pin) { p.Schema = []byte("\xff\xff\xff\xff\x10\x00\x00\x00garbage garbage!") }, "schema"},
	} {
		pin := tb.Pin()
		pin.Files = slices.Clone(pin.Files)
		tc.edit(&pin)
		_, err := table.OpenPin(ctx, pin)
		if err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		if errcode.Of(err) != errcode.Corrupt || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v (%s), want Corrupt naming %q", tc.name, err, errcode.Of(err), tc.want)
		}
	}
}

func TestCorruptManifest(t *testing.T) {
	_, uri, manifest := croupierTable(t, 25)
	orig, _ := os.ReadFile(manifest)
	edit := func(f func(m map[string]any)) []byte { return tabletest.EditedJSON(t, orig, f) }
	file0 := func(m map[string]any) map[string]any { return m["files"].([]any)[0].(map[string]any) }
	cases := map[string][]byte{
		"trailing data":  append(slices.Clone(orig), "{}"...),
		"not JSON":       []byte("\x00\x01garbage"),
		"empty":          nil,
		"unknown field":  edit(func(m map[string]any) { m["extra"] = 1 }),
		"parent":         edit(func(m map[string]any) { m["parent"] = 1 }),
		"added":          edit(func(m map[string]any) { m["added"] = 2 }),
		"rows":           edit(func(m map[string]any) { m["num_rows"] = 26 }),
		"row groups":     edit(func(m map[string]any) { file0(m)["row_groups"] = []int64{30, -5} }),
		"garbled schema": edit(func(m map[string]any) { m["schema"] = "AAAAAAAAAAAAAAAA" }),
		"schema not IPC": edit(func(m map[string]any) {
			m["schema"] = "/////xAAAAAQAAAAAAAKAAwACgAJAAQACgAAABAAAAAAAQQACAAIAAAABAAIAAAABAAAAA=="
		}),
		"wrong version":   edit(func(m map[string]any) { m["version"] = 2 }),
		"size":            edit(func(m map[string]any) { file0(m)["size"] = -1 }),
		"files not array": edit(func(m map[string]any) { m["files"] = "data/x.parquet" }),
	}
	for n := 1; n < len(orig); n += max(1, len(orig)/40) {
		cases[fmt.Sprintf("truncated to %d bytes", n)] = orig[:n]
	}
	for name, b := range cases {
		os.WriteFile(manifest, b, 0o644)
		_, err := table.Open(context.Background(), uri)
		if err == nil {
			t.Errorf("%s: no error", name)
			continue
		}
		if errcode.Of(err) != errcode.Corrupt || !strings.Contains(err.Error(), "00000000000000000001.json") {
			t.Errorf("%s: %v (%s), want Corrupt naming the manifest", name, err, errcode.Of(err))
		}
	}
	os.WriteFile(manifest, orig, 0o644)
	checkRowsOf(t, open(t, uri), []uint64{0, 24})
}

// TestTruncatedParquet truncates a data file at many lengths: a plain Parquet
// dataset fails to open with Corrupt naming the file; a croupier table,
// whose manifest pins the file's size, fails to read with Changed.
func TestTruncatedParquet(t *testing.T) {
	ctx := context.Background()
	full := tabletest.Encode(t, 0, 30, 10)
	dir := t.TempDir()
	p := filepath.Join(dir, "cut.parquet")
	for n := 0; n < len(full); n += max(1, len(full)/60) {
		os.WriteFile(p, full[:n], 0o644)
		_, err := table.Open(ctx, "file://"+p)
		wantErr(t, err, errcode.Corrupt, "cut.parquet")
	}

	_, uri, _ := croupierTable(t, 25)
	tb := open(t, uri)
	data := filepath.Join(strings.TrimPrefix(uri, "file://"), tb.Files()[0].Key)
	b, _ := os.ReadFile(data)
	os.WriteFile(data, b[:len(b)-100], 0o644)
	r, err := tb.NewReader(table.ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	_, err = r.Read(ctx, []uint64{3})
	wantErr(t, err, errcode.Changed, tb.Files()[0].Key)
}

// TestGarbageFooter replaces a file's footer with garbage of the same length
// (a valid length and magic around it): Corrupt, naming the file.
func TestGarbageFooter(t *testing.T) {
	full := tabletest.Encode(t, 0, 30, 10)
	flen := int(uint32(full[len(full)-8]) | uint32(full[len(full)-7])<<8 | uint32(full[len(full)-6])<<16 | uint32(full[len(full)-5])<<24)
	p := filepath.Join(t.TempDir(), "garbage.parquet")
	for seed := range 50 {
		b := slices.Clone(full)
		footer := b[len(b)-8-flen : len(b)-8]
		x := uint32(seed)*2654435761 + 1
		for i := range footer {
			x ^= x << 13
			x ^= x >> 17
			x ^= x << 5
			if seed < 25 || i%7 == 0 { // wholly random, or one byte in seven
				footer[i] = byte(x)
			}
		}
		os.WriteFile(p, b, 0o644)
		tb, err := table.Open(context.Background(), "file://"+p)
		if err == nil {
			// A footer that still parses must describe the same rows.
			if tb.NumRows() != 30 {
				t.Errorf("seed %d: garbled footer opened with %d rows", seed, tb.NumRows())
			}
			tb.Close()
			continue
		}
		wantErr(t, err, errcode.Corrupt, "garbage.parquet")
	}
}

// TestHostileArrowSchemaInFooter garbles, one at a time, every byte of the
// Arrow schema that pqarrow keeps in a Parquet footer (base64, under
// ARROW:schema) and decodes whenever it opens the file: a length or count
// garbled into a huge number must give Corrupt naming the file, not a huge
// allocation that kills the process (as byte 3, the message length, did).
func TestHostileArrowSchemaInFooter(t *testing.T) {
	_, uri, _ := croupierTable(t, 25) // croupier's data files store the Arrow schema
	tb := open(t, uri)
	full, err := os.ReadFile(filepath.Join(strings.TrimPrefix(uri, "file://"), tb.Files()[0].Key))
	if err != nil {
		t.Fatal(err)
	}
	flen := int(binary.LittleEndian.Uint32(full[len(full)-8:]))
	footer := full[len(full)-8-flen : len(full)-8]
	// The base64 value is the longest run of base64 characters in the footer.
	isB64 := func(c byte) bool {
		return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '/' || c == '='
	}
	start, end := 0, 0
	for i := 0; i < len(footer); {
		j := i
		for j < len(footer) && isB64(footer[j]) {
			j++
		}
		if j-i > end-start {
			start, end = i, j
		}
		i = j + 1
	}
	enc := string(footer[start:end])
	msg, err := base64.StdEncoding.DecodeString(enc)
	if err != nil || end-start < 100 {
		t.Fatalf("no ARROW:schema found (%d bytes): %v", end-start, err)
	}
	p := filepath.Join(t.TempDir(), "hostile.parquet")
	for at := range msg {
		bad := slices.Clone(msg)
		bad[at] ^= 0x80
		b := slices.Clone(full)
		copy(b[len(full)-8-flen+start:], base64.StdEncoding.EncodeToString(bad))
		os.WriteFile(p, b, 0o644)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		tb, err := table.Open(context.Background(), "file://"+p)
		runtime.ReadMemStats(&after)
		if n := after.TotalAlloc - before.TotalAlloc; n > 64<<20 {
			t.Errorf("byte %d of ARROW:schema garbled: opening allocated %d bytes", at, n)
		}
		if err == nil {
			tb.Close() // a garbling that stays a valid schema
			continue
		}
		wantErr(t, err, errcode.Corrupt, "hostile.parquet")
	}
}

// TestFooterRowCountsAddUp opens files whose footers' row counts disagree:
// row ids are laid out by row group sizes, so they must add up to the file's.
func TestFooterRowCountsAddUp(t *testing.T) {
	full := tabletest.Encode(t, 0, 30, 10)
	flen := int(binary.LittleEndian.Uint32(full[len(full)-8:]))
	pages := full[:len(full)-8-flen]
	p := filepath.Join(t.TempDir(), "counts.parquet")
	for name, tc := range map[string]struct {
		edit func(md *metadata.FileMetaData)
		want string
	}{
		"file rows":          {func(md *metadata.FileMetaData) { md.FileMetaData.NumRows = 31 }, "row groups hold 30 rows, the file 31"},
		"negative row group": {func(md *metadata.FileMetaData) { md.RowGroups[1].NumRows = -10 }, "row group 1 has -10 rows"},
	} {
		md, err := metadata.NewFileMetaData(full[len(pages):len(full)-8], nil)
		if err != nil {
			t.Fatal(err)
		}
		tc.edit(md)
		var footer bytes.Buffer
		if _, err := md.WriteTo(&footer, nil); err != nil {
			t.Fatal(err)
		}
		b := append(slices.Clone(pages), footer.Bytes()...)
		b = binary.LittleEndian.AppendUint32(b, uint32(footer.Len()))
		os.WriteFile(p, append(b, "PAR1"...), 0o644)
		_, err = table.Open(context.Background(), "file://"+p)
		if err == nil {
			t.Errorf("%s: no error", name)
			continue
		}
		wantErr(t, err, errcode.Corrupt, "counts.parquet", tc.want)
	}
}

// TestFlippedPageBytes flips one bit in every byte of a croupier data file's
// first row group (its pages and their headers), keeping the file's size and
// modification time so that only the decoder can notice: every read of the
// row group either returns exactly the right rows or fails with Corrupt naming
// the file and the row group. Croupier writes a CRC with every page; page
// headers have none, and a damaged one can make a column decode
// fewer values than the row group holds. (A plain Parquet file without
// compression or page checksums has nothing that would tell a flipped value
// from a real one.)
func TestFlippedPageBytes(t *testing.T) {
	ctx := context.Background()
	_, uri, _ := croupierTable(t, 25)
	tb := open(t, uri)
	path := filepath.Join(strings.TrimPrefix(uri, "file://"), tb.Files()[0].Key)
	orig, _ := os.ReadFile(path)
	fi, _ := os.Stat(path)
	md, err := tb.Footer(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	rg := md.RowGroup(0)
	start, end := int64(len(orig)), int64(0)
	for c := range rg.NumColumns() {
		cc, err := rg.ColumnChunk(c)
		if err != nil {
			t.Fatal(err)
		}
		first := cc.DataPageOffset()
		if cc.HasDictionaryPage() {
			first = min(first, cc.DictionaryPageOffset())
		}
		start, end = min(start, first), max(end, first+cc.TotalCompressedSize())
	}
	ids := make([]uint64, rg.NumRows())
	for i := range ids {
		ids[i] = uint64(i)
	}
	read := func() (arrow.RecordBatch, error) {
		r, err := tb.NewReader(table.ReaderOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		return r.Read(ctx, ids)
	}
	want, err := read()
	if err != nil {
		t.Fatal(err)
	}
	defer want.Release()
	detected := 0
	for i := start; i < end; i++ {
		b := slices.Clone(orig)
		b[i] ^= 0x10
		os.WriteFile(path, b, 0o644)
		os.Chtimes(path, fi.ModTime(), fi.ModTime())
		got, err := read()
		if err != nil {
			detected++
			if errcode.Of(err) != errcode.Corrupt || !strings.Contains(err.Error(), tb.Files()[0].Key) || !strings.Contains(err.Error(), "row group 0") {
				t.Errorf("byte %d flipped: %v (%s), want Corrupt naming the file and row group 0", i, err, errcode.Of(err))
			}
			continue
		}
		if !array.RecordEqual(got, want) {
			t.Errorf("byte %d flipped: read silently returned other rows", i)
		}
		got.Release()
	}
	t.Logf("%d of %d flips detected, the others touched nothing the rows depend on", detected, end-start)
}

// TestFlippedManifestBits flips one seeded bit in each byte of a committed
// manifest in turn: every flip makes opening the table fail with Corrupt
// naming the manifest.
func TestFlippedManifestBits(t *testing.T) {
	_, uri, manifest := croupierTable(t, 25)
	orig, _ := os.ReadFile(manifest)
	rng := rand.New(rand.NewPCG(seedtest.Seed(t), 0))
	for p := range orig {
		b := slices.Clone(orig)
		b[p] ^= 1 << rng.IntN(8)
		os.WriteFile(manifest, b, 0o644)
		_, err := table.Open(context.Background(), uri)
		if errcode.Of(err) != errcode.Corrupt || !strings.Contains(err.Error(), "00000000000000000001.json") {
			t.Fatalf("bit flipped at byte %d of %d: %v (%s), want Corrupt naming the manifest", p, len(orig), err, errcode.Of(err))
		}
	}
	os.WriteFile(manifest, orig, 0o644)
	checkRowsOf(t, open(t, uri), []uint64{0, 24})
}

// TestManifestListsEachFileOnce lists a data file twice in a manifest whose
// row counts and seal are made to agree: opening fails with Corrupt naming
// the manifest and the file, instead of reading its rows twice.
func TestManifestListsEachFileOnce(t *testing.T) {
	_, uri, manifest := croupierTable(t, 25)
	var key string
	tabletest.EditJSON(t, manifest, func(m map[string]any) {
		files := m["files"].([]any)
		key = files[0].(map[string]any)["key"].(string)
		m["files"] = append(files, files[0])
		m["num_rows"] = 50
		m["added"] = 2
	})
	_, err := table.Open(context.Background(), uri)
	wantErr(t, err, errcode.Corrupt, "00000000000000000001.json", fmt.Sprintf("%q is listed twice", key))
}

// TestUnsealedManifests reads a manifest of format 1, written before
// manifests were sealed, without a seal; a manifest of a sealed format
// whose seal is gone is Corrupt.
func TestUnsealedManifests(t *testing.T) {
	_, uri, manifest := croupierTable(t, 25)
	orig, _ := os.ReadFile(manifest)
	unsealed := func(format int) []byte {
		var m map[string]any
		if err := json.Unmarshal(orig, &m); err != nil {
			t.Fatal(err)
		}
		delete(m, "sha256")
		delete(m, "writer")
		for _, f := range m["files"].([]any) {
			delete(f.(map[string]any), "footer_sha256")
		}
		m["format"] = format
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	os.WriteFile(manifest, unsealed(1), 0o644)
	checkRowsOf(t, open(t, uri), []uint64{0, 24})
	os.WriteFile(manifest, unsealed(table.ManifestFormat), 0o644)
	_, err := table.Open(context.Background(), uri)
	wantErr(t, err, errcode.Corrupt, "00000000000000000001.json", "without its sha256 seal")
}
