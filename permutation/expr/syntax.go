package expr

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/croupier-data/croupier/core/errcode"
)

// This file turns text into a syntax tree: a lexer for MySQL's lexical
// rules and a precedence-climbing parser for the expression grammar the
// package documents. Constructs of SQL outside that grammar (CASE, CAST,
// subqueries, bit and JSON operators, ...) are recognised and refused by
// name, so that an error says what the user wrote, not what a parser calls it.

// tokKind is the kind of a token.
type tokKind int

const (
	tEOF      tokKind = iota
	tIdent            // a bare identifier or keyword, as written
	tQuoted           // a `backquoted` identifier, unquoted
	tString           // a 'single' or "double" quoted string, unescaped
	tInt              // digits
	tDecimal          // digits with a decimal point
	tFloat            // a number with an exponent
	tOtherLit         // hexadecimal and bit literals: 0x1f, X'1f', 0b01, b'01'
	tOp               // punctuation and operators
	tParam            // a placeholder: ? or :name
	tVar              // a variable: @name
)

// A token is one lexeme; pos and end are byte offsets into the text.
type token struct {
	kind     tokKind
	val      string
	pos, end int
}

// span is where a syntax node lies in the text, as byte offsets.
type span struct{ pos, end int }

func (s span) where() span { return s }

// sexpr is a node of the syntax tree.
type sexpr interface{ where() span }

type (
	identExpr struct {
		span
		parts []string // dotted parts; a backquoted part may itself hold dots
	}
	litExpr struct {
		span
		kind  tokKind // tString, tInt, tDecimal, tFloat or tOtherLit
		val   string
		typed string // TIMESTAMP or DATE before a string, else ""
	}
	intervalExpr struct {
		span
		n    sexpr  // the number of units
		unit string // upper-cased, as written
	}
	nullExpr struct{ span }
	boolExpr struct {
		span
		v bool
	}
	unaryExpr struct {
		span
		op string // "-", "+" or "NOT"
		x  sexpr
	}
	binaryExpr struct {
		span
		op   string // AND OR = != < <= > >= + - * / DIV %
		l, r sexpr
	}
	isExpr struct {
		span
		x    sexpr
		what string // NULL, TRUE or FALSE
		neg  bool
	}
	inExpr struct {
		span
		x    sexpr
		list []sexpr
		neg  bool
	}
	betweenExpr struct {
		span
		x, lo, hi sexpr
		neg       bool
	}
	likeExpr struct {
		span
		x, pat, esc sexpr // esc is nil without ESCAPE
		neg         bool
	}
	callExpr struct {
		span
		name []string // dotted parts of the function's name
		args []sexpr
	}
	parenExpr struct {
		span
		x sexpr
	}
	tupleExpr struct {
		span
		items []sexpr
	}
)

// Words that are not identifiers unless backquoted: the grammar's own, and
// SQL's clauses, so that "i FROM t" reads as a clause rather than a column.
var reserved = map[string]bool{
	"AND": true, "OR": true, "XOR": true, "NOT": true, "IS": true, "NULL": true, "TRUE": true,
	"FALSE": true, "IN": true, "BETWEEN": true, "LIKE": true, "ESCAPE": true, "DIV": true,
	"MOD": true, "REGEXP": true, "RLIKE": true, "CASE": true, "WHEN": true, "THEN": true,
	"ELSE": true, "END": true, "CAST": true, "CONVERT": true, "INTERVAL": true, "EXISTS": true,
	"SELECT": true, "FROM": true, "WHERE": true, "AS": true, "UNION": true, "GROUP": true,
	"ORDER": true, "LIMIT": true, "HAVING": true, "BINARY": true, "COLLATE": true,
	"DEFAULT": true, "MATCH": true, "DISTINCT": true,
}

// unsupportedWords names, as SQL, the constructs a reserved word starts.
var unsupportedWords = map[string]string{
	"CASE": "CASE", "CAST": "CAST", "CONVERT": "CONVERT",
	"EXISTS": "EXISTS", "BINARY": "BINARY", "DEFAULT": "DEFAULT", "MATCH": "MATCH ... AGAINST",
	"XOR": "XOR", "COLLATE": "COLLATE", "REGEXP": "the operator REGEXP", "RLIKE": "the operator RLIKE",
}

