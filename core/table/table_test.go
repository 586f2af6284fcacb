package table_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/croupier-data/croupier/core/cmem"
	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/store"
	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/internal/tabletest"
)

func writeDir(t *testing.T, sizes ...int64) (string, int64) {
	t.Helper()
	dir := t.TempDir()
	return dir, tabletest.Write(t, dir, sizes, 100)
}

func open(t *testing.T, uri string) *table.Table {
	t.Helper()
	tb, err := table.Open(context.Background(), uri)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tb.Close() })
	return tb
}

func TestOpenFolderFileGlob(t *testing.T) {
	dir, n := writeDir(t, 250, 30, 120)
	os.WriteFile(filepath.Join(dir, "_SUCCESS"), nil, 0o644)
	os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("not data"), 0o644)
	for _, tc := range []struct {
		uri  string
		rows int64
	}{
		{"file://" + dir, n},
		{"file://" + dir + "/", n},
		{"file://" + filepath.Join(dir, "part-001.parquet"), 30},
		{"file://" + filepath.Join(dir, "part-00[02].parquet"), 370},
	} {
		tb := open(t, tc.uri)
		if tb.NumRows() != tc.rows {
			t.Errorf("%s: NumRows = %d, want %d", tc.uri, tb.NumRows(), tc.rows)
		}
		if !sameFields(tb.Schema(), tabletest.Schema) {
			t.Errorf("%s: schema\n%s\nwant\n%s", tc.uri, tb.Schema(), tabletest.Schema)
		}
	}
	tb := open(t, "file://"+dir)
	if got := len(tb.Files()); got != 3 {
		t.Fatalf("files = %d, want 3", got)
	}
	if rg := tb.Files()[0].RowGroups; len(rg) != 3 || rg[0] != 100 || rg[2] != 50 {
		t.Errorf("row groups of file 0 = %v, want [100 100 50]", rg)
	}
}

// sameFields compares names and types; Parquet renames list items "element".
func sameFields(a, b *arrow.Schema) bool {
	if a.NumFields() != b.NumFields() {
		return false
	}
	for i := range a.NumFields() {
		fa, fb := a.Field(i), b.Field(i)
		if fa.Name != fb.Name || fa.Type.ID() != fb.Type.ID() || fa.Type.String() != strings.ReplaceAll(fb.Type.String(), "item:", "element:") {
			return false
		}
	}
	return true
}

func TestVersionFollowsFiles(t *testing.T) {
	dir, _ := writeDir(t, 50, 50)
	v1 := open(t, "file://"+dir).Version()
	if v2 := open(t, "file://"+dir).Version(); v2 != v1 {
		t.Fatalf("reopen changed the version: %s then %s", v1, v2)
	}
	time.Sleep(10 * time.Millisecond)
	os.WriteFile(filepath.Join(dir, "part-001.parquet"), tabletest.Encode(t, 50, 50, 100), 0o644)
	if v3 := open(t, "file://"+dir).Version(); v3 == v1 {
		t.Fatalf("rewriting a file kept version %s", v1)
	}
}

// checkRows asserts that rec holds exactly the rows ids, with every column.
func checkRows(t *testing.T, rec arrow.RecordBatch, ids []uint64) {
	t.Helper()
	if rec.NumRows() != int64(len(ids)) {
		t.Fatalf("rows = %d, want %d", rec.NumRows(), len(ids))
	}
	col := func(name string) arrow.Array { return rec.Column(rec.Schema().FieldIndices(name)[0]) }
	idc := col("id").(*array.Int64)
	toks := col("tokens").(*array.List)
	vals := toks.ListValues().(*array.Int32)
	text := col("text").(*array.String)
	meta := col("meta").(*array.Struct)
	turn := meta.Field(1).(*array.Int32)
	for i, want := range ids {
		id := idc.Value(i)
		if uint64(id) != want {
			t.Fatalf("row %d: id %d, want %d", i, id, want)
		}
		s, e := toks.ValueOffsets(i)
		wantToks := tabletest.Tokens(id)
		if int(e-s) != len(wantToks) {
			t.Fatalf("row %d: %d tokens, want %d", i, e-s, len(wantToks))
		}
		for j := s; j < e; j++ {
			if vals.Value(int(j)) != wantToks[j-s] {
				t.Fatalf("row %d: token %d = %d, want %d", i, j-s, vals.Value(int(j)), wantToks[j-s])
			}
		}
		if text.Value(i) != tabletest.Text(id) {
			t.Fatalf("row %d: text %q", i, text.Value(i))
		}
		if turn.Value(i) != int32(id%5) {
			t.Fatalf("row %d: meta.turn %d", i, turn.Value(i))
		}
	}
}

