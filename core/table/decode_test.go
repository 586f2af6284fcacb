package table

import (
	"bytes"
	"context"
	"encoding/binary"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/apache/arrow-go/v18/parquet/schema"

	"github.com/croupier-data/croupier/core/cmem"
	"github.com/croupier-data/croupier/internal/seedtest"
	"github.com/croupier-data/croupier/internal/tabletest"
)

// fastFields are columns of every layout decodeColumn handles.
var fastFields = []arrow.Field{
	{Name: "i32", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
	{Name: "i64", Type: arrow.PrimitiveTypes.Int64},
	{Name: "f32", Type: arrow.PrimitiveTypes.Float32, Nullable: true},
	{Name: "f64", Type: arrow.PrimitiveTypes.Float64},
	{Name: "s", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "b", Type: arrow.BinaryTypes.Binary},
	{Name: "ls", Type: arrow.BinaryTypes.LargeString, Nullable: true},
	{Name: "lb", Type: arrow.BinaryTypes.LargeBinary},
	{Name: "l", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32), Nullable: true},
	{Name: "lnn", Type: arrow.ListOfNonNullable(arrow.PrimitiveTypes.Float32)},
	{Name: "l64", Type: arrow.ListOf(arrow.PrimitiveTypes.Int64)},
}

// TestDecodeColumnMatchesPqarrow decodes random columns of every layout
// decodeColumn handles, with and without nulls (rows, lists and elements),
// empty lists, PLAIN and dictionary encodings, V1 and V2 pages and many
// pages per chunk, and checks each against pqarrow's decoding; also from an
// allocator whose unzeroed buffers hold garbage (as cmem's reused mappings
// may), where the slots of nulls must still be zero.
func TestDecodeColumnMatchesPqarrow(t *testing.T) {
	fields := fastFields
	schema := arrow.NewSchema(fields, nil)
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		props []parquet.WriterProperty
	}{
		{"v1-dict", []parquet.WriterProperty{parquet.WithDataPageSize(256)}},
		{"v1-plain", []parquet.WriterProperty{parquet.WithDictionaryDefault(false), parquet.WithDataPageSize(512)}},
		{"v2-dict-zstd", []parquet.WriterProperty{parquet.WithDataPageVersion(parquet.DataPageV2),
			parquet.WithCompression(compress.Codecs.Zstd), parquet.WithDataPageSize(300)}},
		{"v2-plain-snappy", []parquet.WriterProperty{parquet.WithDataPageVersion(parquet.DataPageV2),
			parquet.WithDictionaryDefault(false), parquet.WithCompression(compress.Codecs.Snappy)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(3, uint64(len(tc.name))))
			b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
			defer b.Release()
			for range 700 {
				for i, f := range fields {
					appendRandom(rng, b.Field(i), f.Nullable)
				}
			}
			rec := b.NewRecordBatch()
			defer rec.Release()
			data := tabletest.EncodeRecord(t, rec, append(tc.props, parquet.WithMaxRowGroupLength(300))...)
			pf, err := file.NewParquetReader(bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
			if err != nil {
				t.Fatal(err)
			}
			checked := memory.NewCheckedAllocator(memory.DefaultAllocator)
			defer checked.AssertSize(t, 0)
			for _, mem := range []memory.Allocator{checked, dirty{checked}} {
				for g := range pf.NumRowGroups() {
					rg := pf.RowGroup(g)
					for leaf, f := range fields {
						chunk, _ := rg.MetaData().ColumnChunk(leaf)
						col := pf.MetaData().Schema.Column(leaf)
						kind := fastColumn(f, col, chunk)
						if kind == notFast {
							t.Fatalf("column %s is not decoded fast", f.Name)
						}
						pr, err := rg.GetColumnPageReader(leaf)
						if err != nil {
							t.Fatal(err)
						}
						got, _, err := decodeColumn(mem, f, col, kind, chunk, pr, rg.NumRows(), nil)
						pr.Close()
						if err != nil {
							t.Fatalf("row group %d, column %s: %v", g, f.Name, err)
						}
						tbl, err := fr.ReadRowGroups(ctx, []int{leaf}, []int{g})
						if err != nil {
							t.Fatal(err)
						}
						want := tbl.Column(0).Data().Chunk(0)
						if !array.Equal(got, want) || got.NullN() != want.NullN() {
							t.Fatalf("row group %d, column %s:\n got %v\nwant %v", g, f.Name, got, want)
						}
						checkNullSlotsZero(t, got)
						got.Release()
						tbl.Release()
					}
				}
			}
		})
	}
}