// aggregates are SQL's aggregate functions: an expression is over one row.
var aggregates = map[string]bool{
	"count": true, "sum": true, "avg": true, "min": true, "max": true, "group_concat": true,
	"std": true, "stddev": true, "stddev_pop": true, "stddev_samp": true, "variance": true,
	"var_pop": true, "var_samp": true, "bit_and": true, "bit_or": true, "bit_xor": true,
	"json_arrayagg": true, "json_objectagg": true, "any_value": true,
}

// operators are the operator tokens, longest first.
var operators = []string{
	"->>", "<=>", "->", "<=", ">=", "<>", "!=", "||", "&&", "<<", ">>",
	"=", "<", ">", "+", "-", "*", "/", "%", "(", ")", ",", ".", "!", "~", "&", "|", "^", ";",
}

// syntaxError is an InvalidArgument error at byte offset pos of text.
func syntaxError(text string, pos int, format string, args ...any) error {
	return errcode.New(errcode.InvalidArgument, op, "", "in %q: syntax error at position %d: %s",
		text, pos+1, fmt.Sprintf(format, args...))
}

// notSupported is the error for a construct of SQL that expressions lack.
func notSupported(text string, pos int, what string) error {
	return errcode.New(errcode.InvalidArgument, op, "", "%s is not supported (in %q at position %d)", what, text, pos+1)
}

