package table_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/google/uuid"

	"github.com/croupier-data/croupier/core/catalog"
	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/store"
	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/core/table/libzstd"
	_ "github.com/croupier-data/croupier/drivers/s3" // s3://
	"github.com/croupier-data/croupier/internal/s3test"
	"github.com/croupier-data/croupier/internal/tabletest"
)

// Environment of a writer subprocess: the test binary re-executed by
// TestConcurrentAppendProcesses, TestKilledWriter and TestWriterKilledAtEveryPhase.
const (
	envWriterURI = "CROUPIER_TABLETEST_WRITER_URI"
	envWriterID  = "CROUPIER_TABLETEST_WRITER_ID"
	envAppends   = "CROUPIER_TABLETEST_APPENDS"
	envCreate    = "CROUPIER_TABLETEST_CREATE"  // "1": create the table with the first batch
	envKillAt    = "CROUPIER_TABLETEST_KILL_AT" // a commit phase: SIGKILL this process there
)

// Rows appended by writer w in its append j: rowsPerAppend ids from id(w, j, 0).
const rowsPerAppend = 3

func writerID(w, j, k int) int64 { return int64(w*100000 + j*rowsPerAppend + k) }

// TestMain decompresses zstd pages with libzstd, as croupier's C library
// does, when built with cgo; built without (CGO_ENABLED=0, make test-go), the
// same tests run on arrow-go's pure-Go codec.
func TestMain(m *testing.M) {
	libzstd.Register()
	if uri := os.Getenv(envWriterURI); uri != "" {
		os.Exit(runWriter(uri))
	}
	if src := os.Getenv(envRewriteSrc); src != "" {
		os.Exit(runRewrite(src))
	}
	os.Exit(m.Run())
}

// runWriter appends $CROUPIER_TABLETEST_APPENDS batches (-1: until killed),
// or creates the table with one batch.
func runWriter(uri string) int {
	w, _ := strconv.Atoi(os.Getenv(envWriterID))
	n, _ := strconv.Atoi(os.Getenv(envAppends))
	if phase := os.Getenv(envKillAt); phase != "" {
		table.SetCommitHook(func(p string) {
			if p == phase {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
				time.Sleep(time.Hour) // the signal is on its way
			}
		})
	}
	ctx := context.Background()
	var tb *table.Table
	var err error
	if os.Getenv(envCreate) != "" {
		tb, err = table.Create(ctx, uri, tabletest.Reader(writerID(w, 0, 0), rowsPerAppend), table.WriteOptions{})
	} else {
		tb, err = table.Open(ctx, uri)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "writer %d: %v\n", w, err)
		return 1
	}
	defer tb.Close()
	for j := 0; n < 0 || j < n; j++ {
		if _, err := tb.Append(ctx, tabletest.Reader(writerID(w, j, 0), rowsPerAppend), table.WriteOptions{}); err != nil {
			fmt.Fprintf(os.Stderr, "writer %d append %d: %v\n", w, j, err)
			return 1
		}
	}
	return 0
}

func startS3(t *testing.T) *s3test.Server {
	t.Helper()
	s, err := s3test.Start("bkt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// stores returns one fresh table URI on each store.
func stores(t *testing.T) map[string]string {
	s := startS3(t)
	return map[string]string{
		"file": "file://" + filepath.Join(t.TempDir(), "tbl"),
		"mem":  "mem://tabletest/" + t.Name() + "/" + uuid.NewString(), // mem buckets outlive a test run
		"s3":   s.URI("bkt", "tables/"+t.Name()),
	}
}

// allIDs reads every row of tb and returns the id column.
func allIDs(t *testing.T, tb *table.Table) []int64 {
	t.Helper()
	return slices.Clone(readAll(t, tb, []string{"id"}).Column(0).(*array.Int64).Int64Values())
}

func seq(start, n int64) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = start + int64(i)
	}
	return out
}

