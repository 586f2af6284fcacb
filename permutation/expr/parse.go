package expr

import (
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"vitess.io/vitess/go/vt/sqlparser"

	"github.com/croupier-data/croupier/core/errcode"
)

// kind is the type of a value inside an expression. Every Arrow column type
// the package accepts maps onto one kind; evaluation works on the canonical
// Arrow type of the kind (boolean, int64, float64, utf8).
type kind int

const (
	kNull   kind = iota // the untyped NULL literal
	kBool               // boolean
	kInt                // int64
	kFloat              // float64
	kString             // utf8
	kList               // a list column; only an argument of length/cardinality or IS NULL
	kStruct             // a struct column; only an argument of IS NULL
)

func (k kind) String() string {
	return [...]string{"null", "boolean", "integer", "float", "string", "list", "struct"}[k]
}

func (k kind) numeric() bool { return k == kInt || k == kFloat }

// arrowType is the Arrow type values of kind k are evaluated as.
func (k kind) arrowType() arrow.DataType {
	switch k {
	case kInt:
		return arrow.PrimitiveTypes.Int64
	case kFloat:
		return arrow.PrimitiveTypes.Float64
	case kString:
		return arrow.BinaryTypes.String
	}
	return arrow.FixedWidthTypes.Boolean
}

// kindOf maps a column's Arrow type to a kind; ok is false for types that
// expressions cannot use (temporal, decimal, binary, map, ...).
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

// checkSize refuses text beyond MaxBytes or MaxOperators. It runs the
// parser's own tokenizer, which is linear and does not recurse, so strings
// and quoted names count as one operand whatever they hold.
func checkSize(p *sqlparser.Parser, text string) error {
	if len(text) > MaxBytes {
		return errcode.New(errcode.InvalidArgument, op, "",
			"the expression is %d bytes long, more than the %d allowed", len(text), MaxBytes)
	}
	tkn := p.NewStringTokenizer(text)
	n := 0
	for {
		typ, _ := tkn.Scan()
		switch typ {
		case 0, sqlparser.LEX_ERROR: // the end, or an error the parser reports
			return nil
		case sqlparser.ID, sqlparser.STRING, sqlparser.INTEGRAL, sqlparser.FLOAT, sqlparser.DECIMAL,
			sqlparser.HEXNUM, sqlparser.HEX, sqlparser.BIT_LITERAL, sqlparser.NULL,
			sqlparser.TRUE, sqlparser.FALSE, ',', ')':
			continue
		}
		if n++; n > MaxOperators {
			return errcode.New(errcode.InvalidArgument, op, "",
				"the expression has more than %d operators, parentheses and function calls; "+
					"nesting that deep or a chain that long is refused (for many values, use x IN (v, ...))",
				MaxOperators)
		}
	}
}

// Parse parses a SQL expression and checks it against schema: every column
// must exist and every operator must apply to its operands' types.
func Parse(text string, schema *arrow.Schema) (*Expr, error) {
	if schema == nil {
		return nil, errcode.New(errcode.InvalidArgument, op, "", "no schema to check %q against", text)
	}
	p, err := sqlparser.New(sqlparser.Options{})
	if err != nil {
		return nil, errcode.Wrap(err, errcode.Internal, op, "")
	}
	if err := checkSize(p, text); err != nil {
		return nil, err
	}
	const prefix = "select "
	stmt, err := p.Parse(prefix + text)
	if err != nil {
		return nil, syntaxError(text, err, len(prefix))
	}
	sel, ok := stmt.(*sqlparser.Select)
	if !ok || len(sel.SelectExprs.Exprs) != 1 {
		return nil, errcode.New(errcode.InvalidArgument, op, "", "%q is not a single expression", text)
	}
	ae, ok := sel.SelectExprs.Exprs[0].(*sqlparser.AliasedExpr)
	if !ok {
		return nil, errcode.New(errcode.InvalidArgument, op, "", "%q is not an expression", text)
	}
	// Anything but the expression itself (FROM, WHERE, an alias, ...) makes
	// the formatted statement differ from "select <expr> from dual".
	sel.Comments = nil
	if want := prefix + sqlparser.String(ae.Expr) + " from dual"; sqlparser.String(sel) != want || !ae.As.IsEmpty() {
		return nil, errcode.New(errcode.InvalidArgument, op, "",
			"%q is not a single expression: unexpected clause after %q", text, sqlparser.String(ae.Expr))
	}
	c := &compiler{text: text, schema: schema, cols: map[string]bool{}}
	n, err := c.compile(ae.Expr)
	if err != nil {
		return nil, err
	}
	switch n.kind() {
	case kList:
		return nil, c.errf(ae.Expr, "the expression is a list; use length(...) or cardinality(...)")
	case kStruct:
		return nil, c.errf(ae.Expr, "the expression is a struct; name one of its fields")
	}
	e := &Expr{text: text, root: n}
	for name := range c.cols {
		e.columns = append(e.columns, name)
	}
	sort.Strings(e.columns)
	return e, nil
}