func TestReadRowsAnyOrder(t *testing.T) {
	dir, n := writeDir(t, 250, 30, 120)
	tb := open(t, "file://"+dir)
	mem := memory.NewCheckedAllocator(cmem.New())
	defer mem.AssertSize(t, 0)
	r, err := tb.NewReader(table.ReaderOptions{Columns: []string{"meta", "id", "tokens", "text"},
		Allocator: mem})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if names := r.Schema().Fields(); names[0].Name != "meta" || names[1].Name != "id" {
		t.Fatalf("projection order not kept: %s", r.Schema())
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, size := range []int{1, 7, 64, 400} {
		ids := make([]uint64, size)
		for i := range ids {
			ids[i] = uint64(rng.Int64N(n))
		}
		rec, err := r.Read(context.Background(), ids)
		if err != nil {
			t.Fatal(err)
		}
		checkRows(t, rec, ids)
		rec.Release()
	}
	// sequential, within one row group: the single-piece path
	rec, err := r.Read(context.Background(), []uint64{3, 4, 5})
	if err != nil {
		t.Fatal(err)
	}
	checkRows(t, rec, []uint64{3, 4, 5})
	rec.Release()
}

func TestConcurrentReads(t *testing.T) {
	dir, n := writeDir(t, 300, 300)
	tb := open(t, "file://"+dir)
	mem := memory.NewCheckedAllocator(cmem.New())
	defer mem.AssertSize(t, 0)
	// A budget below one row group forces constant eviction under contention.
	r, err := tb.NewReader(table.ReaderOptions{Columns: []string{"id", "tokens", "text", "meta"}, Allocator: mem})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 9))
			for range 20 {
				ids := make([]uint64, 16)
				for i := range ids {
					ids[i] = uint64(rng.Int64N(n))
				}
				rec, err := r.Read(context.Background(), ids)
				if err != nil {
					t.Error(err)
					return
				}
				checkRows(t, rec, ids)
				rec.Release()
			}
		})
	}
	wg.Wait()
}

