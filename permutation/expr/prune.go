package expr

import (
	"encoding/binary"
	"math"
	"strings"

	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/decimal256"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/arrow-go/v18/parquet/schema"
)

// Stats summarises one column over a set of rows, such as a Parquet row
// group. Min and Max bound the column's non-null values and hold the
// evaluation type of the column: bool, int64, float64 or string; for a
// timestamp or date, int64 nanoseconds since the epoch (UTC); for a
// decimal, its unscaled value as a decimal128.Num or decimal256.Num.
type Stats struct {
	Min, Max     any
	HasMinMax    bool  // Min and Max are set
	NullCount    int64 // number of null values
	HasNullCount bool  // NullCount is set
	NumRows      int64 // number of rows; must be set
}

// tri is what a boolean expression may evaluate to over a set of rows.
type tri struct{ t, f, null bool }

var unknown = tri{true, true, true}

// MayMatch reports whether the expression may be TRUE for some row of a set
// of rows, judging from per-column statistics: stats returns them for a
// column, named by its path with dots (a top-level column's name, or
// "s.a" for field a of struct column s), or false when there are none.
//
// MayMatch is conservative: it returns false only when the statistics prove
// no row can match, so a false answer means the rows can be skipped. It
// reasons about comparisons, BETWEEN, IN, IS [NOT] NULL, IS [NOT] TRUE/FALSE,
// LIKE 'prefix%' and bare boolean columns between a column and constants,
// combined with AND, OR and NOT; everything else counts as "may be
// anything".
func (e *Expr) MayMatch(stats func(column string) (Stats, bool)) bool {
	return mayBe(e.root, stats).t
}

func mayBe(n node, stats func(string) (Stats, bool)) tri {
	switch n := n.(type) {
	case *literal:
		switch {
		case n.null:
			return tri{null: true}
		case n.k == kBool:
			return tri{t: n.v.(bool), f: !n.v.(bool)}
		}
	case *logic:
		l, r := mayBe(n.l, stats), mayBe(n.r, stats)
		if n.op == opAnd {
			return tri{t: l.t && r.t, f: l.f || r.f, null: l.null || r.null}
		}
		return tri{t: l.t || r.t, f: l.f && r.f, null: l.null || r.null}
	case *not:
		x := mayBe(n.x, stats)
		return tri{t: x.f, f: x.t, null: x.null}
	case *isBool:
		x := mayBe(n.x, stats)
		// x IS want: true where x = want, false elsewhere (NULL included).
		yes, no := x.f, x.t || x.null
		if n.want {
			yes, no = x.t, x.f || x.null
		}
		if n.neg {
			yes, no = no, yes
		}
		return tri{t: yes, f: no}
	case *isNull:
		s, ok := columnStats(n.x, stats)
		if !ok || !s.HasNullCount {
			return tri{true, true, false}
		}
		some, all := s.NullCount > 0, s.NullCount >= s.NumRows
		if n.neg {
			return tri{t: !all, f: some}
		}
		return tri{t: some, f: !all}
	case *column:
		if n.k == kBool {
			return compareStats(n, cmpEQ, true, stats)
		}
	case *compare:
		if lit, ok := n.r.(*literal); ok {
			return compareStats(n.l, n.op, lit.value(), stats)
		}
		if lit, ok := n.l.(*literal); ok {
			return compareStats(n.r, flip[n.op], lit.value(), stats)
		}
	case *decCmp:
		return compareStats(n.x, n.op, n.v, stats)
	case *like:
		return likeStats(n, stats)
	case *in:
		s, ok := columnStats(n.x, stats)
		if !ok {
			return unknown
		}
		if s.HasNullCount && s.NullCount >= s.NumRows {
			return tri{null: true}
		}
		match := false
		for _, v := range n.values {
			match = match || compareStats(n.x, cmpEQ, v.value(), stats).t
		}
		if n.neg {
			return tri{t: true, f: match, null: true}
		}
		return tri{t: match, f: true, null: true}
	}
	return unknown
}

