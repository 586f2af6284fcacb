// Package expr evaluates SQL expressions over Arrow record batches: the
// boolean filters that prefilter a table (reward > 0 AND role = 'assistant')
// and the integer expressions that compute split ids (problem_id % 10).
//
// # Parsing
//
// Text is parsed by this package's own lexer and precedence-climbing parser
// for the grammar below, in MySQL's dialect (syntax.go). A parser of all of
// SQL was used before: vitess's sqlparser, the maintained one, brings a
// thousand packages and registers command-line flags when imported, and the
// small ones (github.com/xwb1989/sqlparser, a fork of an old vitess) are
// unmaintained; the grammar here is a page long, and the parser recognises
// the rest of SQL's expression syntax only to refuse it by name.
// Parse then checks the tree against the table's schema and builds a typed
// plan; every error is an errcode.InvalidArgument error that names the
// column, token or fragment at fault and its 1-based byte position in the
// text.
//
// Because the dialect is MySQL's, identifiers that are keywords or contain
// odd characters are quoted with backquotes (`order`), 'single' and "double"
// quotes both make strings (a doubled quote or MySQL's backslash escapes
// stand for a quote), && is AND, || is OR, MOD is %, and comments (/* */,
// # and "-- " to the end of the line) are skipped. Comparisons of strings are
// byte-wise and case-sensitive (a binary collation), unlike MySQL's default.
//
// # Columns
//
// A column is named as in the schema: case-sensitively, or else
// case-insensitively when only one column matches. Fields of struct columns
// are reached with dots at any depth: s.a, s.b.c.d; any part may be
// backquoted (`s`.`order`), and a backquoted `s.b.c` is split at its dots. A field
// name may itself contain dots; every split of a dotted name is tried against
// the schema. A field of a null struct is null.
//
// Columns of integer types (signed or unsigned, 8 to 64 bits) are evaluated
// as int64, float16/32/64 as float64, and string, large_string, string_view
// and dictionary-encoded strings as utf8; booleans as booleans. A uint64
// value above the int64 range makes evaluation fail. Lists are usable only
// through length and cardinality.
//
// Timestamps of every unit, with or without a time zone, and date32 and
// date64 are evaluated as int64 nanoseconds since 1970-01-01 00:00:00 UTC
// (time.go): Arrow stores a zoned timestamp as its UTC instant, a timestamp
// without a zone is read as UTC, and a date is its midnight, as in MySQL, so
// every temporal column compares with every other. Nanoseconds cover the
// years 1678 to 2261; a value outside them makes evaluation fail, naming the
// column, rather than compare wrongly.
//
// Decimal columns (decimal128 and decimal256) are compared with number
// literals exactly, at the column's scale (decimal.go): the literal is the
// rational number its text writes, and when scaling it leaves a fraction
// the comparison becomes the equivalent one on the neighbouring integers
// (price > 1.255 on a scale-2 column is price >= 1.26). A decimal is
// usable in comparisons, IN and BETWEEN with literals, IS NULL, and
// coalesce over decimals of one type and literals that are values of it;
// comparing two decimal columns and arithmetic on decimals are refused.
// Other types (time of day, duration, binary, maps) are rejected by Parse.
//
// # Operators and functions
//
//   - comparisons = != <> < <= > >= between numbers (an integer compared with
//     a float is widened to float64), strings, or booleans;
//   - AND, OR, NOT (also written !) with SQL's three-valued logic;
//   - x [NOT] IN (v, ...), x [NOT] BETWEEN lo AND hi, x IS [NOT] NULL,
//     x IS [NOT] TRUE, x IS [NOT] FALSE;
//   - x [NOT] LIKE 'pattern' [ESCAPE 'c']: % matches any run of characters,
//     _ one character, and \ (or the ESCAPE character) makes the next one
//     literal; the pattern must be a constant;
//   - + - * on integers (int64; overflow is an error, never a wrap-around) or
//     floats; / on two integers divides and truncates toward zero, as in
//     PostgreSQL (MySQL would give a decimal), on floats it is float division;
//     DIV is integer division and takes integers only; % is the remainder with
//     the sign of the dividend (Go's and MySQL's), math.Mod for floats; a zero
//     divisor gives NULL, as in SQL; unary minus; parentheses;
//   - length(x): elements of a list, bytes of a string (MySQL's LENGTH);
//     char_length(x) (or character_length): characters of a string or
//     elements of a list; cardinality(x): elements of a list; abs(x);
//     coalesce(x, ...): the first non-null argument;
//   - ts + INTERVAL n unit, ts - INTERVAL n unit and INTERVAL n unit + ts
//     for a timestamp or date ts, an integer literal n and a unit of fixed
//     length: MICROSECOND, SECOND, MINUTE, HOUR, DAY or WEEK. MONTH,
//     QUARTER and YEAR are refused by name: they need calendar arithmetic.
//     A constant shifted by an interval is computed at Parse, so that
//     pruning sees it.
//
// Literals are integers (int64), decimals and floats (float64), strings,
// TRUE, FALSE and NULL; TIMESTAMP 'YYYY-MM-DD[ HH:MM:SS[.fffffffff]]', in
// UTC unless the text ends with Z or an offset (+05:30), and DATE
// 'YYYY-MM-DD'. A string literal compared with a timestamp or date (or in
// its IN list, BETWEEN or coalesce) is read as a TIMESTAMP literal, as
// MySQL does. Subqueries, aggregates, other functions and operators (bit
// operations, REGEXP, <=>, XOR, CASE, CAST, EXTRACT, the JSON operators ->
// and ->>, placeholders, ...) are errors that name the construct as SQL.
// Hexadecimal and bit literals (0x1f, X'1f') are refused.
//
// The functions that read the clock (now(), current_timestamp, curdate(),
// sysdate(), ...) are refused, with an error that says to write the
// instant as TIMESTAMP '...'. A permutation is built once, persisted, and
// must be the same whenever and wherever it is built again from its spec
// and table version; its manifest records the filter text as the account of
// which rows it kept. A filter that read the clock would keep other rows at
// every build while its recorded text stayed the same. Evaluating now() once
// and recording the instant would keep the record true, but would make the
// spec, as written, build something different each time; the caller, who
// knows what "now" means for the run, writes the instant instead.
//
// # Limits
//
// An expression is at most MaxBytes of text with at most MaxOperators
// operators, opening parentheses and function calls. Checking, evaluating and
// pruning recurse once per level of the tree, and every level is one of those
// tokens, so no expression can exhaust the stack however deep it nests or
// long it chains; the work is linear in the text. A long list of values
// belongs in x IN (v, ...), which is one level whatever its length.
//
// # Evaluation
//
// Eval is vectorised: the arrow-go compute kernels do comparisons, Kleene
// AND/OR, + - *, negation, abs and the widening casts; small typed kernels
// in this package do what compute lacks (LIKE, division, remainder, lengths,
// IS TRUE, coalesce) or, in arrow-go v18.8.0, gets wrong: NOT and IS NOT
// NULL (sliced inputs), IN (leaks, -0.0 ≠ 0.0) and booleans as integers
// (sliced inputs); docs/upstream.md lists them, and a canary test of each
// fails once arrow-go no longer does.
// Kernels run with a context that cannot be canceled (arrow-go's executor
// leaks its output when canceled mid-call); the caller's context is checked
// between operations. Every intermediate array is released before
// Eval returns.
//
// # Pruning
//
// MayMatch decides from per-column minimum, maximum and null count whether
// any row of a row group can satisfy a filter, so that row groups whose
// statistics rule a filter out are not read; RowGroupStats reads those
// statistics from Parquet metadata, converting timestamps (INT64 with a
// unit) and dates (INT32 days) to nanoseconds and decimals (INT32, INT64 or
// big-endian FIXED_LEN_BYTE_ARRAY, up to 32 bytes) to unscaled values. It reasons about
// comparisons, IN, BETWEEN, IS NULL, boolean columns and LIKE 'prefix%',
// and answers false only when it can prove no row matches.
package expr