var positionRE = regexp.MustCompile(`at position (\d+)`)

// syntaxError rewrites a parser error so that its position counts from the
// start of the user's text rather than of the statement built around it.
func syntaxError(text string, err error, shift int) error {
	msg := err.Error()
	if m := positionRE.FindStringSubmatchIndex(msg); m != nil {
		pos, _ := strconv.Atoi(msg[m[2]:m[3]])
		pos -= shift
		pos = max(1, min(pos, len(text)+1))
		msg = msg[:m[2]] + strconv.Itoa(pos) + msg[m[3]:]
	}
	return errcode.New(errcode.InvalidArgument, op, "", "in %q: %s", text, msg)
}

type compiler struct {
	text   string
	schema *arrow.Schema
	cols   map[string]bool // top-level columns referenced
}

// errf returns an InvalidArgument error about node, naming it and the
// position where it (probably) starts in the text.
func (c *compiler) errf(node sqlparser.SQLNode, format string, args ...any) error {
	frag := sqlparser.String(node)
	msg := fmt.Sprintf(format, args...)
	if pos := c.position(node); pos > 0 {
		return errcode.New(errcode.InvalidArgument, op, "", "%s (in %q at position %d)", msg, frag, pos)
	}
	return errcode.New(errcode.InvalidArgument, op, "", "%s (in %q)", msg, frag)
}

// position finds where node starts in the text, 1-based, or 0 when unknown.
// The syntax tree keeps no positions, so this looks for the node's first
// column name or literal in the text: the first occurrence is reported.
func (c *compiler) position(node sqlparser.SQLNode) int {
	var needle string
	_ = sqlparser.Walk(func(n sqlparser.SQLNode) (bool, error) {
		if needle != "" {
			return false, nil
		}
		switch n := n.(type) {
		case *sqlparser.ColName:
			needle = colParts(n)[0]
			return false, nil
		case *sqlparser.FuncExpr:
			needle = n.Name.String()
			return false, nil
		case *sqlparser.Literal:
			needle = n.Val
			return false, nil
		}
		return true, nil
	}, node)
	if needle == "" {
		return 0
	}
	if i := strings.Index(strings.ToLower(c.text), strings.ToLower(needle)); i >= 0 {
		return i + 1
	}
	return 0
}

func colParts(n *sqlparser.ColName) []string {
	var parts []string
	for _, p := range []string{n.Qualifier.Qualifier.String(), n.Qualifier.Name.String(), n.Name.String()} {
		if p != "" {
			parts = append(parts, p)
		}
	}
	return parts
}