// dirty is an allocator whose unzeroed buffers hold garbage.
type dirty struct{ memory.Allocator }

func (d dirty) AllocateUnzeroed(n int) []byte {
	b := d.Allocate(n)
	for i := range b {
		b[i] = 0xa5
	}
	return b
}

// checkNullSlotsZero fails t unless every null slot of a fixed-width array,
// or of a list array's elements, is zero bytes.
func checkNullSlotsZero(t *testing.T, a arrow.Array) {
	t.Helper()
	if l, ok := a.(*array.List); ok {
		checkNullSlotsZero(t, l.ListValues())
		return
	}
	fw, ok := a.DataType().(arrow.FixedWidthDataType)
	if !ok || a.NullN() == 0 {
		return
	}
	w := fw.BitWidth() / 8
	vals := a.Data().Buffers()[1].Bytes()
	for i := range a.Len() {
		if a.IsNull(i) {
			at := (a.Data().Offset() + i) * w
			if slot := vals[at : at+w]; !bytes.Equal(slot, make([]byte, w)) {
				t.Fatalf("%s: null slot %d holds %x", a.DataType(), i, slot)
			}
		}
	}
}

// TestFastColumnDeclines keeps layouts decodeColumn does not handle on the
// pqarrow path.
func TestFastColumnDeclines(t *testing.T) {
	fields := []arrow.Field{
		{Name: "i16", Type: arrow.PrimitiveTypes.Int16},
		{Name: "ts", Type: arrow.FixedWidthTypes.Timestamp_us},
		{Name: "ls", Type: arrow.ListOf(arrow.BinaryTypes.String)},
		{Name: "ll", Type: arrow.ListOf(arrow.ListOf(arrow.PrimitiveTypes.Int32))},
		{Name: "bool", Type: arrow.FixedWidthTypes.Boolean},
	}
	schema := arrow.NewSchema(fields, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	rng := rand.New(rand.NewPCG(1, 1))
	for i := range fields {
		appendRandom(rng, b.Field(i), true)
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	pf, err := file.NewParquetReader(bytes.NewReader(tabletest.EncodeRecord(t, rec)))
	if err != nil {
		t.Fatal(err)
	}
	leaf := 0
	for _, f := range fields {
		chunk, _ := pf.RowGroup(0).MetaData().ColumnChunk(leaf)
		if kind := fastColumn(f, pf.MetaData().Schema.Column(leaf), chunk); kind != notFast {
			t.Errorf("column %s: fastColumn = %d, want notFast", f.Name, kind)
		}
		leaf += countLeaves(f.Type)
	}
}

// BenchmarkDecodeColumn decodes one row group of pretokenized LM rows (4,096
// rows of 256–1,023 random int32 tokens, zstd, dictionary as the writer
// chooses) with croupier's page decoder and with pqarrow, side by side:
//
//	go test ./core/table -run '^$' -bench DecodeColumn -count 5
func BenchmarkDecodeColumn(b *testing.B) {
	schema := arrow.NewSchema([]arrow.Field{{Name: "tokens", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32)}}, nil)
	rb := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer rb.Release()
	rng := rand.New(rand.NewPCG(1, 1))
	toks := rb.Field(0).(*array.ListBuilder)
	vals := toks.ValueBuilder().(*array.Int32Builder)
	for range 4096 {
		toks.Append(true)
		for range 256 + rng.IntN(768) {
			vals.Append(rng.Int32N(50000))
		}
	}
	rec := rb.NewRecordBatch()
	defer rec.Release()
	data := tabletest.EncodeRecord(b, rec, parquet.WithMaxRowGroupLength(4096), parquet.WithCompression(compress.Codecs.Zstd))
	pf, err := file.NewParquetReader(bytes.NewReader(data))
	if err != nil {
		b.Fatal(err)
	}
	f, col := schema.Field(0), pf.MetaData().Schema.Column(0)
	rg := pf.RowGroup(0)
	chunk, _ := rg.MetaData().ColumnChunk(0)
	b.Run("croupier", func(b *testing.B) {
		for b.Loop() {
			pr, err := rg.GetColumnPageReader(0)
			if err != nil {
				b.Fatal(err)
			}
			arr, _, err := decodeColumn(memory.DefaultAllocator, f, col, fastColumn(f, col, chunk), chunk, pr, rg.NumRows(), nil)
			pr.Close()
			if err != nil {
				b.Fatal(err)
			}
			arr.Release()
		}
		b.ReportMetric(float64(rg.NumRows()*int64(b.N))/b.Elapsed().Seconds(), "rows/s")
	})
	b.Run("pqarrow", func(b *testing.B) {
		fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			tbl, err := fr.ReadRowGroups(context.Background(), []int{0}, []int{0})
			if err != nil {
				b.Fatal(err)
			}
			tbl.Release()
		}
		b.ReportMetric(float64(rg.NumRows()*int64(b.N))/b.Elapsed().Seconds(), "rows/s")
	})
}

