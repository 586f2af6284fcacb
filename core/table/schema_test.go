package table

import (
	"context"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/apache/arrow-go/v18/parquet/schema"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/table/internal/general"
	"github.com/croupier-data/croupier/internal/tabletest"
)

// A leaf type of a generated Parquet schema, and whether the page decoder
// reads it as a column (flat) and as a list's element (elem).
type leafSpec struct {
	pt         parquet.Type
	lt         schema.LogicalType
	length     int
	flat, elem bool
}

var leafSpecs = []leafSpec{
	{pt: parquet.Types.Int32, lt: schema.NoLogicalType{}, flat: true, elem: true},
	{pt: parquet.Types.Int64, lt: schema.NoLogicalType{}, flat: true, elem: true},
	{pt: parquet.Types.Float, lt: schema.NoLogicalType{}, flat: true, elem: true},
	{pt: parquet.Types.Double, lt: schema.NoLogicalType{}, flat: true, elem: true},
	{pt: parquet.Types.Int32, lt: schema.NewIntLogicalType(32, true), flat: true, elem: true},
	{pt: parquet.Types.Int64, lt: schema.NewIntLogicalType(64, true), flat: true, elem: true},
	{pt: parquet.Types.ByteArray, lt: schema.NoLogicalType{}, flat: true},
	{pt: parquet.Types.ByteArray, lt: schema.StringLogicalType{}, flat: true},
	{pt: parquet.Types.Boolean, lt: schema.NoLogicalType{}},
	{pt: parquet.Types.Int32, lt: schema.NewIntLogicalType(8, true)},
	{pt: parquet.Types.Int32, lt: schema.NewIntLogicalType(32, false)},
	{pt: parquet.Types.Int64, lt: schema.NewIntLogicalType(64, false)},
	{pt: parquet.Types.Int32, lt: schema.DateLogicalType{}},
	{pt: parquet.Types.Int64, lt: schema.NewTimestampLogicalType(true, schema.TimeUnitMillis)},
	{pt: parquet.Types.Int32, lt: schema.NewDecimalLogicalType(9, 2)},
	{pt: parquet.Types.ByteArray, lt: schema.JSONLogicalType{}},
	{pt: parquet.Types.FixedLenByteArray, lt: schema.NoLogicalType{}, length: 16},
	{pt: parquet.Types.Int96, lt: schema.NoLogicalType{}},
}

// schemaGen makes random Parquet schemas of the shapes writers produce, and
// knows which of their fields plainSchema must convert.
type schemaGen struct {
	t   *testing.T
	rng *rand.Rand
}

func (g schemaGen) id() int32 {
	if g.rng.IntN(3) == 0 {
		return int32(g.rng.IntN(100))
	}
	return -1
}

func (g schemaGen) rep(repeated bool) parquet.Repetition {
	reps := []parquet.Repetition{parquet.Repetitions.Required, parquet.Repetitions.Optional, parquet.Repetitions.Repeated}
	if !repeated {
		reps = reps[:2]
	}
	return reps[g.rng.IntN(len(reps))]
}

func (g schemaGen) leaf(name string, rep parquet.Repetition) (schema.Node, leafSpec) {
	s := leafSpecs[g.rng.IntN(len(leafSpecs))]
	if g.rng.IntN(3) != 0 { // mostly the types training tables hold
		s = leafSpecs[g.rng.IntN(8)]
	}
	n, err := schema.NewPrimitiveNodeLogical(name, rep, s.lt, s.pt, s.length, g.id())
	if err != nil {
		g.t.Fatalf("leaf %s %s: %v", s.pt, s.lt, err)
	}
	return n, s
}

func (g schemaGen) group(name string, rep parquet.Repetition, lt schema.LogicalType, fields ...schema.Node) schema.Node {
	var n *schema.GroupNode
	var err error
	if lt == nil {
		n, err = schema.NewGroupNode(name, rep, fields, g.id())
	} else {
		n, err = schema.NewGroupNodeLogical(name, rep, fields, lt, g.id())
	}
	if err != nil {
		g.t.Fatalf("group %s: %v", name, err)
	}
	return n
}

