package expr

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/croupier-data/croupier/core/errcode"
)

// kind is the type of a value inside an expression. Every Arrow column type
// the package accepts maps onto one kind; evaluation works on the canonical
// Arrow type of the kind (boolean, int64, float64, utf8).
type kind int

const (
	kNull    kind = iota // the untyped NULL literal
	kBool                // boolean
	kInt                 // int64
	kFloat               // float64
	kString              // utf8
	kList                // a list column; only an argument of length/cardinality or IS NULL
	kStruct              // a struct column; only an argument of IS NULL
	kTime                // a timestamp or date: int64 nanoseconds since 1970-01-01 00:00:00 UTC
	kDecimal             // a decimal128 or decimal256 column, compared with number literals at its scale
)

func (k kind) String() string {
	return [...]string{"null", "boolean", "integer", "float", "string", "list", "struct", "timestamp", "decimal"}[k]
}

func (k kind) numeric() bool { return k == kInt || k == kFloat }

// arrowType is the Arrow type values of kind k are evaluated as.
func (k kind) arrowType() arrow.DataType {
	switch k {
	case kInt, kTime:
		return arrow.PrimitiveTypes.Int64
	case kFloat:
		return arrow.PrimitiveTypes.Float64
	case kString:
		return arrow.BinaryTypes.String
	}
	return arrow.FixedWidthTypes.Boolean
}

// kindOf maps a column's Arrow type to a kind; ok is false for types that
// expressions cannot use (time of day, duration, interval, binary, map,
// ...).
func kindOf(dt arrow.DataType) (kind, bool) {
	switch dt.ID() {
	case arrow.BOOL:
		return kBool, true
	case arrow.INT8, arrow.INT16, arrow.INT32, arrow.INT64,
		arrow.UINT8, arrow.UINT16, arrow.UINT32, arrow.UINT64:
		return kInt, true
	case arrow.FLOAT16, arrow.FLOAT32, arrow.FLOAT64:
		return kFloat, true
	case arrow.STRING, arrow.LARGE_STRING, arrow.STRING_VIEW:
		return kString, true
	case arrow.LIST, arrow.LARGE_LIST, arrow.FIXED_SIZE_LIST:
		return kList, true
	case arrow.STRUCT:
		return kStruct, true
	case arrow.TIMESTAMP, arrow.DATE32, arrow.DATE64:
		return kTime, true
	case arrow.DECIMAL128, arrow.DECIMAL256:
		return kDecimal, true
	case arrow.DICTIONARY:
		vk, ok := kindOf(dt.(*arrow.DictionaryType).ValueType)
		if ok && vk == kString {
			return kString, true
		}
	}
	return 0, false
}

const op = "parse filter"

// Limits on an expression's text. Parsing keeps its stack on the heap, but
// checking, formatting, evaluating and pruning the tree recurse once per
// level of it. Every level is at least one operator, parenthesis or function
// call, so bounding those bounds the depth: no text, however nested or
// chained, can exhaust the stack, and the work stays linear in the text.
const (
	MaxBytes     = 1 << 20 // bytes of text
	MaxOperators = 10_000  // operators, opening parentheses and other non-operand tokens
)

// checkSize refuses text beyond MaxBytes or MaxOperators. It counts over the
// tokens, so strings and quoted names count as one operand whatever they
// hold.
func checkSize(toks []token) error {
	n := 0
	for _, t := range toks {
		if operand(t) {
			continue
		}
		if n++; n > MaxOperators {
			return errcode.New(errcode.InvalidArgument, op, "",
				"the expression has more than %d operators, parentheses and function calls; "+
					"nesting that deep or a chain that long is refused (for many values, use x IN (v, ...))",
				MaxOperators)
		}
	}
	return nil
}

// Parse parses a SQL expression and checks it against schema: every column
// must exist and every operator must apply to its operands' types.
func Parse(text string, schema *arrow.Schema) (*Expr, error) {
	if schema == nil {
		return nil, errcode.New(errcode.InvalidArgument, op, "", "no schema to check %q against", text)
	}
	if len(text) > MaxBytes {
		return nil, errcode.New(errcode.InvalidArgument, op, "",
			"the expression is %d bytes long, more than the %d allowed", len(text), MaxBytes)
	}
	toks, err := lex(text)
	if err != nil {
		return nil, err
	}
	if err := checkSize(toks); err != nil {
		return nil, err
	}
	tree, err := (&parser{text: text, toks: toks}).parse()
	if err != nil {
		return nil, err
	}
	c := &compiler{text: text, schema: schema, cols: map[string]bool{}}
	n, err := c.compile(tree)
	if err != nil {
		return nil, err
	}
	switch n.kind() {
	case kList:
		return nil, c.errf(tree, "the expression is a list; use length(...) or cardinality(...)")
	case kStruct:
		return nil, c.errf(tree, "the expression is a struct; name one of its fields")
	case kTime, kDecimal:
		return nil, c.errf(tree, "the expression is a %s; compare it with a value", n.kind())
	}
	e := &Expr{text: text, root: n}
	for name := range c.cols {
		e.columns = append(e.columns, name)
	}
	sort.Strings(e.columns)
	return e, nil
}

