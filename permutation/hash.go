package permutation

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/big"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/cespare/xxhash/v2"
)

// Hash splits hash the canonical encoding of a row's values with XXH64
// (seed 0; github.com/cespare/xxhash/v2, a widely used implementation of the
// published algorithm). The encoding, column after column:
//
//	null                        0x00
//	boolean                     0x01, then 0x00 or 0x01
//	integer of any width/sign   0x02, then the value as int64, 8 bytes little endian
//	                            (unsigned values above 2⁶³−1: 0x03, then uint64)
//	float32/float64             0x04, then the float64 bits, little endian, with
//	                            −0 as +0 and every NaN as 0x7FF8000000000000
//	string/binary (any width)   0x05, then the length as uvarint, then the bytes
//	timestamp (any unit or      0x06, then the seconds since 1970-01-01 00:00:00 UTC
//	time zone), date32, date64  as int64 (rounded down), then the nanoseconds past
//	                            them as uint32, both little endian; a date is its
//	                            midnight
//	decimal128/decimal256       0x07, then the value as d·10^e with d not a multiple
//	                            of 10 (0 is 0·10^0): e as a zigzag varint, then 0x00
//	                            for d ≥ 0 or 0x01 for d < 0, then |d| as uvarint
//	                            length and big-endian bytes (none for 0)
//
// So the same value hashes the same whatever the column's integer width,
// string offset width, timestamp unit or time zone (an instant is one value),
// or decimal precision and scale (1.50 and 1.5 are one value), and a row's
// hash never depends on its position. Decimals hash apart from integers and
// floats, and timestamps apart from integers.

// hasher appends the canonical encoding of one column's values.
type hasher func(buf []byte, row int) []byte

func newHasher(a arrow.Array) (hasher, error) {
	switch a := a.(type) {
	case *array.Boolean:
		return nullable(a, func(b []byte, i int) []byte {
			if a.Value(i) {
				return append(b, 1, 1)
			}
			return append(b, 1, 0)
		}), nil
	case *array.Int8:
		return nullable(a, func(b []byte, i int) []byte { return appendInt(b, int64(a.Value(i))) }), nil
	case *array.Int16:
		return nullable(a, func(b []byte, i int) []byte { return appendInt(b, int64(a.Value(i))) }), nil
	case *array.Int32:
		return nullable(a, func(b []byte, i int) []byte { return appendInt(b, int64(a.Value(i))) }), nil
	case *array.Int64:
		return nullable(a, func(b []byte, i int) []byte { return appendInt(b, a.Value(i)) }), nil
	case *array.Uint8:
		return nullable(a, func(b []byte, i int) []byte { return appendInt(b, int64(a.Value(i))) }), nil
	case *array.Uint16:
		return nullable(a, func(b []byte, i int) []byte { return appendInt(b, int64(a.Value(i))) }), nil
	case *array.Uint32:
		return nullable(a, func(b []byte, i int) []byte { return appendInt(b, int64(a.Value(i))) }), nil
	case *array.Uint64:
		return nullable(a, func(b []byte, i int) []byte { return appendUint(b, a.Value(i)) }), nil
	case *array.Float32:
		return nullable(a, func(b []byte, i int) []byte { return appendFloat(b, float64(a.Value(i))) }), nil
	case *array.Float64:
		return nullable(a, func(b []byte, i int) []byte { return appendFloat(b, a.Value(i)) }), nil
	case array.StringLike:
		return nullable(a, func(b []byte, i int) []byte { return appendBytes(b, []byte(a.ValueStr(i))) }), nil
	case *array.Binary:
		return nullable(a, func(b []byte, i int) []byte { return appendBytes(b, a.Value(i)) }), nil
	case *array.LargeBinary:
		return nullable(a, func(b []byte, i int) []byte { return appendBytes(b, a.Value(i)) }), nil
	case *array.Timestamp:
		per := int64(a.DataType().(*arrow.TimestampType).Unit.Multiplier())
		return nullable(a, func(b []byte, i int) []byte { return appendInstant(b, int64(a.Value(i)), per) }), nil
	case *array.Date32:
		return nullable(a, func(b []byte, i int) []byte { return appendInstant(b, int64(a.Value(i))*86400, 1e9) }), nil
	case *array.Date64:
		return nullable(a, func(b []byte, i int) []byte { return appendInstant(b, int64(a.Value(i)), 1e6) }), nil
	case *array.Decimal128:
		scale := a.DataType().(*arrow.Decimal128Type).Scale
		return nullable(a, func(b []byte, i int) []byte { return appendDecimal(b, a.Value(i).BigInt(), scale) }), nil
	case *array.Decimal256:
		scale := a.DataType().(*arrow.Decimal256Type).Scale
		return nullable(a, func(b []byte, i int) []byte { return appendDecimal(b, a.Value(i).BigInt(), scale) }), nil
	}
	return nil, fmt.Errorf("cannot hash values of type %s (hash splits and group keys take booleans, integers, floats, "+
		"strings, binary, timestamps, dates and decimals)", a.DataType())
}

