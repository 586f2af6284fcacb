package expr_test

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/croupier-data/croupier/permutation/expr"
)

func TestMayMatchHandPicked(t *testing.T) {
	stats := map[string]expr.Stats{
		"i":    {Min: int64(0), Max: int64(5), HasMinMax: true, NullCount: 0, HasNullCount: true, NumRows: 10},
		"f":    {Min: 1.0, Max: 2.0, HasMinMax: true, NullCount: 2, HasNullCount: true, NumRows: 10},
		"s":    {Min: "b", Max: "d", HasMinMax: true, NullCount: 10, HasNullCount: true, NumRows: 10},
		"b":    {Min: false, Max: false, HasMinMax: true, NullCount: 0, HasNullCount: true, NumRows: 10},
		"st.a": {Min: int64(3), Max: int64(3), HasMinMax: true, NullCount: 1, HasNullCount: true, NumRows: 10},
	}
	get := func(c string) (expr.Stats, bool) { s, ok := stats[c]; return s, ok }
	for _, tc := range []struct {
		text string
		want bool
	}{
		{"i > 10", false}, {"i > 5", false}, {"i >= 5", true}, {"i > 4", true},
		{"i = 3", true}, {"i = 6", false}, {"i < 0", false}, {"i <= 0", true},
		{"10 < i", false}, {"i != 3", true}, {"i > 4.5", true}, {"i > 5.5", false},
		{"i IS NULL", false}, {"i IS NOT NULL", true}, {"f IS NULL", true},
		{"i > 10 AND f > 0", false}, {"i > 10 OR f > 0", true}, {"i > 10 OR f > 3", false},
		{"NOT (i <= 5)", false}, {"NOT (i < 5)", true}, {"NOT (i > 10)", true},
		{"i BETWEEN 6 AND 9", false}, {"i BETWEEN 5 AND 9", true}, {"i NOT BETWEEN 0 AND 5", false},
		{"i IN (7, 8, NULL)", false}, {"i IN (7, 3)", true}, {"i NOT IN (7, 8)", true},
		{"s = 'c'", false}, {"s IS NULL", true}, {"s IS NOT NULL", false}, // all null
		{"f != 1.5", true}, {"f = 3", false},
		{"b", false}, {"NOT b", true}, {"b IS TRUE", false}, {"b IS NOT TRUE", true}, {"b = true", false},
		{"st.a = 3", true}, {"st.a != 3", false}, {"st.a IS NULL", true},
		{"j > 1000", true}, {"i + 1 > 100", true}, {"s LIKE '%zz'", false}, // all null
		{"length(s) > 1", true}, // no reasoning: may match
		{"FALSE", false}, {"NULL", false}, {"TRUE", true}, {"i > 10 IS NOT TRUE", true},
	} {
		e, err := expr.Parse(tc.text, testSchema)
		if err != nil {
			t.Fatalf("%s: %v", tc.text, err)
		}
		if got := e.MayMatch(get); got != tc.want {
			t.Errorf("MayMatch(%s) = %v, want %v", tc.text, got, tc.want)
		}
	}
	// no statistics: always may match
	e, _ := expr.Parse("i > 10", testSchema)
	if !e.MayMatch(func(string) (expr.Stats, bool) { return expr.Stats{}, false }) {
		t.Error("MayMatch without statistics is false")
	}
}