// field makes a top-level field named name, and says whether plainSchema
// must convert it.
func (g schemaGen) field(name string) (schema.Node, bool) {
	switch g.rng.IntN(6) {
	case 0, 1: // a column
		rep := g.rep(true)
		n, s := g.leaf(name, rep)
		return n, s.flat && rep != parquet.Repetitions.Repeated
	case 2, 3: // a three-level list
		listName := []string{"list", "list", "array", name + "_tuple", "bag"}[g.rng.IntN(5)]
		elem, s := g.leaf([]string{"element", "item"}[g.rng.IntN(2)], g.rep(false))
		list := g.group(listName, parquet.Repetitions.Repeated, nil, elem)
		return g.group(name, g.rep(false), schema.NewListLogicalType(), list),
			s.elem && listName != "array" && listName != name+"_tuple"
	case 4: // a two-level list
		elem, _ := g.leaf("element", parquet.Repetitions.Repeated)
		return g.group(name, g.rep(false), schema.NewListLogicalType(), elem), false
	default: // a struct, or a list of structs
		a, _ := g.leaf("a", g.rep(false))
		b, _ := g.leaf("b", g.rep(false))
		st := g.group(name, g.rep(false), nil, a, b)
		if g.rng.IntN(2) == 0 {
			list := g.group("list", parquet.Repetitions.Repeated, nil, g.group("element", g.rep(false), nil, a, b))
			st = g.group(name, g.rep(false), schema.NewListLogicalType(), list)
		}
		return st, false
	}
}

// stored returns footer key-value metadata holding the Arrow schema a
// writer might have stored beside sc (what pqarrow infers from sc, changed
// at random), or none, or a damaged one (bad). It clears plain[i] for each
// field i whose stored type plainSchema must leave to the general codec.
func (g schemaGen) stored(sc *schema.Schema, plain []bool) (kv metadata.KeyValueMetadata, bad bool) {
	kv = metadata.NewKeyValueMetadata()
	switch g.rng.IntN(6) {
	case 0:
		return kv, false
	case 1:
		kv.Append("ARROW:schema", "not base64!")
		return kv, true
	}
	inferred, err := pqarrow.FromParquet(sc, &pqarrow.ArrowReadProperties{}, nil)
	if err != nil {
		g.t.Fatal(err)
	}
	fields := inferred.Fields()
	refusedAt := make([]bool, len(fields))
	for i := range fields {
		if g.rng.IntN(2) == 0 {
			continue
		}
		f := &fields[i]
		refused := true // plainSchema leaves the stored type to the codec
		switch dt := f.Type.(type) {
		case *arrow.StringType:
			f.Type, refused = arrow.BinaryTypes.LargeString, false
		case *arrow.BinaryType:
			f.Type, refused = arrow.BinaryTypes.LargeBinary, false
		case *arrow.Int64Type:
			f.Type = arrow.FixedWidthTypes.Duration_ms
		case *arrow.Int32Type:
			f.Type = arrow.PrimitiveTypes.Int64
		case *arrow.ListType:
			elem := dt.ElemField()
			switch g.rng.IntN(4) {
			case 0:
				f.Type = arrow.LargeListOfField(elem)
			case 1:
				f.Type = arrow.FixedSizeListOfField(3, elem)
			case 2: // pyarrow stores "item" where the Parquet element is "element"
				elem.Name = "item"
				elem.Metadata = arrow.Metadata{}
				f.Type, refused = arrow.ListOfField(elem), false
			default:
				elem.Nullable = !elem.Nullable
				f.Type = arrow.ListOfField(elem)
			}
		default:
			refused = false
		}
		f.Metadata = arrow.NewMetadata([]string{"k"}, []string{"v"})
		refusedAt[i] = refused
	}
	if g.rng.IntN(8) == 0 {
		fields = fields[1:] // a stored schema that does not fit is ignored
	} else {
		for i, r := range refusedAt {
			plain[i] = plain[i] && !r
		}
	}
	enc, err := encodeSchema(arrow.NewSchema(fields, nil))
	if err != nil {
		g.t.Fatal(err)
	}
	kv.Append("ARROW:schema", base64.StdEncoding.EncodeToString(enc))
	return kv, false
}