// likeStats bounds x LIKE 'p%' (and NOT LIKE): a string with the prefix p
// lies in [min, max] only if max ≥ p and min either is ≤ p or starts with p.
func likeStats(n *like, stats func(string) (Stats, bool)) tri {
	s, ok := columnStats(n.x, stats)
	if !ok {
		return unknown
	}
	if s.HasNullCount && s.NullCount >= s.NumRows {
		return tri{null: true}
	}
	r := tri{t: true, f: true, null: !s.HasNullCount || s.NullCount > 0}
	lo, hi, ok := bounds(s, kString)
	if !s.HasMinMax || !ok || n.m.shape != likePrefix || n.m.lit == "" {
		return r
	}
	p, min, max := n.m.lit, lo.(string), hi.(string)
	some := max >= p && (min <= p || strings.HasPrefix(min, p))
	all := strings.HasPrefix(min, p) && strings.HasPrefix(max, p)
	if n.neg {
		some, all = !all, !some
	}
	r.t, r.f = some, !all
	return r
}

var flip = [...]cmpOp{cmpEQ: cmpEQ, cmpNE: cmpNE, cmpLT: cmpGT, cmpLE: cmpGE, cmpGT: cmpLT, cmpGE: cmpLE}

// value is the literal's Go value, nil for NULL.
func (n *literal) value() any {
	if n.null {
		return nil
	}
	return n.v
}

// columnStats returns the statistics of n when it is a column (possibly
// widened to float).
func columnStats(n node, stats func(string) (Stats, bool)) (Stats, bool) {
	if tf, ok := n.(*toFloat); ok {
		n = tf.x
	}
	c, ok := n.(*column)
	if !ok || c.k == kList || c.k == kStruct {
		return Stats{}, false
	}
	s, ok := stats(c.name())
	if !ok || s.NumRows <= 0 || s.NullCount < 0 || (s.HasNullCount && s.NullCount > s.NumRows) {
		return Stats{}, false
	}
	return s, true
}

// compareStats bounds "n op v" for a column n and a constant v (nil: NULL).
func compareStats(n node, o cmpOp, v any, stats func(string) (Stats, bool)) tri {
	s, ok := columnStats(n, stats)
	if !ok {
		return unknown
	}
	allNull := s.HasNullCount && s.NullCount >= s.NumRows
	someNull := !s.HasNullCount || s.NullCount > 0
	if v == nil || allNull {
		return tri{null: true}
	}
	r := tri{t: true, f: true, null: someNull}
	if !s.HasMinMax {
		return r
	}
	lo, hi, ok := bounds(s, n.kind())
	if !ok {
		return r
	}
	cl, okl := cmpAny(lo, v) // sign of min − v
	ch, okh := cmpAny(hi, v) // sign of max − v
	if !okl || !okh || cl > ch {
		return r
	}
	switch o {
	case cmpEQ:
		r.t = cl <= 0 && ch >= 0
		r.f = !(cl == 0 && ch == 0)
	case cmpNE:
		r.t = !(cl == 0 && ch == 0)
		r.f = cl <= 0 && ch >= 0
	case cmpLT:
		r.t, r.f = cl < 0, ch >= 0
	case cmpLE:
		r.t, r.f = cl <= 0, ch > 0
	case cmpGT:
		r.t, r.f = ch > 0, cl <= 0
	case cmpGE:
		r.t, r.f = ch >= 0, cl < 0
	}
	if n.kind() == kFloat {
		// NaN lies outside min and max: NaN != v is true and every other
		// comparison with NaN false.
		r.f = true
		if o == cmpNE {
			r.t = true
		}
	}
	return r
}

