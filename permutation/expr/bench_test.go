package expr_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/croupier-data/croupier/permutation/expr"
)

// BenchmarkEval evaluates typical filters and a computed split on 1M rows;
// rows/s is reported per case.
func BenchmarkEval(b *testing.B) {
	const n = 1 << 20
	mem := memory.NewGoAllocator()
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "reward", Type: arrow.PrimitiveTypes.Float32, Nullable: true},
		{Name: "role", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "problem_id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "text", Type: arrow.BinaryTypes.String},
		{Name: "created_at", Type: &arrow.TimestampType{Unit: arrow.Millisecond, TimeZone: "UTC"}},
		{Name: "price", Type: &arrow.Decimal128Type{Precision: 12, Scale: 2}},
	}, nil)
	rb := array.NewRecordBuilder(mem, schema)
	defer rb.Release()
	roles := []string{"assistant", "user", "system"}
	for i := range n {
		if i%17 == 0 {
			rb.Field(0).AppendNull()
		} else {
			rb.Field(0).(*array.Float32Builder).Append(float32(i%7) - 3)
		}
		rb.Field(1).(*array.StringBuilder).Append(roles[i%3])
		rb.Field(2).(*array.Int64Builder).Append(int64(i))
		rb.Field(3).(*array.StringBuilder).Append(fmt.Sprintf("sample text number %d", i))
		rb.Field(4).(*array.TimestampBuilder).Append(arrow.Timestamp(1796083200000 + int64(i)*1000)) // a row a second
		rb.Field(5).(*array.Decimal128Builder).Append(decimal128.FromI64(int64(i % 1000)))
	}
	rec := rb.NewRecordBatch()
	defer rec.Release()
	for _, text := range []string{
		"reward > 0 AND role = 'assistant'",
		"problem_id % 10 < 8",
		"role IN ('assistant', 'system') AND reward BETWEEN -1 AND 2",
		"text LIKE '%number 1%' OR reward IS NULL",
		"created_at >= TIMESTAMP '2026-12-01 06:00:00' - INTERVAL 2 HOUR",
		"price > 1.255 AND price <= 9",
	} {
		e, err := expr.Parse(text, schema)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(text, func(b *testing.B) {
			for b.Loop() {
				out, err := e.Eval(context.Background(), rec, mem)
				if err != nil {
					b.Fatal(err)
				}
				out.Release()
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}