type compiler struct {
	text   string
	schema *arrow.Schema
	cols   map[string]bool // top-level columns referenced
}

// errf returns an InvalidArgument error about node, quoting its text and
// the position where it starts.
func (c *compiler) errf(node sexpr, format string, args ...any) error {
	sp := node.where()
	return errcode.New(errcode.InvalidArgument, op, "", "%s (in %q at position %d)",
		fmt.Sprintf(format, args...), c.text[sp.pos:sp.end], sp.pos+1)
}

// fragment is node's text.
func (c *compiler) fragment(node sexpr) string {
	sp := node.where()
	return c.text[sp.pos:sp.end]
}

func (c *compiler) compile(e sexpr) (node, error) {
	switch e := e.(type) {
	case *identExpr:
		return c.column(e)
	case *litExpr:
		return c.literal(e, false)
	case *boolExpr:
		return &literal{k: kBool, v: e.v}, nil
	case *nullExpr:
		return &literal{k: kNull, null: true}, nil
	case *unaryExpr:
		return c.unary(e)
	case *binaryExpr:
		switch e.op {
		case "AND":
			return c.logic(e, opAnd)
		case "OR":
			return c.logic(e, opOr)
		}
		if o, ok := cmpOps[e.op]; ok {
			l, r, err := c.operands(e.l, e.r)
			if err != nil {
				return nil, err
			}
			return c.compare(e, o, l, r)
		}
		return c.arith(e)
	case *betweenExpr:
		x, err := c.compile(e.x)
		if err != nil {
			return nil, err
		}
		lo, hi, err := c.operands(e.lo, e.hi)
		if err != nil {
			return nil, err
		}
		ge, err := c.compare(e, cmpGE, x, lo)
		if err != nil {
			return nil, err
		}
		le, err := c.compare(e, cmpLE, x, hi)
		if err != nil {
			return nil, err
		}
		var n node = &logic{op: opAnd, l: ge, r: le}
		if e.neg {
			n = &not{x: n}
		}
		return n, nil
	case *isExpr:
		x, err := c.compile(e.x)
		if err != nil {
			return nil, err
		}
		if e.what == "NULL" {
			return &isNull{x: x, neg: e.neg}, nil
		}
		if x.kind() != kBool && x.kind() != kNull {
			return nil, c.errf(e, "IS TRUE / IS FALSE need a boolean, not a %s", x.kind())
		}
		return &isBool{x: x, want: e.what == "TRUE", neg: e.neg}, nil
	case *inExpr:
		return c.in(e)
	case *likeExpr:
		return c.like(e)
	case *callExpr:
		return c.function(e)
	case *parenExpr:
		return c.compile(e.x)
	case *tupleExpr:
		return nil, c.errf(e, "a row value (a, b, ...) outside IN is not supported")
	case *intervalExpr:
		return nil, c.errf(e, "INTERVAL is only added to or subtracted from a timestamp or date: ts + INTERVAL n unit, ts - INTERVAL n unit")
	}
	return nil, errcode.New(errcode.Internal, op, "", "no compiler for the syntax node %T of %q", e, c.fragment(e))
}

// functions lists the functions expressions support, for error messages.
const functions = "length, char_length, cardinality, abs, coalesce"

func (c *compiler) unary(e *unaryExpr) (node, error) {
	if e.op == "NOT" {
		n, err := c.boolOperand(e, e.x)
		if err != nil {
			return nil, err
		}
		return &not{x: n}, nil
	}
	if lit, ok := e.x.(*litExpr); ok && e.op == "-" {
		return c.literal(lit, true)
	}
	x, err := c.compile(e.x)
	if err != nil {
		return nil, err
	}
	switch x.kind() {
	case kNull:
		return x, nil
	case kInt, kFloat:
		if e.op == "+" {
			return x, nil
		}
		return &negate{k: x.kind(), x: x}, nil
	}
	return nil, c.errf(e, "unary %s needs a number, not a %s", e.op, x.kind())
}