// TestPlainSchema converts random Parquet schemas, with and without an Arrow
// schema stored beside them, with plainSchema and with pqarrow.FromParquet:
// plainSchema must convert exactly the schemas whose every field the page
// decoder reads, to what pqarrow gives (field ids and all), and refuse the
// others naming the column and parquetio.
func TestPlainSchema(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	g := schemaGen{t, rng}
	const schemas = 6000
	converted := 0
	for i := range schemas {
		nf := 1 + rng.IntN(3)
		fields := make(schema.FieldList, nf)
		plain := make([]bool, nf)
		for j := range fields {
			fields[j], plain[j] = g.field(fmt.Sprintf("f%d", j))
		}
		sc := schema.NewSchema(g.group("schema", parquet.Repetitions.Repeated, nil, fields...).(*schema.GroupNode))
		kv, bad := g.stored(sc, plain)
		want, werr := pqarrow.FromParquet(sc, &pqarrow.ArrowReadProperties{}, kv)
		got, gerr := plainSchema(sc, kv)
		allPlain := !bad
		for _, p := range plain {
			allPlain = allPlain && p
		}
		where := fmt.Sprintf("schema %d:\n%s\nstored %v", i, schemaString(sc), kv.Keys())
		switch {
		case gerr == nil:
			converted++
			if !allPlain {
				t.Fatalf("%s\nconverted, to %s; the page decoder does not read every field", where, got)
			}
			if werr != nil {
				t.Fatalf("%s\nconverted to %s; pqarrow: %v", where, got, werr)
			}
			for k, f := range got.Fields() {
				w := want.Field(k)
				if f.Name != w.Name || f.Nullable != w.Nullable || !arrow.TypeEqual(f.Type, w.Type, arrow.CheckMetadata()) {
					t.Fatalf("%s\nfield %d: %s, pqarrow %s", where, k, f, w)
				}
			}
		case allPlain:
			t.Fatalf("%s\nnot converted: %v", where, gerr)
		case werr == nil && !strings.Contains(gerr.Error(), parquetioPath):
			t.Fatalf("%s\nthe error does not name %s: %v", where, parquetioPath, gerr)
		}
	}
	if converted < schemas/20 {
		t.Errorf("%d of %d schemas converted; the generator should make more plain ones", converted, schemas)
	}
	t.Logf("%d of %d schemas converted", converted, schemas)
}

func schemaString(sc *schema.Schema) string {
	var b strings.Builder
	schema.PrintSchema(sc.Root(), &b, 2)
	return b.String()
}

// withoutGeneralCodec runs the rest of the test as a program that links no
// general codec runs. Such a test must not be parallel.
func withoutGeneralCodec(t *testing.T) {
	c := general.Registered()
	general.Register(nil)
	t.Cleanup(func() { general.Register(c) })
}

