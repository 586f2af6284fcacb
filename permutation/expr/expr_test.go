package expr_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/arrow/memory/mallocator"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/permutation/expr"
)

var testSchema = arrow.NewSchema([]arrow.Field{
	{Name: "i", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	{Name: "j", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
	{Name: "u", Type: arrow.PrimitiveTypes.Uint8, Nullable: true},
	{Name: "f", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	{Name: "g", Type: arrow.PrimitiveTypes.Float32, Nullable: true},
	{Name: "s", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "ls", Type: arrow.BinaryTypes.LargeString, Nullable: true},
	{Name: "d", Type: &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: arrow.BinaryTypes.String}, Nullable: true},
	{Name: "b", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
	{Name: "l", Type: arrow.ListOf(arrow.PrimitiveTypes.Int64), Nullable: true},
	{Name: "st", Type: arrow.StructOf(
		arrow.Field{Name: "a", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		arrow.Field{Name: "b", Type: arrow.BinaryTypes.String, Nullable: true},
		arrow.Field{Name: "in", Type: arrow.StructOf(
			arrow.Field{Name: "c", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
			arrow.Field{Name: "deep", Type: arrow.StructOf(
				arrow.Field{Name: "e", Type: arrow.PrimitiveTypes.Int64, Nullable: true}), Nullable: true}), Nullable: true}), Nullable: true},
	{Name: "x.y", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	{Name: "Mixed", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	{Name: "ts", Type: arrow.FixedWidthTypes.Timestamp_us, Nullable: true},
	{Name: "dec", Type: &arrow.Decimal128Type{Precision: 9, Scale: 2}, Nullable: true},
}, nil)

const testRows = `[
{"i": 1, "j": 10, "u": 200, "f": 1.5, "g": 0.5, "s": "apple", "ls": "apple", "d": "red", "b": true, "l": [1, 2],
 "st": {"a": 1, "b": "x", "in": {"c": 0.5, "deep": {"e": 7}}}, "x.y": 5, "Mixed": 1, "ts": 1796083200000000, "dec": "1.25"},
{"i": null, "j": 20, "u": null, "f": null, "g": null, "s": null, "ls": null, "d": null, "b": null, "l": null,
 "st": null, "x.y": null, "Mixed": null, "ts": null, "dec": null},
{"i": -7, "j": null, "u": 0, "f": -2.0, "g": -2.0, "s": "banana", "ls": "banana", "d": "blue", "b": false, "l": [],
 "st": {"a": null, "b": "y", "in": null}, "x.y": 6, "Mixed": 2, "ts": 0, "dec": "-0.50"},
{"i": 0, "j": 3, "u": 3, "f": 0.0, "g": 0.0, "s": "a_c%", "ls": "a_c%", "d": "red", "b": true, "l": [null, 5, 6],
 "st": {"a": 3, "b": null, "in": {"c": null, "deep": null}}, "x.y": 7, "Mixed": 3, "ts": -1, "dec": "0.00"},
{"i": 100, "j": -3, "u": 255, "f": 2.5, "g": 2.5, "s": "é日", "ls": "é日", "d": null, "b": false, "l": [9],
 "st": {"a": 4, "b": "", "in": {"c": -1.0, "deep": {"e": null}}}, "x.y": null, "Mixed": -1, "ts": 1796083200000001, "dec": "9999999.99"}
]`

func checkedMem(t testing.TB) *memory.CheckedAllocator {
	mem := memory.NewCheckedAllocator(mallocator.NewMallocator())
	t.Cleanup(func() { mem.AssertSize(t, 0) })
	return mem
}

func testRecord(t testing.TB, mem memory.Allocator) arrow.RecordBatch {
	t.Helper()
	rec, _, err := array.RecordFromJSON(mem, testSchema, strings.NewReader(testRows))
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// values turns an array into Go values, nil for null.
func values(a arrow.Array) []any {
	out := make([]any, a.Len())
	for i := range out {
		if a.IsNull(i) {
			continue
		}
		switch a := a.(type) {
		case *array.Boolean:
			out[i] = a.Value(i)
		case *array.Int64:
			out[i] = a.Value(i)
		case *array.Float64:
			out[i] = a.Value(i)
		case *array.String:
			out[i] = strings.Clone(a.Value(i)) // a view into a's buffer otherwise
		default:
			panic(a.DataType().String())
		}
	}
	return out
}

var N any

func TestEval(t *testing.T) {
	T, F := true, false
	for _, tc := range []struct {
		text string
		want []any
	}{
		// comparisons, with nulls and widening
		{"i = 1", []any{T, N, F, F, F}},
		{"i != 1", []any{F, N, T, T, T}},
		{"i <> 1", []any{F, N, T, T, T}},
		{"i < 1", []any{F, N, T, T, F}},
		{"i <= 1", []any{T, N, T, T, F}},
		{"i > 0", []any{T, N, F, F, T}},
		{"i >= 0", []any{T, N, F, T, T}},
		{"1 < i", []any{F, N, F, F, T}},
		{"i > 0.5", []any{T, N, F, F, T}},
		{"f > 1", []any{T, N, F, F, T}},
		{"f = g", []any{F, N, T, T, T}},
		{"i = j", []any{F, N, N, F, F}},
		{"u > 100", []any{T, N, F, F, T}},
		{"j < i", []any{F, N, N, F, T}},
		{"s = 'apple'", []any{T, N, F, F, F}},
		{"s < 'b'", []any{T, N, F, T, F}},
		{"s = ls", []any{T, N, T, T, T}},
		{"d = 'red'", []any{T, N, F, T, N}},
		{"d = s", []any{F, N, F, F, N}},
		{"b = true", []any{T, N, F, T, F}},
		{"b != false", []any{T, N, F, T, F}},
		{"b", []any{T, N, F, T, F}},
		{"i = NULL", []any{N, N, N, N, N}},
		{"NULL = NULL", []any{N, N, N, N, N}},
		{"1 = 1", []any{T, T, T, T, T}},
		{`s = "apple"`, []any{T, N, F, F, F}},
		{`s = 'app' OR s = "ban""ana" OR s = 'it''s' OR s = '\t'`, []any{F, N, F, F, F}},
		{"s = 'apple' /* a comment */ # another\n AND i = 1 -- and one more", []any{T, N, F, F, F}},
		{"i--1 = 2", []any{T, N, F, F, F}},
		{"s >= .5e1 OR i < 1.e0", nil}, // error: string and float
		{"i < 1.e0 OR f = .5e1", []any{F, N, T, T, F}},
		// Kleene logic
		{"b AND i > 0", []any{T, N, F, F, F}},
		{"b OR i > 0", []any{T, N, F, T, T}},
		{"b AND NULL", []any{N, N, F, N, F}},
		{"b OR NULL", []any{T, N, N, T, N}},
		{"NOT b", []any{F, N, T, F, T}},
		{"!b", []any{F, N, T, F, T}},
		{"NOT (i > 0)", []any{F, N, T, T, F}},
		{"b && i > 0 || s = 'banana'", []any{T, N, T, F, F}},
		{"FALSE AND NULL", []any{F, F, F, F, F}},
		{"TRUE OR NULL", []any{T, T, T, T, T}},
		// IN
		{"i IN (1, 100)", []any{T, N, F, F, T}},
		{"i NOT IN (1, 100)", []any{F, N, T, T, F}},
		{"i IN (1, NULL)", []any{T, N, N, N, N}},
		{"i NOT IN (1, NULL)", []any{F, N, N, N, N}},
		{"i IN (1.0, 2.5)", []any{T, N, F, F, F}},
		{"f IN (1, 2.5)", []any{F, N, F, F, T}},
		{"s IN ('apple', 'é日')", []any{T, N, F, F, T}},
		{"d IN ('blue')", []any{F, N, T, F, N}},
		{"i IN (j, 0)", []any{F, N, N, T, F}},
		{"1 IN (i, j)", []any{T, N, N, F, F}},
		// BETWEEN
		{"i BETWEEN 0 AND 1", []any{T, N, F, T, F}},
		{"i NOT BETWEEN 0 AND 1", []any{F, N, T, F, T}},
		{"f BETWEEN -2 AND 1.5", []any{T, N, T, T, F}},
		{"i BETWEEN j AND 200", []any{F, N, N, F, T}},
		{"s BETWEEN 'a' AND 'b'", []any{T, N, F, T, F}},
		// IS
		{"i IS NULL", []any{F, T, F, F, F}},
		{"i IS NOT NULL", []any{T, F, T, T, T}},
		{"st IS NULL", []any{F, T, F, F, F}},
		{"st.in IS NOT NULL", []any{T, F, F, T, T}},
		{"st.in.deep IS NULL", []any{F, T, T, T, F}},
		{"l IS NULL", []any{F, T, F, F, F}},
		{"NULL IS NULL", []any{T, T, T, T, T}},
		{"b IS TRUE", []any{T, F, F, T, F}},
		{"b IS NOT TRUE", []any{F, T, T, F, T}},
		{"b IS FALSE", []any{F, F, T, F, T}},
		{"b IS NOT FALSE", []any{T, T, F, T, F}},
		{"(i > 0) IS UNKNOWN", []any{F, T, F, F, F}},
		// LIKE
		{"s LIKE 'a%'", []any{T, N, F, T, F}},
		{"s LIKE '%a'", []any{F, N, T, F, F}},
		{"s LIKE '%an%'", []any{F, N, T, F, F}},
		{"s LIKE 'b_n_n_'", []any{F, N, T, F, F}},
		{"s LIKE '_日'", []any{F, N, F, F, T}},
		{"s LIKE 'a\\_c\\%'", []any{F, N, F, T, F}},
		{"s LIKE 'a!_c%' ESCAPE '!'", []any{F, N, F, T, F}},
		{"s LIKE 'a_c%'", []any{F, N, F, T, F}},
		{"s NOT LIKE 'a%'", []any{F, N, T, F, T}},
		{"s LIKE '%'", []any{T, N, T, T, T}},
		{"s LIKE 'apple'", []any{T, N, F, F, F}},
		{"s LIKE '%p%l%'", []any{T, N, F, F, F}},
		{"s LIKE NULL", []any{N, N, N, N, N}},
		{"d LIKE 'r%'", []any{T, N, F, T, N}},
		{"ls LIKE '%na'", []any{F, N, T, F, F}},
		// arithmetic
		{"i + 1", []any{int64(2), N, int64(-6), int64(1), int64(101)}},
		{"i - j", []any{int64(-9), N, N, int64(-3), int64(103)}},
		{"i * 2", []any{int64(2), N, int64(-14), int64(0), int64(200)}},
		{"i / 2", []any{int64(0), N, int64(-3), int64(0), int64(50)}},
		{"i DIV 2", []any{int64(0), N, int64(-3), int64(0), int64(50)}},
		{"i % 3", []any{int64(1), N, int64(-1), int64(0), int64(1)}},
		{"i % -3", []any{int64(1), N, int64(-1), int64(0), int64(1)}},
		{"i MOD 3", []any{int64(1), N, int64(-1), int64(0), int64(1)}},
		{"7 / i", []any{int64(7), N, int64(-1), N, int64(0)}},
		{"7 % i", []any{int64(0), N, int64(0), N, int64(7)}},
		{"f / 2", []any{0.75, N, -1.0, 0.0, 1.25}},
		{"i / 2.0", []any{0.5, N, -3.5, 0.0, 50.0}},
		{"1 / f", []any{1 / 1.5, N, -0.5, N, 0.4}},
		{"f % 1", []any{0.5, N, 0.0, 0.0, 0.5}},
		{"i + f", []any{2.5, N, -9.0, 0.0, 102.5}},
		{"-i", []any{int64(-1), N, int64(7), int64(0), int64(-100)}},
		{"-f", []any{-1.5, N, 2.0, 0.0, -2.5}},
		{"+i", []any{int64(1), N, int64(-7), int64(0), int64(100)}},
		{"(i + 1) * 2", []any{int64(4), N, int64(-12), int64(2), int64(202)}},
		{"i + 1 * 2", []any{int64(3), N, int64(-5), int64(2), int64(102)}},
		{"i + NULL", []any{N, N, N, N, N}},
		{"u + j", []any{int64(210), N, N, int64(6), int64(252)}},
		{"-9223372036854775808", []any{int64(-1 << 63), int64(-1 << 63), int64(-1 << 63), int64(-1 << 63), int64(-1 << 63)}},
		{"i % 10 < 8", []any{T, N, T, T, T}},
		// functions
		{"length(l)", []any{int64(2), N, int64(0), int64(3), int64(1)}},
		{"cardinality(l)", []any{int64(2), N, int64(0), int64(3), int64(1)}},
		{"char_length(l)", []any{int64(2), N, int64(0), int64(3), int64(1)}},
		{"length(s)", []any{int64(5), N, int64(6), int64(4), int64(5)}},
		{"char_length(s)", []any{int64(5), N, int64(6), int64(4), int64(2)}},
		{"CHARACTER_LENGTH(d)", []any{int64(3), N, int64(4), int64(3), N}},
		{"abs(i)", []any{int64(1), N, int64(7), int64(0), int64(100)}},
		{"abs(f)", []any{1.5, N, 2.0, 0.0, 2.5}},
		{"coalesce(i, j, 42)", []any{int64(1), int64(20), int64(-7), int64(0), int64(100)}},
		{"coalesce(f, i)", []any{1.5, N, -2.0, 0.0, 2.5}},
		{"coalesce(s, 'none')", []any{"apple", "none", "banana", "a_c%", "é日"}},
		{"coalesce(b, false)", []any{T, F, F, T, F}},
		{"coalesce(NULL, NULL)", []any{N, N, N, N, N}},
		{"length(l) > 1", []any{T, N, F, T, F}},
		// columns: nested, dotted, case
		{"st.a", []any{int64(1), N, N, int64(3), int64(4)}},
		{"st.b", []any{"x", N, "y", N, ""}},
		{"st.in.c", []any{0.5, N, N, N, -1.0}},
		{"`st.in.deep.e`", []any{int64(7), N, N, N, N}},
		{"`st`.`in`.`c` > 0", []any{T, N, N, N, F}},
		{"`x.y`", []any{int64(5), N, int64(6), int64(7), N}},
		{"st.`in`.deep.e", []any{int64(7), N, N, N, N}},
		{"`st`.in.deep.E + 0", []any{int64(7), N, N, N, N}},
		{"x.y + 1", []any{int64(6), N, int64(7), int64(8), N}},
		{"mixed", []any{int64(1), N, int64(2), int64(3), int64(-1)}},
		{"ST.A", []any{int64(1), N, N, int64(3), int64(4)}},
		{"reward_like_name_absent IS NULL OR TRUE", nil}, // error, checked below
	} {
		t.Run(tc.text, func(t *testing.T) {
			mem := checkedMem(t)
			rec := testRecord(t, mem)
			defer rec.Release()
			e, err := expr.Parse(tc.text, testSchema)
			if tc.want == nil {
				if err == nil {
					t.Fatal("no error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range []arrow.RecordBatch{rec} {
				got, err := e.Eval(context.Background(), r, mem)
				if err != nil {
					t.Fatal(err)
				}
				if !arrow.TypeEqual(got.DataType(), e.Type()) {
					t.Errorf("type %s, Type() %s", got.DataType(), e.Type())
				}
				if g := values(got); !reflect.DeepEqual(g, tc.want) {
					t.Errorf("got  %v\nwant %v", g, tc.want)
				}
				got.Release()
			}
			// every row window of a sliced batch gives the same values
			for off := int64(0); off <= rec.NumRows(); off++ {
				for end := off; end <= rec.NumRows(); end++ {
					s := rec.NewSlice(off, end)
					got, err := e.Eval(context.Background(), s, mem)
					if err != nil {
						t.Fatal(err)
					}
					if g := values(got); !reflect.DeepEqual(g, tc.want[off:end]) {
						t.Errorf("slice [%d:%d]: got %v, want %v", off, end, g, tc.want[off:end])
					}
					got.Release()
					s.Release()
				}
			}
		})
	}
}

func TestMask(t *testing.T) {
	mem := checkedMem(t)
	rec := testRecord(t, mem)
	defer rec.Release()
	e, err := expr.Parse("i >= 0 OR b IS NULL", testSchema)
	if err != nil {
		t.Fatal(err)
	}
	m, err := e.Mask(context.Background(), rec, mem)
	if err != nil {
		t.Fatal(err)
	}
	if want := []bool{true, true, false, true, true}; !reflect.DeepEqual(m, want) {
		t.Errorf("Mask %v, want %v", m, want)
	}
	if e, err = expr.Parse("i + 1", testSchema); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Mask(context.Background(), rec, mem); errcode.Of(err) != errcode.InvalidArgument {
		t.Errorf("Mask of an integer expression: %v", err)
	}
}

func TestColumnsAndType(t *testing.T) {
	for _, tc := range []struct {
		text string
		cols []string
		typ  arrow.DataType
	}{
		{"reward > 0", nil, nil},
		{"i > 0 AND st.a = 1 OR ST.b = 'x'", []string{"i", "st"}, arrow.FixedWidthTypes.Boolean},
		{"`x.y` % 10", []string{"x.y"}, arrow.PrimitiveTypes.Int64},
		{"f * 2", []string{"f"}, arrow.PrimitiveTypes.Float64},
		{"coalesce(s, d)", []string{"d", "s"}, arrow.BinaryTypes.String},
		{"1 + 1", nil, arrow.PrimitiveTypes.Int64},
	} {
		e, err := expr.Parse(tc.text, testSchema)
		if tc.typ == nil {
			if err == nil {
				t.Errorf("%s: no error", tc.text)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.text, err)
		}
		if got := e.Columns(); !reflect.DeepEqual(got, tc.cols) {
			t.Errorf("%s: Columns %v, want %v", tc.text, got, tc.cols)
		}
		if !arrow.TypeEqual(e.Type(), tc.typ) {
			t.Errorf("%s: Type %s, want %s", tc.text, e.Type(), tc.typ)
		}
		if e.String() != tc.text {
			t.Errorf("String %q", e.String())
		}
	}
}

// A record batch holding only the referenced columns, in another order, is
// enough.
func TestEvalProjected(t *testing.T) {
	mem := checkedMem(t)
	rec := testRecord(t, mem)
	defer rec.Release()
	e, err := expr.Parse("st.a + i > 1", testSchema)
	if err != nil {
		t.Fatal(err)
	}
	sch := arrow.NewSchema([]arrow.Field{testSchema.Field(10), testSchema.Field(0)}, nil)
	proj := array.NewRecordBatch(sch, []arrow.Array{rec.Column(10), rec.Column(0)}, rec.NumRows())
	defer proj.Release()
	got, err := e.Eval(context.Background(), proj, mem)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Release()
	if g, want := values(got), []any{true, N, N, true, true}; !reflect.DeepEqual(g, want) {
		t.Errorf("got %v, want %v", g, want)
	}
	// missing column and changed type are errors
	missing := array.NewRecordBatch(arrow.NewSchema(sch.Fields()[:1], nil), []arrow.Array{rec.Column(10)}, rec.NumRows())
	defer missing.Release()
	if _, err := e.Eval(context.Background(), missing, mem); errcode.Of(err) != errcode.InvalidArgument || !strings.Contains(err.Error(), `"i"`) {
		t.Errorf("missing column: %v", err)
	}
	retyped := array.NewRecordBatch(arrow.NewSchema([]arrow.Field{testSchema.Field(10), {Name: "i", Type: arrow.PrimitiveTypes.Float64}}, nil),
		[]arrow.Array{rec.Column(10), rec.Column(3)}, rec.NumRows())
	defer retyped.Release()
	if _, err := e.Eval(context.Background(), retyped, mem); errcode.Of(err) != errcode.InvalidArgument {
		t.Errorf("retyped column: %v", err)
	}
}

func TestEvalErrors(t *testing.T) {
	mem := checkedMem(t)
	sch := arrow.NewSchema([]arrow.Field{
		{Name: "a", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "u", Type: arrow.PrimitiveTypes.Uint64, Nullable: true},
	}, nil)
	rec, _, err := array.RecordFromJSON(mem, sch, strings.NewReader(
		`[{"a": 9223372036854775807, "u": 18446744073709551615}, {"a": -9223372036854775808, "u": 1}]`))
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	for _, text := range []string{"a + 1 > 0", "a - 1 > 0", "a * 2 > 0", "-a > 0", "abs(a) > 0", "a / -1 > 0", "u > 0"} {
		e, err := expr.Parse(text, sch)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.Eval(context.Background(), rec, mem); errcode.Of(err) != errcode.InvalidArgument {
			t.Errorf("%s: want an overflow error, got %v", text, err)
		}
	}
	e, err := expr.Parse("a % -1 = 0 AND a IS NOT NULL", sch)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := e.Eval(ctx, rec, mem); errcode.Of(err) != errcode.Canceled {
		t.Errorf("canceled: %v", err)
	}
	got, err := e.Eval(context.Background(), rec, mem)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Release()
	if g := values(got); !reflect.DeepEqual(g, []any{true, true}) {
		t.Errorf("a %% -1 = 0: %v", g)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"reward > 0", `unknown column "reward" at position 1; the table has: i, j, u`},
		{"i > 0 AND rewrd = 1", `unknown column "rewrd" at position 11`},
		{"st.zz = 1", `unknown column "st.zz"`},
		{"st.a.b = 1", `unknown column "st.a.b"`},
		{"i > 'abc'", `cannot compare integer with string (in "i > 'abc'" at position 1)`},
		{"f > 'abc'", `cannot compare float with string`},
		{"s + 1", `arithmetic + needs numbers, not a string`},
		{"i LIKE 'a%'", `LIKE needs a string, not a integer`},
		{"s LIKE s", `pattern of LIKE must be a string literal`},
		{"s LIKE 'a' ESCAPE 'ab'", `ESCAPE needs a string literal`},
		{"b = 1", `cannot compare boolean with integer`},
		{"i AND b", `i is a integer, not a boolean`},
		{"NOT s", `s is a string, not a boolean`},
		{"i IN ('a', 'b')", `type mismatch: integer IN a list holding string`},
		{"i IS TRUE", `IS TRUE / IS FALSE need a boolean`},
		{"l = 1", `cannot compare list with integer`},
		{"l", `the expression is a list`},
		{"st = 1", `cannot compare struct with integer`},
		{"st", `the expression is a struct`},
		{"st.in", `the expression is a struct`},
		{"ts > 0", `cannot compare timestamp with integer`},
		{"length(i)", `length of a integer`},
		{"cardinality(s)", `cardinality of a string`},
		{"length(s, s)", `length takes 1 argument(s), not 2`},
		{"abs(s)", `abs of a string`},
		{"coalesce(i, s)", `coalesce of integer and string`},
		{"coalesce()", `coalesce needs at least one argument`},
		{"upper(s) = 'A'", `unknown function upper`},
		{"i DIV 1.5", `DIV needs integers`},
		{"-s", `unary - needs a number`},
		{"-'a'", `unary - needs a number, not a string`},
		{"i = 99999999999999999999", `out of the int64 range`},
		{"i > (SELECT 1)", `a subquery is not supported`},
		{"i IN (SELECT 1)", `a subquery is not supported (in "i IN (SELECT 1)" at position 6)`},
		{"i IN ()", `syntax error at position 7: expected an operand, found ")"`},
		{"i IN 1", `syntax error at position 6: expected "("`},
		{"count(*) > 1", `the aggregate function count is not supported`},
		{"SUM(i) > 1", `the aggregate function sum is not supported`},
		{"i & 1", `operator & is not supported`},
		{"i REGEXP 'a'", `the operator REGEXP is not supported`},
		{"s NOT RLIKE 'a'", `the operator RLIKE is not supported`},
		{"i <=> 1", `operator <=> is not supported`},
		{"i = ANY (SELECT 1)", `ANY / ALL`},
		{"i = 0x10", `unsupported literal`},
		{"i > 0 AND", `syntax error at position 10: expected an operand, found the end`},
		{"i >> 1 > 0", `operator >> is not supported (in "i >> 1 > 0" at position 3)`},
		{"i > > 0", `syntax error at position 5: expected an operand, found ">"`},
		{"i IS 1", `syntax error at position 6: expected NULL, TRUE, FALSE or UNKNOWN after IS`},
		{"i NOT = 1", `expected IN, BETWEEN or LIKE after NOT`},
		{"i BETWEEN 1 OR 2", `expected AND after BETWEEN`},
		{"s = 'abc", `syntax error at position 5: the string is not closed`},
		{"`s = 1", `the quoted identifier is not closed`},
		{"i > 0 /* b", `the comment is not closed`},
		{"i > 1x", `syntax error at position 6: unexpected 'x' after the number 1`},
		{"i \\ 2", `unexpected character '\\'`},
		{"st. = 1", `expected a name after the dot`},
		{"(i > 0", `syntax error at position 7: expected ")", found the end`},
		{"i = @v", `a variable (@name) is not supported`},
		{"i = :v", `a placeholder (? or :name) is not supported`},
		{"s = _utf8'x'", `character set introducer`},
		{"i MEMBER OF ('[1]')", `MEMBER OF is not supported`},
		{"s COLLATE utf8mb4_bin = 'a'", `COLLATE is not supported`},
		{"INTERVAL 1 DAY", `INTERVAL is only added to or subtracted from a timestamp`},
		{"i = X'0a'", `unsupported literal X'0a'`},
		{"``", `an identifier cannot be empty`},
		{"a.b(i)", `unknown function a.b`},
		{"a.b.c.d = 1", `unknown column "a.b.c.d" at position 1`},
		{"", `syntax error at position 1: expected an operand, found the end`},
		{"i > 0; DROP TABLE t", `"i > 0; DROP TABLE t" is not a single expression: unexpected ";" at position 6`},
		{"*", `syntax error at position 1: expected an operand, found "*"`},
		{"i, j", `is not a single expression`},
		{"i FROM t", `is not a single expression: unexpected "FROM" at position 3`},
		{"i AS k", `is not a single expression: unexpected "AS"`},
		{"i > 0 WHERE j", `is not a single expression: unexpected "WHERE"`},
		{"1 UNION SELECT 2", `is not a single expression`},
		{"i = ?", `a placeholder (? or :name) is not supported`},
		{"i XOR b", `XOR is not supported`},
		{"s ->> '$.a' = 'x'", `the JSON operator ->> (json_unquote) is not supported`},
		{"s -> '$.a' = 'x'", `the JSON operator -> (json_extract) is not supported`},
		{"CASE WHEN i > 0 THEN 1 ELSE 0 END = 1", `CASE is not supported`},
		{"CAST(i AS CHAR) = 'x'", `CAST is not supported`},
		{"~i = 1", `the operator ~ is not supported`},
		{"(i, j) = (1, 1)", `a row value (a, b, ...) outside IN is not supported`},
		{"trim(s) = 'x'", `unknown function trim; the functions are length`},
		{"now() > i", `now() reads the clock`},
	} {
		_, err := expr.Parse(tc.text, testSchema)
		if err == nil {
			t.Errorf("%q: no error", tc.text)
			continue
		}
		if errcode.Of(err) != errcode.InvalidArgument {
			t.Errorf("%q: code %s", tc.text, errcode.Of(err))
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %q\n  does not contain %q", tc.text, err, tc.want)
		}
		var ce *errcode.Error
		if !errors.As(err, &ce) {
			t.Errorf("%q: not an *errcode.Error", tc.text)
		}
		if strings.Contains(err.Error(), "sqlparser") || strings.Contains(err.Error(), "*sql") {
			t.Errorf("%q: error %q names a Go type", tc.text, err)
		}
	}
	if _, err := expr.Parse("i > 0", nil); errcode.Of(err) != errcode.InvalidArgument {
		t.Errorf("nil schema: %v", err)
	}
}

func ExampleExpr_Mask() {
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "reward", Type: arrow.PrimitiveTypes.Float32, Nullable: true},
		{Name: "role", Type: arrow.BinaryTypes.String, Nullable: true},
	}, nil)
	rec, _, _ := array.RecordFromJSON(memory.DefaultAllocator, schema, strings.NewReader(
		`[{"reward": 1, "role": "assistant"}, {"reward": -1, "role": "assistant"}, {"reward": 2, "role": "user"}, {"reward": null, "role": "assistant"}]`))
	defer rec.Release()
	filter, err := expr.Parse("reward > 0 AND role = 'assistant'", schema)
	if err != nil {
		fmt.Println(err)
		return
	}
	mask, _ := filter.Mask(context.Background(), rec, memory.DefaultAllocator)
	fmt.Println(filter.Columns(), mask)
	// Output: [reward role] [true false false false]
}

// TestSizeLimits: text beyond MaxBytes, or with more than MaxOperators
// operators however they nest or chain, is refused with InvalidArgument
// before anything recurses over it; just inside the limit, the deepest
// chains parse and evaluate to the right values.
func TestSizeLimits(t *testing.T) {
	const n = 1_000_000
	for name, text := range map[string]string{
		"nested NOT":     strings.Repeat("NOT ", n) + "b",
		"chained + 0":    "i" + strings.Repeat(" + 0", n) + " > 0",
		"unary minus":    strings.Repeat("- ", n) + "i > 0",
		"parentheses":    strings.Repeat("(", n) + "b" + strings.Repeat(")", n),
		"function":       strings.Repeat("abs(", n) + "i" + strings.Repeat(")", n) + " > 0",
		"long OR":        "i = 0" + strings.Repeat(" OR i = 0", n/10),
		"too many bytes": "s IN ('" + strings.Repeat("x", expr.MaxBytes) + "')",
	} {
		_, err := expr.Parse(text, testSchema)
		if errcode.Of(err) != errcode.InvalidArgument || !strings.Contains(err.Error(), "allowed") &&
			!strings.Contains(err.Error(), "more than 10000 operators") {
			t.Errorf("%s: %v", name, err)
		}
	}
	T, F := true, false
	mem := checkedMem(t)
	rec := testRecord(t, mem)
	defer rec.Release()
	const m = expr.MaxOperators - 1 // and ">": the limit itself
	for text, want := range map[string][]any{
		strings.Repeat("- ", m-1) + "i > 0":                     {T, N, F, F, T}, // an even count of minus
		strings.Repeat("NOT ", m-1) + "b":                       {T, N, F, T, F}, // even: b itself
		"i" + strings.Repeat(" + 0", m-1) + " > 0":              {T, N, F, F, T},
		"s IN ('" + strings.Repeat("x", expr.MaxBytes/2) + "')": {F, N, F, F, F},
	} {
		e, err := expr.Parse(text, testSchema)
		if err != nil {
			t.Fatalf("%.40s…: %v", text, err)
		}
		got, err := e.Eval(context.Background(), rec, mem)
		if err != nil {
			t.Fatalf("%.40s…: %v", text, err)
		}
		if v := values(got); !reflect.DeepEqual(v, want) {
			t.Errorf("%.40s…: %v, want %v", text, v, want)
		}
		got.Release()
	}
}