func (c *compiler) literal(e *litExpr, negative bool) (node, error) {
	sign := ""
	if negative {
		sign = "-"
	}
	switch e.kind {
	case tString:
		if negative {
			return nil, c.errf(e, "unary - needs a number, not a string")
		}
		if e.typed != "" {
			v, err := parseTime(e.val, e.typed == "DATE")
			if err != nil {
				return nil, c.errf(e, "%v", err)
			}
			return &literal{k: kTime, v: v}, nil
		}
		return &literal{k: kString, v: e.val}, nil
	case tInt:
		v, err := strconv.ParseInt(sign+e.val, 10, 64)
		if err != nil {
			return nil, c.errf(e, "integer literal %s%s is out of the int64 range", sign, e.val)
		}
		return &literal{k: kInt, v: v, num: sign + e.val}, nil
	case tFloat, tDecimal:
		v, err := strconv.ParseFloat(sign+e.val, 64)
		if err != nil || math.IsInf(v, 0) {
			return nil, c.errf(e, "number %s%s is out of the float64 range", sign, e.val)
		}
		return &literal{k: kFloat, v: v, num: sign + e.val}, nil
	}
	return nil, c.errf(e, "unsupported literal %s: the literals are numbers, strings, TRUE, FALSE and NULL", e.val)
}

// column resolves a column reference: a top-level column, a nested struct
// field written a.b.c, or a backquoted dotted name `a.b.c`.
func (c *compiler) column(e *identExpr) (node, error) {
	var segs []string
	for _, p := range e.parts {
		segs = append(segs, strings.Split(p, ".")...)
	}
	path, f, err := resolve(c.schema.Fields(), segs)
	if w := strings.ToLower(strings.Join(segs, ".")); err != nil && nowFunctions[w] {
		return nil, c.errf(e, nowRefused, strings.ToUpper(w))
	}
	if err != nil {
		names := make([]string, 0, c.schema.NumFields())
		for _, f := range c.schema.Fields() {
			names = append(names, f.Name)
		}
		return nil, errcode.New(errcode.InvalidArgument, op, strings.Join(segs, "."),
			"%v at position %d; the table has: %s", err, e.pos+1, strings.Join(names, ", "))
	}
	k, ok := kindOf(f.Type)
	if !ok {
		return nil, c.errf(e, "column %q has type %s, which expressions do not support", strings.Join(path, "."), f.Type)
	}
	c.cols[path[0]] = true
	return &column{path: path, k: k, dt: f.Type}, nil
}

// resolve finds the field that segs names among fields. A field name may
// itself contain dots, so every split of segs into names is tried, longest
// first. Names match case-sensitively, else case-insensitively when only one
// field matches.
func resolve(fields []arrow.Field, segs []string) ([]string, arrow.Field, error) {
	for j := len(segs); j >= 1; j-- {
		name := strings.Join(segs[:j], ".")
		f, ok := lookup(fields, name)
		if !ok {
			continue
		}
		if j == len(segs) {
			return []string{f.Name}, f, nil
		}
		st, isStruct := f.Type.(*arrow.StructType)
		if !isStruct {
			continue
		}
		if rest, leaf, err := resolve(st.Fields(), segs[j:]); err == nil {
			return append([]string{f.Name}, rest...), leaf, nil
		}
	}
	return nil, arrow.Field{}, fmt.Errorf("unknown column %q", strings.Join(segs, "."))
}

func lookup(fields []arrow.Field, name string) (arrow.Field, bool) {
	for _, f := range fields {
		if f.Name == name {
			return f, true
		}
	}
	var found []arrow.Field
	for _, f := range fields {
		if strings.EqualFold(f.Name, name) {
			found = append(found, f)
		}
	}
	if len(found) == 1 {
		return found[0], true
	}
	return arrow.Field{}, false
}

func (c *compiler) logic(e *binaryExpr, o logicOp) (node, error) {
	ln, err := c.boolOperand(e, e.l)
	if err != nil {
		return nil, err
	}
	rn, err := c.boolOperand(e, e.r)
	if err != nil {
		return nil, err
	}
	return &logic{op: o, l: ln, r: rn}, nil
}

func (c *compiler) boolOperand(parent, e sexpr) (node, error) {
	n, err := c.compile(e)
	if err != nil {
		return nil, err
	}
	switch n.kind() {
	case kBool:
		return n, nil
	case kNull:
		return &literal{k: kBool, null: true}, nil
	}
	return nil, c.errf(parent, "%s is a %s, not a boolean", c.fragment(e), n.kind())
}