func (c *compiler) compile(e sqlparser.Expr) (node, error) {
	switch e := e.(type) {
	case *sqlparser.ColName:
		return c.column(e)
	case *sqlparser.Literal:
		return c.literal(e, false)
	case sqlparser.BoolVal:
		return &literal{k: kBool, v: bool(e)}, nil
	case *sqlparser.NullVal:
		return &literal{k: kNull, null: true}, nil
	case *sqlparser.AndExpr:
		return c.logic(e, opAnd, e.Left, e.Right)
	case *sqlparser.OrExpr:
		return c.logic(e, opOr, e.Left, e.Right)
	case *sqlparser.NotExpr:
		return c.not(e, e.Expr)
	case *sqlparser.UnaryExpr:
		switch e.Operator {
		case sqlparser.BangOp:
			return c.not(e, e.Expr)
		case sqlparser.UPlusOp:
			x, err := c.compile(e.Expr)
			if err != nil {
				return nil, err
			}
			if !x.kind().numeric() && x.kind() != kNull {
				return nil, c.errf(e, "unary + needs a number, not a %s", x.kind())
			}
			return x, nil
		case sqlparser.UMinusOp:
			if lit, ok := e.Expr.(*sqlparser.Literal); ok {
				return c.literal(lit, true)
			}
			x, err := c.compile(e.Expr)
			if err != nil {
				return nil, err
			}
			switch x.kind() {
			case kNull:
				return x, nil
			case kInt, kFloat:
				return &negate{k: x.kind(), x: x}, nil
			}
			return nil, c.errf(e, "unary - needs a number, not a %s", x.kind())
		}
	case *sqlparser.ComparisonExpr:
		return c.comparison(e)
	case *sqlparser.BetweenExpr:
		x, err := c.compile(e.Left)
		if err != nil {
			return nil, err
		}
		lo, err := c.compile(e.From)
		if err != nil {
			return nil, err
		}
		hi, err := c.compile(e.To)
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
		if !e.IsBetween {
			n = &not{x: n}
		}
		return n, nil
	case *sqlparser.IsExpr:
		x, err := c.compile(e.Left)
		if err != nil {
			return nil, err
		}
		switch e.Right {
		case sqlparser.IsNullOp, sqlparser.IsNotNullOp:
			return &isNull{x: x, neg: e.Right == sqlparser.IsNotNullOp}, nil
		}
		if x.kind() != kBool && x.kind() != kNull {
			return nil, c.errf(e, "IS TRUE / IS FALSE need a boolean, not a %s", x.kind())
		}
		return &isBool{x: x,
			want: e.Right == sqlparser.IsTrueOp || e.Right == sqlparser.IsNotTrueOp,
			neg:  e.Right == sqlparser.IsNotTrueOp || e.Right == sqlparser.IsNotFalseOp}, nil
	case *sqlparser.BinaryExpr:
		return c.arith(e)
	case *sqlparser.FuncExpr:
		return c.function(e)
	case *sqlparser.Subquery:
		return nil, c.errf(e, "subqueries are not supported")
	case sqlparser.AggrFunc:
		return nil, c.errf(e, "aggregate functions are not supported")
	}
	return nil, c.unsupported(e)
}

// functions lists the functions expressions support, for error messages.
const functions = "length, char_length, cardinality, abs, coalesce"

var callRE = regexp.MustCompile(`^(\w+)\(`)

// unsupported returns the error for a construct the compiler does not take,
// naming it as SQL: the parser has a node type for many constructs and
// built-in functions, whose names mean nothing to the user.
func (c *compiler) unsupported(e sqlparser.Expr) error {
	var what string
	switch e := e.(type) {
	case *sqlparser.JSONExtractExpr:
		what = "the JSON operator -> (json_extract)"
	case *sqlparser.JSONUnquoteExpr:
		what = "the JSON operator ->> (json_unquote)"
	case *sqlparser.CaseExpr:
		what = "CASE"
	case *sqlparser.CastExpr:
		what = "CAST"
	case *sqlparser.ConvertExpr, *sqlparser.ConvertUsingExpr:
		what = "CONVERT"
	case *sqlparser.CollateExpr:
		what = "COLLATE"
	case *sqlparser.IntervalDateExpr, *sqlparser.IntervalFuncExpr:
		what = "INTERVAL"
	case *sqlparser.ExistsExpr:
		what = "EXISTS"
	case *sqlparser.XorExpr:
		what = "XOR"
	case *sqlparser.MatchExpr:
		what = "MATCH ... AGAINST"
	case *sqlparser.MemberOfExpr:
		what = "MEMBER OF"
	case *sqlparser.Default:
		what = "DEFAULT"
	case *sqlparser.Variable:
		what = "a variable (@name)"
	case *sqlparser.Argument:
		what = "a placeholder (? or :name)"
	case *sqlparser.IntroducerExpr:
		what = "a character set introducer (_charset 'text')"
	case sqlparser.ValTuple:
		what = "a row value (a, b, ...) outside IN"
	case *sqlparser.UnaryExpr:
		what = "the operator " + e.Operator.ToString()
	default:
		if m := callRE.FindStringSubmatch(sqlparser.String(e)); m != nil {
			return c.errf(e, "unknown function %s; the functions are %s", m[1], functions)
		}
		return c.errf(e, "this construct is not supported")
	}
	return c.errf(e, "%s is not supported", what)
}

