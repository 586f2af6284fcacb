package expr

import (
	"fmt"
	"math/big"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/decimal256"
)

// A decimal column (decimal128 or decimal256) is compared with number literals exactly, as decimals
// at the column's scale: the literal is read as the exact rational its text
// writes (1.25, -3, 2.5e-1) and scaled by 10^scale. When it then has a
// fraction, it lies strictly between two integers f and f+1, and
// x < L is x ≤ f, x > L is x ≥ f+1, x = L is never true and x != L always
// (for a non-null x). No value is rounded through a float.

// decCmp compares a decimal column with a constant unscaled value at the
// column's scale: a decimal128.Num for a decimal128 column, a
// decimal256.Num for a decimal256 one.
type decCmp struct {
	op cmpOp
	x  node
	v  any
}

func (n *decCmp) kind() kind { return kBool }

func (n *decCmp) eval(ev *evaluator) (compute.Datum, error) {
	as, err := ev.arrays(n.x)
	if err != nil {
		return nil, err
	}
	x := as[0]
	defer x.Release()
	var cmp func(i int) int
	switch x := x.(type) {
	case *array.Decimal128:
		v := n.v.(decimal128.Num)
		cmp = func(i int) int { return x.Value(i).Cmp(v) }
	case *array.Decimal256:
		v := n.v.(decimal256.Num)
		cmp = func(i int) int { return x.Value(i).Cmp(v) }
	default:
		return nil, fmt.Errorf("a decimal comparison on %s", x.DataType())
	}
	w := newBoolWriter(ev, x.NullN() > 0)
	for i := 0; i < ev.n; i++ {
		if x.IsNull(i) {
			w.null(i)
			continue
		}
		w.set(i, cmpHolds(n.op, cmp(i)))
	}
	return own(w.finish()), nil
}

// cmpHolds reports whether o holds for two values whose comparison is c
// (the sign of a − b).
func cmpHolds(o cmpOp, c int) bool {
	switch o {
	case cmpEQ:
		return c == 0
	case cmpNE:
		return c != 0
	case cmpLT:
		return c < 0
	case cmpLE:
		return c <= 0
	case cmpGT:
		return c > 0
	}
	return c >= 0
}

func pow10(n int32) *big.Int { return new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(n)), nil) }

// decimalType is the type of a decimal expression: a column or coalesce.
func decimalType(n node) (arrow.DecimalType, bool) {
	var dt arrow.DataType
	switch n := n.(type) {
	case *column:
		dt = n.dt
	case *coalesce:
		dt = n.dt
	}
	d, ok := dt.(arrow.DecimalType)
	return d, ok
}

// scaled returns the number literal lit at the scale of decimal type dt:
// floor(lit·10^scale) and the integer after it, as values of dt's width
// (clamped just past the 38 or 76 digits its values have, which keeps every
// comparison's answer), and whether lit·10^scale is an integer.
func (c *compiler) scaled(e sexpr, lit *literal, dt arrow.DecimalType) (floor, ceil any, exact bool, err error) {
	r, ok := new(big.Rat).SetString(lit.num)
	if lit.num == "" || !ok {
		return nil, nil, false, c.errf(e, "type mismatch: a decimal is compared with a number, not a %s", lit.k)
	}
	scale := dt.GetScale()
	p := new(big.Rat).SetInt(pow10(abs32(scale)))
	if scale >= 0 {
		r.Mul(r, p)
	} else {
		r.Quo(r, p)
	}
	fl := new(big.Int).Div(r.Num(), r.Denom()) // Euclidean: floor for a positive denominator
	limit := pow10(38)
	if dt.BitWidth() == 256 {
		limit = pow10(76)
	}
	lo := new(big.Int).Sub(new(big.Int).Neg(limit), big.NewInt(1))
	switch {
	case fl.Cmp(limit) > 0:
		fl.Set(limit)
	case fl.Cmp(lo) < 0:
		fl.Set(lo)
	}
	cl := new(big.Int).Add(fl, big.NewInt(1))
	if dt.BitWidth() == 256 {
		return decimal256.FromBigInt(fl), decimal256.FromBigInt(cl), r.IsInt(), nil
	}
	return decimal128.FromBigInt(fl), decimal128.FromBigInt(cl), r.IsInt(), nil
}