func TestCreateAppendTimeTravel(t *testing.T) {
	ctx := context.Background()
	for name, uri := range stores(t) {
		t.Run(name, func(t *testing.T) {
			tb, err := table.Create(ctx, uri, tabletest.Reader(0, 10), table.WriteOptions{RowGroupRows: 4})
			if err != nil {
				t.Fatal(err)
			}
			defer tb.Close()
			if tb.Version() != "1" || tb.NumRows() != 10 || tb.Kind() != table.KindCroupier {
				t.Fatalf("created: version %s, %d rows, kind %s", tb.Version(), tb.NumRows(), tb.Kind())
			}
			if rg := tb.Files()[0].RowGroups; !slices.Equal(rg, []int64{4, 4, 2}) {
				t.Errorf("row groups %v, want [4 4 2]", rg)
			}
			for v := int64(2); v <= 4; v++ {
				got, err := tb.Append(ctx, tabletest.Reader(10*(v-1), 10), table.WriteOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if got != v {
					t.Fatalf("append returned version %d, want %d", got, v)
				}
			}
			if tb.Version() != "1" || tb.NumRows() != 10 {
				t.Fatalf("append moved the open table to %s", tb.Version())
			}
			versions, err := table.Versions(ctx, uri)
			if err != nil || !slices.Equal(versions, []int64{1, 2, 3, 4}) {
				t.Fatalf("versions %v, %v", versions, err)
			}
			latest := open(t, uri)
			if latest.Version() != "4" || !slices.Equal(allIDs(t, latest), seq(0, 40)) {
				t.Fatalf("latest: version %s", latest.Version())
			}
			checkRowsOf(t, latest, []uint64{39, 0, 17})
			// Each version added the ten ids after its parent's, and kept
			// its parent's files: its Base is the parent's Head.
			var head string
			for k := int64(1); k <= 4; k++ {
				a, err := tb.Appended(ctx, k)
				if err != nil {
					t.Fatal(err)
				}
				if a.Version != k || a.Start != 10*(k-1) || a.End != 10*k || a.Rows() != 10 || (k > 1 && a.Base != head) || a.Head == a.Base {
					t.Errorf("version %d appended %+v after head %s", k, a, head)
				}
				head = a.Head
			}
			if _, err := tb.Appended(ctx, 5); errcode.Of(err) != errcode.NotFound {
				t.Errorf("version 5 appended: %v, want NotFound", err)
			}
			for k := int64(1); k <= 4; k++ {
				tk, err := table.OpenVersion(ctx, uri, k)
				if err != nil {
					t.Fatal(err)
				}
				if got := allIDs(t, tk); !slices.Equal(got, seq(0, 10*k)) {
					t.Errorf("version %d: ids %v", k, got)
				}
				// The pin of a croupier version reopens the same rows.
				tp, err := table.OpenPin(ctx, tk.Pin())
				if err != nil {
					t.Fatal(err)
				}
				if tp.Version() != strconv.FormatInt(k, 10) || !slices.Equal(allIDs(t, tp), seq(0, 10*k)) {
					t.Errorf("pin of version %d reopened as %s", k, tp.Version())
				}
				tp.Close()
				tk.Close()
			}
		})
	}
}

// TestPagesHoldTheirSize writes a column of 300-byte strings with one
// 1 MiB string among them, a list column of small numbers and a column of
// numbers, and checks that every page of the strings holds about PageBytes
// of values (at most one and a half times; the large string's page as many
// of its neighbours), the other columns' pages still full pages of their
// values, and that the strings' chunks carry no statistics, too long to keep.
func TestPagesHoldTheirSize(t *testing.T) {
	ctx := context.Background()
	const (
		rows, width  = 20_000, 300
		huge, hugeAt = 1 << 20, 12_345
		pageBytes    = 16 << 10
	)
	mem := memory.NewGoAllocator()
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "text", Type: arrow.BinaryTypes.String},
		{Name: "tokens", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32)},
	}, nil)
	b := array.NewRecordBuilder(mem, schema)
	defer b.Release()
	text := strings.Repeat("x", width)
	for i := range rows {
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		if i == hugeAt {
			b.Field(1).(*array.StringBuilder).Append(strings.Repeat("y", huge))
		} else {
			b.Field(1).(*array.StringBuilder).Append(text)
		}
		lb := b.Field(2).(*array.ListBuilder)
		lb.Append(true)
		for j := range 8 {
			lb.ValueBuilder().(*array.Int32Builder).Append(int32(i + j))
		}
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	rr, err := array.NewRecordReader(schema, []arrow.RecordBatch{rec})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tb, err := table.Create(ctx, "file://"+dir, rr, table.WriteOptions{RowGroupRows: 8192, PageBytes: pageBytes})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	f := tb.Files()[0]
	pf, err := file.OpenParquetFile(filepath.Join(dir, f.Key), false)
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	// Statistics are kept short: the ids' minimum and maximum, not the strings'.
	for c, want := range []bool{true, false} {
		col, err := pf.MetaData().RowGroup(0).ColumnChunk(c)
		if err != nil {
			t.Fatal(err)
		}
		stats, err := col.Statistics()
		if err != nil {
			t.Fatal(err)
		}
		if got := stats != nil && stats.HasMinMax(); got != want {
			t.Errorf("column %s has a minimum and maximum: %t; want %t", col.PathInSchema(), got, want)
		}
	}
	index := pf.GetPageIndexReader()
	var first int64 // the row group's first row in the table
	for g, groupRows := range f.RowGroups {
		rg, err := index.RowGroup(g)
		if err != nil {
			t.Fatal(err)
		}
		// Rows of each page of column c, in order.
		pageRows := func(c int) []int64 {
			oi, err := rg.GetOffsetIndex(c)
			if err != nil {
				t.Fatal(err)
			}
			locs := oi.GetPageLocations()
			n := make([]int64, len(locs))
			for i, l := range locs {
				end := groupRows
				if i+1 < len(locs) {
					end = locs[i+1].FirstRowIndex
				}
				n[i] = end - l.FirstRowIndex
			}
			return n
		}
		for c, value := range map[int]int64{0: 8, 2: 8 * 4} {
			pages := pageRows(c)
			for i, n := range pages[:len(pages)-1] { // the last may be short
				if n*value < pageBytes/2 {
					t.Errorf("row group %d, column %d: page %d holds %d rows, %d bytes of values; want about %d", g, c, i, n, n*value, pageBytes)
				}
			}
		}
		var at int64
		for i, n := range pageRows(1) {
			small := n // of width bytes
			if hugeAt >= first+at && hugeAt < first+at+n {
				small--
			}
			if small*width > pageBytes*3/2 {
				t.Errorf("row group %d, page %d of the strings holds %d rows of %d bytes (%d of the large one); want at most %d bytes",
					g, i, small, width, n-small, pageBytes*3/2)
			}
			at += n
		}
		first += groupRows
	}
	if got := allIDs(t, open(t, "file://"+dir)); !slices.Equal(got, seq(0, rows)) {
		t.Fatalf("ids read back: %d of %d", len(got), rows)
	}
}

// TestCompression: each WriteOptions.Compression writes its codec into
// every column chunk, on create and on append, and the rows read back the
// same; a name it does not know fails before anything is written.
func TestCompression(t *testing.T) {
	ctx := context.Background()
	codecs := func(tb *table.Table, file int) []compress.Compression {
		t.Helper()
		md, err := tb.Footer(ctx, file)
		if err != nil {
			t.Fatal(err)
		}
		var out []compress.Compression
		for g := range md.NumRowGroups() {
			for c := range md.Schema.NumColumns() {
				col, err := md.RowGroup(g).ColumnChunk(c)
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, col.Compression())
			}
		}
		return out
	}
	for name, want := range map[string]compress.Compression{
		"": compress.Codecs.Lz4Raw, "zstd": compress.Codecs.Zstd,
		"lz4": compress.Codecs.Lz4Raw, "none": compress.Codecs.Uncompressed,
	} {
		t.Run("codec="+name, func(t *testing.T) {
			uri := "file://" + t.TempDir()
			tb, err := table.Create(ctx, uri, tabletest.Reader(0, 30), table.WriteOptions{RowGroupRows: 8, Compression: name})
			if err != nil {
				t.Fatal(err)
			}
			defer tb.Close()
			// Appended files take the append's codec, whatever the table's.
			if _, err := tb.Append(ctx, tabletest.Reader(30, 10), table.WriteOptions{Compression: "lz4"}); err != nil {
				t.Fatal(err)
			}
			latest := open(t, uri)
			for f, w := range []compress.Compression{want, compress.Codecs.Lz4Raw} {
				for _, got := range codecs(latest, f) {
					if got != w {
						t.Fatalf("file %d: a column chunk compressed with %v, want %v", f, got, w)
					}
				}
			}
			if got := allIDs(t, latest); !slices.Equal(got, seq(0, 40)) {
				t.Fatalf("ids %v", got)
			}
			checkRowsOf(t, latest, []uint64{39, 0, 17, 31, 5})
		})
	}
	dir := filepath.Join(t.TempDir(), "tbl")
	_, err := table.Create(ctx, "file://"+dir, tabletest.Reader(0, 5), table.WriteOptions{Compression: "brotli"})
	wantErr(t, err, errcode.InvalidArgument, dir, `compression "brotli": use one of ["lz4" "none" "zstd"]`)
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused create left %s: %v", dir, err)
	}
	_, err = table.Append(ctx, "file://"+dir, tabletest.Reader(0, 5), table.WriteOptions{Compression: "LZ4"})
	wantErr(t, err, errcode.InvalidArgument, dir, `compression "LZ4"`)
}

