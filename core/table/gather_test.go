package table

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/internal/seedtest"
)

// gatherTypes are the layouts gather supports, nested as training data nests them.
var gatherTypes = []arrow.DataType{
	arrow.PrimitiveTypes.Int64,
	arrow.PrimitiveTypes.Float32,
	arrow.PrimitiveTypes.Int8,
	arrow.FixedWidthTypes.Boolean,
	arrow.FixedWidthTypes.Timestamp_us,
	&arrow.Decimal128Type{Precision: 20, Scale: 3},
	&arrow.FixedSizeBinaryType{ByteWidth: 3},
	arrow.BinaryTypes.String,
	arrow.BinaryTypes.LargeBinary,
	arrow.ListOf(arrow.PrimitiveTypes.Int32),
	arrow.LargeListOf(arrow.BinaryTypes.String),
	arrow.ListOf(arrow.ListOf(arrow.FixedWidthTypes.Boolean)),
	arrow.StructOf(
		arrow.Field{Name: "a", Type: arrow.PrimitiveTypes.Int16, Nullable: true},
		arrow.Field{Name: "b", Type: arrow.ListOf(arrow.BinaryTypes.String), Nullable: true},
	),
}

// randomArray builds n random values of dt, a fifth of them null, as a slice
// of a longer array so that offsets are exercised.
func randomArray(t *testing.T, rng *rand.Rand, dt arrow.DataType, n int) arrow.Array {
	mem := memory.DefaultAllocator
	b := array.NewBuilder(mem, dt)
	defer b.Release()
	for range n + 5 {
		appendRandom(rng, b, true)
	}
	full := b.NewArray()
	defer full.Release()
	return array.NewSlice(full, 3, int64(n+3))
}

// appendRandom appends a random value to b, a fifth of them null when
// nullable. Nested values are nullable as their fields say.
func appendRandom(rng *rand.Rand, b array.Builder, nullable bool) {
	if nullable && rng.IntN(5) == 0 {
		b.AppendNull()
		return
	}
	switch b := b.(type) {
	case *array.Int64Builder:
		b.Append(rng.Int64())
	case *array.Int32Builder:
		b.Append(rng.Int32())
	case *array.Int16Builder:
		b.Append(int16(rng.Int()))
	case *array.Int8Builder:
		b.Append(int8(rng.Int()))
	case *array.Float32Builder:
		b.Append(rng.Float32())
	case *array.Float64Builder:
		b.Append(rng.Float64())
	case *array.BooleanBuilder:
		b.Append(rng.IntN(2) == 0)
	case *array.TimestampBuilder:
		b.Append(arrow.Timestamp(rng.Int64()))
	case *array.Decimal128Builder:
		b.Append(decimal128.FromI64(rng.Int64()))
	case *array.FixedSizeBinaryBuilder:
		b.Append([]byte{byte(rng.Int()), byte(rng.Int()), byte(rng.Int())})
	case *array.StringBuilder:
		b.Append(fmt.Sprintf("s%d", rng.IntN(1000)))
	case *array.LargeStringBuilder:
		b.Append(fmt.Sprintf("large %d", rng.IntN(1000)))
	case *array.BinaryBuilder:
		b.Append([]byte(fmt.Sprintf("bytes %d", rng.IntN(1000))))
	case array.ListLikeBuilder:
		b.Append(true)
		elem := b.Type().(arrow.ListLikeType).ElemField()
		for range rng.IntN(4) {
			appendRandom(rng, b.ValueBuilder(), elem.Nullable)
		}
	case *array.StructBuilder:
		b.Append(true)
		for i, f := range b.Type().(*arrow.StructType).Fields() {
			appendRandom(rng, b.FieldBuilder(i), f.Nullable)
		}
	default:
		panic(fmt.Sprintf("no random values for %T", b))
	}
}

// TestGatherMatchesTake checks gather against compute.Take on random arrays
// of every supported layout, with nulls, sliced sources and runs of rows;
// every other trial from an allocator whose unzeroed buffers hold garbage.
func TestGatherMatchesTake(t *testing.T) {
	ctx := context.Background()
	for _, dt := range gatherTypes {
		t.Run(dt.String(), func(t *testing.T) {
			if !gatherable(dt) {
				t.Fatalf("gatherable(%s) = false", dt)
			}
			mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
			defer mem.AssertSize(t, 0)
			rng := rand.New(rand.NewPCG(1, uint64(len(dt.String()))))
			srcs := make([]arrow.Array, 3)
			for i := range srcs {
				srcs[i] = randomArray(t, rng, dt, 20+i*7)
				defer srcs[i].Release()
			}
			joined, err := array.Concatenate(srcs, memory.DefaultAllocator)
			if err != nil {
				t.Fatal(err)
			}
			defer joined.Release()
			for trial := range 20 {
				var spans []span
				var idx []int64
				for range rng.IntN(40) {
					src := rng.IntN(len(srcs))
					off := rng.Int64N(int64(srcs[src].Len()))
					n := 1 + rng.Int64N(min(4, int64(srcs[src].Len())-off))
					spans = appendSpan(spans, src, off, n)
					base := int64(0)
					for _, s := range srcs[:src] {
						base += int64(s.Len())
					}
					for k := range n {
						idx = append(idx, base+off+k)
					}
				}
				data := make([]arrow.ArrayData, len(srcs))
				for i, s := range srcs {
					data[i] = s.Data()
				}
				var alloc memory.Allocator = mem
				if trial%2 == 1 {
					alloc = dirty{mem}
				}
				gotData, err := gather(alloc, dt, data, spans)
				if err != nil {
					t.Fatal(err)
				}
				got := array.MakeFromData(gotData)
				gotData.Release()
				indices := array.NewInt64Data(array.NewData(arrow.PrimitiveTypes.Int64, len(idx),
					[]*memory.Buffer{nil, memory.NewBufferBytes(arrow.Int64Traits.CastToBytes(idx))}, nil, 0, 0))
				want, err := compute.TakeArray(ctx, joined, indices)
				if err != nil {
					t.Fatal(err)
				}
				if v, ok := got.(interface{ ValidateFull() error }); ok {
					if err := v.ValidateFull(); err != nil {
						t.Fatalf("trial %d: invalid array: %v", trial, err)
					}
				}
				if !array.Equal(got, want) || got.NullN() != want.NullN() {
					t.Fatalf("trial %d: gather = %v, take = %v", trial, got, want)
				}
				got.Release()
				want.Release()
				indices.Release()
			}
		})
	}
}