// TestRowGroupStats writes a Parquet file with small row groups and checks
// that the row groups MayMatch skips hold no matching row, and that it does
// skip the ones it should.
func TestRowGroupStats(t *testing.T) {
	mem := checkedMem(t)
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "score", Type: arrow.PrimitiveTypes.Float32, Nullable: true},
		{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "flag", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
		{Name: "u", Type: arrow.PrimitiveTypes.Uint32},
		{Name: "st", Type: arrow.StructOf(arrow.Field{Name: "a", Type: arrow.PrimitiveTypes.Int64, Nullable: true}), Nullable: true},
	}, nil)
	var js strings.Builder
	js.WriteString("[")
	for i := range 50 {
		if i > 0 {
			js.WriteString(",")
		}
		score, name, flag := "null", "null", "null"
		if i%3 != 0 && i < 40 {
			score = []string{"-1.5", "0.5", "2.25"}[i%3]
		}
		if i >= 10 {
			name = `"n` + string(rune('a'+i/10)) + `"`
		}
		if i >= 20 {
			flag = map[bool]string{true: "true", false: "false"}[i >= 30]
		}
		js.WriteString(`{"id":` + strconv.Itoa(i) + `,"score":` + score + `,"name":` + name + `,"flag":` + flag +
			`,"u":` + strconv.Itoa(4000000000+i) + `,"st":{"a":` + strconv.Itoa(i) + `}}`)
	}
	js.WriteString("]")
	rec, _, err := array.RecordFromJSON(mem, schema, strings.NewReader(js.String()))
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	r := writeRowGroups(t, schema, rec, mem)
	defer r.Close()
	if r.NumRowGroups() != 5 {
		t.Fatalf("%d row groups", r.NumRowGroups())
	}
	st := rowGroupStats(r)
	if _, ok := st[0]("st.a"); ok {
		t.Error("statistics for a nested column")
	}
	if s, ok := st[4]("u"); !ok || s.Min != int64(4000000040) || s.Max != int64(4000000049) {
		t.Errorf("u statistics %+v (uint32 read as unsigned)", s)
	}
	checkSkips(t, schema, rec, st, mem, []skipCase{
		{"id >= 35", []bool{true, true, true, false, false}},
		{"id = 10", []bool{true, false, true, true, true}},
		{"id < 10 OR id > 45", []bool{false, true, true, true, false}},
		{"id BETWEEN 12 AND 15 AND name = 'nb'", []bool{true, false, true, true, true}},
		{"score IS NOT NULL", []bool{false, false, false, false, true}},
		{"score > 2.5", []bool{true, true, true, true, true}},
		{"name IS NULL", []bool{false, true, true, true, true}},
		{"name LIKE 'nc%'", []bool{true, true, false, true, true}},
		{"name >= 'nd'", []bool{true, true, true, false, false}},
		{"flag", []bool{true, true, true, false, false}},
		{"NOT flag", []bool{true, true, false, true, true}},
		{"u > 4000000045", []bool{true, true, true, true, false}},
		{"st.a > 45", []bool{false, false, false, false, false}},
	})
}

// skipCase is a filter and, for each of five row groups, whether its
// statistics let the filter skip it.
type skipCase struct {
	text string
	skip []bool
}

// checkSkips checks each case against rec, whose row groups of 10 rows have
// the statistics st: the filter skips exactly the row groups the case names,
// and never one that holds a matching row.
func checkSkips(t *testing.T, schema *arrow.Schema, rec arrow.RecordBatch, st []func(string) (expr.Stats, bool), mem memory.Allocator, cases []skipCase) {
	t.Helper()
	for _, tc := range cases {
		e, err := expr.Parse(tc.text, schema)
		if err != nil {
			t.Fatal(err)
		}
		for g := range tc.skip {
			skip := !e.MayMatch(st[g])
			part := rec.NewSlice(int64(g*10), int64(g*10+10))
			mask, err := e.Mask(context.Background(), part, mem)
			part.Release()
			if err != nil {
				t.Fatal(err)
			}
			for i, m := range mask {
				if m && skip {
					t.Errorf("%s: row group %d skipped, but row %d matches", tc.text, g, g*10+i)
				}
			}
			if skip != tc.skip[g] {
				t.Errorf("%s: row group %d skipped %v, want %v", tc.text, g, skip, tc.skip[g])
			}
		}
	}
}

// writeRowGroups writes rec as Parquet in row groups of 10 rows and opens it.
func writeRowGroups(t *testing.T, schema *arrow.Schema, rec arrow.RecordBatch, mem memory.Allocator) *file.Reader {
	t.Helper()
	var buf bytes.Buffer
	w, err := pqarrow.NewFileWriter(schema, &buf,
		parquet.NewWriterProperties(parquet.WithMaxRowGroupLength(10), parquet.WithAllocator(mem)),
		pqarrow.NewArrowWriterProperties(pqarrow.WithAllocator(mem)))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := file.NewParquetReader(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// rowGroupStats returns the statistics of every row group of r.
func rowGroupStats(r *file.Reader) []func(string) (expr.Stats, bool) {
	var out []func(string) (expr.Stats, bool)
	for i := range r.NumRowGroups() {
		out = append(out, expr.RowGroupStats(r.MetaData().RowGroup(i)))
	}
	return out
}