var cmpOps = map[string]cmpOp{
	"=": cmpEQ, "!=": cmpNE, "<": cmpLT, "<=": cmpLE, ">": cmpGT, ">=": cmpGE,
}

// common is the kind two operands are compared or combined as: equal kinds,
// integer widened to float, NULL taking the other side's kind.
func common(a, b kind) (kind, bool) {
	switch {
	case a == kList || a == kStruct || a == kDecimal || b == kList || b == kStruct || b == kDecimal:
		return 0, false
	case a == b:
		return a, true
	case a == kNull:
		return b, true
	case b == kNull:
		return a, true
	case a.numeric() && b.numeric():
		return kFloat, true
	}
	return 0, false
}

func (c *compiler) compare(e sexpr, o cmpOp, l, r node) (node, error) {
	if l.kind() == kDecimal || r.kind() == kDecimal {
		return c.decimalCompare(e, o, l, r)
	}
	lr := []node{l, r}
	if err := c.timeLiterals(e, lr); err != nil {
		return nil, err
	}
	l, r = lr[0], lr[1]
	k, ok := common(l.kind(), r.kind())
	if !ok {
		hint := ""
		if l.kind() == kTime && r.kind().numeric() || l.kind().numeric() && r.kind() == kTime {
			hint = ": a number is not read as an instant; write it as TIMESTAMP 'YYYY-MM-DD HH:MM:SS' (UTC)"
		}
		return nil, c.errf(e, "type mismatch: cannot compare %s with %s%s", l.kind(), r.kind(), hint)
	}
	if k == kNull {
		k = kBool
	}
	l, r = coerce(l, k), coerce(r, k)
	if k == kBool && o != cmpEQ && o != cmpNE {
		// compute orders no booleans; as integers, FALSE < TRUE.
		l, r = &boolToInt{x: l}, &boolToInt{x: r}
	}
	return &compare{op: o, l: l, r: r}, nil
}

// coerce converts n to kind k: a typed NULL for the NULL literal, a cast for
// integers used as floats.
func coerce(n node, k kind) node {
	switch {
	case n.kind() == k:
		return n
	case n.kind() == kNull:
		return &literal{k: k, null: true}
	}
	if lit, ok := n.(*literal); ok && lit.k == kInt && k == kFloat && !lit.null {
		return &literal{k: kFloat, v: float64(lit.v.(int64))}
	}
	return &toFloat{x: n}
}

func (c *compiler) in(e *inExpr) (node, error) {
	x, err := c.compile(e.x)
	if err != nil {
		return nil, err
	}
	k := x.kind()
	items := make([]node, len(e.list))
	for i, it := range e.list {
		if items[i], err = c.compile(it); err != nil {
			return nil, err
		}
	}
	if k == kDecimal {
		return c.decimalIn(e, x, items)
	}
	all := append([]node{x}, items...)
	if err := c.timeLiterals(e, all); err != nil {
		return nil, err
	}
	x, items, k = all[0], all[1:], all[0].kind()
	for i := range items {
		ck, ok := common(k, items[i].kind())
		if !ok {
			return nil, c.errf(e, "type mismatch: %s IN a list holding %s", x.kind(), items[i].kind())
		}
		k = ck
	}
	if k == kNull {
		k = kBool
	}
	neg := e.neg
	lits := make([]*literal, 0, len(items))
	for _, it := range items {
		if lit, ok := coerce(it, k).(*literal); ok {
			lits = append(lits, lit)
		}
	}
	if len(lits) == len(items) && x.kind() != kNull {
		return &in{x: coerce(x, k), values: lits, neg: neg}, nil
	}
	// Not all constants: x = a OR x = b OR ...
	var n node
	for _, it := range items {
		eq := &compare{op: cmpEQ, l: coerce(x, k), r: coerce(it, k)}
		if n == nil {
			n = eq
		} else {
			n = &logic{op: opOr, l: n, r: eq}
		}
	}
	if neg {
		n = &not{x: n}
	}
	return n, nil
}