func abs32(v int32) int32 {
	if v < 0 {
		return -v
	}
	return v
}

// decimalCompare compiles a comparison of a decimal column (or coalesce)
// with a number literal or NULL, in either order.
func (c *compiler) decimalCompare(e sexpr, o cmpOp, l, r node) (node, error) {
	x, other := l, r
	if _, ok := l.(*literal); ok {
		x, other, o = r, l, flip[o]
	}
	dt, isDec := decimalType(x)
	lit, isLit := other.(*literal)
	if !isDec || !isLit {
		return nil, c.errf(e, "a decimal column is compared with a number literal or NULL, not with an expression of type %s",
			other.kind())
	}
	if lit.null {
		return &literal{k: kBool, null: true}, nil
	}
	f, ceil, exact, err := c.scaled(e, lit, dt)
	if err != nil {
		return nil, err
	}
	if exact {
		return &decCmp{op: o, x: x, v: f}, nil
	}
	switch o {
	case cmpLT, cmpLE:
		return &decCmp{op: cmpLE, x: x, v: f}, nil
	case cmpGT, cmpGE:
		return &decCmp{op: cmpGE, x: x, v: ceil}, nil
	case cmpEQ:
		return &logic{op: opAnd, l: &decCmp{op: cmpGT, x: x, v: f}, r: &decCmp{op: cmpLT, x: x, v: ceil}}, nil
	}
	return &logic{op: opOr, l: &decCmp{op: cmpLE, x: x, v: f}, r: &decCmp{op: cmpGE, x: x, v: ceil}}, nil
}

// decimalIn compiles x [NOT] IN (...) for a decimal column (or coalesce)
// x: the list holds number literals and NULLs; a literal with more
// fractional digits than x's scale equals no value and is left out.
func (c *compiler) decimalIn(e *inExpr, x node, items []node) (node, error) {
	dt, _ := decimalType(x)
	var values []*literal
	for _, it := range items {
		lit, ok := it.(*literal)
		if !ok {
			return nil, c.errf(e, "IN on a decimal column takes number literals and NULL, not an expression of type %s", it.kind())
		}
		if lit.null {
			values = append(values, &literal{k: kDecimal, null: true})
			continue
		}
		f, _, exact, err := c.scaled(e, lit, dt)
		if err != nil {
			return nil, err
		}
		if exact {
			values = append(values, &literal{k: kDecimal, v: f})
		}
	}
	return &in{x: x, values: values, neg: e.neg}, nil
}

// decimalCoalesce compiles coalesce over decimal columns of one type and
// number literals and NULLs, which must be values of that type exactly.
func (c *compiler) decimalCoalesce(e sexpr, args []node) (node, error) {
	var dt arrow.DecimalType
	for _, a := range args {
		if d, ok := decimalType(a); ok {
			if dt != nil && !arrow.TypeEqual(d, dt) {
				return nil, c.errf(e, "type mismatch: coalesce of %s and %s; its decimals must be of one type", dt, d)
			}
			dt = d
		}
	}
	out := make([]node, len(args))
	for i, a := range args {
		lit, isLit := a.(*literal)
		switch {
		case !isLit && a.kind() == kDecimal:
			out[i] = a
			continue
		case !isLit:
			return nil, c.errf(e, "type mismatch: coalesce of %s and %s", dt, a.kind())
		case lit.null:
			out[i] = &literal{k: kDecimal, null: true, dt: dt}
			continue
		}
		f, _, exact, err := c.scaled(e, lit, dt)
		if err != nil {
			return nil, err
		}
		limit := pow10(dt.GetPrecision())
		if v := decimalBig(f); !exact || v.CmpAbs(limit) >= 0 {
			return nil, c.errf(e, "%s is not a value of %s", lit.num, dt)
		}
		out[i] = &literal{k: kDecimal, v: f, dt: dt}
	}
	return &coalesce{k: kDecimal, dt: dt, args: out}, nil
}

// decimalBig is a decimal128.Num or decimal256.Num as a big.Int.
func decimalBig(v any) *big.Int {
	if v, ok := v.(decimal128.Num); ok {
		return v.BigInt()
	}
	return v.(decimal256.Num).BigInt()
}