// TestDecoderKeepsRowsAcrossPages feeds the page decoder random rows of a
// list column (null, empty and long lists, null elements) and of a flat one,
// in pages cut at random level entries, also inside a row, as writers of
// V1 pages without an offset index may cut them, and checks that keeping a
// random set of rows gives those rows of the whole column.
func TestDecoderKeepsRowsAcrossPages(t *testing.T) {
	rng := rand.New(rand.NewPCG(seedtest.Seed(t), 7))
	fields := []arrow.Field{
		{Name: "l", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32), Nullable: true},
		{Name: "i", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	}
	cols := storedColumns(t, fields...)
	for leaf, f := range fields {
		col := cols[leaf]
		kind := fastFlat
		if leaf == 0 {
			kind = fastList
		}
		for range 50 {
			// Rows as level entries (and the values of the present ones).
			const rows = 300
			var reps, defs []uint8
			var values []byte
			for range rows {
				if kind == fastFlat {
					def := uint8(rng.IntN(4) / 3) // a quarter null
					reps, defs = append(reps, 0), append(defs, def)
					if def == 1 {
						values = binary.LittleEndian.AppendUint64(values, rng.Uint64())
					}
					continue
				}
				switch k := rng.IntN(12); k { // null list, empty list, or up to 10 elements
				case 0, 1:
					reps, defs = append(reps, 0), append(defs, uint8(k))
				default:
					for e := range k - 1 {
						def := uint8(2 + rng.IntN(5)/4) // a fifth of the elements null
						reps, defs = append(reps, uint8(min(e, 1))), append(defs, def)
						if def == 3 {
							values = binary.LittleEndian.AppendUint32(values, rng.Uint32())
						}
					}
				}
			}
			keep := []int64{}
			for r := range int64(rows) {
				if rng.IntN(4) == 0 {
					keep = append(keep, r)
				}
			}
			decode := func(keep []int64) arrow.Array {
				d := newColumnDecoder(memory.DefaultAllocator, f, col, kind, int64(len(defs)), keep, rows)
				defer d.free()
				width := 4
				if kind == fastFlat {
					width = 8
				}
				for e, v := 0, 0; e < len(defs); {
					n := min(len(defs)-e, 1+rng.IntN(20)) // cut anywhere
					present := 0
					for _, def := range defs[e : e+n] {
						if int16(def) == d.maxDef {
							present++
						}
					}
					if d.maxRep > 0 {
						d.reps = append(d.reps[:0], reps[e:e+n]...)
					}
					d.defs = append(d.defs[:0], defs[e:e+n]...)
					if err := d.dataPage(values[v*width:(v+present)*width], parquet.Encodings.Plain, n); err != nil {
						t.Fatal(err)
					}
					e, v = e+n, v+present
				}
				arr, err := d.finish(memory.DefaultAllocator, rows)
				if err != nil {
					t.Fatal(err)
				}
				return arr
			}
			whole, kept := decode(nil), decode(keep)
			if kept.Len() != len(keep) {
				t.Fatalf("column %s: kept %d rows of %d", f.Name, kept.Len(), len(keep))
			}
			for i, r := range keep {
				if !array.SliceEqual(kept, int64(i), int64(i+1), whole, r, r+1) {
					t.Fatalf("column %s: row %d kept as %v, is %v", f.Name, r, kept.GetOneForMarshal(i), whole.GetOneForMarshal(int(r)))
				}
			}
			whole.Release()
			kept.Release()
		}
	}
}