// bounds converts a column's min and max to the values of kind k that the
// expression compares.
func bounds(s Stats, k kind) (lo, hi any, ok bool) {
	conv := func(v any) (any, bool) {
		switch k {
		case kBool:
			b, ok := v.(bool)
			return b, ok
		case kInt, kTime:
			i, ok := v.(int64)
			return i, ok
		case kDecimal:
			switch v.(type) {
			case decimal128.Num, decimal256.Num:
				return v, true
			}
		case kFloat:
			// Integer columns compared with floats are widened, and
			// widening is monotone, so widened bounds still bound.
			switch v := v.(type) {
			case float64:
				return v, !math.IsNaN(v)
			case int64:
				return float64(v), true
			}
		case kString:
			s, ok := v.(string)
			return s, ok
		}
		return nil, false
	}
	if lo, ok = conv(s.Min); !ok {
		return nil, nil, false
	}
	hi, ok = conv(s.Max)
	return lo, hi, ok
}

// cmpAny compares two values of the same Go type.
func cmpAny(a, b any) (int, bool) {
	switch a := a.(type) {
	case bool:
		b, ok := b.(bool)
		switch {
		case !ok:
			return 0, false
		case a == b:
			return 0, true
		case b:
			return -1, true
		}
		return 1, true
	case int64:
		b, ok := b.(int64)
		return cmp3(a, b), ok
	case float64:
		b, ok := b.(float64)
		return cmp3(a, b), ok && !math.IsNaN(b)
	case string:
		b, ok := b.(string)
		return strings.Compare(a, b), ok
	case decimal128.Num:
		switch b := b.(type) {
		case decimal128.Num:
			return a.Cmp(b), true
		case decimal256.Num:
			return decimal256.FromDecimal128(a).Cmp(b), true
		}
	case decimal256.Num:
		switch b := b.(type) {
		case decimal128.Num:
			return a.Cmp(decimal256.FromDecimal128(b)), true
		case decimal256.Num:
			return a.Cmp(b), true
		}
	}
	return 0, false
}