func TestPinRoundTrip(t *testing.T) {
	dir, _ := writeDir(t, 120, 80)
	tb := open(t, "file://"+dir)
	data, err := json.Marshal(tb.Pin())
	if err != nil {
		t.Fatal(err)
	}
	pin, err := table.DecodePin(data)
	if err != nil {
		t.Fatal(err)
	}
	tb2, err := table.OpenPin(context.Background(), pin)
	if err != nil {
		t.Fatal(err)
	}
	defer tb2.Close()
	if tb2.Version() != tb.Version() || tb2.NumRows() != tb.NumRows() || !tb2.Schema().Equal(tb.Schema()) {
		t.Fatalf("reopened pin differs: %s/%d vs %s/%d", tb2.Version(), tb2.NumRows(), tb.Version(), tb.NumRows())
	}
	r, err := tb2.NewReader(table.ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rec, err := r.Read(context.Background(), []uint64{199, 0, 120})
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	checkRows(t, rec, []uint64{199, 0, 120})
}

func TestMemStore(t *testing.T) {
	ctx := context.Background()
	loc, err := store.Open(ctx, "mem://tabletest/data")
	if err != nil {
		t.Fatal(err)
	}
	if err := loc.WriteAll(ctx, "data/a.parquet", tabletest.Encode(t, 0, 70, 32), store.WriterOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := loc.WriteAll(ctx, "data/b.parquet", tabletest.Encode(t, 70, 10, 32), store.WriterOptions{}); err != nil {
		t.Fatal(err)
	}
	tb := open(t, "mem://tabletest/data")
	if tb.NumRows() != 80 {
		t.Fatalf("NumRows = %d, want 80", tb.NumRows())
	}
	r, err := tb.NewReader(table.ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rec, err := r.Read(ctx, []uint64{79, 33, 0})
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	checkRows(t, rec, []uint64{79, 33, 0})
}

func wantErr(t *testing.T, err error, code errcode.Code, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %s", code)
	}
	if got := errcode.Of(err); got != code {
		t.Errorf("code %s, want %s: %v", got, code, err)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not name %q", err, p)
		}
	}
}

func TestPinnedFileChanged(t *testing.T) {
	dir, _ := writeDir(t, 100, 100)
	tb := open(t, "file://"+dir)
	r, err := tb.NewReader(table.ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	victim := filepath.Join(dir, "part-001.parquet")
	time.Sleep(10 * time.Millisecond)
	os.WriteFile(victim, tabletest.Encode(t, 100, 100, 100), 0o644)
	_, err = r.Read(context.Background(), []uint64{150})
	wantErr(t, err, errcode.Changed, "part-001.parquet", "changed")
	os.Remove(victim)
	_, err = r.Read(context.Background(), []uint64{150})
	wantErr(t, err, errcode.Changed, "part-001.parquet", "vanished")
	// rows of the untouched file still read
	rec, err := r.Read(context.Background(), []uint64{5})
	if err != nil {
		t.Fatal(err)
	}
	rec.Release()
}

func TestBadInput(t *testing.T) {
	ctx := context.Background()
	dir, _ := writeDir(t, 10)
	_, err := table.Open(ctx, "file://"+dir+"/missing")
	wantErr(t, err, errcode.NotFound, dir+"/missing")

	empty := t.TempDir()
	_, err = table.Open(ctx, "file://"+empty)
	wantErr(t, err, errcode.NotFound, empty, "no .parquet files")

	bad := filepath.Join(t.TempDir(), "bad.parquet")
	os.WriteFile(bad, []byte(strings.Repeat("this is not parquet", 10)), 0o644)
	_, err = table.Open(ctx, "file://"+bad)
	wantErr(t, err, errcode.Corrupt, "bad.parquet", "not a Parquet file")

	trunc := filepath.Join(t.TempDir(), "trunc.parquet")
	full := tabletest.Encode(t, 0, 10, 10)
	os.WriteFile(trunc, append(append([]byte{}, full[:len(full)/2]...), full[len(full)-8:]...), 0o644)
	_, err = table.Open(ctx, "file://"+trunc)
	wantErr(t, err, errcode.Corrupt, "trunc.parquet")

	_, err = table.Open(ctx, "relative/path")
	wantErr(t, err, errcode.InvalidArgument, "relative/path")

	tb := open(t, "file://"+dir)
	_, err = tb.NewReader(table.ReaderOptions{Columns: []string{"id", "nope"}})
	wantErr(t, err, errcode.InvalidArgument, `"nope"`, "id, tokens")

	r, err := tb.NewReader(table.ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	_, err = r.Read(ctx, []uint64{10})
	wantErr(t, err, errcode.InvalidArgument, "row id 10 out of range")
}

func TestSchemaMismatch(t *testing.T) {
	dir, _ := writeDir(t, 10)
	// a file whose schema is only the id column
	schema := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}}, nil)
	b := array.NewInt64Builder(memory.DefaultAllocator)
	b.AppendValues([]int64{1, 2}, nil)
	col := b.NewArray()
	rec := array.NewRecordBatch(schema, []arrow.Array{col}, 2)
	f, err := os.Create(filepath.Join(dir, "zz-other.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	w, err := pqarrow.NewFileWriter(schema, f, nil, pqarrow.DefaultWriterProps())
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	w.Close()
	rec.Release()
	col.Release()
	b.Release()
	_, err = table.Open(context.Background(), "file://"+dir)
	wantErr(t, err, errcode.InvalidArgument, "zz-other.parquet", "schema differs")
}

// TestReaderFetchesRowGroupsWhole checks that a reader fetches the projected
// column chunks of each row group in one request, reads no more than them
// (and the small holes between), and serves later reads from its cache.
func TestReaderFetchesRowGroupsWhole(t *testing.T) {
	dir, n := writeDir(t, 250, 150)
	tb := open(t, "file://"+dir)
	ctx := context.Background()
	var projected, groups int64
	for f := range 2 {
		md, err := tb.Footer(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		for g := range md.NumRowGroups() {
			groups++
			for _, leaf := range []int{0, 1, 2} { // id, tokens (one leaf), reward
				col, err := md.RowGroup(g).ColumnChunk(leaf)
				if err != nil {
					t.Fatal(err)
				}
				projected += col.TotalCompressedSize()
			}
		}
	}
	r, err := tb.NewReader(table.ReaderOptions{Columns: []string{"reward", "id", "tokens"}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ids := make([]uint64, n)
	for i := range ids {
		ids[i] = uint64(n) - 1 - uint64(i)
	}
	rec, err := r.Read(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	rec.Release()
	st := r.Stats()
	if st.Requests != groups || st.RowGroups != groups {
		t.Errorf("requests = %d, row groups decoded = %d; want %d each", st.Requests, st.RowGroups, groups)
	}
	if st.BytesRead < projected || st.BytesRead > projected+groups*8<<10 {
		t.Errorf("read %d bytes; the projected column chunks hold %d", st.BytesRead, projected)
	}
	if st.KeptRows != int64(n) {
		t.Errorf("kept %d rows, want %d", st.KeptRows, n)
	}
}
