package expr

import (
	"fmt"
	"math"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/decimal256"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/arrow/scalar"

	"github.com/croupier-data/croupier/core/errcode"
)

// node is a type-checked expression tree node. eval returns a Datum the
// caller owns: an array of ev.n values or a scalar that stands for ev.n equal
// values, of the Arrow type of kind().
type node interface {
	kind() kind
	eval(ev *evaluator) (compute.Datum, error)
}

type (
	literal struct {
		k    kind
		v    any // bool, int64 (kTime too), float64, string, decimal128.Num or decimal256.Num; unused when null
		null bool
		num  string         // a number literal's text, with its sign, for decimal comparisons
		dt   arrow.DataType // a decimal literal's type
	}
	column struct {
		path []string // top-level name, then struct field names
		k    kind
		dt   arrow.DataType // as the schema declared it
	}
	toFloat   struct{ x node }
	boolToInt struct{ x node }
	compare   struct {
		op   cmpOp
		l, r node
	}
	logic struct {
		op   logicOp
		l, r node
	}
	not    struct{ x node }
	isNull struct {
		x   node
		neg bool
	}
	isBool struct {
		x         node
		want, neg bool // x IS [NOT] want
	}
	in struct {
		x      node
		values []*literal
		neg    bool
	}
	like struct {
		x   node
		m   *likeMatcher
		neg bool
	}
	arith struct {
		op   arithOp
		k    kind
		l, r node
	}
	// negate and abs keep their operand's kind: asking the operand would
	// walk a chain of them once per link.
	negate struct {
		k kind
		x node
	}
	abs struct {
		k kind
		x node
	}
	length struct {
		x     node
		chars bool // count characters of a string rather than bytes
	}
	coalesce struct {
		k    kind
		dt   arrow.DataType // the type of a decimal result
		args []node
	}
)

type cmpOp int

const (
	cmpEQ cmpOp = iota
	cmpNE
	cmpLT
	cmpLE
	cmpGT
	cmpGE
)

var cmpFuncs = [...]string{"equal", "not_equal", "less", "less_equal", "greater", "greater_equal"}

type logicOp int

const (
	opAnd logicOp = iota
	opOr
)

type arithOp int

const (
	opAdd arithOp = iota
	opSub
	opMul
	opDiv
	opIntDiv
	opMod
)

func (n *literal) kind() kind   { return n.k }
func (n *column) kind() kind    { return n.k }
func (n *toFloat) kind() kind   { return kFloat }
func (n *boolToInt) kind() kind { return kInt }
func (n *compare) kind() kind   { return kBool }
func (n *logic) kind() kind     { return kBool }
func (n *not) kind() kind       { return kBool }
func (n *isNull) kind() kind    { return kBool }
func (n *isBool) kind() kind    { return kBool }
func (n *in) kind() kind        { return kBool }
func (n *like) kind() kind      { return kBool }
func (n *arith) kind() kind     { return n.k }
func (n *negate) kind() kind    { return n.k }
func (n *abs) kind() kind       { return n.k }
func (n *length) kind() kind    { return kInt }
func (n *coalesce) kind() kind  { return n.k }

// scalar returns the literal as an Arrow scalar of its kind's type; the NULL
// literal is a boolean null.
func (n *literal) scalar() scalar.Scalar {
	if n.null && n.dt != nil {
		return scalar.MakeNullScalar(n.dt)
	}
	if n.null {
		return scalar.MakeNullScalar(n.k.arrowType())
	}
	switch v := n.v.(type) {
	case decimal128.Num:
		return scalar.NewDecimal128Scalar(v, n.dt)
	case decimal256.Num:
		return scalar.NewDecimal256Scalar(v, n.dt)
	case bool:
		return scalar.NewBooleanScalar(v)
	case int64:
		return scalar.NewInt64Scalar(v)
	case float64:
		return scalar.NewFloat64Scalar(v)
	case string:
		return scalar.NewStringScalar(v)
	}
	panic(fmt.Sprintf("expr: literal of type %T", n.v))
}

func (n *literal) eval(*evaluator) (compute.Datum, error) {
	return &compute.ScalarDatum{Value: n.scalar()}, nil
}

func (n *column) name() string {
	s := n.path[0]
	for _, p := range n.path[1:] {
		s += "." + p
	}
	return s
}

