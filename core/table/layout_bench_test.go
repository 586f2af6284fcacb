package table_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"

	"github.com/croupier-data/croupier/core/store"
	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/internal/tabletest"
)

// benchRecord builds n rows shaped like RL rollouts: an id, 16–48 token ids,
// a reward and a short text.
func benchRecord(start, n int64) arrow.RecordBatch {
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "tokens", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32), Nullable: true},
		{Name: "reward", Type: arrow.PrimitiveTypes.Float32, Nullable: true},
		{Name: "text", Type: arrow.BinaryTypes.String, Nullable: true},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	rng := rand.New(rand.NewPCG(uint64(start), 1))
	toks := b.Field(1).(*array.ListBuilder)
	vals := toks.ValueBuilder().(*array.Int32Builder)
	for id := start; id < start+n; id++ {
		b.Field(0).(*array.Int64Builder).Append(id)
		toks.Append(true)
		for range 16 + rng.IntN(33) {
			vals.Append(rng.Int32N(50000))
		}
		b.Field(2).(*array.Float32Builder).Append(rng.Float32())
		b.Field(3).(*array.StringBuilder).Append(fmt.Sprintf("sample %d with a little text %x", id, rng.Uint64()))
	}
	return b.NewRecordBatch()
}

// BenchmarkRandomRows measures reading 64 random rows of a 1M-row file with a
// cold cache, for several row-group and page sizes (see the package doc).
//
//	go test ./core/table -run '^$' -bench RandomRows -benchtime 10x
func BenchmarkRandomRows(b *testing.B) {
	const rows = 1 << 20
	rec := benchRecord(0, rows)
	defer rec.Release()
	ctx := context.Background()
	for _, rg := range []int64{4 << 10, 16 << 10, 64 << 10, 256 << 10} {
		for _, page := range []int64{8 << 10, 64 << 10, 1 << 20} {
			b.Run(fmt.Sprintf("rowgroup=%d/page=%d", rg, page), func(b *testing.B) {
				data := tabletest.EncodeRecord(b, rec, parquet.WithMaxRowGroupLength(rg),
					parquet.WithDataPageSize(page), parquet.WithPageIndexEnabled(true),
					parquet.WithCompression(compress.Codecs.Zstd), parquet.WithDictionaryDefault(false))
				name := fmt.Sprintf("mem://layoutbench/rg%d-p%d/f.parquet", rg, page)
				loc, err := store.Open(ctx, name)
				if err != nil {
					b.Fatal(err)
				}
				if err := loc.WriteAll(ctx, loc.Key, data, store.WriterOptions{}); err != nil {
					b.Fatal(err)
				}
				tb, err := table.Open(ctx, name)
				if err != nil {
					b.Fatal(err)
				}
				defer tb.Close()
				b.ResetTimer()
				readRandomRows(b, tb)
				b.ReportMetric(float64(len(data))/(1<<20), "MiB")
			})
		}
	}
}

// BenchmarkLayout measures croupier's own layout (table.Create: row groups of
// 4,096 rows, zstd, dictionaries, an offset index) at several page sizes: a
// scan of every row group, and reads of 64 random rows.
//
//	go test ./core/table -run '^$' -bench Layout -benchtime 5x
func BenchmarkLayout(b *testing.B) {
	const rows = 1 << 18
	rec := benchRecord(0, rows)
	defer rec.Release()
	ctx := context.Background()
	for _, page := range []int64{8 << 10, 16 << 10, 64 << 10, 1 << 20} {
		rdr, err := array.NewRecordReader(rec.Schema(), []arrow.RecordBatch{rec})
		if err != nil {
			b.Fatal(err)
		}
		tb, err := table.Create(ctx, fmt.Sprintf("mem://layout/p%d", page), rdr, table.WriteOptions{PageBytes: page})
		rdr.Release()
		if err != nil {
			b.Fatal(err)
		}
		var size int64
		for _, f := range tb.Pin().Files {
			size += f.Size
		}
		b.Run(fmt.Sprintf("scan/page=%d", page), func(b *testing.B) {
			for b.Loop() {
				r, err := tb.NewReader(table.ReaderOptions{})
				if err != nil {
					b.Fatal(err)
				}
				for f, file := range tb.Pin().Files {
					for g := range file.RowGroups {
						out, err := r.ReadGroup(ctx, f, g)
						if err != nil {
							b.Fatal(err)
						}
						out.Release()
					}
				}
			}
			b.ReportMetric(float64(rows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
			b.ReportMetric(float64(size)/(1<<20), "MiB")
		})
		b.Run(fmt.Sprintf("random/page=%d", page), func(b *testing.B) { readRandomRows(b, tb) })
		tb.Close()
	}
}

// readRandomRows reads 64 random rows of tb with a new reader per loop.
func readRandomRows(b *testing.B, tb *table.Table) {
	rng := rand.New(rand.NewPCG(7, 7))
	for b.Loop() {
		r, err := tb.NewReader(table.ReaderOptions{})
		if err != nil {
			b.Fatal(err)
		}
		ids := make([]uint64, 64)
		for i := range ids {
			ids[i] = uint64(rng.Int64N(tb.NumRows()))
		}
		out, err := r.Read(context.Background(), ids)
		if err != nil {
			b.Fatal(err)
		}
		out.Release()
	}
}