func nullable(a arrow.Array, h hasher) hasher {
	if a.NullN() == 0 {
		return h
	}
	return func(b []byte, i int) []byte {
		if a.IsNull(i) {
			return append(b, 0)
		}
		return h(b, i)
	}
}

func appendInt(b []byte, v int64) []byte {
	return binary.LittleEndian.AppendUint64(append(b, 2), uint64(v))
}

func appendUint(b []byte, v uint64) []byte {
	if v <= math.MaxInt64 {
		return appendInt(b, int64(v))
	}
	return binary.LittleEndian.AppendUint64(append(b, 3), v)
}

func appendFloat(b []byte, v float64) []byte {
	bits := math.Float64bits(v)
	switch {
	case v == 0:
		bits = 0
	case math.IsNaN(v):
		bits = 0x7FF8000000000000
	}
	return binary.LittleEndian.AppendUint64(append(b, 4), bits)
}

func appendBytes(b, v []byte) []byte {
	return appendBytesBody(append(b, 5), v)
}

// appendBytesBody appends v's length as uvarint, then v.
func appendBytesBody(b, v []byte) []byte {
	return append(binary.AppendUvarint(b, uint64(len(v))), v...)
}

// appendInstant encodes v units of per nanoseconds since the epoch as
// seconds and nanoseconds, which no unit's range overflows.
func appendInstant(b []byte, v, per int64) []byte {
	perSec := int64(1e9) / per
	sec, frac := v/perSec, v%perSec
	if frac < 0 {
		sec, frac = sec-1, frac+perSec
	}
	b = binary.LittleEndian.AppendUint64(append(b, 6), uint64(sec))
	return binary.LittleEndian.AppendUint32(b, uint32(frac*per))
}

var bigTen = big.NewInt(10)

// appendDecimal encodes the decimal unscaled·10^−scale with the trailing
// zeros of unscaled moved into the exponent. unscaled is modified.
func appendDecimal(b []byte, unscaled *big.Int, scale int32) []byte {
	exp := int64(-scale)
	if unscaled.Sign() == 0 {
		exp = 0
	}
	q, r := new(big.Int), new(big.Int)
	for unscaled.Sign() != 0 {
		if q.QuoRem(unscaled, bigTen, r); r.Sign() != 0 {
			break
		}
		unscaled.Set(q)
		exp++
	}
	b = binary.AppendVarint(append(b, 7), exp)
	if unscaled.Sign() < 0 {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	return appendBytesBody(b, unscaled.Bytes()) // Bytes is the absolute value
}

// HashRows sets out[i] to the hash of row i's values in cols.
func HashRows(cols []arrow.Array, out []uint64) error {
	return EncodeRows(cols, len(out), func(row int, key []byte) { out[row] = xxhash.Sum64(key) })
}

// EncodeRows calls fn with the canonical encoding of each of the first rows
// rows' values in cols: two rows' values are equal, as group_by compares
// them, exactly when their encodings are. The encoding is fn's only until it
// returns.
func EncodeRows(cols []arrow.Array, rows int, fn func(row int, key []byte)) error {
	hs := make([]hasher, len(cols))
	for i, c := range cols {
		h, err := newHasher(c)
		if err != nil {
			return err
		}
		hs[i] = h
	}
	var buf []byte
	for row := range rows {
		buf = buf[:0]
		for _, h := range hs {
			buf = h(buf, row)
		}
		fn(row, buf)
	}
	return nil
}
