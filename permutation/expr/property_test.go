package expr_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/croupier-data/croupier/internal/seedtest"
	"github.com/croupier-data/croupier/permutation/expr"
)

// The property tests compare Eval with this file's reference evaluator,
// which works row by row on Go values, following SQL's rules as plainly as
// possible.

type kind int

const (
	kBool kind = iota
	kInt
	kFloat
	kString
)

// val is one value: nil for NULL, else bool, int64, float64 or string.
type val = any

type row map[string]val

var propSchema = arrow.NewSchema([]arrow.Field{
	{Name: "pi", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	{Name: "pj", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
	{Name: "pf", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	{Name: "ps", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "pd", Type: &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int16, ValueType: arrow.BinaryTypes.String}, Nullable: true},
	{Name: "pb", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
	{Name: "pl", Type: arrow.ListOf(arrow.PrimitiveTypes.Int64), Nullable: true},
	{Name: "pst", Type: arrow.StructOf(
		arrow.Field{Name: "a", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		arrow.Field{Name: "b", Type: arrow.BinaryTypes.String, Nullable: true}), Nullable: true},
}, nil)

var (
	floatPool = []float64{-2.5, -1, 0, 0.5, 1, 3.25, 10}
	alphabet  = []string{"a", "b", "_", "%", "é"}
)

type gen struct{ r *rand.Rand }

func (g gen) null() bool { return g.r.IntN(5) == 0 }

func (g gen) int() int64 {
	if g.r.IntN(10) == 0 {
		return g.r.Int64N(101) - 50
	}
	return g.r.Int64N(11) - 5
}

func (g gen) float() float64 {
	if g.r.IntN(4) == 0 {
		return math.Round((g.r.Float64()*20-10)*4) / 4
	}
	return floatPool[g.r.IntN(len(floatPool))]
}

func (g gen) str() string {
	var b strings.Builder
	for range g.r.IntN(4) {
		b.WriteString(alphabet[g.r.IntN(len(alphabet))])
	}
	return b.String()
}

// data makes n random rows and the record batch holding them.
func (g gen) data(mem memory.Allocator, n int) ([]row, arrow.RecordBatch) {
	b := array.NewRecordBuilder(mem, propSchema)
	defer b.Release()
	rows := make([]row, n)
	for i := range rows {
		r := row{}
		rows[i] = r
		if !g.null() {
			r["pi"] = g.int()
		}
		if !g.null() {
			r["pj"] = g.int()
		}
		if !g.null() {
			r["pf"] = g.float()
		}
		if !g.null() {
			r["ps"] = g.str()
		}
		if !g.null() {
			r["pd"] = g.str()
		}
		if !g.null() {
			r["pb"] = g.r.IntN(2) == 0
		}
		if !g.null() {
			var l []val
			for range g.r.IntN(4) {
				if g.null() {
					l = append(l, nil)
				} else {
					l = append(l, g.int())
				}
			}
			r["pl"] = l
		}
		if !g.null() {
			r["pst"] = true
			if !g.null() {
				r["pst.a"] = g.int()
			}
			if !g.null() {
				r["pst.b"] = g.str()
			}
		}
		appendRow(b, r)
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	// Rebuild the struct column so that the fields of null structs hold
	// values, which must not show through.
	ab, bb := array.NewInt64Builder(mem), array.NewStringBuilder(mem)
	defer ab.Release()
	defer bb.Release()
	valid := memory.NewResizableBuffer(mem)
	defer valid.Release()
	valid.Resize(int(bitutil.BytesForBits(int64(n))))
	clear(valid.Bytes())
	nulls := 0
	for i, r := range rows {
		if r["pst"] == nil {
			nulls++
			ab.Append(99)
			bb.Append("junk")
			continue
		}
		bitutil.SetBit(valid.Bytes(), i)
		if v, ok := r["pst.a"].(int64); ok {
			ab.Append(v)
		} else {
			ab.AppendNull()
		}
		if v, ok := r["pst.b"].(string); ok {
			bb.Append(v)
		} else {
			bb.AppendNull()
		}
	}
	fa, fb := ab.NewArray(), bb.NewArray()
	defer fa.Release()
	defer fb.Release()
	st, err := array.NewStructArrayWithFieldsAndNulls([]arrow.Array{fa, fb},
		propSchema.Field(7).Type.(*arrow.StructType).Fields(), valid, nulls, 0)
	if err != nil {
		panic(err)
	}
	defer st.Release()
	cols := append([]arrow.Array{}, rec.Columns()[:7]...)
	return rows, array.NewRecordBatch(propSchema, append(cols, st), int64(n))
}

func appendRow(b *array.RecordBuilder, r row) {
	appendVal := func(fb array.Builder, v val) {
		if v == nil {
			fb.AppendNull()
			return
		}
		switch fb := fb.(type) {
		case *array.Int64Builder:
			fb.Append(v.(int64))
		case *array.Int32Builder:
			fb.Append(int32(v.(int64)))
		case *array.Float64Builder:
			fb.Append(v.(float64))
		case *array.StringBuilder:
			fb.Append(v.(string))
		case *array.BinaryDictionaryBuilder:
			_ = fb.AppendString(v.(string))
		case *array.BooleanBuilder:
			fb.Append(v.(bool))
		}
	}
	for i, name := range []string{"pi", "pj", "pf", "ps", "pd", "pb"} {
		appendVal(b.Field(i), r[name])
	}
	lb := b.Field(6).(*array.ListBuilder)
	if l, ok := r["pl"].([]val); ok {
		lb.Append(true)
		for _, v := range l {
			appendVal(lb.ValueBuilder(), v)
		}
	} else {
		lb.AppendNull()
	}
	sb := b.Field(7).(*array.StructBuilder)
	if r["pst"] != nil {
		sb.Append(true)
		appendVal(sb.FieldBuilder(0), r["pst.a"])
		appendVal(sb.FieldBuilder(1), r["pst.b"])
	} else {
		sb.AppendNull()
	}
}

// gexpr is a generated expression: its text and its reference evaluator.
type gexpr struct {
	sql  string
	k    kind
	eval func(row) val
}

func col(name string, k kind) gexpr {
	return gexpr{name, k, func(r row) val { return r[name] }}
}

func lit(sql string, k kind, v val) gexpr {
	return gexpr{sql, k, func(row) val { return v }}
}

func (g gen) intLit() gexpr {
	v := g.int()
	if v < 0 {
		return lit(fmt.Sprintf("(%d)", v), kInt, v)
	}
	return lit(fmt.Sprint(v), kInt, v)
}

func (g gen) floatLit() gexpr {
	v := g.float()
	if v < 0 {
		return lit(fmt.Sprintf("(%.2f)", v), kFloat, v)
	}
	return lit(fmt.Sprintf("%.2f", v), kFloat, v)
}

func (g gen) strLit() gexpr {
	s := g.str()
	return lit("'"+s+"'", kString, s)
}

func toF(v val) float64 {
	if i, ok := v.(int64); ok {
		return float64(i)
	}
	return v.(float64)
}

// widen makes two numbers of the same kind, as SQL's implicit widening does.
func widen(a, b val) (val, val) {
	_, af := a.(float64)
	_, bf := b.(float64)
	if af != bf {
		return toF(a), toF(b)
	}
	return a, b
}

func (g gen) num(d int) gexpr {
	n := 6
	if d > 0 {
		n = 12
	}
	switch g.r.IntN(n) {
	case 0:
		return col("pi", kInt)
	case 1:
		return col("pj", kInt)
	case 2:
		return col("pst.a", kInt)
	case 3:
		return col("pf", kFloat)
	case 4:
		return g.intLit()
	case 5:
		return g.floatLit()
	case 6, 7:
		return g.arith(d)
	case 8:
		x := g.num(d - 1)
		return gexpr{"-(" + x.sql + ")", x.k, func(r row) val {
			switch v := x.eval(r).(type) {
			case int64:
				return -v
			case float64:
				return -v
			}
			return nil
		}}
	case 9:
		x := g.num(d - 1)
		return gexpr{"abs(" + x.sql + ")", x.k, func(r row) val {
			switch v := x.eval(r).(type) {
			case int64:
				if v < 0 {
					return -v
				}
				return v
			case float64:
				return math.Abs(v)
			}
			return nil
		}}
	case 10:
		fn := []string{"length(pl)", "cardinality(pl)", "length(ps)", "char_length(ps)", "length(pd)"}[g.r.IntN(5)]
		return gexpr{fn, kInt, func(r row) val {
			switch fn {
			case "length(pl)", "cardinality(pl)":
				if l, ok := r["pl"].([]val); ok {
					return int64(len(l))
				}
			case "length(ps)":
				if s, ok := r["ps"].(string); ok {
					return int64(len(s))
				}
			case "char_length(ps)":
				if s, ok := r["ps"].(string); ok {
					return int64(utf8.RuneCountInString(s))
				}
			case "length(pd)":
				if s, ok := r["pd"].(string); ok {
					return int64(len(s))
				}
			}
			return nil
		}}
	default:
		a, b := g.num(d-1), g.num(d-1)
		k := a.k
		if b.k != k {
			k = kFloat
		}
		return gexpr{"coalesce(" + a.sql + ", " + b.sql + ")", k, func(r row) val {
			v := a.eval(r)
			if v == nil {
				v = b.eval(r)
			}
			if v != nil && k == kFloat {
				return toF(v)
			}
			return v
		}}
	}
}

func (g gen) arith(d int) gexpr {
	a, b := g.num(d-1), g.num(d-1)
	op := []string{"+", "-", "*", "/", "%", "DIV"}[g.r.IntN(6)]
	k := a.k
	if b.k != k {
		k = kFloat
	}
	if op == "DIV" && k != kInt {
		op = "/"
	}
	return gexpr{"(" + a.sql + " " + op + " " + b.sql + ")", k, func(r row) val {
		x, y := a.eval(r), b.eval(r)
		if x == nil || y == nil {
			return nil
		}
		x, y = widen(x, y)
		if xi, ok := x.(int64); ok {
			yi := y.(int64)
			switch op {
			case "+":
				return xi + yi
			case "-":
				return xi - yi
			case "*":
				return xi * yi
			}
			if yi == 0 {
				return nil
			}
			if op == "%" {
				return xi % yi
			}
			return xi / yi
		}
		xf, yf := x.(float64), y.(float64)
		switch op {
		case "+":
			return xf + yf
		case "-":
			return xf - yf
		case "*":
			return xf * yf
		}
		if yf == 0 {
			return nil
		}
		if op == "%" {
			return math.Mod(xf, yf)
		}
		return xf / yf
	}}
}

func (g gen) str_(d int) gexpr {
	n := 4
	if d > 0 {
		n = 5
	}
	switch g.r.IntN(n) {
	case 0:
		return col("ps", kString)
	case 1:
		return col("pd", kString)
	case 2:
		return col("pst.b", kString)
	case 3:
		return g.strLit()
	default:
		a, b := g.str_(d-1), g.str_(d-1)
		return gexpr{"coalesce(" + a.sql + ", " + b.sql + ")", kString, func(r row) val {
			if v := a.eval(r); v != nil {
				return v
			}
			return b.eval(r)
		}}
	}
}

// compareVals returns the sign of a − b for two non-null values of one kind.
func compareVals(a, b val) int {
	a, b = widen(a, b)
	switch a := a.(type) {
	case int64:
		b := b.(int64)
		return map[bool]int{true: -1, false: 0}[a < b] + map[bool]int{true: 1, false: 0}[a > b]
	case float64:
		b := b.(float64)
		return map[bool]int{true: -1, false: 0}[a < b] + map[bool]int{true: 1, false: 0}[a > b]
	case string:
		return strings.Compare(a, b.(string))
	case bool:
		b := b.(bool)
		return map[bool]int{true: -1, false: 0}[!a && b] + map[bool]int{true: 1, false: 0}[a && !b]
	}
	panic("compare")
}

func cmpHolds(op string, c int, a, b val) bool {
	a, b = widen(a, b)
	if fa, ok := a.(float64); ok && (math.IsNaN(fa) || math.IsNaN(b.(float64))) {
		return op == "!="
	}
	switch op {
	case "=":
		return c == 0
	case "!=", "<>":
		return c != 0
	case "<":
		return c < 0
	case "<=":
		return c <= 0
	case ">":
		return c > 0
	}
	return c >= 0
}

func and3(a, b val) val {
	if a == false || b == false {
		return false
	}
	if a == nil || b == nil {
		return nil
	}
	return true
}

func or3(a, b val) val {
	if a == true || b == true {
		return true
	}
	if a == nil || b == nil {
		return nil
	}
	return false
}

func not3(a val) val {
	if a == nil {
		return nil
	}
	return !a.(bool)
}

// likeRef matches a LIKE pattern the slow, obvious way, by recursion on
// characters.
func likeRef(s, p []rune) bool {
	if len(p) == 0 {
		return len(s) == 0
	}
	switch {
	case p[0] == '\\' && len(p) > 1:
		return len(s) > 0 && s[0] == p[1] && likeRef(s[1:], p[2:])
	case p[0] == '%':
		for i := 0; i <= len(s); i++ {
			if likeRef(s[i:], p[1:]) {
				return true
			}
		}
		return false
	case p[0] == '_':
		return len(s) > 0 && likeRef(s[1:], p[1:])
	}
	return len(s) > 0 && s[0] == p[0] && likeRef(s[1:], p[1:])
}

func (g gen) boolean(d int) gexpr {
	n := 4
	if d > 0 {
		n = 16
	}
	ops := []string{"=", "!=", "<>", "<", "<=", ">", ">="}
	cmp := func(a, b gexpr) gexpr {
		op := ops[g.r.IntN(len(ops))]
		return gexpr{"(" + a.sql + ") " + op + " (" + b.sql + ")", kBool, func(r row) val {
			x, y := a.eval(r), b.eval(r)
			if x == nil || y == nil {
				return nil
			}
			return cmpHolds(op, compareVals(x, y), x, y)
		}}
	}
	switch g.r.IntN(n) {
	case 0:
		return col("pb", kBool)
	case 1:
		v := []val{true, false, nil}[g.r.IntN(3)]
		return lit(map[val]string{true: "TRUE", false: "FALSE", nil: "NULL"}[v], kBool, v)
	case 2:
		return cmp(g.num(0), g.num(0))
	case 3:
		return cmp(g.str_(0), g.str_(0))
	case 4:
		return cmp(g.num(d-1), g.num(d-1))
	case 5:
		return cmp(col("pb", kBool), g.boolean(d-1))
	case 6, 7:
		a, b := g.boolean(d-1), g.boolean(d-1)
		if g.r.IntN(2) == 0 {
			return gexpr{"(" + a.sql + " AND " + b.sql + ")", kBool, func(r row) val { return and3(a.eval(r), b.eval(r)) }}
		}
		return gexpr{"(" + a.sql + " OR " + b.sql + ")", kBool, func(r row) val { return or3(a.eval(r), b.eval(r)) }}
	case 8:
		a := g.boolean(d - 1)
		return gexpr{"NOT (" + a.sql + ")", kBool, func(r row) val { return not3(a.eval(r)) }}
	case 9:
		var x gexpr
		switch g.r.IntN(4) {
		case 0:
			x = g.num(d - 1)
		case 1:
			x = g.str_(d - 1)
		case 2:
			x = col("pl", kInt)
		default:
			x = col("pst", kInt)
		}
		neg := g.r.IntN(2) == 0
		return gexpr{"(" + x.sql + map[bool]string{true: " IS NOT NULL)", false: " IS NULL)"}[neg], kBool, func(r row) val {
			return (x.eval(r) == nil) != neg
		}}
	case 10:
		a := g.boolean(d - 1)
		want, neg := g.r.IntN(2) == 0, g.r.IntN(2) == 0
		sql := "(" + a.sql + ") IS " + map[bool]string{true: "NOT ", false: ""}[neg] + map[bool]string{true: "TRUE", false: "FALSE"}[want]
		return gexpr{sql, kBool, func(r row) val { return (a.eval(r) == want) != neg }}
	case 11, 12:
		var x gexpr
		var items []gexpr
		for range 1 + g.r.IntN(4) {
			var it gexpr
			switch {
			case g.r.IntN(6) == 0:
				it = lit("NULL", kInt, nil)
			case x.sql == "" && g.r.IntN(2) == 0, x.k == kString:
				x = g.str_(d - 1)
				it = g.strLit()
			default:
				if x.sql == "" {
					x = g.num(d - 1)
				}
				if g.r.IntN(2) == 0 {
					it = g.intLit()
				} else {
					it = g.floatLit()
				}
			}
			items = append(items, it)
		}
		if x.sql == "" {
			x = g.num(d - 1)
		}
		var list []string
		for _, it := range items {
			list = append(list, it.sql)
		}
		neg := g.r.IntN(2) == 0
		sql := x.sql + map[bool]string{true: " NOT IN (", false: " IN ("}[neg] + strings.Join(list, ", ") + ")"
		return gexpr{sql, kBool, func(r row) val {
			v := x.eval(r)
			if v == nil {
				return nil
			}
			var res val = false
			for _, it := range items {
				w := it.eval(r)
				switch {
				case w == nil:
					res = or3(res, nil)
				case compareVals(v, w) == 0:
					res = true
				}
			}
			if neg {
				return not3(res)
			}
			return res
		}}
	case 13:
		x, lo, hi := g.num(d-1), g.num(0), g.num(0)
		if g.r.IntN(3) == 0 {
			x, lo, hi = g.str_(d-1), g.strLit(), g.strLit()
		}
		neg := g.r.IntN(2) == 0
		sql := x.sql + map[bool]string{true: " NOT BETWEEN ", false: " BETWEEN "}[neg] + lo.sql + " AND " + hi.sql
		return gexpr{sql, kBool, func(r row) val {
			v, l, h := x.eval(r), lo.eval(r), hi.eval(r)
			var a, b val
			if v != nil && l != nil {
				a = compareVals(v, l) >= 0
			}
			if v != nil && h != nil {
				b = compareVals(v, h) <= 0
			}
			res := and3(a, b)
			if neg {
				return not3(res)
			}
			return res
		}}
	default:
		x := g.str_(d - 1)
		var p strings.Builder
		for range g.r.IntN(5) {
			switch c := []string{"a", "b", "é", "%", "_", `\%`, `\_`}[g.r.IntN(7)]; c {
			default:
				p.WriteString(c)
			}
		}
		pat := p.String()
		neg := g.r.IntN(2) == 0
		sql := x.sql + map[bool]string{true: " NOT LIKE '", false: " LIKE '"}[neg] + pat + "'"
		return gexpr{sql, kBool, func(r row) val {
			v := x.eval(r)
			if v == nil {
				return nil
			}
			return likeRef([]rune(v.(string)), []rune(pat)) != neg
		}}
	}
}

func (g gen) any(d int) gexpr {
	switch g.r.IntN(4) {
	case 0:
		return g.num(d)
	case 1:
		return g.str_(d)
	}
	return g.boolean(d)
}

func sameVal(a, b val) bool {
	if fa, ok := a.(float64); ok {
		fb, ok := b.(float64)
		return ok && (fa == fb || math.IsNaN(fa) && math.IsNaN(fb))
	}
	return a == b
}

func TestEvalMatchesReference(t *testing.T) {
	g := gen{rand.New(rand.NewPCG(seedtest.Seed(t), 1))}
	mem := checkedMem(t)
	const nrows = 48
	for range 40 {
		rows, rec := g.data(mem, nrows)
		off, end := g.r.IntN(10), nrows-g.r.IntN(10)
		slice := rec.NewSlice(int64(off), int64(end))
		for range 50 {
			x := g.any(3)
			e, err := expr.Parse(x.sql, propSchema)
			if err != nil {
				t.Fatalf("%s: %v", x.sql, err)
			}
			for _, c := range []struct {
				rec  arrow.RecordBatch
				rows []row
			}{{rec, rows}, {slice, rows[off:end]}} {
				got, err := e.Eval(context.Background(), c.rec, mem)
				if err != nil {
					t.Fatalf("%s: %v", x.sql, err)
				}
				gv := values(got)
				got.Release()
				for i, r := range c.rows {
					if want := x.eval(r); !sameVal(gv[i], want) {
						t.Fatalf("%s\nrow %v: got %v (%T), want %v (%T)", x.sql, r, gv[i], gv[i], want, want)
					}
				}
			}
		}
		slice.Release()
		rec.Release()
	}
}

// statsOf computes exact statistics of a column over rows, as a writer would.
func statsOf(rows []row, name string) expr.Stats {
	s := expr.Stats{NumRows: int64(len(rows)), HasNullCount: true}
	for _, r := range rows {
		v := r[name]
		if v == nil {
			s.NullCount++
			continue
		}
		if !s.HasMinMax {
			s.Min, s.Max, s.HasMinMax = v, v, true
			continue
		}
		if compareVals(v, s.Min) < 0 {
			s.Min = v
		}
		if compareVals(v, s.Max) > 0 {
			s.Max = v
		}
	}
	return s
}

func TestMayMatchNeverSkipsAMatch(t *testing.T) {
	g := gen{rand.New(rand.NewPCG(seedtest.Seed(t), 2))}
	const nrows, group = 64, 8
	var groups, skipped int
	for range 30 {
		rows, rec := g.data(memory.DefaultAllocator, nrows)
		rec.Release()
		for range 100 {
			x := g.boolean(3)
			e, err := expr.Parse(x.sql, propSchema)
			if err != nil {
				t.Fatalf("%s: %v", x.sql, err)
			}
			for start := 0; start < nrows; start += group {
				rg := rows[start : start+group]
				// Sometimes drop statistics, as files without them do.
				drop := map[string]int{}
				for _, c := range []string{"pi", "pj", "pf", "ps", "pd", "pb", "pst.a", "pst.b"} {
					drop[c] = g.r.IntN(8)
				}
				stats := func(c string) (expr.Stats, bool) {
					s := statsOf(rg, c)
					switch drop[c] {
					case 0:
						return s, false
					case 1:
						s.HasMinMax, s.Min, s.Max = false, nil, nil
					case 2:
						s.HasNullCount, s.NullCount = false, 0
					}
					return s, true
				}
				match := false
				for _, r := range rg {
					match = match || x.eval(r) == true
				}
				groups++
				if !e.MayMatch(stats) {
					skipped++
					if match {
						t.Fatalf("%s: MayMatch is false but a row matches; rows %v", x.sql, rg)
					}
				}
			}
		}
	}
	t.Logf("%d of %d row groups skipped", skipped, groups)
	if skipped == 0 {
		t.Error("MayMatch never skipped a row group")
	}
}