func (c *compiler) like(e *likeExpr) (node, error) {
	x, err := c.compile(e.x)
	if err != nil {
		return nil, err
	}
	if x.kind() != kString && x.kind() != kNull {
		return nil, c.errf(e, "type mismatch: LIKE needs a string, not a %s", x.kind())
	}
	pat, err := c.compile(e.pat)
	if err != nil {
		return nil, err
	}
	lit, ok := pat.(*literal)
	if !ok || (lit.k != kString && lit.k != kNull) {
		return nil, c.errf(e, "the pattern of LIKE must be a string literal")
	}
	escape := '\\'
	if e.esc != nil {
		esc, err := c.compile(e.esc)
		if err != nil {
			return nil, err
		}
		el, ok := esc.(*literal)
		if !ok || el.k != kString || len([]rune(el.v.(string))) > 1 {
			return nil, c.errf(e, "ESCAPE needs a string literal of at most one character")
		}
		escape = 0
		for _, r := range el.v.(string) {
			escape = r
		}
	}
	neg := e.neg
	if lit.null {
		return &literal{k: kBool, null: true}, nil
	}
	m := compileLike(lit.v.(string), escape)
	return &like{x: coerce(x, kString), m: m, neg: neg}, nil
}

var arithOps = map[string]arithOp{
	"+": opAdd, "-": opSub, "*": opMul, "/": opDiv, "DIV": opIntDiv, "%": opMod,
}

// operands compiles the two sides of a binary expression.
func (c *compiler) operands(left, right sexpr) (l, r node, err error) {
	if l, err = c.compile(left); err != nil {
		return nil, nil, err
	}
	if r, err = c.compile(right); err != nil {
		return nil, nil, err
	}
	return l, r, nil
}

func (c *compiler) arith(e *binaryExpr) (node, error) {
	o, ok := arithOps[e.op]
	if !ok {
		return nil, c.errf(e, "operator %s is not supported", e.op)
	}
	if iv, ok := e.r.(*intervalExpr); ok && (o == opAdd || o == opSub) {
		return c.shift(e, e.l, iv, o == opSub)
	}
	if iv, ok := e.l.(*intervalExpr); ok && o == opAdd {
		return c.shift(e, e.r, iv, false)
	}
	l, r, err := c.operands(e.l, e.r)
	if err != nil {
		return nil, err
	}
	for _, n := range []node{l, r} {
		if !n.kind().numeric() && n.kind() != kNull {
			return nil, c.errf(e, "type mismatch: arithmetic %s needs numbers, not a %s", e.op, n.kind())
		}
	}
	k, _ := common(l.kind(), r.kind())
	if k == kNull {
		k = kInt
	}
	if o == opIntDiv && k != kInt {
		return nil, c.errf(e, "type mismatch: DIV needs integers, not a %s", k)
	}
	return &arith{op: o, k: k, l: coerce(l, k), r: coerce(r, k)}, nil
}

func (c *compiler) function(e *callExpr) (node, error) {
	name := strings.ToLower(strings.Join(e.name, "."))
	args := make([]node, len(e.args))
	for i, a := range e.args {
		var err error
		if args[i], err = c.compile(a); err != nil {
			return nil, err
		}
	}
	nargs := func(n int) error {
		if len(args) != n {
			return c.errf(e, "%s takes %d argument(s), not %d", name, n, len(args))
		}
		return nil
	}
	switch name {
	case "length", "char_length", "character_length", "cardinality":
		if err := nargs(1); err != nil {
			return nil, err
		}
		k := args[0].kind()
		switch {
		case k == kNull:
			return &literal{k: kInt, null: true}, nil
		case k == kList:
			return &length{x: args[0]}, nil
		case k == kString && name != "cardinality":
			return &length{x: args[0], chars: name != "length"}, nil
		}
		return nil, c.errf(e, "type mismatch: %s of a %s", name, k)
	case "abs":
		if err := nargs(1); err != nil {
			return nil, err
		}
		switch args[0].kind() {
		case kNull:
			return &literal{k: kInt, null: true}, nil
		case kInt, kFloat:
			return &abs{k: args[0].kind(), x: args[0]}, nil
		}
		return nil, c.errf(e, "type mismatch: abs of a %s", args[0].kind())
	case "coalesce":
		if len(args) == 0 {
			return nil, c.errf(e, "coalesce needs at least one argument")
		}
		if hasKind(args, kDecimal) {
			return c.decimalCoalesce(e, args)
		}
		if err := c.timeLiterals(e, args); err != nil {
			return nil, err
		}
		k := kNull
		for _, a := range args {
			ck, ok := common(k, a.kind())
			if !ok {
				return nil, c.errf(e, "type mismatch: coalesce of %s and %s", k, a.kind())
			}
			k = ck
		}
		if k == kNull {
			return &literal{k: kNull, null: true}, nil
		}
		for i := range args {
			args[i] = coerce(args[i], k)
		}
		return &coalesce{k: k, args: args}, nil
	}
	if nowFunctions[name] {
		return nil, c.errf(e, nowRefused, name+"()")
	}
	return nil, c.errf(e, "unknown function %s; the functions are %s", name, functions)
}
