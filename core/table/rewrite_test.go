package table_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/internal/bigtest"
	"github.com/croupier-data/croupier/internal/tabletest"
)

// exportedDataset writes a plain Parquet dataset laid out as pyarrow writes a
// Hugging Face export: files of the given numbers of rows (ids continuing
// across them) in row groups of 16,384 rows, 1 MiB pages, snappy and no page
// index. It returns the dataset's URI.
func exportedDataset(t *testing.T, sizes ...int64) string {
	t.Helper()
	dir := t.TempDir()
	var start int64
	for i, n := range sizes {
		rec := tabletest.Record(start, n)
		data := tabletest.EncodeRecord(t, rec, parquet.WithMaxRowGroupLength(16384),
			parquet.WithDataPageSize(1<<20), parquet.WithCompression(compress.Codecs.Snappy))
		rec.Release()
		name := fmt.Sprintf("train-%05d-of-%05d.parquet", i, len(sizes))
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
		start += n
	}
	return "file://" + dir
}

// readAll returns every row of tb, in row id order, with the given columns.
func readAll(t *testing.T, tb *table.Table, columns []string) arrow.RecordBatch {
	t.Helper()
	r, err := tb.NewReader(table.ReaderOptions{Columns: columns})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ids := make([]uint64, tb.NumRows())
	for i := range ids {
		ids[i] = uint64(i)
	}
	rec, err := r.Read(context.Background(), ids)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rec.Release)
	return rec
}

// sameRows fails t unless got holds the rows of want, with columns of want's.
func sameRows(t *testing.T, got, want *table.Table, columns []string) {
	t.Helper()
	if got.NumRows() != want.NumRows() {
		t.Fatalf("%d rows, want %d", got.NumRows(), want.NumRows())
	}
	g, w := readAll(t, got, nil), readAll(t, want, columns)
	if !g.Schema().Equal(w.Schema()) {
		t.Fatalf("schema\n%s\nwant\n%s", g.Schema(), w.Schema())
	}
	if !array.RecordEqual(g, w) {
		t.Fatal("rows differ from the source's")
	}
}

// checkLayout fails t unless every data file of tb is in row groups of
// rowGroupRows rows (fewer in the last), lz4 (the default), with a page index.
func checkLayout(t *testing.T, tb *table.Table, rowGroupRows int64) {
	t.Helper()
	for i, f := range tb.Files() {
		for g, n := range f.RowGroups {
			if n > rowGroupRows || (n < rowGroupRows && g < len(f.RowGroups)-1) {
				t.Fatalf("file %s: row groups %v, want %d rows each", f.Key, f.RowGroups, rowGroupRows)
			}
		}
		md, err := tb.Footer(context.Background(), i)
		if err != nil {
			t.Fatal(err)
		}
		for g := range md.NumRowGroups() {
			for c := range md.Schema.NumColumns() {
				col, err := md.RowGroup(g).ColumnChunk(c)
				if err != nil {
					t.Fatal(err)
				}
				if col.GetOffsetIndexLocation() == nil || col.GetColumnIndexLocation() == nil {
					t.Fatalf("file %s, row group %d, column %s: no page index", f.Key, g, col.PathInSchema())
				}
				if col.Compression() != compress.Codecs.Lz4Raw {
					t.Fatalf("file %s, row group %d, column %s: compression %s", f.Key, g, col.PathInSchema(), col.Compression())
				}
			}
		}
	}
}