// TestWithoutGeneralCodec reads tables as a program that does not import
// parquetio. The columns the page decoder reads (large strings as Polars
// writes them among them) come out as with the codec, from plain Parquet
// and from a croupier table. Everything else is an error naming parquetio:
// at open for a plain dataset's schema, at NewReader for a column's type or
// a chunk's encoding, at Create.
func TestWithoutGeneralCodec(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	const n = 3000
	if err := os.Mkdir(filepath.Join(dir, "all"), 0o755); err != nil {
		t.Fatal(err)
	}
	tabletest.Write(t, filepath.Join(dir, "all"), []int64{n}, 1000) // has a struct column
	plainCols := []string{"id", "tokens", "reward", "text"}
	src := tabletest.Record(0, n)
	defer src.Release()
	// The plain columns alone; and with DELTA_BINARY_PACKED ids, which the
	// page decoder leaves to the codec.
	plainRec := project(t, src, plainCols)
	defer plainRec.Release()
	base := "file://" + dir
	put := func(name string, data []byte) {
		if err := os.MkdirAll(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name, "a.parquet"), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	put("plain", tabletest.EncodeRecord(t, plainRec, parquet.WithMaxRowGroupLength(1000)))
	put("delta", tabletest.EncodeRecord(t, plainRec, parquet.WithMaxRowGroupLength(1000),
		parquet.WithDictionaryDefault(false), parquet.WithEncodingFor("id", parquet.Encodings.DeltaBinaryPacked)))
	// Text as Polars writes it: large_string, stored in the footer.
	large := array.NewLargeStringBuilder(memory.DefaultAllocator)
	defer large.Release()
	for i := range n {
		large.Append(tabletest.Text(int64(i)))
	}
	text := large.NewArray()
	defer text.Release()
	largeRec := array.NewRecordBatch(arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "text", Type: arrow.BinaryTypes.LargeString}}, nil), []arrow.Array{plainRec.Column(0), text}, n)
	defer largeRec.Release()
	put("large", tabletest.EncodeRecord(t, largeRec, parquet.WithMaxRowGroupLength(1000)))
	// The same rows as a croupier table, whose schema its manifest holds.
	tb, err := Create(ctx, base+"/croupier", tabletest.Reader(0, n), WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tb.Close()
	ids := []uint64{2999, 0, 1500, 7, 2001}
	// newReader opens a reader of cols of the table name; read reads ids
	// with it.
	newReader := func(name string, cols []string) (*Reader, error) {
		tb, err := Open(ctx, base+"/"+name)
		if err != nil {
			return nil, err
		}
		t.Cleanup(func() { tb.Close() })
		return tb.NewReader(ReaderOptions{Columns: cols, Allocator: memory.DefaultAllocator})
	}
	read := func(name string, cols []string) (arrow.RecordBatch, error) {
		r, err := newReader(name, cols)
		if err != nil {
			return nil, err
		}
		return r.Read(ctx, ids)
	}
	mustRead := func(name string, cols []string) arrow.RecordBatch {
		t.Helper()
		rec, err := read(name, cols)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rec.Release)
		return rec
	}
	with, withLarge := mustRead("all", plainCols), mustRead("large", nil)

	withoutGeneralCodec(t)
	needs := func(what string, err error) {
		t.Helper()
		if err == nil || errcode.Of(err) != errcode.InvalidArgument || !strings.Contains(err.Error(), parquetioPath) {
			t.Errorf("%s: %v, want InvalidArgument naming %s", what, err, parquetioPath)
		}
	}
	same := func(what, name string, cols []string, want arrow.RecordBatch) {
		t.Helper()
		if got := mustRead(name, cols); !array.RecordEqual(got, want) {
			t.Errorf("%s without the codec:\n%v\nwith it:\n%v", what, got, want)
		}
	}
	same("plain columns", "plain", plainCols, with)
	same("large strings", "large", nil, withLarge)
	_, err = read("all", plainCols)
	needs("opening a table with a struct column", err)
	if err != nil && !strings.Contains(err.Error(), `"meta"`) {
		t.Errorf("the error does not name the column: %v", err)
	}
	// A chunk the page decoder does not read fails when the reader is made,
	// not at the first read of its row group.
	_, err = newReader("delta", []string{"id"})
	needs("a DELTA_BINARY_PACKED column", err)
	if err != nil && !strings.Contains(err.Error(), "DELTA_BINARY_PACKED") {
		t.Errorf("the error does not name the encoding: %v", err)
	}
	// A croupier table with a struct column opens; a reader of its plain
	// columns reads them, one of the struct fails when made.
	same("a croupier table's plain columns", "croupier", plainCols, with)
	_, err = newReader("croupier", []string{"id", "meta"})
	needs("a reader of a struct column", err)
	if err != nil && !strings.Contains(err.Error(), base+"/croupier") {
		t.Errorf("the error does not name the table: %v", err)
	}
	mustRead("delta", []string{"reward"}) // a column of the same file that the page decoder reads
	_, err = Create(ctx, "file://"+filepath.Join(dir, "new"), tabletest.Reader(0, 10), WriteOptions{})
	needs("Create", err)
}

func project(t *testing.T, rec arrow.RecordBatch, names []string) arrow.RecordBatch {
	t.Helper()
	var fields []arrow.Field
	var cols []arrow.Array
	for _, name := range names {
		i := rec.Schema().FieldIndices(name)
		if len(i) != 1 {
			t.Fatalf("no column %q", name)
		}
		fields = append(fields, rec.Schema().Field(i[0]))
		cols = append(cols, rec.Column(i[0]))
	}
	return array.NewRecordBatch(arrow.NewSchema(fields, nil), cols, rec.NumRows())
}