func (n *column) eval(ev *evaluator) (compute.Datum, error) {
	idx := ev.rec.Schema().FieldIndices(n.path[0])
	if len(idx) == 0 {
		return nil, errcode.New(errcode.InvalidArgument, evalOp, n.name(), "the record batch has no column %q", n.path[0])
	}
	arr := ev.rec.Column(idx[0])
	arr.Retain()
	for _, name := range n.path[1:] {
		st, ok := arr.(*array.Struct)
		var i int
		if ok {
			i, ok = st.DataType().(*arrow.StructType).FieldIdx(name)
		}
		if !ok {
			arr.Release()
			return nil, errcode.New(errcode.InvalidArgument, evalOp, n.name(), "the record batch has no field %q", name)
		}
		child := withParentNulls(ev, st, st.Field(i))
		arr.Release()
		arr = child
	}
	if !arrow.TypeEqual(arr.DataType(), n.dt) {
		defer arr.Release()
		return nil, errcode.New(errcode.InvalidArgument, evalOp, n.name(),
			"column has type %s in the record batch but %s in the schema", arr.DataType(), n.dt)
	}
	if n.k == kTime {
		defer arr.Release()
		t, err := timeNanos(ev, n.name(), arr)
		if err != nil {
			return nil, err
		}
		return own(t), nil
	}
	d := own(arr)
	if n.k == kList || n.k == kStruct || n.k == kDecimal || arrow.TypeEqual(n.dt, n.k.arrowType()) {
		return d, nil
	}
	defer d.Release()
	// Widening casts are exact, except uint64 above the int64 range, which
	// the safe cast reports as an error.
	opts := compute.SafeCastOptions(n.k.arrowType())
	out, err := compute.CastDatum(ev.kctx, d, opts)
	if err != nil {
		return nil, errcode.Wrap(err, errcode.InvalidArgument, evalOp, n.name())
	}
	return out, nil
}

// withParentNulls returns child (a field of parent, already sliced like it)
// with parent's nulls added to its own: a field of a null struct is null.
// The caller releases the result.
func withParentNulls(ev *evaluator, parent *array.Struct, child arrow.Array) arrow.Array {
	if parent.NullN() == 0 {
		child.Retain()
		return child
	}
	cd := child.Data()
	off, n := cd.Offset(), cd.Len()
	buf := newBitmap(ev, off+n)
	bits := buf.Bytes()
	for i := 0; i < n; i++ {
		if parent.IsValid(i) && child.IsValid(i) {
			bits[(off+i)/8] |= 1 << ((off + i) % 8)
		}
	}
	bufs := append([]*memory.Buffer{buf}, cd.Buffers()[1:]...)
	data := array.NewData(cd.DataType(), n, bufs, cd.Children(), array.UnknownNullCount, off)
	if d := cd.Dictionary(); d != nil {
		data.SetDictionary(d)
	}
	buf.Release()
	defer data.Release()
	return array.MakeFromData(data)
}

func (n *toFloat) eval(ev *evaluator) (compute.Datum, error) {
	d, err := n.x.eval(ev)
	if err != nil {
		return nil, err
	}
	defer d.Release()
	if err := ev.ctx.Err(); err != nil {
		return nil, err
	}
	return compute.CastDatum(ev.kctx, d, compute.UnsafeCastOptions(arrow.PrimitiveTypes.Float64))
}

// boolToInt has its own kernel: arrow-go v18.8.0's cast from boolean to
// int64 ignores the offset of sliced inputs (docs/upstream.md; canary
// TestUpstreamBoolToIntIgnoresOffset).
func (n *boolToInt) eval(ev *evaluator) (compute.Datum, error) {
	as, err := ev.arrays(n.x)
	if err != nil {
		return nil, err
	}
	x := as[0].(*array.Boolean)
	defer x.Release()
	w := newNumWriter[int64](ev, x.NullN() > 0)
	for i := 0; i < ev.n; i++ {
		switch {
		case x.IsNull(i):
			w.null(i)
		case x.Value(i):
			w.set(i, 1)
		}
	}
	return own(w.finish()), nil
}

func (n *compare) eval(ev *evaluator) (compute.Datum, error) {
	return ev.callNodes(cmpFuncs[n.op], nil, n.l, n.r)
}

func (n *logic) eval(ev *evaluator) (compute.Datum, error) {
	name := "and_kleene"
	if n.op == opOr {
		name = "or_kleene"
	}
	return ev.callNodes(name, nil, n.l, n.r)
}

