package table

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"

	"github.com/croupier-data/croupier/core/catalog"
	"github.com/croupier-data/croupier/core/cmem"
	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/internal/seedtest"
	"github.com/croupier-data/croupier/internal/tabletest"
)

// TestPageReadsMatchRows keeps random row sets of random columns of every
// type (nullable and not, null, empty and long lists, null elements,
// strings, nested types the page decoder leaves to pqarrow), written in
// pages of a few rows with and without an offset index, PLAIN and
// dictionary-encoded, V1 and V2 pages, and checks every row read against
// the rows written: page-level reads (where an offset index or locations
// learned from an earlier read allow them) and whole row groups deliver the
// same values. Nothing stays allocated.
func TestPageReadsMatchRows(t *testing.T) {
	fields := append(slices.Clone(fastFields), []arrow.Field{ // and some pqarrow decodes
		{Name: "i16", Type: arrow.PrimitiveTypes.Int16, Nullable: true},
		{Name: "ts", Type: arrow.FixedWidthTypes.Timestamp_us},
		{Name: "bool", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
		{Name: "lists", Type: arrow.ListOf(arrow.BinaryTypes.String), Nullable: true},
		{Name: "st", Type: arrow.StructOf(
			arrow.Field{Name: "x", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
			arrow.Field{Name: "y", Type: arrow.BinaryTypes.String},
		), Nullable: true},
	}...)
	schema := arrow.NewSchema(fields, nil)
	seed := seedtest.Seed(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		props []parquet.WriterProperty
	}{
		{"index-v1-plain", []parquet.WriterProperty{parquet.WithPageIndexEnabled(true),
			parquet.WithDictionaryDefault(false), parquet.WithDataPageSize(64)}},
		{"index-v1-plain-lz4", []parquet.WriterProperty{parquet.WithPageIndexEnabled(true),
			parquet.WithDictionaryDefault(false), parquet.WithCompression(compress.Codecs.Lz4Raw),
			parquet.WithDataPageSize(96)}},
		{"index-v1-dict", []parquet.WriterProperty{parquet.WithPageIndexEnabled(true), parquet.WithDataPageSize(100)}},
		{"index-v2-plain-zstd", []parquet.WriterProperty{parquet.WithPageIndexEnabled(true),
			parquet.WithDataPageVersion(parquet.DataPageV2), parquet.WithDictionaryDefault(false),
			parquet.WithCompression(compress.Codecs.Zstd), parquet.WithDataPageSize(128)}},
		{"index-v2-dict-snappy", []parquet.WriterProperty{parquet.WithPageIndexEnabled(true),
			parquet.WithDataPageVersion(parquet.DataPageV2), parquet.WithCompression(compress.Codecs.Snappy),
			parquet.WithDataPageSize(80)}},
		{"no-index-plain", []parquet.WriterProperty{parquet.WithDictionaryDefault(false), parquet.WithDataPageSize(64)}},
		// V2 pages start at rows: their locations are learned once a chunk is read whole.
		{"no-index-v2-plain", []parquet.WriterProperty{parquet.WithDataPageVersion(parquet.DataPageV2),
			parquet.WithDictionaryDefault(false), parquet.WithDataPageSize(64)}},
		{"no-index-dict-zstd", []parquet.WriterProperty{parquet.WithCompression(compress.Codecs.Zstd),
			parquet.WithDataPageSize(100)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, uint64(len(tc.name))))
			b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
			defer b.Release()
			const n = 1200
			for range n {
				for i, f := range fields {
					appendRandom(rng, b.Field(i), f.Nullable)
				}
			}
			src := b.NewRecordBatch()
			defer src.Release()
			dir := t.TempDir()
			// Two files, so that row ids cross a file boundary.
			for i, part := range []arrow.RecordBatch{src.NewSlice(0, n/3), src.NewSlice(n/3, n)} {
				// The writer checks the page size every batch of values.
				props := append(tc.props, parquet.WithMaxRowGroupLength(250), parquet.WithBatchSize(8))
				data := tabletest.EncodeRecord(t, part, props...)
				part.Release()
				if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("part-%d.parquet", i)), data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			tb, err := Open(ctx, "file://"+dir)
			if err != nil {
				t.Fatal(err)
			}
			defer tb.Close()
			mem := memory.NewCheckedAllocator(cmem.New())
			defer mem.AssertSize(t, 0)
			for range 8 {
				readRandomly(t, rng, tb, mem, fields, src)
			}
		})
	}
}

