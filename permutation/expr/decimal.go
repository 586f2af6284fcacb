package expr

import (
	"math/big"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
)

// A decimal column is compared with number literals exactly, as decimals
// at the column's scale: the literal is read as the exact rational its text
// writes (1.25, -3, 2.5e-1) and scaled by 10^scale. When it then has a
// fraction, it lies strictly between two integers f and f+1, and
// x < L is x ≤ f, x > L is x ≥ f+1, x = L is never true and x != L always
// (for a non-null x). No value is rounded through a float.

// decCmp compares a decimal128 column with a constant unscaled value at the
// column's scale.
type decCmp struct {
	op cmpOp
	x  node
	v  decimal128.Num
}

func (n *decCmp) kind() kind { return kBool }

func (n *decCmp) eval(ev *evaluator) (compute.Datum, error) {
	as, err := ev.arrays(n.x)
	if err != nil {
		return nil, err
	}
	x := as[0].(*array.Decimal128)
	defer x.Release()
	w := newBoolWriter(ev, x.NullN() > 0)
	for i := 0; i < ev.n; i++ {
		if x.IsNull(i) {
			w.null(i)
			continue
		}
		w.set(i, cmpHolds(n.op, x.Value(i).Cmp(n.v)))
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

// decimalLimit bounds the unscaled values of decimal128 columns (at most
// 38 digits); constants beyond it are clamped to just past it, which keeps
// every comparison's answer.
var decimalLimit = new(big.Int).Exp(big.NewInt(10), big.NewInt(38), nil)

// scaled returns the number literal lit at scale: f = floor(lit·10^scale),
// clamped past the range of decimal128 values, and whether lit·10^scale is
// an integer.
func (c *compiler) scaled(e sexpr, lit *literal, scale int32) (f decimal128.Num, exact bool, err error) {
	r, ok := new(big.Rat).SetString(lit.num)
	if lit.num == "" || !ok {
		return f, false, c.errf(e, "type mismatch: a decimal column is compared with a number, not a %s", lit.k)
	}
	p := new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(abs32(scale))), nil))
	if scale >= 0 {
		r.Mul(r, p)
	} else {
		r.Quo(r, p)
	}
	fl := new(big.Int).Div(r.Num(), r.Denom()) // Euclidean: floor for a positive denominator
	lo := new(big.Int).Sub(new(big.Int).Neg(decimalLimit), big.NewInt(1))
	switch {
	case fl.Cmp(decimalLimit) > 0:
		fl.Set(decimalLimit)
	case fl.Cmp(lo) < 0:
		fl.Set(lo)
	}
	return decimal128.FromBigInt(fl), r.IsInt(), nil
}

func abs32(v int32) int32 {
	if v < 0 {
		return -v
	}
	return v
}

// decimalCompare compiles a comparison of a decimal column with a number
// literal or NULL, in either order.
func (c *compiler) decimalCompare(e sexpr, o cmpOp, l, r node) (node, error) {
	x, other := l, r
	if _, ok := l.(*literal); ok {
		x, other, o = r, l, flip[o]
	}
	col, isCol := x.(*column)
	lit, isLit := other.(*literal)
	if !isCol || !isLit || x.kind() != kDecimal {
		return nil, c.errf(e, "a decimal column is compared with a number literal or NULL, not with an expression of type %s",
			other.kind())
	}
	if lit.null {
		return &literal{k: kBool, null: true}, nil
	}
	f, exact, err := c.scaled(e, lit, col.dt.(*arrow.Decimal128Type).Scale)
	if err != nil {
		return nil, err
	}
	if exact {
		return &decCmp{op: o, x: x, v: f}, nil
	}
	ceil := f.Add(decimal128.FromI64(1))
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

// decimalIn compiles x [NOT] IN (...) for a decimal column x: the list
// holds number literals and NULLs; a literal with more fractional digits
// than the column's scale equals no value and is left out.
func (c *compiler) decimalIn(e *inExpr, x node, items []node) (node, error) {
	col, isCol := x.(*column)
	if !isCol {
		return nil, c.errf(e, "IN on a decimal needs a decimal column")
	}
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
		f, exact, err := c.scaled(e, lit, col.dt.(*arrow.Decimal128Type).Scale)
		if err != nil {
			return nil, err
		}
		if exact {
			values = append(values, &literal{k: kDecimal, v: f})
		}
	}
	return &in{x: x, values: values, neg: e.neg}, nil
}
