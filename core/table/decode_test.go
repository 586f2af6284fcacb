package table

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/croupier-data/croupier/core/table/tabletest"
)

// TestDecodeColumnMatchesPqarrow decodes random columns of every layout
// decodeColumn handles, with and without nulls (rows, lists and elements),
// empty lists, PLAIN and dictionary encodings, V1 and V2 pages and many
// pages per chunk, and checks each against pqarrow's decoding.
func TestDecodeColumnMatchesPqarrow(t *testing.T) {
	fields := []arrow.Field{
		{Name: "i32", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
		{Name: "i64", Type: arrow.PrimitiveTypes.Int64},
		{Name: "f32", Type: arrow.PrimitiveTypes.Float32, Nullable: true},
		{Name: "f64", Type: arrow.PrimitiveTypes.Float64},
		{Name: "s", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "b", Type: arrow.BinaryTypes.Binary},
		{Name: "l", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32), Nullable: true},
		{Name: "lnn", Type: arrow.ListOfNonNullable(arrow.PrimitiveTypes.Float32)},
		{Name: "l64", Type: arrow.ListOf(arrow.PrimitiveTypes.Int64)},
	}
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
			mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
			defer mem.AssertSize(t, 0)
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
					got.Release()
					tbl.Release()
				}
			}
		})
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