func isIdentRune(r rune) bool {
	return r == '_' || r == '$' || r >= utf8.RuneSelf && unicode.IsPrint(r) && !unicode.IsSpace(r) ||
		'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9'
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// lex splits text into tokens, skipping white space and comments (/* */,
// # and "-- " to the end of the line). It runs in one pass without
// recursion.
func lex(text string) ([]token, error) {
	var toks []token
	i := 0
	for {
		for i < len(text) {
			r, n := utf8.DecodeRuneInString(text[i:])
			switch {
			case unicode.IsSpace(r):
				i += n
				continue
			case strings.HasPrefix(text[i:], "/*"):
				end := strings.Index(text[i+2:], "*/")
				if end < 0 {
					return nil, syntaxError(text, i, "the comment is not closed")
				}
				i += 2 + end + 2
				continue
			case r == '#' || strings.HasPrefix(text[i:], "--") && (i+2 == len(text) || text[i+2] <= ' '):
				end := strings.IndexByte(text[i:], '\n')
				if end < 0 {
					end = len(text) - i
				}
				i += end
				continue
			}
			break
		}
		if i == len(text) {
			return append(toks, token{kind: tEOF, pos: i, end: i}), nil
		}
		t, err := lexOne(text, i, toks)
		if err != nil {
			return nil, err
		}
		toks = append(toks, t)
		i = t.end
	}
}

// lexOne reads the token at text[i:], which is not white space; prev are the
// tokens before it.
func lexOne(text string, i int, prev []token) (token, error) {
	c := text[i]
	rest := text[i:]
	switch {
	case c == '\'' || c == '"':
		val, end, err := lexQuoted(text, i)
		return token{kind: tString, val: val, pos: i, end: end}, err
	case c == '`':
		val, end, err := lexQuoted(text, i)
		if err == nil && val == "" {
			err = syntaxError(text, i, "an identifier cannot be empty")
		}
		return token{kind: tQuoted, val: val, pos: i, end: end}, err
	case (c == 'x' || c == 'X' || c == 'b' || c == 'B') && len(rest) > 1 && rest[1] == '\'':
		end := strings.IndexByte(rest[2:], '\'')
		if end < 0 {
			return token{}, syntaxError(text, i, "the literal is not closed")
		}
		return token{kind: tOtherLit, val: rest[:end+3], pos: i, end: i + end + 3}, nil
	case isDigit(c) || c == '.' && len(rest) > 1 && isDigit(rest[1]) && !afterName(prev):
		return lexNumber(text, i)
	case c == '?':
		return token{kind: tParam, val: "?", pos: i, end: i + 1}, nil
	case (c == ':' || c == '@') && len(rest) > 1:
		j := 1
		for j < len(rest) && (isIdentRune(rune(rest[j])) || rest[j] == '@' || rest[j] >= utf8.RuneSelf) {
			j++
		}
		if j > 1 {
			kind := tParam
			if c == '@' {
				kind = tVar
			}
			return token{kind: kind, val: rest[:j], pos: i, end: i + j}, nil
		}
	}
	if r, _ := utf8.DecodeRuneInString(rest); isIdentRune(r) {
		j := 0
		for j < len(rest) {
			r, n := utf8.DecodeRuneInString(rest[j:])
			if !isIdentRune(r) {
				break
			}
			j += n
		}
		return token{kind: tIdent, val: rest[:j], pos: i, end: i + j}, nil
	}
	for _, o := range operators {
		if strings.HasPrefix(rest, o) {
			return token{kind: tOp, val: o, pos: i, end: i + len(o)}, nil
		}
	}
	r, _ := utf8.DecodeRuneInString(rest)
	return token{}, syntaxError(text, i, "unexpected character %q", r)
}

// afterName reports whether the last token names something, so that a dot
// after it separates parts of a name rather than starting a number.
func afterName(prev []token) bool {
	if len(prev) == 0 {
		return false
	}
	k := prev[len(prev)-1].kind
	return k == tIdent || k == tQuoted
}

// lexQuoted reads a string or backquoted identifier starting at text[i]: a
// doubled quote stands for one, and in strings MySQL's backslash escapes
// apply (\% and \_ keep their backslash, for LIKE).
func lexQuoted(text string, i int) (string, int, error) {
	q := text[i]
	var b strings.Builder
	for j := i + 1; j < len(text); j++ {
		c := text[j]
		switch {
		case c == q && j+1 < len(text) && text[j+1] == q:
			b.WriteByte(q)
			j++
		case c == q:
			return b.String(), j + 1, nil
		case c == '\\' && q != '`' && j+1 < len(text):
			j++
			switch e := text[j]; e {
			case '0':
				b.WriteByte(0)
			case 'b':
				b.WriteByte('\b')
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case 'Z':
				b.WriteByte(0x1a)
			case '%', '_':
				b.WriteByte('\\')
				b.WriteByte(e)
			default:
				b.WriteByte(e)
			}
		default:
			b.WriteByte(c)
		}
	}
	what := "string"
	if q == '`' {
		what = "quoted identifier"
	}
	return "", 0, syntaxError(text, i, "the %s is not closed", what)
}

// lexNumber reads a number at text[i]: 12, 1.5, .5, 1e-3, and the
// hexadecimal and bit literals 0x1f and 0b01.
func lexNumber(text string, i int) (token, error) {
	rest := text[i:]
	j, kind := 0, tInt
	if len(rest) > 2 && rest[0] == '0' && (rest[1] == 'x' || rest[1] == 'b') {
		j = 2
		for j < len(rest) && isIdentRune(rune(rest[j])) {
			j++
		}
		return token{kind: tOtherLit, val: rest[:j], pos: i, end: i + j}, nil
	}
	digits := func() {
		for j < len(rest) && isDigit(rest[j]) {
			j++
		}
	}
	digits()
	if j < len(rest) && rest[j] == '.' {
		kind = tDecimal
		j++
		digits()
	}
	if j < len(rest) && (rest[j] == 'e' || rest[j] == 'E') {
		k := j + 1
		if k < len(rest) && (rest[k] == '+' || rest[k] == '-') {
			k++
		}
		if k < len(rest) && isDigit(rest[k]) {
			kind, j = tFloat, k
			digits()
		}
	}
	if r, _ := utf8.DecodeRuneInString(rest[j:]); j < len(rest) && isIdentRune(r) {
		return token{}, syntaxError(text, i+j, "unexpected %q after the number %s", r, rest[:j])
	}
	return token{kind: kind, val: rest[:j], pos: i, end: i + j}, nil
}

// operand reports whether t is an operand, a comma or a closing
// parenthesis: the tokens that do not add a level to the tree.
func operand(t token) bool {
	switch t.kind {
	case tIdent:
		w := strings.ToUpper(t.val)
		return !reserved[w] || w == "NULL" || w == "TRUE" || w == "FALSE"
	case tOp:
		return t.val == "," || t.val == ")"
	}
	return true
}

// Binding powers, loosest first, as in MySQL.
const (
	precOr = iota + 1
	precAnd
	precNot
	precCmp // = != < <= > >= IS IN BETWEEN LIKE
	precAdd // + -
	precMul // * / DIV % MOD
	precUnary
	precBang
)

// parser is a precedence-climbing parser over the tokens of text.
type parser struct {
	text string
	toks []token
	i    int
}

func (p *parser) peek() token { return p.toks[p.i] }

func (p *parser) next() token {
	t := p.toks[p.i]
	if t.kind != tEOF {
		p.i++
	}
	return t
}

// word is t's upper-cased text when t is a bare word, else "".
func word(t token) string {
	if t.kind != tIdent {
		return ""
	}
	return strings.ToUpper(t.val)
}

func isOp(t token, ops ...string) bool {
	if t.kind != tOp {
		return false
	}
	for _, o := range ops {
		if t.val == o {
			return true
		}
	}
	return false
}

func (p *parser) expected(what string) error {
	t := p.peek()
	if t.kind == tEOF {
		return syntaxError(p.text, t.pos, "expected %s, found the end", what)
	}
	return syntaxError(p.text, t.pos, "expected %s, found %q", what, p.text[t.pos:t.end])
}

func (p *parser) expectOp(o string) (token, error) {
	if !isOp(p.peek(), o) {
		return token{}, p.expected(fmt.Sprintf("%q", o))
	}
	return p.next(), nil
}

// parse parses the whole text as one expression.
func (p *parser) parse() (sexpr, error) {
	e, err := p.expr(precOr)
	if err != nil {
		return nil, err
	}
	if t := p.peek(); t.kind != tEOF {
		return nil, errcode.New(errcode.InvalidArgument, op, "",
			"%q is not a single expression: unexpected %q at position %d", p.text, p.text[t.pos:t.end], t.pos+1)
	}
	return e, nil
}

// expr parses an expression whose operators bind at least as tightly as min.
func (p *parser) expr(min int) (sexpr, error) {
	left, err := p.prefix()
	if err != nil {
		return nil, err
	}
	for {
		t := p.peek()
		if err := p.refuseInfix(t); err != nil {
			return nil, err
		}
		w := word(t)
		var prec int
		switch {
		case w == "OR" || isOp(t, "||"):
			prec = precOr
		case w == "AND" || isOp(t, "&&"):
			prec = precAnd
		case isOp(t, "=", "!=", "<>", "<", "<=", ">", ">=") || w == "IS" || w == "IN" || w == "BETWEEN" ||
			w == "LIKE" || w == "NOT":
			prec = precCmp
		case isOp(t, "+", "-"):
			prec = precAdd
		case isOp(t, "*", "/", "%") || w == "DIV" || w == "MOD":
			prec = precMul
		default:
			return left, nil
		}
		if prec < min {
			return left, nil
		}
		p.next()
		if prec == precCmp {
			left, err = p.predicate(left, t)
		} else {
			left, err = p.binary(left, t, prec)
		}
		if err != nil {
			return nil, err
		}
	}
}

// refuseInfix refuses the operators of SQL that expressions lack.
func (p *parser) refuseInfix(t token) error {
	switch {
	case isOp(t, "&", "|", "^", "<<", ">>", "<=>"):
		return notSupported(p.text, t.pos, "operator "+t.val)
	case isOp(t, "->"):
		return notSupported(p.text, t.pos, "the JSON operator -> (json_extract)")
	case isOp(t, "->>"):
		return notSupported(p.text, t.pos, "the JSON operator ->> (json_unquote)")
	}
	w := word(t)
	if w == "NOT" && p.i+1 < len(p.toks) {
		w = word(p.toks[p.i+1])
	}
	switch w {
	case "XOR", "REGEXP", "RLIKE", "COLLATE":
		return notSupported(p.text, t.pos, unsupportedWords[w])
	case "MEMBER", "SOUNDS":
		if next := p.toks[min(p.i+1, len(p.toks)-1)]; word(next) == "OF" || word(next) == "LIKE" {
			return notSupported(p.text, t.pos, w+" "+word(next))
		}
	}
	return nil
}

func (p *parser) binary(left sexpr, t token, prec int) (sexpr, error) {
	right, err := p.expr(prec + 1)
	if err != nil {
		return nil, err
	}
	o := t.val
	switch w := word(t); {
	case w == "OR" || o == "||":
		o = "OR"
	case w == "AND" || o == "&&":
		o = "AND"
	case w == "MOD":
		o = "%"
	case w != "":
		o = w
	}
	return &binaryExpr{span{left.where().pos, right.where().end}, o, left, right}, nil
}

// predicate parses what follows the left operand of a comparison, IS, IN,
// BETWEEN or LIKE, whose first token t has been read.
func (p *parser) predicate(left sexpr, t token) (sexpr, error) {
	start := left.where().pos
	if t.kind == tOp {
		if w := word(p.peek()); (w == "ANY" || w == "ALL" || w == "SOME") && p.i+1 < len(p.toks) &&
			isOp(p.toks[p.i+1], "(") {
			return nil, notSupported(p.text, p.peek().pos, "ANY / ALL")
		}
		right, err := p.expr(precCmp + 1)
		if err != nil {
			return nil, err
		}
		o := t.val
		if o == "<>" {
			o = "!="
		}
		return &binaryExpr{span{start, right.where().end}, o, left, right}, nil
	}
	w := word(t)
	if w == "IS" {
		neg := word(p.peek()) == "NOT"
		if neg {
			p.next()
		}
		v := p.peek()
		what := word(v)
		switch what {
		case "UNKNOWN":
			what = "NULL"
		case "NULL", "TRUE", "FALSE":
		default:
			return nil, p.expected("NULL, TRUE, FALSE or UNKNOWN after IS")
		}
		p.next()
		return &isExpr{span{start, v.end}, left, what, neg}, nil
	}
	neg := w == "NOT"
	if neg {
		if w = word(p.peek()); w != "IN" && w != "BETWEEN" && w != "LIKE" {
			return nil, p.expected("IN, BETWEEN or LIKE after NOT")
		}
		p.next()
	}
	switch w {
	case "IN":
		open, err := p.expectOp("(")
		if err != nil {
			return nil, err
		}
		if word(p.peek()) == "SELECT" {
			return nil, notSupported(p.text, open.pos, "a subquery")
		}
		list, end, err := p.list(open)
		if err != nil {
			return nil, err
		}
		return &inExpr{span{start, end}, left, list, neg}, nil
	case "BETWEEN":
		lo, err := p.expr(precCmp + 1)
		if err != nil {
			return nil, err
		}
		if word(p.peek()) != "AND" {
			return nil, p.expected("AND after BETWEEN's lower bound")
		}
		p.next()
		hi, err := p.expr(precCmp + 1)
		if err != nil {
			return nil, err
		}
		return &betweenExpr{span{start, hi.where().end}, left, lo, hi, neg}, nil
	}
	// LIKE
	pat, err := p.expr(precCmp + 1)
	if err != nil {
		return nil, err
	}
	e := &likeExpr{span{start, pat.where().end}, left, pat, nil, neg}
	if word(p.peek()) == "ESCAPE" {
		p.next()
		if e.esc, err = p.expr(precCmp + 1); err != nil {
			return nil, err
		}
		e.end = e.esc.where().end
	}
	return e, nil
}

// list parses "a, b, ...)" after the opening parenthesis open, returning the
// items and the end of the closing parenthesis.
func (p *parser) list(open token) ([]sexpr, int, error) {
	var items []sexpr
	for {
		e, err := p.expr(precOr)
		if err != nil {
			return nil, 0, err
		}
		items = append(items, e)
		if isOp(p.peek(), ",") {
			p.next()
			continue
		}
		closing, err := p.expectOp(")")
		if err != nil {
			return nil, 0, err
		}
		return items, closing.end, nil
	}
}

// prefix parses a unary operator and its operand, or a primary expression.
func (p *parser) prefix() (sexpr, error) {
	t := p.peek()
	var o string
	var prec int
	switch {
	case word(t) == "NOT":
		o, prec = "NOT", precNot
	case isOp(t, "!"):
		o, prec = "NOT", precBang
	case isOp(t, "-", "+"):
		o, prec = t.val, precUnary
	case isOp(t, "~"):
		return nil, notSupported(p.text, t.pos, "the operator ~")
	default:
		return p.primary()
	}
	p.next()
	x, err := p.expr(prec)
	if err != nil {
		return nil, err
	}
	return &unaryExpr{span{t.pos, x.where().end}, o, x}, nil
}

// primary parses a literal, a column, a function call, or a parenthesised
// expression or row value.
func (p *parser) primary() (sexpr, error) {
	t := p.peek()
	sp := span{t.pos, t.end}
	switch t.kind {
	case tString, tInt, tDecimal, tFloat, tOtherLit:
		p.next()
		return &litExpr{span: sp, kind: t.kind, val: t.val}, nil
	case tQuoted:
		return p.name()
	case tParam:
		return nil, notSupported(p.text, t.pos, "a placeholder (? or :name)")
	case tVar:
		return nil, notSupported(p.text, t.pos, "a variable (@name)")
	case tOp:
		if t.val != "(" {
			break
		}
		p.next()
		if word(p.peek()) == "SELECT" {
			return nil, notSupported(p.text, t.pos, "a subquery")
		}
		items, end, err := p.list(t)
		if err != nil {
			return nil, err
		}
		if len(items) == 1 {
			return &parenExpr{span{t.pos, end}, items[0]}, nil
		}
		return &tupleExpr{span{t.pos, end}, items}, nil
	case tIdent:
		w := word(t)
		switch w {
		case "NULL":
			p.next()
			return &nullExpr{sp}, nil
		case "TRUE", "FALSE":
			p.next()
			return &boolExpr{sp, w == "TRUE"}, nil
		}
		if what, ok := unsupportedWords[w]; ok {
			return nil, notSupported(p.text, t.pos, what)
		}
		next := p.toks[min(p.i+1, len(p.toks)-1)]
		switch {
		case w == "INTERVAL":
			return p.interval()
		case (w == "TIMESTAMP" || w == "DATE") && next.kind == tString:
			p.next()
			p.next()
			return &litExpr{span{t.pos, next.end}, tString, next.val, w}, nil
		case (w == "TIME" || w == "DATETIME") && next.kind == tString:
			return nil, notSupported(p.text, t.pos, "a "+w+" literal (write TIMESTAMP '...')")
		}
		if strings.HasPrefix(t.val, "_") && p.toks[p.i+1].kind == tString {
			return nil, notSupported(p.text, t.pos, "a character set introducer (_charset 'text')")
		}
		if !reserved[w] {
			return p.name()
		}
	}
	return nil, p.expected("an operand")
}

// interval parses INTERVAL n unit.
func (p *parser) interval() (sexpr, error) {
	start := p.next()
	num := p.peek()
	n, err := p.prefix()
	if err != nil {
		return nil, err
	}
	u := p.peek()
	if u.kind != tIdent {
		if num.kind == tString {
			// INTERVAL '1 hour', as PostgreSQL writes it.
			return nil, syntaxError(p.text, num.pos, "INTERVAL takes an unquoted integer and then a unit, "+
				"as in INTERVAL 1 HOUR, not the string %s", p.text[num.pos:num.end])
		}
		return nil, p.expected("a unit after INTERVAL's number (MICROSECOND, SECOND, MINUTE, HOUR, DAY or WEEK)")
	}
	p.next()
	return &intervalExpr{span{start.pos, u.end}, n, strings.ToUpper(u.val)}, nil
}

// name parses a dotted column name, or a function call when a parenthesis
// follows it.
func (p *parser) name() (sexpr, error) {
	first := p.next()
	e := &identExpr{span{first.pos, first.end}, []string{first.val}}
	for isOp(p.peek(), ".") {
		p.next()
		t := p.peek()
		if t.kind != tIdent && t.kind != tQuoted {
			return nil, p.expected("a name after the dot")
		}
		p.next()
		e.parts = append(e.parts, t.val)
		e.end = t.end
	}
	if !isOp(p.peek(), "(") || first.kind == tQuoted {
		return e, nil
	}
	name := strings.ToLower(strings.Join(e.parts, "."))
	if aggregates[name] {
		return nil, notSupported(p.text, e.pos, "the aggregate function "+name)
	}
	if name == "extract" {
		return nil, notSupported(p.text, e.pos, "EXTRACT")
	}
	open := p.next()
	call := &callExpr{span: span{e.pos, open.end}, name: e.parts}
	if isOp(p.peek(), ")") {
		call.end = p.next().end
		return call, nil
	}
	args, end, err := p.list(open)
	if err != nil {
		return nil, err
	}
	call.args, call.end = args, end
	return call, nil
}