// readRandomly keeps a random row set of a random projection of tb and
// checks the rows read against src, the rows written.
func readRandomly(t *testing.T, rng *rand.Rand, tb *Table, mem memory.Allocator, fields []arrow.Field, src arrow.RecordBatch) {
	t.Helper()
	ctx := context.Background()
	cols := rng.Perm(len(fields))[:1+rng.IntN(len(fields))]
	names := make([]string, len(cols))
	for i, c := range cols {
		names[i] = fields[c].Name
	}
	r, err := tb.NewReader(ReaderOptions{Columns: names, Allocator: mem})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ids := randomRows(rng, src.NumRows())
	k, err := r.Keep(ctx, ids, NewBudget(1<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	for from := 0; from < len(ids); {
		to := min(len(ids), from+1+rng.IntN(40))
		rec, err := k.Read(ctx, from, to)
		if err != nil {
			t.Fatalf("positions [%d, %d): %v", from, to, err)
		}
		defer rec.Release()
		for j, id := range ids[from:to] {
			for c, f := range cols {
				if !array.SliceEqual(rec.Column(c), int64(j), int64(j+1), src.Column(f), int64(id), int64(id+1)) {
					t.Fatalf("row %d, column %s: got %v, want %v", id, fields[f].Name,
						rec.Column(c).GetOneForMarshal(j), src.Column(f).GetOneForMarshal(int(id)))
				}
			}
		}
		from = to
	}
}

// randomRows returns ids of rows in [0, n): sparse rows, runs, whole row
// groups' worth and repeats, shuffled.
func randomRows(rng *rand.Rand, n int64) []uint64 {
	var ids []uint64
	switch rng.IntN(3) {
	case 0: // a few sparse rows
		for range 1 + rng.IntN(20) {
			ids = append(ids, uint64(rng.Int64N(n)))
		}
	case 1: // runs
		for range 1 + rng.IntN(4) {
			start := rng.Int64N(n)
			for id := start; id < min(n, start+1+rng.Int64N(300)); id++ {
				ids = append(ids, uint64(id))
			}
		}
	default: // a random fraction of every row
		p := rng.Float64()
		for id := range n {
			if rng.Float64() < p {
				ids = append(ids, uint64(id))
			}
		}
	}
	for range rng.IntN(5) { // repeats, of a random fraction that may be none
		if len(ids) > 0 {
			ids = append(ids, ids[rng.IntN(len(ids))])
		}
	}
	rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	return ids
}

// TestLearnedPages: once a column chunk of a file without an offset index
// has been decoded, a read of a few of its rows fetches their pages, not the
// chunk, decodes them alone and gets the right rows. A read of a chunk not
// located yet decodes it from its start up to the page that ends the last
// row it needs, and a later read goes on from there.
func TestLearnedPages(t *testing.T) {
	ctx := context.Background()
	dir, src := tokenFile(t, 1, 6000, parquet.WithMaxRowGroupLength(2000))
	tb, err := Open(ctx, "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	whole := firstChunkBytes(t, tb)
	read := func(ids ...uint64) int64 { return decodedFor(t, tb, src, ids) }
	// Decoded bytes are the pages' without their headers: most of the chunk.
	if n := read(5, 900, 1999); n < whole/2 {
		t.Fatalf("first sparse read of row group 0 decoded %d bytes, want its whole chunk (%d)", n, whole)
	}
	if n := read(7, 901, 1500); n >= whole/4 {
		t.Fatalf("second sparse read of row group 0 decoded %d bytes of a %d-byte chunk, want its pages", n, whole)
	}
	if n := read(2005, 3999); n < whole/2 {
		t.Fatalf("sparse read of row group 1, not decoded before, decoded %d bytes, want its whole chunk", n)
	}
	// Row group 2, not decoded yet, read from its start on.
	if n := read(4003, 4090); n >= whole/8 {
		t.Fatalf("read of rows 3 and 90 of row group 2 decoded %d bytes of a %d-byte chunk, want those of its first rows", n, whole)
	}
	if n := read(4095, 4900); n < whole/4 || n >= whole*3/4 {
		t.Fatalf("read of rows 95 and 900 of row group 2 decoded %d bytes of a %d-byte chunk, want those from row 90 to 900", n, whole)
	}
	if n := read(4004, 4601, 4899, 5999); n >= whole*3/4 {
		t.Fatalf("read of rows 4, 601, 899 and 1999 of row group 2 decoded %d bytes of a %d-byte chunk, want their pages and those from row 900 on", n, whole)
	}
	if n := read(4001, 4700, 5998); n >= whole/4 {
		t.Fatalf("read of rows 1, 700 and 1998 of row group 2, located by now, decoded %d bytes of a %d-byte chunk, want their pages", n, whole)
	}
}

// TestLearnedPagesCached: the page locations an open table learnt of a file
// without an offset index are in its catalog once it is closed, so that a
// table opened after it reads only the pages of its first rows; an entry
// that does not fit the chunk is a miss, not an error.
func TestLearnedPagesCached(t *testing.T) {
	ctx := context.Background()
	dir, src := tokenFile(t, 3, 2000)
	cat := catalog.Open(catalog.Options{Path: filepath.Join(t.TempDir(), "catalog.db")})
	read := func(ids ...uint64) (decoded, whole int64) { // in a table opened for it
		t.Helper()
		tb, err := OpenWith(ctx, "file://"+dir, OpenOptions{Catalog: cat})
		if err != nil {
			t.Fatal(err)
		}
		defer tb.Close()
		return decodedFor(t, tb, src, ids), firstChunkBytes(t, tb)
	}
	if n, whole := read(3, 1000, 1999); n < whole/2 {
		t.Fatalf("first read, nothing cached: decoded %d bytes of a %d-byte chunk, want most of it", n, whole)
	}
	if n, whole := read(4, 1001, 1998); n >= whole/4 {
		t.Fatalf("read by a table opened after: decoded %d bytes of a %d-byte chunk, want its pages", n, whole)
	}
	// Damage the cached entry of page locations: it is a miss.
	tb, err := OpenWith(ctx, "file://"+dir, OpenOptions{Catalog: cat})
	if err != nil {
		t.Fatal(err)
	}
	key := tb.pagesKey(pageKey{0, 0, 0})
	tb.Close()
	entry := cat.Get([]string{key})[0]
	if entry == nil {
		t.Fatal("no page locations cached")
	}
	entry[len(entry)-1] ^= 1
	cat.Put([]string{key}, [][]byte{entry})
	if n, whole := read(5, 1002, 1997); n < whole/2 {
		t.Fatalf("read with a damaged entry: decoded %d bytes of a %d-byte chunk, want most of it", n, whole)
	}
}

// tokenFile writes rows random lists of int32 token ids (rng seed seed) as
// the one file of a folder it returns, with the rows written, in V2 pages of
// about 256 bytes without dictionaries or an offset index, and props. V2
// pages start at rows; a V1 page may start inside a row, and such pages are
// not located (arrow-go cuts them so; Arrow C++ and pyarrow do not).
func tokenFile(t *testing.T, seed uint64, rows int, props ...parquet.WriterProperty) (string, arrow.RecordBatch) {
	t.Helper()
	schema := arrow.NewSchema([]arrow.Field{{Name: "tokens", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32)}}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	rng := rand.New(rand.NewPCG(seed, seed+1))
	for range rows {
		appendRandom(rng, b.Field(0), false)
	}
	src := b.NewRecordBatch()
	t.Cleanup(src.Release)
	dir := t.TempDir()
	data := tabletest.EncodeRecord(t, src, append([]parquet.WriterProperty{parquet.WithDictionaryDefault(false),
		parquet.WithDataPageSize(256), parquet.WithBatchSize(16), parquet.WithDataPageVersion(parquet.DataPageV2)}, props...)...)
	if err := os.WriteFile(filepath.Join(dir, "part.parquet"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, src
}

// firstChunkBytes is the uncompressed size of the first column chunk of tb.
func firstChunkBytes(t *testing.T, tb *Table) int64 {
	t.Helper()
	md, err := tb.Footer(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	chunk, err := md.RowGroup(0).ColumnChunk(0)
	if err != nil {
		t.Fatal(err)
	}
	return chunk.TotalUncompressedSize()
}

// decodedFor reads rows ids of tb's one column, checks them against src
// and returns the bytes of pages the read decoded.
func decodedFor(t *testing.T, tb *Table, src arrow.RecordBatch, ids []uint64) int64 {
	t.Helper()
	r, err := tb.NewReader(ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rec, err := r.Read(context.Background(), ids)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	for j, id := range ids {
		if !array.SliceEqual(rec.Column(0), int64(j), int64(j+1), src.Column(0), int64(id), int64(id+1)) {
			t.Fatalf("row %d: got %v", id, rec.Column(0).GetOneForMarshal(j))
		}
	}
	return r.Stats().DecodedBytes
}

// TestLearnedPagesCountEntries: a read that reaches a chunk's end through
// pages located by earlier reads checks the level entries of all its pages,
// those located included, against the chunk's metadata.
func TestLearnedPagesCountEntries(t *testing.T) {
	ctx := context.Background()
	dir, src := tokenFile(t, 5, 2000)
	tb, err := Open(ctx, "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	decodedFor(t, tb, src, []uint64{10, 500})
	v, _ := tb.pageIndex.m.Load(pageKey{0, 0, 0})
	learnt := v.(*pageLocs)
	if learnt == nil || !learnt.partial() || learnt.entries <= 0 {
		t.Fatalf("locations after a read of rows 10 and 500: %+v, want those of its first pages", learnt)
	}
	decodedFor(t, tb, src, []uint64{700, 1999}) // from the located pages on to the end: the counts add up
	off := *learnt
	off.entries--
	tb.pageIndex.m.Store(pageKey{0, 0, 0}, &off)
	r, err := tb.NewReader(ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.Read(ctx, []uint64{1500, 1999}); errcode.Of(err) != errcode.Corrupt || !strings.Contains(err.Error(), "level entries") {
		t.Fatalf("a tail read past located pages whose entries do not add up: %v, want Corrupt", err)
	}
}

// TestPageLimitWhateverRowsAreKept keeps rows of a file of lists without an
// offset index in V1 pages, whose pages are not located before they are
// read, one of whose lists decodes to more than the reader's PageBytes: the
// read is refused by the page's header (PageTooLarge) whether it keeps some
// rows of the row group or all of them in order (which read the chunk
// through arrow-go's page reader, and decoded the page).
func TestPageLimitWhateverRowsAreKept(t *testing.T) {
	ctx := context.Background()
	schema := arrow.NewSchema([]arrow.Field{{Name: "tokens", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32)}}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	const rows = 64
	for i := range rows {
		list := b.Field(0).(*array.ListBuilder)
		list.Append(true)
		n := 4
		if i == 10 {
			n = 4096
		}
		for j := range n {
			list.ValueBuilder().(*array.Int32Builder).Append(int32(j))
		}
	}
	src := b.NewRecordBatch()
	defer src.Release()
	dir := t.TempDir()
	data := tabletest.EncodeRecord(t, src, parquet.WithDictionaryDefault(false))
	if err := os.WriteFile(filepath.Join(dir, "part.parquet"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	tb, err := Open(ctx, "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	all := make([]uint64, rows)
	for i := range all {
		all[i] = uint64(i)
	}
	for name, ids := range map[string][]uint64{"some rows": {0, 1, 30}, "every row": all} {
		r, err := tb.NewReader(ReaderOptions{PageBytes: 8 << 10})
		if err != nil {
			t.Fatal(err)
		}
		k, err := r.Keep(ctx, ids, NewBudget(1<<20))
		if err != nil {
			t.Fatal(err)
		}
		rec, err := k.Read(ctx, 0, len(ids))
		k.Close()
		var big *PageTooLarge
		if !errors.As(err, &big) || big.Column != "tokens" || big.Bytes <= 16<<10 || big.Limit != 8<<10 {
			if rec != nil {
				rec.Release()
			}
			t.Errorf("%s: %v; want the page refused by its header, more than 8 KiB", name, err)
		}
	}
}

// dictionaryTable opens a plain file of one binary column "cell" whose row i
// is values[i % len(values)], rows rows in one row group of 1 KiB data pages
// written with props besides: its values go to the chunk's dictionary.
func dictionaryTable(t *testing.T, values [][]byte, rows int, props ...parquet.WriterProperty) *Table {
	t.Helper()
	schema := arrow.NewSchema([]arrow.Field{{Name: "cell", Type: arrow.BinaryTypes.Binary}}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	for i := range rows {
		b.Field(0).(*array.BinaryBuilder).Append(values[i%len(values)])
	}
	src := b.NewRecordBatch()
	defer src.Release()
	dir := t.TempDir()
	data := tabletest.EncodeRecord(t, src, append(props, parquet.WithDataPageSize(1<<10))...)
	if err := os.WriteFile(filepath.Join(dir, "part.parquet"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	tb, err := Open(context.Background(), "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tb.Close() })
	return tb
}

// TestLargeDictionaryCharged keeps a few rows of a plain file whose column
// chunk's dictionary page (64 values of 8 KiB) decodes to far more than its
// data pages (of a kilobyte): each piece is charged the dictionary whole
// when it is admitted, as every row of the group needs it, beside its rows.
func TestLargeDictionaryCharged(t *testing.T) {
	ctx := context.Background()
	const dictBytes = 64 * 8 << 10
	values := make([][]byte, 64)
	for i := range values {
		values[i] = bytes.Repeat([]byte{byte(i)}, 8<<10)
	}
	tb := dictionaryTable(t, values, 4096, parquet.WithDictionaryPageSizeLimit(1<<20))
	r, err := tb.NewReader(ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	budget := NewBudget(64 << 20)
	k, err := r.Keep(ctx, []uint64{5, 900, 3000}, budget)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	if err := k.Built(ctx); err != nil {
		t.Fatal(err)
	}
	if _, peak := budget.Used(); peak < dictBytes {
		t.Errorf("the piece was charged at most %d bytes; its dictionary decodes to %d", peak, dictBytes)
	}
}

// TestLargeDictionaryReadOnce keeps a few rows of a file whose column
// chunk's dictionary (64 values of 256 KiB, zstd) decodes to 16 MiB: the
// rows are right, the decoder reads the dictionary where the page reader
// decompressed it, and that page, mapped off Go's heap, is given back once
// the rows are kept. Beside the bytes fetched, Go's heap takes a small part
// of the dictionary (it had held it twice: the decompressed page, and the
// decoder's copy of it).
func TestLargeDictionaryReadOnce(t *testing.T) {
	ctx := context.Background()
	const dictBytes = 64 * 256 << 10
	rng := rand.New(rand.NewPCG(5, 6))
	values := make([][]byte, 64)
	for i := range values {
		values[i] = make([]byte, 256<<10)
		for j := range values[i] {
			values[i][j] = byte(rng.Uint32())
		}
	}
	tb := dictionaryTable(t, values, 256, parquet.WithDictionaryPageSizeLimit(64<<20), parquet.WithStats(false),
		parquet.WithCompression(compress.Codecs.Zstd))
	r, err := tb.NewReader(ReaderOptions{Allocator: cmem.New(), PageBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	ids := []uint64{3, 100, 200}
	if _, err := r.largePages(ctx, GroupRef{}); err != nil { // locates the pages first
		t.Fatal(err)
	}
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	k, err := r.Keep(ctx, ids, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	rec, err := k.Read(ctx, 0, len(ids))
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	runtime.ReadMemStats(&after)
	for i, id := range ids {
		if !bytes.Equal(rec.Column(0).(*array.Binary).Value(i), values[id%64]) {
			t.Fatalf("position %d: not row %d", i, id)
		}
	}
	// The fetched bytes are on Go's heap: the rest is the decoder's.
	fetched := r.Stats().BytesRead
	if heap := int64(after.TotalAlloc-before.TotalAlloc) - fetched; heap > dictBytes/2 {
		t.Errorf("keeping 3 rows allocated %d bytes on Go's heap beside the %d fetched; the dictionary decodes to %d", heap, fetched, dictBytes)
	}
	if n := hugePages.AllocatedBytes(); n != 0 {
		t.Errorf("%d bytes of pages still mapped once the rows are kept", n)
	}
}