// not and isNull have their own kernels: arrow-go v18.8.0's "not" and
// "is_not_null" misplace the validity of sliced inputs, and isNull answers
// both IS NULL and IS NOT NULL (docs/upstream.md; canary
// TestUpstreamNotAndIsNotNullMisplaceValidity).

func (n *not) eval(ev *evaluator) (compute.Datum, error) {
	as, err := ev.arrays(n.x)
	if err != nil {
		return nil, err
	}
	x := as[0].(*array.Boolean)
	defer x.Release()
	w := newBoolWriter(ev, x.NullN() > 0)
	for i := 0; i < ev.n; i++ {
		if x.IsNull(i) {
			w.null(i)
		} else {
			w.set(i, !x.Value(i))
		}
	}
	return own(w.finish()), nil
}

func (n *isNull) eval(ev *evaluator) (compute.Datum, error) {
	as, err := ev.arrays(n.x)
	if err != nil {
		return nil, err
	}
	x := as[0]
	defer x.Release()
	w := newBoolWriter(ev, false)
	for i := 0; i < ev.n; i++ {
		w.set(i, x.IsNull(i) != n.neg)
	}
	return own(w.finish()), nil
}

func (n *isBool) eval(ev *evaluator) (compute.Datum, error) {
	as, err := ev.arrays(n.x)
	if err != nil {
		return nil, err
	}
	x := as[0].(*array.Boolean)
	defer x.Release()
	w := newBoolWriter(ev, false)
	for i := 0; i < ev.n; i++ {
		w.set(i, (x.IsValid(i) && x.Value(i) == n.want) != n.neg)
	}
	return own(w.finish()), nil
}

// in has its own kernel: arrow-go v18.8.0's "is_in" leaks memory (its
// lookup state, for sets of strings and of numbers alike) and tells -0.0
// from 0.0 (docs/upstream.md; canary TestUpstreamIsInLeaksAndTellsZeros).
func (n *in) eval(ev *evaluator) (compute.Datum, error) {
	set := make(map[any]bool, len(n.values))
	hasNull := false
	for _, v := range n.values {
		if v.null {
			hasNull = true
		} else {
			set[inKey(v.v)] = true
		}
	}
	as, err := ev.arrays(n.x)
	if err != nil {
		return nil, err
	}
	x := as[0]
	defer x.Release()
	w := newBoolWriter(ev, true)
	for i := 0; i < ev.n; i++ {
		if x.IsNull(i) {
			w.null(i)
			continue
		}
		var found bool
		switch x := x.(type) {
		case *array.String:
			found = set[x.Value(i)]
		case *array.Int64:
			found = set[x.Value(i)]
		case *array.Float64:
			found = set[inKey(x.Value(i))]
		case *array.Boolean:
			found = set[x.Value(i)]
		case *array.Decimal128:
			found = set[x.Value(i)]
		case *array.Decimal256:
			found = set[x.Value(i)]
		}
		switch {
		case found:
			w.set(i, !n.neg)
		case hasNull:
			w.null(i)
		default:
			w.set(i, n.neg)
		}
	}
	return own(w.finish()), nil
}

// inKey makes equal values equal keys: -0.0 and 0.0 are one key; NaN,
// never equal to anything, matches nothing.
func inKey(v any) any {
	if f, ok := v.(float64); ok && f == 0 {
		return float64(0)
	}
	return v
}

func (n *like) eval(ev *evaluator) (compute.Datum, error) {
	as, err := ev.arrays(n.x)
	if err != nil {
		return nil, err
	}
	x := as[0].(*array.String)
	defer x.Release()
	w := newBoolWriter(ev, x.NullN() > 0)
	for i := 0; i < ev.n; i++ {
		if x.IsNull(i) {
			w.null(i)
			continue
		}
		w.set(i, n.m.match(x.Value(i)) != n.neg)
	}
	return own(w.finish()), nil
}

var arithFuncs = [...]string{opAdd: "add", opSub: "subtract", opMul: "multiply"}

func (n *arith) eval(ev *evaluator) (compute.Datum, error) {
	switch n.op {
	case opAdd, opSub, opMul:
		// The checked kernels: integer overflow is an error, not a wrap.
		return ev.callNodes(arithFuncs[n.op], nil, n.l, n.r)
	}
	as, err := ev.arrays(n.l, n.r)
	if err != nil {
		return nil, err
	}
	defer releaseArrays(as...)
	if n.k == kFloat {
		return floatDivMod(ev, n.op, as[0].(*array.Float64), as[1].(*array.Float64))
	}
	return intDivMod(ev, n.op, as[0].(*array.Int64), as[1].(*array.Int64))
}

