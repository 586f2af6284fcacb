package permutation

import (
	"math"
	"math/big"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/decimal256"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// TestGoldenHashRows pins the canonical encoding and XXH64. The expected
// values were computed by an independent implementation (Python's xxhash
// package over the encoding written out by hand). A change here changes hash
// splits: bump FormatVersion.
func TestGoldenHashRows(t *testing.T) {
	mem := memory.DefaultAllocator
	// int32 on purpose: every integer width hashes as int64.
	ib := array.NewInt32Builder(mem)
	ib.AppendValues([]int32{42, -7}, nil)
	ib.AppendNull()
	ib.Append(0)
	ints := ib.NewArray()
	sb := array.NewLargeStringBuilder(mem)
	sb.AppendValues([]string{"alpha", "", strings.Repeat("x", 200)}, nil)
	sb.AppendNull()
	strs := sb.NewArray()
	got := make([]uint64, 4)
	if err := HashRows([]arrow.Array{ints, strs}, got); err != nil {
		t.Fatal(err)
	}
	want := []uint64{0xe4f75a4d90074ecc, 0xe3361ad1593ef90f, 0x8100467b4ea00f7a, 0x2175e0f88eec3bd9}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("row %d: hash %#x, want %#x", i, got[i], want[i])
		}
	}

	fb := array.NewFloat64Builder(mem)
	fb.AppendValues([]float64{1.5, math.Copysign(0, -1), math.NaN()}, nil)
	floats := fb.NewArray()
	fgot := make([]uint64, 3)
	if err := HashRows([]arrow.Array{floats}, fgot); err != nil {
		t.Fatal(err)
	}
	fwant := []uint64{0xe61612a10904c397, 0x078e4ab900e95271, 0x280308856b409770}
	for i := range fwant {
		if fgot[i] != fwant[i] {
			t.Errorf("float row %d: hash %#x, want %#x", i, fgot[i], fwant[i])
		}
	}

	bb := array.NewBooleanBuilder(mem)
	bb.Append(true)
	bools := bb.NewArray()
	bgot := make([]uint64, 1)
	if err := HashRows([]arrow.Array{bools}, bgot); err != nil || bgot[0] != 0x52fc4823a13c997a {
		t.Errorf("bool hash %#x, %v", bgot[0], err)
	}
}

// TestGoldenHashRowsTemporalDecimal pins the encoding of timestamps, dates
// and decimals, with values computed as TestGoldenHashRows's were (an
// independent XXH64 over the encoding written out by hand), and checks that
// one instant or one decimal value hashes the same whatever its Arrow type.
func TestGoldenHashRowsTemporalDecimal(t *testing.T) {
	mem := memory.DefaultAllocator
	tb := array.NewTimestampBuilder(mem, &arrow.TimestampType{Unit: arrow.Nanosecond, TimeZone: "Asia/Tokyo"})
	tb.AppendValues([]arrow.Timestamp{1796083200123456789, -1}, nil)
	tb.AppendNull()
	tb.AppendValues([]arrow.Timestamp{0, 1796083200000000000, -86400 * 365 * 1e9}, nil)
	ts := tb.NewArray()
	db := array.NewDecimal128Builder(mem, &arrow.Decimal128Type{Precision: 10, Scale: 2})
	for _, v := range []int64{150, -1, 0, 1234567890} {
		db.Append(decimal128.FromI64(v))
	}
	db.AppendNull()
	db.Append(decimal128.FromI64(1000))
	decs := db.NewArray()
	got := make([]uint64, 6)
	if err := HashRows([]arrow.Array{ts, decs}, got); err != nil {
		t.Fatal(err)
	}
	want := []uint64{0x7b0a3543b1aee92e, 0xfd0bd471aebadf66, 0xc8c78f80e6dd789a,
		0xbb737a013d463260, 0x3a34f808cea0cd3b, 0xe566f4d32b0ea16d}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("row %d: hash %#x, want %#x", i, got[i], want[i])
		}
	}

	b256 := array.NewDecimal256Builder(mem, &arrow.Decimal256Type{Precision: 76, Scale: 3})
	b256.Append(decimal256.FromBigInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(63), nil))) // 10^60
	b256.Append(decimal256.FromBigInt(new(big.Int).Sub(new(big.Int).Neg(new(big.Int).Exp(big.NewInt(10), big.NewInt(40), nil)), big.NewInt(7))))
	big256 := b256.NewArray()
	bgot := make([]uint64, 2)
	if err := HashRows([]arrow.Array{big256}, bgot); err != nil {
		t.Fatal(err)
	}
	if bgot[0] != 0xe7d54d839510f346 || bgot[1] != 0x5f569ac2d8a3c0c7 {
		t.Errorf("decimal256 hashes %#x %#x", bgot[0], bgot[1])
	}

	// 2026-12-01 00:00:00 UTC as every temporal type, and 1.5 at two scales.
	one := func(a arrow.Array) uint64 {
		h := make([]uint64, 1)
		if err := HashRows([]arrow.Array{a}, h); err != nil {
			t.Fatal(err)
		}
		return h[0]
	}
	same := []arrow.Array{array.NewSlice(ts, 4, 5)}
	for _, unit := range []arrow.TimeUnit{arrow.Second, arrow.Millisecond, arrow.Microsecond} {
		b := array.NewTimestampBuilder(mem, &arrow.TimestampType{Unit: unit})
		b.Append(arrow.Timestamp(1796083200 * int64(1e9/unit.Multiplier())))
		same = append(same, b.NewArray())
	}
	d32 := array.NewDate32Builder(mem)
	d32.Append(20788)
	d64 := array.NewDate64Builder(mem)
	d64.Append(1796083200000)
	same = append(same, d32.NewArray(), d64.NewArray())
	for _, a := range same[1:] {
		if one(a) != one(same[0]) {
			t.Errorf("%s: hash %#x, want %#x as for %s", a.DataType(), one(a), one(same[0]), same[0].DataType())
		}
	}
	d51 := array.NewDecimal128Builder(mem, &arrow.Decimal128Type{Precision: 5, Scale: 1})
	d51.Append(decimal128.FromI64(15))
	if one(d51.NewArray()) != one(array.NewSlice(decs, 0, 1)) {
		t.Error("1.5 as decimal(5, 1) and 1.50 as decimal(10, 2) hash differently")
	}
}