// TestDecoderRefusesValuesLeftOver: a PLAIN page of fixed-width values holds
// exactly a value for each present level entry; a page header is not under
// the page's CRC, and one that counts too few entries leaves values over,
// which is an error, as too few values are.
func TestDecoderRefusesValuesLeftOver(t *testing.T) {
	f := arrow.Field{Name: "i", Type: arrow.PrimitiveTypes.Int64, Nullable: true}
	col := storedColumns(t, f)[0]
	for _, values := range []int{9, 10, 11} {
		d := newColumnDecoder(memory.DefaultAllocator, f, col, fastFlat, 16, []int64{2, 3}, 10)
		d.defs = append(d.defs[:0], 1, 1, 1, 1, 1, 1, 1, 1, 1, 1)
		err := d.dataPage(make([]byte, 8*values), parquet.Encodings.Plain, 10)
		d.free()
		if (err == nil) != (values == 10) {
			t.Errorf("a page of 10 entries and %d values: %v", values, err)
		}
	}
}

// storedColumns returns the Parquet columns that fields are stored as, one
// leaf each.
func storedColumns(t *testing.T, fields ...arrow.Field) []*schema.Column {
	t.Helper()
	empty := array.NewRecordBuilder(memory.DefaultAllocator, arrow.NewSchema(fields, nil))
	rec := empty.NewRecordBatch()
	empty.Release()
	pf, err := file.NewParquetReader(bytes.NewReader(tabletest.EncodeRecord(t, rec)))
	rec.Release()
	if err != nil {
		t.Fatal(err)
	}
	cols := make([]*schema.Column, len(fields))
	for i := range cols {
		cols[i] = pf.MetaData().Schema.Column(i)
	}
	return cols
}

// TestDecoderCopiesALargeCellOnce decodes a column of small binary values
// and one of 8 MiB, pages read through an allocator off Go's heap: the
// decoder's own allocations on the heap are a small part of the large
// value, which it copies once, into a buffer of the reader's allocator
// that becomes the column's (it had grown a buffer of its own on the heap,
// then copied that into the column).
func TestDecoderCopiesALargeCellOnce(t *testing.T) {
	const large = 8 << 20
	schema := arrow.NewSchema([]arrow.Field{{Name: "cell", Type: arrow.BinaryTypes.Binary}}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	for i := range 200 {
		cell := bytes.Repeat([]byte{byte(i)}, 100)
		if i == 50 {
			cell = bytes.Repeat([]byte{7}, large)
		}
		b.Field(0).(*array.BinaryBuilder).Append(cell)
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	data := tabletest.EncodeRecord(t, rec, parquet.WithDictionaryDefault(false))
	mem := cmem.New()
	pf, err := file.NewParquetReader(bytes.NewReader(data), file.WithReadProps(parquet.NewReaderProperties(mem)))
	if err != nil {
		t.Fatal(err)
	}
	rg := pf.RowGroup(0)
	chunk, _ := rg.MetaData().ColumnChunk(0)
	f, col := schema.Field(0), pf.MetaData().Schema.Column(0)
	for _, keep := range [][]int64{nil, {3, 50, 51, 199}} {
		pr, err := rg.GetColumnPageReader(0)
		if err != nil {
			t.Fatal(err)
		}
		defer debug.SetGCPercent(debug.SetGCPercent(-1))
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		got, _, err := decodeColumn(mem, f, col, fastColumn(f, col, chunk), chunk, pr, rg.NumRows(), keep)
		runtime.ReadMemStats(&after)
		pr.Close()
		if err != nil {
			t.Fatal(err)
		}
		if heap := after.TotalAlloc - before.TotalAlloc; heap > large/4 {
			t.Errorf("keeping rows %v, the decoder allocated %d bytes on Go's heap for a value of %d", keep, heap, large)
		}
		at := 50 // the large value's row among those kept
		if keep != nil {
			at = 1
		}
		if n := got.(*array.Binary).ValueLen(at); n != large {
			t.Errorf("keeping rows %v, the large value holds %d bytes", keep, n)
		}
		got.Release()
	}
}
