// Package tabletest writes small Parquet datasets for tests. Importing it
// registers the general Parquet codec (core/table/parquetio): tests write
// tables, and read columns of every type.
package tabletest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	_ "github.com/croupier-data/croupier/core/table/parquetio"
	"github.com/croupier-data/croupier/internal/seal"
)

// Schema of the rows Write makes: an id equal to the row id, a token list whose
// length and values derive from the id, a float, a string, and a struct.
var Schema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "tokens", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32), Nullable: true},
	{Name: "reward", Type: arrow.PrimitiveTypes.Float32, Nullable: true},
	{Name: "text", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "meta", Type: arrow.StructOf(
		arrow.Field{Name: "source", Type: arrow.BinaryTypes.String},
		arrow.Field{Name: "turn", Type: arrow.PrimitiveTypes.Int32},
	), Nullable: true},
}, nil)

// Tokens returns the token list of row id.
func Tokens(id int64) []int32 {
	n := int(id%7) + 1
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(id*10 + int64(i))
	}
	return out
}

// Text returns the text of row id.
func Text(id int64) string { return fmt.Sprintf("row %d", id) }

// Reader yields rows [start, start+n) as Record builds them.
func Reader(start, n int64) array.RecordReader {
	rec := Record(start, n)
	defer rec.Release()
	r, err := array.NewRecordReader(Schema, []arrow.RecordBatch{rec})
	if err != nil {
		panic(err) // the record has Schema
	}
	return r
}

// Record builds rows [start, start+n).
func Record(start, n int64) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, Schema)
	defer b.Release()
	ids := b.Field(0).(*array.Int64Builder)
	toks := b.Field(1).(*array.ListBuilder)
	tokVals := toks.ValueBuilder().(*array.Int32Builder)
	rewards := b.Field(2).(*array.Float32Builder)
	texts := b.Field(3).(*array.StringBuilder)
	meta := b.Field(4).(*array.StructBuilder)
	src := meta.FieldBuilder(0).(*array.StringBuilder)
	turn := meta.FieldBuilder(1).(*array.Int32Builder)
	for id := start; id < start+n; id++ {
		ids.Append(id)
		toks.Append(true)
		tokVals.AppendValues(Tokens(id), nil)
		rewards.Append(float32(id) / 2)
		texts.Append(Text(id))
		meta.Append(true)
		src.Append(fmt.Sprintf("src%d", id%3))
		turn.Append(int32(id % 5))
	}
	return b.NewRecordBatch()
}

// Encode returns rows [start, start+n) as a Parquet file with the given rows
// per row group.
func Encode(t testing.TB, start, n, rowGroup int64) []byte {
	t.Helper()
	rec := Record(start, n)
	defer rec.Release()
	return EncodeRecord(t, rec, parquet.WithMaxRowGroupLength(rowGroup),
		parquet.WithDataPageSize(4<<10), parquet.WithPageIndexEnabled(true))
}

// EncodeRecord returns rec as a Parquet file written with the given writer
// properties and, as pyarrow and croupier write, rec's Arrow schema stored in
// the footer.
func EncodeRecord(t testing.TB, rec arrow.RecordBatch, props ...parquet.WriterProperty) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := pqarrow.NewFileWriter(rec.Schema(), &buf, parquet.NewWriterProperties(props...),
		pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteBuffered(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// EditJSON rewrites the JSON object in file with edit: for tests that damage
// manifests.
func EditJSON(t testing.TB, file string, edit func(m map[string]any)) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, EditedJSON(t, b, edit), 0o644); err != nil {
		t.Fatal(err)
	}
}

// EditedJSON returns the JSON object data with edit applied. A sealed object
// (see internal/seal) is sealed again after the edit, as a writer would, so
// that the checks behind the seal see the edit.
func EditedJSON(t testing.TB, data []byte, edit func(m map[string]any)) []byte {
	t.Helper()
	sealed, err := seal.Check(data)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	delete(m, seal.Field)
	edit(m)
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if sealed {
		return seal.JSON(b)
	}
	return b
}

// Write writes len(sizes) files part-000.parquet, … into dir; file i holds
// sizes[i] rows, ids continuing across files. It returns the total row count.
func Write(t testing.TB, dir string, sizes []int64, rowGroup int64) int64 {
	t.Helper()
	var start int64
	for i, n := range sizes {
		p := filepath.Join(dir, fmt.Sprintf("part-%03d.parquet", i))
		if err := os.WriteFile(p, Encode(t, start, n, rowGroup), 0o644); err != nil {
			t.Fatal(err)
		}
		start += n
	}
	return start
}

// GroupSchema is the schema of the rows WriteGroups makes: an id equal to
// the row id, and the row's group key as an integer and as a string.
var GroupSchema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "problem_id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "problem", Type: arrow.BinaryTypes.String},
}, nil)

// WriteGroups writes one file, groups.parquet, into dir: row i has the key
// keys[i], as problem_id and as the string "p<key>".
func WriteGroups(t testing.TB, dir string, keys []int64, rowGroup int64) {
	t.Helper()
	b := array.NewRecordBuilder(memory.DefaultAllocator, GroupSchema)
	defer b.Release()
	for i, k := range keys {
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		b.Field(1).(*array.Int64Builder).Append(k)
		b.Field(2).(*array.StringBuilder).Append(fmt.Sprintf("p%d", k))
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	data := EncodeRecord(t, rec, parquet.WithMaxRowGroupLength(rowGroup))
	if err := os.WriteFile(filepath.Join(dir, "groups.parquet"), data, 0o644); err != nil {
		t.Fatal(err)
	}
}