func checkRowsOf(t *testing.T, tb *table.Table, ids []uint64) {
	t.Helper()
	r, err := tb.NewReader(table.ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rec, err := r.Read(context.Background(), ids)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	checkRows(t, rec, ids)
}

func TestCroupierErrors(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "tbl")
	uri := "file://" + dir
	tb, err := table.Create(ctx, uri, tabletest.Reader(0, 5), table.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tb.Close()

	_, err = table.Create(ctx, uri, tabletest.Reader(0, 5), table.WriteOptions{})
	wantErr(t, err, errcode.AlreadyExists, dir, "latest version 1")

	// A different type for one field.
	other := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int32}}, nil)
	b := array.NewInt32Builder(memory.DefaultAllocator)
	b.AppendValues([]int32{1}, nil)
	col := b.NewArray()
	rec := array.NewRecordBatch(other, []arrow.Array{col}, 1)
	rr, _ := array.NewRecordReader(other, []arrow.RecordBatch{rec})
	_, err = table.Append(ctx, uri, rr, table.WriteOptions{})
	wantErr(t, err, errcode.InvalidArgument, dir, `field "id"`, "int64", "int32")
	rec.Release()
	col.Release()
	b.Release()

	// A missing field.
	short := arrow.NewSchema(tabletest.Schema.Fields()[:4], nil)
	full := tabletest.Record(0, 2)
	cut := array.NewRecordBatch(short, full.Columns()[:4], 2)
	rr, _ = array.NewRecordReader(short, []arrow.RecordBatch{cut})
	_, err = table.Append(ctx, uri, rr, table.WriteOptions{})
	wantErr(t, err, errcode.InvalidArgument, `field "meta"`, "missing")
	cut.Release()
	full.Release()
	if files, _ := filepath.Glob(filepath.Join(dir, "data", "*.parquet")); len(files) != 1 {
		t.Errorf("rejected appends left data files: %v", files)
	}

	_, err = table.OpenVersion(ctx, uri, 7)
	wantErr(t, err, errcode.NotFound, dir, "version 7 does not exist", "versions 1 to 1")

	// A corrupt manifest is reported as such, with its name.
	if _, err := table.Append(ctx, uri, tabletest.Reader(5, 5), table.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	m2 := filepath.Join(dir, "_versions", "00000000000000000002.json")
	os.WriteFile(m2, []byte(`{"format":1,"version":2,"files":[`), 0o644)
	_, err = table.Open(ctx, uri)
	wantErr(t, err, errcode.Corrupt, "00000000000000000002.json", "corrupt manifest")
	_, err = table.Append(ctx, uri, tabletest.Reader(10, 5), table.WriteOptions{})
	wantErr(t, err, errcode.Corrupt, "00000000000000000002.json")
	// Version 1 still reads.
	tb1, err := table.OpenVersion(ctx, uri, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(allIDs(t, tb1), seq(0, 5)) {
		t.Error("version 1 changed")
	}
	_, err = tb1.NewReader(table.ReaderOptions{Columns: []string{"nope"}})
	wantErr(t, err, errcode.InvalidArgument, "nope")
	tb1.Close()

	plain, _ := writeDir(t, 10)
	_, err = table.OpenVersion(ctx, "file://"+plain, 2)
	wantErr(t, err, errcode.InvalidArgument, plain, "plain Parquet")
	_, err = table.Versions(ctx, "file://"+plain)
	wantErr(t, err, errcode.NotFound, plain, "no croupier table")
	_, err = table.Append(ctx, "file://"+plain, tabletest.Reader(0, 1), table.WriteOptions{})
	wantErr(t, err, errcode.NotFound, plain)
}

// TestConcurrentAppendProcesses runs 8 writer processes of 25 appends each
// against one table, while this process keeps opening and reading the latest
// version.
func TestConcurrentAppendProcesses(t *testing.T) {
	const writers, appends = 8, 25
	s := startS3(t)
	for name, uri := range map[string]string{
		"file": "file://" + filepath.Join(t.TempDir(), "tbl"),
		"s3":   s.URI("bkt", "concurrent"),
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			tb, err := table.Create(ctx, uri, tabletest.Reader(-1, 1), table.WriteOptions{})
			if err != nil {
				t.Fatal(err)
			}
			tb.Close()
			stop := make(chan struct{})
			var reads atomic.Int64
			var readerWG sync.WaitGroup
			readerWG.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					checkConsistent(t, uri)
					reads.Add(1)
					time.Sleep(20 * time.Millisecond)
				}
			})
			var wg sync.WaitGroup
			for w := range writers {
				wg.Go(func() {
					cmd := exec.Command(os.Args[0], "-test.run=^$")
					cmd.Env = append(os.Environ(), envWriterURI+"="+uri, envWriterID+"="+strconv.Itoa(w),
						envAppends+"="+strconv.Itoa(appends))
					if out, err := cmd.CombinedOutput(); err != nil {
						t.Errorf("writer %d: %v\n%s", w, err, out)
					}
				})
			}
			wg.Wait()
			close(stop)
			readerWG.Wait()
			versions, err := table.Versions(ctx, uri)
			if err != nil {
				t.Fatal(err)
			}
			if want := seq(1, writers*appends+1); !slices.Equal(versions, want) {
				t.Fatalf("%d versions %v…, want 1…%d contiguous", len(versions), versions[:min(5, len(versions))], writers*appends+1)
			}
			final := open(t, uri)
			got := allIDs(t, final)
			want := []int64{-1}
			for w := range writers {
				for j := range appends {
					for k := range rowsPerAppend {
						want = append(want, writerID(w, j, k))
					}
				}
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("final version has %d rows, want %d (each appended row exactly once)", len(got), len(want))
			}
			t.Logf("%d consistent reads during the appends", reads.Load())
		})
	}
}