func cmp3[T int64 | float64](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// RowGroupStats returns the statistics of a Parquet row group's top-level
// primitive columns in the form MayMatch takes. Columns inside structs or
// lists, columns without trustworthy statistics (as the file's writer
// version tells) and physical types other than BOOLEAN, INT32, INT64,
// FLOAT, DOUBLE, BYTE_ARRAY and (for decimals) FIXED_LEN_BYTE_ARRAY have
// none. Timestamps (INT64 with a unit) and dates (INT32 days) become
// nanoseconds since the epoch; decimals (INT32, INT64 or big-endian
// two's-complement bytes) their unscaled values.
func RowGroupStats(rg *metadata.RowGroupMetaData) func(column string) (Stats, bool) {
	out := map[string]Stats{}
	for i := 0; i < rg.NumColumns(); i++ {
		cc, err := rg.ColumnChunk(i)
		if err != nil {
			continue
		}
		descr := rg.Schema.Column(i)
		if len(cc.PathInSchema()) != 1 || descr.MaxRepetitionLevel() != 0 {
			continue
		}
		if ok, err := cc.StatsSet(); !ok || err != nil {
			continue
		}
		ts, err := cc.Statistics()
		if err != nil || ts == nil {
			continue
		}
		s := Stats{NumRows: rg.NumRows(), HasNullCount: ts.HasNullCount(), NullCount: ts.NullCount()}
		if ts.HasMinMax() {
			s.Min, s.Max, s.HasMinMax = logicalMinMax(ts, descr)
		}
		out[cc.PathInSchema()[0]] = s
	}
	return func(column string) (Stats, bool) {
		s, ok := out[column]
		return s, ok
	}
}

// logicalMinMax returns the bounds of a column chunk as MayMatch compares
// them, from its physical statistics and its logical type.
func logicalMinMax(ts metadata.TypedStatistics, descr *schema.Column) (lo, hi any, ok bool) {
	switch lt := descr.LogicalType().(type) {
	case schema.DecimalLogicalType:
		return decimalMinMax(ts)
	case schema.TimestampLogicalType:
		per := map[schema.TimeUnitType]int64{schema.TimeUnitMillis: 1e6, schema.TimeUnitMicros: 1e3, schema.TimeUnitNanos: 1}
		return nanosMinMax(ts, per[lt.TimeUnit()])
	case schema.DateLogicalType:
		return nanosMinMax(ts, 86400e9)
	}
	return minMax(ts, descr.SortOrder())
}

// nanosMinMax converts the bounds of a timestamp or date column, per
// nanoseconds to its unit, to nanoseconds.
func nanosMinMax(ts metadata.TypedStatistics, per int64) (lo, hi any, ok bool) {
	if per == 0 { // a unit this package does not know
		return nil, nil, false
	}
	var l, h int64
	switch ts := ts.(type) {
	case *metadata.Int32Statistics:
		l, h = int64(ts.Min()), int64(ts.Max())
	case *metadata.Int64Statistics:
		l, h = ts.Min(), ts.Max()
	default:
		return nil, nil, false
	}
	ln, okl := mulNanos(l, per)
	hn, okh := mulNanos(h, per)
	if !okl || !okh {
		return nil, nil, false
	}
	return ln, hn, true
}

// decimalMinMax reads the bounds of a decimal column as unscaled values.
func decimalMinMax(ts metadata.TypedStatistics) (lo, hi any, ok bool) {
	switch ts := ts.(type) {
	case *metadata.Int32Statistics:
		return decimal128.FromI64(int64(ts.Min())), decimal128.FromI64(int64(ts.Max())), true
	case *metadata.Int64Statistics:
		return decimal128.FromI64(ts.Min()), decimal128.FromI64(ts.Max()), true
	case *metadata.FixedLenByteArrayStatistics:
		l, okl := bigEndianDecimal(ts.Min())
		h, okh := bigEndianDecimal(ts.Max())
		return l, h, okl && okh
	case *metadata.ByteArrayStatistics:
		l, okl := bigEndianDecimal(ts.Min())
		h, okh := bigEndianDecimal(ts.Max())
		return l, h, okl && okh
	}
	return nil, nil, false
}

// bigEndianDecimal reads Parquet's big-endian two's-complement encoding of
// a decimal's unscaled value: a decimal128.Num from 1 to 16 bytes, a
// decimal256.Num from 17 to 32.
func bigEndianDecimal(b []byte) (any, bool) {
	if len(b) == 0 || len(b) > 32 {
		return nil, false
	}
	var buf [32]byte
	if b[0]&0x80 != 0 {
		for i := range buf {
			buf[i] = 0xff
		}
	}
	copy(buf[32-len(b):], b)
	w := func(i int) uint64 { return binary.BigEndian.Uint64(buf[8*i:]) }
	if len(b) <= 16 {
		return decimal128.New(int64(w(2)), w(3)), true
	}
	return decimal256.New(w(0), w(1), w(2), w(3)), true
}

func minMax(ts metadata.TypedStatistics, order schema.SortOrder) (lo, hi any, ok bool) {
	switch ts := ts.(type) {
	case *metadata.BooleanStatistics:
		return ts.Min(), ts.Max(), true
	case *metadata.Int32Statistics:
		switch order {
		case schema.SortSIGNED:
			return int64(ts.Min()), int64(ts.Max()), true
		case schema.SortUNSIGNED:
			return int64(uint32(ts.Min())), int64(uint32(ts.Max())), true
		}
	case *metadata.Int64Statistics:
		switch order {
		case schema.SortSIGNED:
			return ts.Min(), ts.Max(), true
		case schema.SortUNSIGNED:
			if lo, hi := uint64(ts.Min()), uint64(ts.Max()); hi <= math.MaxInt64 {
				return int64(lo), int64(hi), true
			}
		}
	case *metadata.Float32Statistics:
		return float64(ts.Min()), float64(ts.Max()), !math.IsNaN(float64(ts.Min())) && !math.IsNaN(float64(ts.Max()))
	case *metadata.Float64Statistics:
		return ts.Min(), ts.Max(), !math.IsNaN(ts.Min()) && !math.IsNaN(ts.Max())
	case *metadata.ByteArrayStatistics:
		if order == schema.SortUNSIGNED && ts.Type() == parquet.Types.ByteArray {
			return string(ts.Min()), string(ts.Max()), true
		}
	}
	return nil, nil, false
}