func (c *compiler) literal(e *sqlparser.Literal, negative bool) (node, error) {
	sign := ""
	if negative {
		sign = "-"
	}
	switch e.Type {
	case sqlparser.StrVal:
		if negative {
			return nil, c.errf(e, "unary - needs a number, not a string")
		}
		return &literal{k: kString, v: e.Val}, nil
	case sqlparser.IntVal:
		v, err := strconv.ParseInt(sign+e.Val, 10, 64)
		if err != nil {
			return nil, c.errf(e, "integer literal %s%s is out of the int64 range", sign, e.Val)
		}
		return &literal{k: kInt, v: v}, nil
	case sqlparser.FloatVal, sqlparser.DecimalVal:
		v, err := strconv.ParseFloat(sign+e.Val, 64)
		if err != nil || math.IsInf(v, 0) {
			return nil, c.errf(e, "number %s%s is out of the float64 range", sign, e.Val)
		}
		return &literal{k: kFloat, v: v}, nil
	}
	return nil, c.errf(e, "unsupported literal %s", sqlparser.String(e))
}

// column resolves a column reference: a top-level column, a nested struct
// field written a.b or a.b.c, or a backquoted dotted name `a.b.c.d`.
func (c *compiler) column(e *sqlparser.ColName) (node, error) {
	var segs []string
	for _, p := range colParts(e) {
		segs = append(segs, strings.Split(p, ".")...)
	}
	path, f, err := resolve(c.schema.Fields(), segs)
	if err != nil {
		names := make([]string, 0, c.schema.NumFields())
		for _, f := range c.schema.Fields() {
			names = append(names, f.Name)
		}
		pos := ""
		if p := c.position(e); p > 0 {
			pos = fmt.Sprintf(" at position %d", p)
		}
		return nil, errcode.New(errcode.InvalidArgument, op, strings.Join(segs, "."),
			"%v%s; the table has: %s", err, pos, strings.Join(names, ", "))
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

func (c *compiler) logic(e sqlparser.Expr, o logicOp, l, r sqlparser.Expr) (node, error) {
	ln, err := c.boolOperand(e, l)
	if err != nil {
		return nil, err
	}
	rn, err := c.boolOperand(e, r)
	if err != nil {
		return nil, err
	}
	return &logic{op: o, l: ln, r: rn}, nil
}

func (c *compiler) boolOperand(parent, e sqlparser.Expr) (node, error) {
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
	return nil, c.errf(parent, "%s is a %s, not a boolean", sqlparser.String(e), n.kind())
}

func (c *compiler) not(e, x sqlparser.Expr) (node, error) {
	n, err := c.boolOperand(e, x)
	if err != nil {
		return nil, err
	}
	return &not{x: n}, nil
}

var cmpOps = map[sqlparser.ComparisonExprOperator]cmpOp{
	sqlparser.EqualOp: cmpEQ, sqlparser.NotEqualOp: cmpNE,
	sqlparser.LessThanOp: cmpLT, sqlparser.LessEqualOp: cmpLE,
	sqlparser.GreaterThanOp: cmpGT, sqlparser.GreaterEqualOp: cmpGE,
}

func (c *compiler) comparison(e *sqlparser.ComparisonExpr) (node, error) {
	if e.Modifier != sqlparser.Missing {
		return nil, c.errf(e, "ANY / ALL are not supported")
	}
	switch e.Operator {
	case sqlparser.InOp, sqlparser.NotInOp:
		return c.in(e)
	case sqlparser.LikeOp, sqlparser.NotLikeOp:
		return c.like(e)
	}
	o, ok := cmpOps[e.Operator]
	if !ok {
		return nil, c.errf(e, "operator %s is not supported", e.Operator.ToString())
	}
	l, r, err := c.operands(e.Left, e.Right)
	if err != nil {
		return nil, err
	}
	return c.compare(e, o, l, r)
}

// common is the kind two operands are compared or combined as: equal kinds,
// integer widened to float, NULL taking the other side's kind.
func common(a, b kind) (kind, bool) {
	switch {
	case a == kList || a == kStruct || b == kList || b == kStruct:
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

func (c *compiler) compare(e sqlparser.Expr, o cmpOp, l, r node) (node, error) {
	k, ok := common(l.kind(), r.kind())
	if !ok {
		return nil, c.errf(e, "type mismatch: cannot compare %s with %s", l.kind(), r.kind())
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

func (c *compiler) in(e *sqlparser.ComparisonExpr) (node, error) {
	tuple, ok := e.Right.(sqlparser.ValTuple)
	if !ok {
		return nil, c.errf(e, "IN needs a parenthesised list of values")
	}
	x, err := c.compile(e.Left)
	if err != nil {
		return nil, err
	}
	k := x.kind()
	items := make([]node, len(tuple))
	for i, it := range tuple {
		if items[i], err = c.compile(it); err != nil {
			return nil, err
		}
		ck, ok := common(k, items[i].kind())
		if !ok {
			return nil, c.errf(e, "type mismatch: %s IN a list holding %s", x.kind(), items[i].kind())
		}
		k = ck
	}
	if k == kNull {
		k = kBool
	}
	neg := e.Operator == sqlparser.NotInOp
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

func (c *compiler) like(e *sqlparser.ComparisonExpr) (node, error) {
	x, err := c.compile(e.Left)
	if err != nil {
		return nil, err
	}
	if x.kind() != kString && x.kind() != kNull {
		return nil, c.errf(e, "type mismatch: LIKE needs a string, not a %s", x.kind())
	}
	pat, err := c.compile(e.Right)
	if err != nil {
		return nil, err
	}
	lit, ok := pat.(*literal)
	if !ok || (lit.k != kString && lit.k != kNull) {
		return nil, c.errf(e, "the pattern of LIKE must be a string literal")
	}
	escape := '\\'
	if e.Escape != nil {
		esc, err := c.compile(e.Escape)
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
	neg := e.Operator == sqlparser.NotLikeOp
	if lit.null {
		return &literal{k: kBool, null: true}, nil
	}
	m := compileLike(lit.v.(string), escape)
	return &like{x: coerce(x, kString), m: m, neg: neg}, nil
}

var arithOps = map[sqlparser.BinaryExprOperator]arithOp{
	sqlparser.PlusOp: opAdd, sqlparser.MinusOp: opSub, sqlparser.MultOp: opMul,
	sqlparser.DivOp: opDiv, sqlparser.IntDivOp: opIntDiv, sqlparser.ModOp: opMod,
}

// operands compiles the two sides of a binary expression.
func (c *compiler) operands(left, right sqlparser.Expr) (l, r node, err error) {
	if l, err = c.compile(left); err != nil {
		return nil, nil, err
	}
	if r, err = c.compile(right); err != nil {
		return nil, nil, err
	}
	return l, r, nil
}

func (c *compiler) arith(e *sqlparser.BinaryExpr) (node, error) {
	o, ok := arithOps[e.Operator]
	if !ok {
		return nil, c.errf(e, "operator %s is not supported", e.Operator.ToString())
	}
	l, r, err := c.operands(e.Left, e.Right)
	if err != nil {
		return nil, err
	}
	for _, n := range []node{l, r} {
		if !n.kind().numeric() && n.kind() != kNull {
			return nil, c.errf(e, "type mismatch: arithmetic %s needs numbers, not a %s", e.Operator.ToString(), n.kind())
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

func (c *compiler) function(e *sqlparser.FuncExpr) (node, error) {
	name := e.Name.Lowered()
	if !e.Qualifier.IsEmpty() {
		return nil, c.errf(e, "unknown function %s", sqlparser.String(e))
	}
	args := make([]node, len(e.Exprs))
	for i, a := range e.Exprs {
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
	return nil, c.errf(e, "unknown function %s; the functions are %s", name, functions)
}