func TestRewrite(t *testing.T) {
	ctx := context.Background()
	src := open(t, exportedDataset(t, 17000, 5000))
	if got := []int64{src.Files()[0].RowGroups[0], src.Files()[1].RowGroups[0]}; !slices.Equal(got, []int64{16384, 5000}) {
		t.Fatalf("source row groups %v", got)
	}
	dst := "file://" + filepath.Join(t.TempDir(), "tbl")
	var progress []table.RewriteProgress
	opts := table.RewriteOptions{WriteOptions: table.WriteOptions{RowGroupRows: 4096, PageBytes: 8 << 10},
		Progress: func(p table.RewriteProgress) { progress = append(progress, p) }}
	tb, err := table.Rewrite(ctx, src, dst, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	if tb.Kind() != table.KindCroupier || tb.Version() != "1" || tb.URI() != dst {
		t.Fatalf("rewrote to %s %s version %s", tb.Kind(), tb.URI(), tb.Version())
	}
	sameRows(t, tb, src, nil)
	checkLayout(t, tb, 4096)
	reopened := open(t, dst)
	sameRows(t, reopened, src, nil)

	// Progress comes after each of the source's three row groups, grows and
	// ends at the totals.
	if len(progress) != 3 {
		t.Fatalf("%d progress reports, want one per source row group: %+v", len(progress), progress)
	}
	for i, p := range progress {
		if p.TotalRows != src.NumRows() || p.TotalBytes != progress[0].TotalBytes || p.TotalBytes <= 0 ||
			p.Rows <= 0 || p.Bytes <= 0 || (i > 0 && (p.Rows <= progress[i-1].Rows || p.Bytes <= progress[i-1].Bytes)) {
			t.Fatalf("progress %+v", progress)
		}
	}
	if last := progress[2]; last.Rows != last.TotalRows || last.Bytes != last.TotalBytes {
		t.Fatalf("progress ends at %+v", last)
	}

	// A projection keeps the columns asked for, in that order.
	projected, err := table.Rewrite(ctx, src, dst+"-projected", table.RewriteOptions{Columns: []string{"text", "id"}})
	if err != nil {
		t.Fatal(err)
	}
	defer projected.Close()
	sameRows(t, projected, src, []string{"text", "id"})
	checkLayout(t, projected, table.DefaultRowGroupRows)

	// A croupier table rewrites too.
	again, err := table.Rewrite(ctx, tb, dst+"-again", table.RewriteOptions{WriteOptions: table.WriteOptions{RowGroupRows: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	sameRows(t, again, src, nil)
	checkLayout(t, again, 1000)

	_, err = table.Rewrite(ctx, src, dst, table.RewriteOptions{})
	wantErr(t, err, errcode.AlreadyExists, dst)
	_, err = table.Rewrite(ctx, src, dst+"-bad", table.RewriteOptions{Columns: []string{"id", "nope"}})
	wantErr(t, err, errcode.InvalidArgument, `"nope"`, src.URI())
	if _, err := os.Stat(filepath.Join(dst[len("file://"):] + "-bad")); !os.IsNotExist(err) {
		t.Fatalf("a rewrite with a bad column wrote at its destination: %v", err)
	}
}

func TestRewriteCanceled(t *testing.T) {
	src := open(t, exportedDataset(t, 20000))
	dir := filepath.Join(t.TempDir(), "tbl")
	dst := "file://" + dir
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls := 0
	_, err := table.Rewrite(ctx, src, dst, table.RewriteOptions{Progress: func(table.RewriteProgress) {
		calls++
		cancel()
	}})
	wantErr(t, err, errcode.Canceled)
	if calls != 1 {
		t.Fatalf("%d progress reports after the cancel's", calls)
	}
	if vs, err := table.Versions(context.Background(), dst); err != nil || len(vs) != 0 {
		t.Fatalf("a canceled rewrite left versions %v (%v)", vs, err)
	}
	_, err = table.Open(context.Background(), dst)
	wantErr(t, err, errcode.NotFound, "no committed version")
	data, err := filepath.Glob(filepath.Join(dir, "data", "*"))
	if err != nil || len(data) != 0 {
		t.Fatalf("a canceled rewrite left data files %v (%v)", data, err)
	}

	// The destination takes a rewrite that runs to the end.
	tb, err := table.Rewrite(context.Background(), src, dst, table.RewriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	sameRows(t, tb, src, nil)
}

// envRewriteSrc makes the test binary a child that rewrites the table it
// names into $CROUPIER_TABLETEST_REWRITE_DST with a memory budget of
// rewriteBudget, and prints its peak resident bytes before and after.
const (
	envRewriteSrc = "CROUPIER_TABLETEST_REWRITE_SRC"
	envRewriteDst = "CROUPIER_TABLETEST_REWRITE_DST"
	rewriteBudget = 16 << 20
)

func runRewrite(src string) int {
	ctx := context.Background()
	tb, err := table.Open(ctx, src)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer tb.Close()
	before := peakRSS()
	out, err := table.Rewrite(ctx, tb, os.Getenv(envRewriteDst), table.RewriteOptions{MemoryBudget: rewriteBudget})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	out.Close()
	fmt.Println(before, peakRSS())
	return 0
}

// peakRSS returns the process's peak resident bytes (VmHWM), or -1.
func peakRSS() int64 {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for line := range strings.Lines(string(status)) {
		if kb, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(kb), "kB")), 10, 64)
			return n << 10
		}
	}
	return -1
}

// A source row group of a million rows, 200 MB decoded, is rewritten in
// slices within the rewrite's memory rule (1.25 × the budget + 128 MiB over
// the process at its start), not decoded whole.
func TestRewriteBoundsAHugeRowGroup(t *testing.T) {
	const rows, perRow = 1 << 20, 48
	bigtest.Skip(t, rows*perRow*4)
	if peakRSS() < 0 {
		t.Skip("no /proc/self/status here")
	}
	mem := memory.NewGoAllocator()
	values := array.NewInt32Builder(mem)
	offsets := make([]int32, rows+1)
	for i := range rows {
		for j := range perRow {
			values.Append(int32((i + j) % 7))
		}
		offsets[i+1] = offsets[i] + perRow
	}
	vals := values.NewArray()
	defer vals.Release()
	lists := array.NewListData(array.NewData(arrow.ListOf(arrow.PrimitiveTypes.Int32), rows,
		[]*memory.Buffer{nil, memory.NewBufferBytes(arrow.Int32Traits.CastToBytes(offsets))}, []arrow.ArrayData{vals.Data()}, 0, 0))
	defer lists.Release()
	schema := arrow.NewSchema([]arrow.Field{{Name: "tokens", Type: lists.DataType(), Nullable: true}}, nil)
	rec := array.NewRecordBatch(schema, []arrow.Array{lists}, rows)
	defer rec.Release()
	dir := t.TempDir()
	data := tabletest.EncodeRecord(t, rec, parquet.WithMaxRowGroupLength(rows), parquet.WithDataPageSize(1<<20))
	if err := os.WriteFile(filepath.Join(dir, "part-0.parquet"), data, 0o644); err != nil {
		t.Fatal(err)
	}

	dst := "file://" + filepath.Join(t.TempDir(), "out")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envRewriteSrc+"=file://"+dir, envRewriteDst+"="+dst)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("rewrite: %v\n%s", err, out)
	}
	var before, after int64
	if _, err := fmt.Sscan(string(out), &before, &after); err != nil {
		t.Fatalf("child printed %q: %v", out, err)
	}
	t.Logf("peak %d MiB over the start", (after-before)>>20)
	if limit := int64(rewriteBudget)*5/4 + 128<<20; after-before > limit {
		t.Errorf("rewrite of a %d MB row group with a %d MiB budget peaked %d MiB over its start, more than %d MiB",
			rows*perRow*4/1000000, rewriteBudget>>20, (after-before)>>20, limit>>20)
	}
	got, err := table.Open(context.Background(), dst)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	if got.NumRows() != rows {
		t.Fatalf("%d rows, want %d", got.NumRows(), rows)
	}
	src, err := table.Open(context.Background(), "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	sameRows(t, got, src, nil)
}