// TestGatherable keeps types gather does not handle on the Take path.
func TestGatherable(t *testing.T) {
	for _, dt := range []arrow.DataType{
		&arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: arrow.BinaryTypes.String},
		arrow.MapOf(arrow.BinaryTypes.String, arrow.PrimitiveTypes.Int64),
		arrow.FixedSizeListOf(2, arrow.PrimitiveTypes.Float32),
		arrow.BinaryTypes.StringView,
		arrow.ListOf(&arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int8, ValueType: arrow.BinaryTypes.String}),
	} {
		if gatherable(dt) {
			t.Errorf("gatherable(%s) = true, want false", dt)
		}
	}
}

// TestInterleave splits random records of every layout gather supports, and
// a dictionary column it leaves to compute.Take, into 1–4 sources at random
// and checks that Interleave, taking the rows back in their order, rebuilds
// each record; and that an order taking a row twice, or too few, fails.
func TestInterleave(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seedtest.Seed(t), 4))
	fields := []arrow.Field{{Name: "dict", Type: &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int8, ValueType: arrow.BinaryTypes.String}}}
	for i, dt := range gatherTypes {
		fields = append(fields, arrow.Field{Name: fmt.Sprint(i), Type: dt, Nullable: true})
	}
	schema := arrow.NewSchema(fields, nil)
	mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
	defer mem.AssertSize(t, 0)
	for round := range 20 {
		n := rng.IntN(300)
		cols := make([]arrow.Array, len(fields))
		dict := array.NewDictionaryBuilder(memory.DefaultAllocator, fields[0].Type.(*arrow.DictionaryType)).(*array.BinaryDictionaryBuilder)
		for range n {
			if err := dict.AppendString(fmt.Sprint("v", rng.IntN(5))); err != nil {
				t.Fatal(err)
			}
		}
		cols[0] = dict.NewArray()
		dict.Release()
		for i, dt := range gatherTypes {
			cols[i+1] = randomArray(t, rng, dt, n)
		}
		whole := array.NewRecordBatch(schema, cols, int64(n))
		for _, c := range cols {
			c.Release()
		}
		// Deal the rows to k sources at random, in runs of 1–8.
		k := 1 + rng.IntN(4)
		from := make([]int32, 0, n)
		for len(from) < n {
			src := int32(rng.IntN(k))
			for range min(1+rng.IntN(8), n-len(from)) {
				from = append(from, src)
			}
		}
		srcs := make([]arrow.RecordBatch, k)
		for s := range srcs {
			var rows []int64
			for i, f := range from {
				if f == int32(s) {
					rows = append(rows, int64(i))
				}
			}
			idx := array.NewInt64Builder(memory.DefaultAllocator)
			idx.AppendValues(rows, nil)
			indices := idx.NewArray()
			idx.Release()
			dat, err := compute.Take(ctx, compute.TakeOptions{}, compute.NewDatum(whole), compute.NewDatum(indices))
			indices.Release()
			if err != nil {
				t.Fatal(err)
			}
			srcs[s] = dat.(*compute.RecordDatum).Value
		}
		got, err := Interleave(ctx, mem, srcs, from)
		if err != nil {
			t.Fatal(err)
		}
		if !array.RecordEqual(got, whole) {
			t.Fatalf("round %d: %d rows from %d sources interleave to another record", round, n, k)
		}
		got.Release()
		if n > 0 {
			for _, bad := range [][]int32{from[1:], append(slices.Clone(from), from[0])} {
				if _, err := Interleave(ctx, mem, srcs, bad); errcode.Of(err) != errcode.InvalidArgument {
					t.Fatalf("round %d: Interleave with %d rows for %d = %v, want InvalidArgument", round, len(bad), n, err)
				}
			}
		}
		for _, s := range srcs {
			s.Release()
		}
		whole.Release()
	}
}