// checkConsistent opens the latest version and checks that it is whole: its
// row count matches its version and its newest rows read back.
func checkConsistent(t *testing.T, uri string) {
	tb, err := table.Open(context.Background(), uri)
	if err != nil {
		t.Errorf("reader: %v", err)
		return
	}
	defer tb.Close()
	v, _ := strconv.ParseInt(tb.Version(), 10, 64)
	if want := 1 + (v-1)*rowsPerAppend; tb.NumRows() != want {
		t.Errorf("reader: version %d has %d rows, want %d", v, tb.NumRows(), want)
		return
	}
	r, err := tb.NewReader(table.ReaderOptions{})
	if err != nil {
		t.Error(err)
		return
	}
	defer r.Close()
	last := uint64(tb.NumRows() - 1)
	rec, err := r.Read(context.Background(), []uint64{last, 0})
	if err != nil {
		t.Errorf("reader at version %d: %v", v, err)
		return
	}
	rec.Release()
}

// TestKilledWriter kills a writer process in the middle of its appends, and
// leaves data files that no manifest names: the table stays readable at its
// last committed version, and Cleanup removes the orphans.
func TestKilledWriter(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "tbl")
	uri := "file://" + dir
	tb, err := table.Create(ctx, uri, tabletest.Reader(-1, 1), table.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tb.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envWriterURI+"="+uri, envWriterID+"=0", envAppends+"=-1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		vs, err := table.Versions(ctx, uri)
		if err == nil && len(vs) >= 6 {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatal("writer made no progress")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cmd.Process.Kill()
	cmd.Wait()
	// And a writer that died between its data and its manifest.
	if err := table.WriteOrphan(ctx, uri, tabletest.Reader(1e9, 5)); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "_tmp", "00000000000000999999.json-1"), []byte("{partial"), 0o644)

	latest := open(t, uri)
	v, _ := strconv.ParseInt(latest.Version(), 10, 64)
	got := allIDs(t, latest)
	want := []int64{-1}
	for j := range int(v - 1) {
		for k := range rowsPerAppend {
			want = append(want, writerID(0, j, k))
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("version %d after the kill: %d rows, want %d", v, len(got), len(want))
	}
	// The table takes appends again.
	nv, err := table.Append(ctx, uri, tabletest.Reader(5e8, 2), table.WriteOptions{})
	if err != nil || nv != v+1 {
		t.Fatalf("append after the kill: version %d, %v (want %d)", nv, err, v+1)
	}
	res, err := table.Cleanup(ctx, uri, table.CleanupOptions{KeepLast: 2, Grace: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.DeletedVersions) != int(nv-2) {
		t.Errorf("deleted versions %v, want 1…%d", res.DeletedVersions, nv-2)
	}
	// The orphan data file (plus perhaps one the killed writer left) and the temporary manifest.
	if len(res.DeletedFiles) < 2 {
		t.Errorf("deleted files %v, want the orphans", res.DeletedFiles)
	}
	for _, f := range res.DeletedFiles {
		if filepath.Base(f) == filepath.Base(latest.Files()[0].Key) {
			t.Errorf("cleanup deleted %s, which kept versions use", f)
		}
	}
	if vs, _ := table.Versions(ctx, uri); !slices.Equal(vs, []int64{nv - 1, nv}) {
		t.Errorf("versions after cleanup %v", vs)
	}
	_, err = table.OpenVersion(ctx, uri, 1)
	wantErr(t, err, errcode.NotFound, "version 1 does not exist")
	after := open(t, uri)
	if got := allIDs(t, after); len(got) != len(want)+2 {
		t.Errorf("latest after cleanup: %d rows, want %d", len(got), len(want)+2)
	}
	_, err = table.Cleanup(ctx, uri, table.CleanupOptions{KeepLast: 0})
	wantErr(t, err, errcode.InvalidArgument, "keep_last")
}

func TestPinnedParquetOnS3(t *testing.T) {
	ctx := context.Background()
	s := startS3(t)
	uri := s.URI("bkt", "plain")
	loc := mustLoc(t, uri)
	for i, n := range []int64{100, 100} {
		if err := loc.WriteAll(ctx, fmt.Sprintf("plain/part-%d.parquet", i), tabletest.Encode(t, int64(i)*100, n, 50), store.WriterOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	tb := open(t, uri)
	if tb.Kind() != table.KindParquet || tb.Version()[0] != 'p' {
		t.Fatalf("kind %s version %s", tb.Kind(), tb.Version())
	}
	checkRowsOf(t, tb, []uint64{150, 3})
	r, err := tb.NewReader(table.ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// Overwrite part-1 with other rows.
	if err := loc.WriteAll(ctx, "plain/part-1.parquet", tabletest.Encode(t, 1000, 90, 50), store.WriterOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = r.Read(ctx, []uint64{150})
	wantErr(t, err, errcode.Changed, "s3://bkt/plain/part-1.parquet", "changed")
	if err := loc.Delete(ctx, "plain/part-1.parquet"); err != nil {
		t.Fatal(err)
	}
	_, err = r.Read(ctx, []uint64{199})
	wantErr(t, err, errcode.Changed, "s3://bkt/plain/part-1.parquet", "vanished")
}

// TestReopenReadsNoFooter opens a 2,000-file dataset twice with a catalog:
// the second open reads no footer from the store.
func TestReopenReadsNoFooter(t *testing.T) {
	const files = 2000
	ctx := context.Background()
	s := startS3(t)
	uri := s.URI("bkt", "many")
	data := tabletest.Encode(t, 0, 1, 1)
	for i := range files {
		if err := s.Put("bkt", fmt.Sprintf("many/f%05d.parquet", i), data); err != nil {
			t.Fatal(err)
		}
	}
	cat := catalog.Open(catalog.Options{Path: filepath.Join(t.TempDir(), "catalog.db")})
	s.ResetCounts()
	first, err := table.OpenWith(ctx, uri, table.OpenOptions{Catalog: cat})
	if err != nil {
		t.Fatal(err)
	}
	first.Close()
	if n := s.Count("GET", ".parquet"); n < files {
		t.Fatalf("first open made %d GETs of .parquet objects, want ≥ %d footer reads", n, files)
	}
	s.ResetCounts()
	second, err := table.OpenWith(ctx, uri, table.OpenOptions{Catalog: cat})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if n := s.Count("GET", ".parquet"); n != 0 {
		t.Fatalf("second open read %d footers from the store, want 0", n)
	}
	if second.NumRows() != files || second.Version() != first.Version() {
		t.Fatalf("second open: %d rows, version %s vs %s", second.NumRows(), second.Version(), first.Version())
	}
	t.Logf("second open: %d requests (listing and HEADs), no footer read", s.Requests())
	// Reads of the reopened pin use cached footers too: only data ranges.
	s.ResetCounts()
	checkRowsOf(t, second, []uint64{0})
	if n := s.Count("GET", ".parquet"); n > 6 { // one range per leaf column
		t.Errorf("reading one row made %d GETs", n)
	}
}

// TestPinnedOpenOverlapsRequests reopens a plain dataset from its pin on a
// store with 20 ms to the first byte, as a permutation opens the table it
// orders. Verify reads each footer while it stats the file; first uses of a
// footer asked for at once share one read; and a batch that needs many row
// groups has their requests in flight together, not a round trip for every
// core's worth of them.
func TestPinnedOpenOverlapsRequests(t *testing.T) {
	const files, groups = 4, 8 // row groups per file
	ctx := context.Background()
	s := startS3(t)
	uri := putPlain(t, s, files, groups)
	pin := open(t, uri).Pin()
	s.SetFaults(s3test.Faults{FirstByte: 20 * time.Millisecond})

	// Concurrent first uses of each footer: one read each.
	tb, err := table.OpenPin(ctx, pin)
	if err != nil {
		t.Fatal(err)
	}
	s.ResetCounts()
	var wg sync.WaitGroup
	for i := range 8 * files {
		wg.Go(func() {
			if _, err := tb.Footer(ctx, i%files); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := s.Count("GET", ".parquet"); n != files {
		t.Errorf("%d concurrent first uses of %d footers made %d reads, want %d", 8*files, files, n, files)
	}
	tb.Close()

	// Verify: a stat and a footer read per file, all at once.
	tb, err = table.OpenPin(ctx, pin)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	s.ResetCounts()
	if err := tb.Verify(ctx); err != nil {
		t.Fatal(err)
	}
	if h, g, p := s.Count("HEAD", ".parquet"), s.Count("GET", ".parquet"), s.PeakInFlight(); h != files || g != files || p < files+1 {
		t.Errorf("Verify made %d stats and %d reads, at most %d at once; want %d, %d, more than %d", h, g, p, files, files, files)
	}

	// A batch of one row from every row group: their reads overlap.
	r, err := tb.NewReader(table.ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ids := rowOfEachGroup(files * groups)
	s.ResetCounts()
	rec, err := r.Read(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	if rec.NumRows() != int64(len(ids)) {
		t.Fatalf("%d rows, want %d", rec.NumRows(), len(ids))
	}
	// A request per row group: the offset indexes came with the footers.
	if n, p := s.Count("GET", ".parquet"), s.PeakInFlight(); n != files*groups || p < 8 {
		t.Errorf("reading %d row groups made %d requests, at most %d at once; want %d, at least 8", files*groups, n, p, files*groups)
	}
}

// TestFetchShareTakenOnAnswer reads a row of each of 32 row groups on a store
// 20 ms from its first byte, with a fetch share that holds one or two of
// them: the requests of many row groups wait for their first byte together,
// for the share is taken only once the store answers, yet the bytes
// fetched and held never pass it.
func TestFetchShareTakenOnAnswer(t *testing.T) {
	const files, groups = 4, 8 // row groups per file
	ctx := context.Background()
	s := startS3(t)
	uri := putPlain(t, s, files, groups)
	tb := open(t, uri)
	defer tb.Close()
	var most int64 // the bytes of the largest row group
	for f := range files {
		md, err := tb.Footer(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		for g := range md.NumRowGroups() {
			var n int64
			for c := range md.RowGroup(g).NumColumns() {
				col, err := md.RowGroup(g).ColumnChunk(c)
				if err != nil {
					t.Fatal(err)
				}
				n += col.TotalCompressedSize()
			}
			most = max(most, n)
		}
	}
	share := most * 3 / 2
	r, err := tb.NewReader(table.ReaderOptions{FetchBytes: share, Decoders: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ids := rowOfEachGroup(files * groups)
	s.SetFaults(s3test.Faults{FirstByte: 20 * time.Millisecond})
	s.ResetCounts()
	rec, err := r.Read(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	checkIDs(t, rec, ids)
	if p := s.PeakInFlight(); p < 8 {
		t.Errorf("%d requests at most in flight at once, want at least 8: the share was taken before the store answered", p)
	}
	if st := r.Stats(); st.FetchedPeak > share || st.FetchedBytes != 0 {
		t.Errorf("%d bytes fetched held at most, %d at the end; want at most the share %d, and 0", st.FetchedPeak, st.FetchedBytes, share)
	}
}

// putPlain puts a plain dataset of files Parquet files of groups row groups
// of 10 rows each (ids from 0, in order) on s, and returns its URI.
func putPlain(t *testing.T, s *s3test.Server, files, groups int64) string {
	t.Helper()
	for i := range files {
		if err := s.Put("bkt", fmt.Sprintf("plain/part-%d.parquet", i), tabletest.Encode(t, i*groups*10, groups*10, 10)); err != nil {
			t.Fatal(err)
		}
	}
	return s.URI("bkt", "plain")
}

// rowOfEachGroup returns one row id of each of the first groups row groups
// of 10 rows (putPlain's), a different row of each of ten in a row.
func rowOfEachGroup(groups uint64) []uint64 {
	var ids []uint64
	for g := range groups {
		ids = append(ids, g*10+g%10)
	}
	return ids
}

// TestCanceledFooterReadIsRetried cancels the caller whose first use of a
// footer started the read that another caller waits on: that one gets the
// footer, from a read of its own.
func TestCanceledFooterReadIsRetried(t *testing.T) {
	ctx := context.Background()
	s := startS3(t)
	uri := s.URI("bkt", "plain")
	if err := s.Put("bkt", "plain/part-0.parquet", tabletest.Encode(t, 0, 100, 10)); err != nil {
		t.Fatal(err)
	}
	pin := open(t, uri).Pin()
	tb, err := table.OpenPin(ctx, pin)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	s.SetFaults(s3test.Faults{FirstByte: 200 * time.Millisecond})
	s.ResetCounts()
	first, cancel := context.WithCancel(ctx)
	canceled := make(chan error, 1)
	go func() {
		_, err := tb.Footer(first, 0)
		canceled <- err
	}()
	for s.Count("GET", ".parquet") == 0 { // the first caller's read is on its way
		time.Sleep(time.Millisecond)
	}
	go func() {
		time.Sleep(20 * time.Millisecond) // the second caller waits on it
		cancel()
	}()
	md, err := tb.Footer(ctx, 0)
	if err != nil || md.NumRows != 100 {
		t.Fatalf("the caller left waiting: %v", err)
	}
	if err := <-canceled; errcode.Of(err) != errcode.Canceled {
		t.Errorf("the canceled caller: %v, want Canceled", err)
	}
	if n := s.Count("GET", ".parquet"); n != 2 {
		t.Errorf("%d footer reads, want 2 (the canceled one, and its retry)", n)
	}
}

func TestCatalogCachesManifests(t *testing.T) {
	ctx := context.Background()
	s := startS3(t)
	uri := s.URI("bkt", "cached")
	cat := catalog.Open(catalog.Options{Path: filepath.Join(t.TempDir(), "catalog.db")})
	tb, err := table.Create(ctx, uri, tabletest.Reader(0, 5), table.WriteOptions{Catalog: cat})
	if err != nil {
		t.Fatal(err)
	}
	tb.Close()
	for range 2 {
		if _, err := table.OpenWith(ctx, uri, table.OpenOptions{Catalog: cat}); err != nil {
			t.Fatal(err)
		}
	}
	s.ResetCounts()
	tb, err = table.OpenWith(ctx, uri, table.OpenOptions{Catalog: cat})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	if n := s.Count("GET", ".json"); n != 0 {
		t.Errorf("cached open read the manifest %d times", n)
	}
	checkRowsOf(t, tb, []uint64{4})
}

func mustLoc(t *testing.T, uri string) *store.Location {
	t.Helper()
	loc, err := store.Open(context.Background(), uri)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { loc.Close() })
	return loc
}

// TestAppendLostCommitResponse loses the answer to the conditional create
// that commits an append, after the store made the manifest: the append
// finds its own manifest there and reports that version, instead of
// taking the loss for a lost race and committing its rows a second time.
func TestAppendLostCommitResponse(t *testing.T) {
	ctx := context.Background()
	s := startS3(t)
	uri := s.URI("bkt", "lost")
	tb, err := table.Create(ctx, uri, tabletest.Reader(0, 10), table.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	var puts atomic.Int64
	s.SetFaults(s3test.Faults{Rate: 1, Kinds: []s3test.Kind{s3test.LostResponse},
		Match: func(r *http.Request) bool {
			return r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/_versions/00000000000000000002.json") &&
				puts.Add(1) == 1
		}})
	v, err := tb.Append(ctx, tabletest.Reader(10, 5), table.WriteOptions{})
	if err != nil || v != 2 {
		t.Fatalf("append = %d, %v; want version 2", v, err)
	}
	if n := s.Injected()[s3test.LostResponse]; n != 1 {
		t.Fatalf("%d responses lost, want 1", n)
	}
	if vs, err := table.Versions(ctx, uri); err != nil || !slices.Equal(vs, []int64{1, 2}) {
		t.Fatalf("versions = %v, %v; want [1 2]", vs, err)
	}
	t2, err := table.Open(ctx, uri)
	if err != nil {
		t.Fatal(err)
	}
	defer t2.Close()
	if got := allIDs(t, t2); !slices.Equal(got, seq(0, 15)) {
		t.Fatalf("rows = %v, want 0…14 once each", got)
	}
}

// TestRemoteReadsMergeNearbyPages reads a few rows of one row group, their
// pages a few KiB apart: from local files each section is its own read, on
// a remote store sections closer than a request's worth of bytes share one.
func TestRemoteReadsMergeNearbyPages(t *testing.T) {
	ctx := context.Background()
	s := startS3(t)
	requests := map[string]int64{}
	for name, uri := range map[string]string{"file": "file://" + t.TempDir(), "s3": s.URI("bkt", "pages")} {
		tb, err := table.Create(ctx, uri, tabletest.Reader(0, 20000), table.WriteOptions{RowGroupRows: 20000, PageBytes: 1 << 10})
		if err != nil {
			t.Fatal(err)
		}
		tb.Close()
		tb = open(t, uri)
		r, err := tb.NewReader(table.ReaderOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ids := []uint64{5, 3000, 6000, 9000, 12000}
		rec, err := r.Read(ctx, ids)
		if err != nil {
			t.Fatal(err)
		}
		if got := rec.Column(0).(*array.Int64).Int64Values(); !slices.Equal(got, []int64{5, 3000, 6000, 9000, 12000}) {
			t.Fatalf("%s: read ids %v", name, got)
		}
		rec.Release()
		requests[name] = r.Stats().Requests
		r.Close()
		tb.Close()
	}
	t.Logf("requests: %v", requests)
	if requests["s3"] >= requests["file"] {
		t.Errorf("S3 made %d requests, local files %d: nearby pages were not merged", requests["s3"], requests["file"])
	}
}

// TestKeepReadsFootersTogether keeps one row of each of 8 files whose
// footers are not read yet, with a budget (each piece's admission needs its
// footer), on a store 20 ms from the first byte: the footers are read at
// once, not one round trip per piece.
func TestKeepReadsFootersTogether(t *testing.T) {
	const files = 8
	ctx := context.Background()
	s := startS3(t)
	uri := s.URI("bkt", "appended")
	for i := range int64(files) {
		var err error
		if i == 0 {
			var tb *table.Table
			tb, err = table.Create(ctx, uri, tabletest.Reader(0, 50), table.WriteOptions{})
			if err == nil {
				tb.Close()
			}
		} else {
			_, err = table.Append(ctx, uri, tabletest.Reader(i*50, 50), table.WriteOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	tb := open(t, uri)
	defer tb.Close()
	r, err := tb.NewReader(table.ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	s.SetFaults(s3test.Faults{FirstByte: 20 * time.Millisecond})
	s.ResetCounts()
	var ids []uint64
	for i := range uint64(files) {
		ids = append(ids, i*50+7)
	}
	k, err := r.Keep(ctx, ids, table.NewBudget(64<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	if err := k.Built(ctx); err != nil {
		t.Fatal(err)
	}
	if p := s.PeakInFlight(); p < files {
		t.Errorf("at most %d requests at once, want the %d footers' together", p, files)
	}
}

// TestLargeRowGroupStreamedWithinFetchShare reads rows of a plain Parquet
// row group without an offset index whose column chunks are far larger than
// the reader's fetch share: no request asks for more than a decoder's part
// of the share, and the rows are right, the first time (the chunks are read
// whole, a window at a time, and their pages located) and the next (only
// their pages).
func TestLargeRowGroupStreamedWithinFetchShare(t *testing.T) {
	const rows, share = 100_000, 256 << 10
	ctx := context.Background()
	s := startS3(t)
	rec := tabletest.Record(0, rows)
	data := tabletest.EncodeRecord(t, rec, parquet.WithMaxRowGroupLength(rows), parquet.WithDataPageSize(32<<10))
	rec.Release()
	if err := s.Put("bkt", "plain/part-0.parquet", data); err != nil {
		t.Fatal(err)
	}
	tb := open(t, s.URI("bkt", "plain"))
	defer tb.Close()
	const decoders = 2
	r, err := tb.NewReader(table.ReaderOptions{FetchBytes: share, Decoders: decoders})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, ids := range [][]uint64{{5, 50_000, 99_990}, {7, 60_000}} {
		s.ResetCounts()
		got, err := r.Read(ctx, ids)
		if err != nil {
			t.Fatal(err)
		}
		for i, id := range ids {
			if v := got.Column(0).(*array.Int64).Value(i); v != int64(id) {
				t.Errorf("row %d: id %d", id, v)
			}
			if v := got.Column(3).(*array.String).Value(i); v != tabletest.Text(int64(id)) {
				t.Errorf("row %d: text %q", id, v)
			}
		}
		got.Release()
		if l := s.LargestResponse(); l > share/decoders {
			t.Errorf("reading rows %v: a request of %d bytes, more than a decoder's part of the fetch share %d (the file is %d bytes)", ids, l, share, len(data))
		}
		t.Logf("rows %v: %d requests, %d bytes", ids, s.Requests(), s.BytesServed())
	}
}

// TestStreamedRowGroupReadOnce reads every row of a croupier table's row
// group far larger than the reader's fetch share: its page CRCs are checked
// as the pages stream by, so the bytes served are about the row group's,
// not twice them (a read of their own to check the CRCs first).
func TestStreamedRowGroupReadOnce(t *testing.T) {
	const rows, share = 40_000, 64 << 10
	s := startS3(t)
	group, got := readWholeGroup(t, s, rows, table.ReaderOptions{FetchBytes: share}, 0)
	defer got.Release()
	if v := got.Column(0).(*array.Int64).Value(rows - 1); v != rows-1 {
		t.Fatalf("last row: id %d", v)
	}
	if served := s.BytesServed(); group < 4*share || served > group*5/4 {
		t.Fatalf("a row group of %d bytes (the fetch share is %d) read as %d bytes in %d requests", group, share, served, s.Requests())
	}
	t.Logf("a row group of %d bytes read as %d bytes in %d requests", group, s.BytesServed(), s.Requests())
}

// readWholeGroup writes rows rows as a croupier table of one row group on
// s, has s wait delay before each request from then on, and reads every row
// through a reader with opts, s counting the read's requests alone. It
// returns the row group's compressed bytes and the rows read.
func readWholeGroup(t *testing.T, s *s3test.Server, rows int, opts table.ReaderOptions, delay time.Duration) (int64, arrow.RecordBatch) {
	t.Helper()
	ctx := context.Background()
	tb, err := table.Create(ctx, s.URI("bkt", "big"), tabletest.Reader(0, int64(rows)), table.WriteOptions{RowGroupRows: int64(rows)})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	s.SetFaults(s3test.Faults{FirstByte: delay})
	md, err := tb.Footer(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	r, err := tb.NewReader(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ids := make([]uint64, rows)
	for i := range ids {
		ids[i] = uint64(i)
	}
	s.ResetCounts()
	got, err := r.Read(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	return md.RowGroup(0).TotalCompressedSize(), got
}

// TestStreamedSectionsReadInWindows reads a few rows spread over a croupier
// table's row group far larger than the reader's fetch share, so that it
// streams the hundreds of sections of pages that hold them: they are read a
// window of the share at a time, not in a request each, one after the other
// (a round trip apiece on a distant store).
func TestStreamedSectionsReadInWindows(t *testing.T) {
	const rows, share, decoders = 40_000, 256 << 10, 2
	ctx := context.Background()
	s := startS3(t)
	uri := s.URI("bkt", "big")
	tb, err := table.Create(ctx, uri, tabletest.Reader(0, rows), table.WriteOptions{RowGroupRows: rows, PageBytes: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	r, err := tb.NewReader(table.ReaderOptions{FetchBytes: share, Decoders: decoders})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var ids []uint64
	for id := uint64(3); id < rows; id += 1511 {
		ids = append(ids, id)
	}
	s.ResetCounts()
	got, err := r.Read(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Release()
	checkIDsAndText(t, got, ids, 3)
	// A window is half a decoder's part of the share; ranges end where the
	// holes between sections are too long to read through.
	window := int64(share / decoders / 2)
	if n, served := s.Requests(), s.BytesServed(); n*window/4 > served {
		t.Fatalf("%d rows read in %d requests of %d bytes on average; want windows of about %d", len(ids), n, served/n, window)
	}
	t.Logf("%d rows: %d requests, %d bytes", len(ids), s.Requests(), s.BytesServed())
}

// TestStreamedWindowsFetchedAhead reads every row of a croupier table's row
// group far larger than the reader's fetch share from a store 50 ms away:
// its windows are fetched ahead of the decoder, several at once, not one
// round trip after the other, and the requests of more windows than the
// share holds (4 of 64 KiB) wait for their first byte together, their bytes
// taken once they are answered; the rows are right and each byte is fetched
// once.
func TestStreamedWindowsFetchedAhead(t *testing.T) {
	const rows, share = 40_000, 256 << 10
	s := startS3(t)
	group, got := readWholeGroup(t, s, rows, table.ReaderOptions{FetchBytes: share, Decoders: 1}, 50*time.Millisecond)
	defer got.Release()
	ids := make([]uint64, rows)
	for i := range ids {
		ids[i] = uint64(i)
	}
	checkIDsAndText(t, got, ids, 3)
	if group < 4*share {
		t.Fatalf("a row group of %d bytes is not streamed with a fetch share of %d", group, share)
	}
	if peak, served := s.PeakInFlight(), s.BytesServed(); peak < 8 || served > group*5/4 {
		t.Fatalf("a row group of %d bytes streamed as %d bytes in %d requests, at most %d at once", group, served, s.Requests(), peak)
	}
	t.Logf("a row group of %d bytes streamed in %d requests, %d at once", group, s.Requests(), s.PeakInFlight())
}

// TestHolesGrowWithLatency reads the same rows spread over a row group in
// small pages from a store that answers at once and from one 60 ms away: far
// away, sections of pages with longer holes between them are merged into one
// request, since a hole costs less than a round trip there.
func TestHolesGrowWithLatency(t *testing.T) {
	s, uri, ids := spreadRows(t)
	near, _ := readSpread(t, s, uri, ids, 0, table.ReaderOptions{Columns: []string{"id"}})
	far, _ := readSpread(t, s, uri, ids, 60*time.Millisecond, table.ReaderOptions{Columns: []string{"id"}})
	if far >= near {
		t.Fatalf("%d requests 60 ms away, %d at 0 ms; want fewer far away", far, near)
	}
}

// TestHolesWithinFetchShare reads the same rows spread over a row group in
// small pages from a store 60 ms away, through a reader whose fetch share
// is large and one whose share is small: the small share reads no hole
// longer than a small part of it, so it asks for fewer bytes in more
// requests.
func TestHolesWithinFetchShare(t *testing.T) {
	s, uri, ids := spreadRows(t)
	const delay = 60 * time.Millisecond
	wideRequests, wideBytes := readSpread(t, s, uri, ids, delay, table.ReaderOptions{Columns: []string{"id"}, FetchBytes: 64 << 20, Decoders: 1})
	// A hole of at most 2 MiB ÷ 32 = 64 KiB: shorter than those between the
	// pages kept.
	narrowRequests, narrowBytes := readSpread(t, s, uri, ids, delay, table.ReaderOptions{Columns: []string{"id"}, FetchBytes: 2 << 20, Decoders: 1})
	if narrowRequests <= wideRequests || narrowBytes*2 > wideBytes {
		t.Fatalf("a small fetch share read %d bytes in %d requests, a large one %d in %d; want fewer bytes in more requests",
			narrowBytes, narrowRequests, wideBytes, wideRequests)
	}
}

// spreadRows writes a croupier table of one row group of 100,000 rows in
// pages of 4 KiB on a test server, and returns ids spread over it whose
// pages lie 100-130 KB apart: holes longer than the 64 KiB read on a store
// nearby, shorter than what 60 ms is worth.
func spreadRows(t *testing.T) (*s3test.Server, string, []uint64) {
	t.Helper()
	const rows = 100_000
	s := startS3(t)
	uri := s.URI("bkt", "holes")
	tb, err := table.Create(context.Background(), uri, tabletest.Reader(0, rows), table.WriteOptions{RowGroupRows: rows, PageBytes: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	tb.Close()
	var ids []uint64
	for id := uint64(5); id < rows; id += 30_001 {
		ids = append(ids, id)
	}
	return s, uri, ids
}

// readSpread reads ids of the table at uri on s, s waiting delay before
// each request, through a reader with opts, and returns the requests and
// bytes the read took.
func readSpread(t *testing.T, s *s3test.Server, uri string, ids []uint64, delay time.Duration, opts table.ReaderOptions) (requests, bytes int64) {
	t.Helper()
	ctx := context.Background()
	s.SetFaults(s3test.Faults{FirstByte: delay})
	tb := open(t, uri) // its open reads the footer: the latency is known from the first read on
	defer tb.Close()
	r, err := tb.NewReader(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	s.ResetCounts()
	got, err := r.Read(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Release()
	checkIDs(t, got, ids)
	t.Logf("%v away, %+v: %d rows in %d requests of %d bytes", delay, opts, len(ids), s.Requests(), s.BytesServed())
	return s.Requests(), s.BytesServed()
}

// checkIDs checks that rec's rows are those of ids, in order, by their id
// (column 0).
func checkIDs(t *testing.T, rec arrow.RecordBatch, ids []uint64) {
	t.Helper()
	for i, id := range ids {
		if v := rec.Column(0).(*array.Int64).Value(i); v != int64(id) {
			t.Fatalf("row %d: id %d", id, v)
		}
	}
}

// checkIDsAndText checks that rec's rows are those of ids, in order: their
// id (column 0) and their text (column text).
func checkIDsAndText(t *testing.T, rec arrow.RecordBatch, ids []uint64, text int) {
	t.Helper()
	checkIDs(t, rec, ids)
	for i, id := range ids {
		if v := rec.Column(text).(*array.String).Value(i); v != tabletest.Text(int64(id)) {
			t.Fatalf("row %d: text %q", id, v)
		}
	}
}

// TestStreamedPlainChunkLearntOnce reads a few rows of a plain Parquet row
// group without an offset index, far larger than the reader's fetch share,
// on a remote store: the chunk streams by in windows once, and the page
// locations it learns are what the decode read, not read again a page
// header at a time (a request each, one after the other, once the windows
// were freed); a read of other rows of the group then fetches their pages
// alone.
func TestStreamedPlainChunkLearntOnce(t *testing.T) {
	const rows, share = 60_000, 256 << 10
	ctx := context.Background()
	s := startS3(t)
	rec := tabletest.Record(0, rows)
	data := tabletest.EncodeRecord(t, rec, parquet.WithMaxRowGroupLength(rows), parquet.WithDataPageSize(32<<10),
		parquet.WithDictionaryDefault(false))
	rec.Release()
	if err := s.Put("bkt", "plain/part-0.parquet", data); err != nil {
		t.Fatal(err)
	}
	tb := open(t, s.URI("bkt", "plain"))
	r, err := tb.NewReader(table.ReaderOptions{Columns: []string{"id", "text"}, FetchBytes: share, Decoders: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	read := func(ids ...uint64) (requests, served int64) {
		s.ResetCounts()
		got, err := r.Read(ctx, ids)
		if err != nil {
			t.Fatal(err)
		}
		defer got.Release()
		checkIDsAndText(t, got, ids, 1)
		return s.Requests(), s.BytesServed()
	}
	md, err := tb.Footer(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	var chunks int64 // the bytes of the two columns' chunks
	for leaf := range md.Schema.NumColumns() {
		if p := md.Schema.Column(leaf).Path(); p == "id" || p == "text" {
			col, err := md.RowGroup(0).ColumnChunk(leaf)
			if err != nil {
				t.Fatal(err)
			}
			chunks += col.TotalCompressedSize()
		}
	}
	window := max(int64(share/8), 64<<10) // an eighth of the decoder's part of the share, at least 64 KiB
	n, served := read(17, 29_000, 59_990)
	if chunks < 4*share || served < chunks/2 {
		t.Fatalf("a first read of rows of chunks of %d bytes not located (the fetch share is %d) served %d bytes; want them streamed",
			chunks, share, served)
	}
	if n > served/window+8 {
		t.Fatalf("a chunk streamed as %d bytes in %d requests, more than its windows of %d bytes (%d) and a few", served, n, window, served/window)
	}
	n, served = read(4_001, 32_345, 59_999)
	if served >= chunks/4 {
		t.Fatalf("a read of rows of chunks of %d bytes located by the read before served %d bytes in %d requests; want their pages alone",
			chunks, served, n)
	}
}