// intDivMod divides integers, truncating toward zero; % is the remainder
// with the dividend's sign (Go's and MySQL's). A zero divisor gives NULL.
func intDivMod(ev *evaluator, o arithOp, l, r *array.Int64) (compute.Datum, error) {
	w := newNumWriter[int64](ev, true)
	lv, rv := l.Int64Values(), r.Int64Values()
	for i := 0; i < ev.n; i++ {
		if l.IsNull(i) || r.IsNull(i) || rv[i] == 0 {
			w.null(i)
			continue
		}
		if o != opMod && lv[i] == math.MinInt64 && rv[i] == -1 {
			w.release()
			return nil, errcode.New(errcode.InvalidArgument, evalOp, "", "integer overflow: %d / -1", lv[i])
		}
		if o == opMod {
			w.set(i, lv[i]%rv[i])
		} else {
			w.set(i, lv[i]/rv[i])
		}
	}
	return own(w.finish()), nil
}

// floatDivMod divides floats; % is math.Mod (the dividend's sign). A zero
// divisor gives NULL, as in SQL.
func floatDivMod(ev *evaluator, o arithOp, l, r *array.Float64) (compute.Datum, error) {
	w := newNumWriter[float64](ev, true)
	lv, rv := l.Float64Values(), r.Float64Values()
	for i := 0; i < ev.n; i++ {
		if l.IsNull(i) || r.IsNull(i) || rv[i] == 0 {
			w.null(i)
			continue
		}
		if o == opMod {
			w.set(i, math.Mod(lv[i], rv[i]))
		} else {
			w.set(i, lv[i]/rv[i])
		}
	}
	return own(w.finish()), nil
}

func (n *negate) eval(ev *evaluator) (compute.Datum, error) {
	return ev.callNodes("negate", nil, n.x)
}

func (n *abs) eval(ev *evaluator) (compute.Datum, error) {
	return ev.callNodes("abs", nil, n.x)
}

func (n *length) eval(ev *evaluator) (compute.Datum, error) {
	as, err := ev.arrays(n.x)
	if err != nil {
		return nil, err
	}
	x := as[0]
	defer x.Release()
	w := newNumWriter[int64](ev, x.NullN() > 0)
	for i := 0; i < ev.n; i++ {
		if x.IsNull(i) {
			w.null(i)
			continue
		}
		var v int
		switch x := x.(type) {
		case *array.String:
			if n.chars {
				v = utf8.RuneCountInString(x.Value(i))
			} else {
				v = x.ValueLen(i)
			}
		case *array.List:
			lo, hi := x.ValueOffsets(i)
			v = int(hi - lo)
		case *array.LargeList:
			lo, hi := x.ValueOffsets(i)
			v = int(hi - lo)
		case *array.FixedSizeList:
			v = int(x.DataType().(*arrow.FixedSizeListType).Len())
		default:
			w.release()
			return nil, fmt.Errorf("length of %s", x.DataType())
		}
		w.set(i, int64(v))
	}
	return own(w.finish()), nil
}

func (n *coalesce) eval(ev *evaluator) (compute.Datum, error) {
	as, err := ev.arrays(n.args...)
	if err != nil {
		return nil, err
	}
	defer releaseArrays(as...)
	typ := n.k.arrowType()
	if n.dt != nil {
		typ = n.dt
	}
	b := array.NewBuilder(ev.mem, typ)
	defer b.Release()
	b.Reserve(ev.n)
rows:
	for i := 0; i < ev.n; i++ {
		for _, a := range as {
			if a.IsValid(i) {
				switch a := a.(type) {
				case *array.Boolean:
					b.(*array.BooleanBuilder).UnsafeAppend(a.Value(i))
				case *array.Int64:
					b.(*array.Int64Builder).UnsafeAppend(a.Value(i))
				case *array.Float64:
					b.(*array.Float64Builder).UnsafeAppend(a.Value(i))
				case *array.String:
					b.(*array.StringBuilder).Append(a.Value(i))
				case *array.Decimal128:
					b.(*array.Decimal128Builder).UnsafeAppend(a.Value(i))
				case *array.Decimal256:
					b.(*array.Decimal256Builder).UnsafeAppend(a.Value(i))
				}
				continue rows
			}
		}
		b.AppendNull()
	}
	return own(b.NewArray()), nil
}
