package table

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/arrow-go/v18/parquet/schema"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/table/internal/general"
)

// parquetioPath is the package that registers the general codec.
const parquetioPath = "github.com/croupier-data/croupier/core/table/parquetio"

// generalCodec returns the general Parquet codec, or an error saying that
// what needs it (e.g. "writing a table") needs parquetio imported.
func generalCodec(what string) (general.Codec, error) {
	if c := general.Registered(); c != nil {
		return c, nil
	}
	return nil, needsCodec(what)
}

// needsCodec is the error for what needs the general codec without it.
func needsCodec(what string) error {
	return errcode.New(errcode.InvalidArgument, what, "",
		"needs the general Parquet codec, which this program does not link: import _ %q", parquetioPath)
}

// checkPageDecoded is NewReader's check, in a program without the general
// codec, that the page decoder reads every column of fields (with their
// leaves), so that such a column fails when the reader is made rather than
// at the first row group that holds it: by its type, and by the encodings of
// every footer read so far (of a plain Parquet dataset opened afresh, all).
func (t *Table) checkPageDecoded(fields []arrow.Field, leaves [][]int) error {
	for _, f := range fields {
		if !pageDecoded(f.Type) {
			return needsCodec(fmt.Sprintf("reading column %q (%s)", f.Name, f.Type))
		}
	}
	t.mu.Lock()
	footers := slices.Clone(t.footers)
	t.mu.Unlock()
	for i, md := range footers {
		if md == nil {
			continue
		}
		for g := range md.NumRowGroups() {
			for c, f := range fields {
				leaf := leaves[c][0]
				chunk, err := md.RowGroup(g).ColumnChunk(leaf)
				if err != nil || leaf >= md.Schema.NumColumns() {
					continue // the read reports a damaged footer
				}
				if fastColumn(f, md.Schema.Column(leaf), chunk) == notFast {
					return needsCodec(fmt.Sprintf("reading column %q of %s, row group %d (encodings %v)",
						f.Name, t.loc.ObjectURI(t.pin.Files[i].Key), g, chunk.Encodings()))
				}
			}
		}
	}
	return nil
}

// arrowSchema converts a Parquet footer's schema to the Arrow schema croupier
// exposes: fields only, without the writer's per-file metadata or Parquet's
// field ids. A footer's schema is untrusted: a panic converting it is an error.
//
// With the general codec registered it is pqarrow's conversion. Without, it
// is plainSchema's, for the schemas whose every column the page decoder
// reads; TestPlainSchema holds the two equal wherever plainSchema answers, so
// that a pin or checkpoint taken by one program opens in the other.
func arrowSchema(md *metadata.FileMetaData) (_ *arrow.Schema, err error) {
	defer errcode.Recover(&err, errcode.Corrupt, "convert schema", "")
	var s *arrow.Schema
	if c := general.Registered(); c != nil {
		s, err = c.Schema(md.Schema, md.KeyValueMetadata())
	} else {
		s, err = plainSchema(md.Schema, md.KeyValueMetadata())
	}
	if err != nil {
		return nil, err
	}
	fields := s.Fields()
	for i := range fields {
		fields[i].Metadata = arrow.Metadata{}
	}
	return arrow.NewSchema(fields, nil), nil
}

// plainSchema converts a footer's schema, with the key-value metadata
// beside it, whose every column is one that the
// page decoder reads (fastColumn): a required or optional number, string or
// binary (large ones too, where the writer stored them so), or a three-level
// list of numbers, as pqarrow.FromParquet does. A
// column of any other type, or whose Arrow type as the writer stored it
// differs from the one its Parquet type gives, is an error naming it and
// parquetio, which converts every schema.
func plainSchema(sc *schema.Schema, kv metadata.KeyValueMetadata) (*arrow.Schema, error) {
	root := sc.Root()
	stored, err := storedSchema(kv)
	if err != nil {
		return nil, err
	}
	if stored != nil && stored.NumFields() != root.NumFields() {
		stored = nil // pqarrow ignores a stored schema that does not fit
	}
	fields := make([]arrow.Field, root.NumFields())
	for i := range fields {
		n := root.Field(i)
		f, ok := plainField(n)
		if ok && stored != nil {
			f, ok = storedType(f, stored.Field(i).Type)
		}
		if !ok {
			return nil, needsCodec(fmt.Sprintf("reading column %q (%s)", n.Name(), nodeString(n)))
		}
		fields[i] = f
	}
	return arrow.NewSchema(fields, nil), nil
}

// storedType applies to field f the type a writer stored for it, as pqarrow
// does, where the page decoder reads the result: the same type, or the large
// variant of a string or binary column (Polars writes those). It reports
// false for any other stored type.
func storedType(f arrow.Field, stored arrow.DataType) (arrow.Field, bool) {
	switch {
	case arrow.TypeEqual(stored, f.Type):
	case stored.ID() == arrow.LARGE_STRING && f.Type.ID() == arrow.STRING,
		stored.ID() == arrow.LARGE_BINARY && f.Type.ID() == arrow.BINARY:
		f.Type = stored
	default:
		return f, false
	}
	return f, true
}

// plainField converts a top-level node plainSchema handles, and reports
// whether it does.
func plainField(n schema.Node) (arrow.Field, bool) {
	nullable := n.RepetitionType() == parquet.Repetitions.Optional
	if !nullable && n.RepetitionType() != parquet.Repetitions.Required {
		return arrow.Field{}, false
	}
	f := arrow.Field{Name: n.Name(), Nullable: nullable, Metadata: fieldIDMeta(n)}
	if p, ok := n.(*schema.PrimitiveNode); ok {
		f.Type = plainType(p, true)
		return f, f.Type != nil
	}
	// required/optional group (LIST) { repeated group list { r/o element } }
	g := n.(*schema.GroupNode)
	if !g.LogicalType().Equals(schema.NewListLogicalType()) || g.NumFields() != 1 {
		return arrow.Field{}, false
	}
	list, ok := g.Field(0).(*schema.GroupNode)
	if !ok || list.RepetitionType() != parquet.Repetitions.Repeated || list.NumFields() != 1 ||
		list.Name() == "array" || list.Name() == g.Name()+"_tuple" {
		return arrow.Field{}, false
	}
	elem, ok := list.Field(0).(*schema.PrimitiveNode)
	if !ok || elem.RepetitionType() == parquet.Repetitions.Repeated {
		return arrow.Field{}, false
	}
	et := plainType(elem, false)
	if et == nil {
		return arrow.Field{}, false
	}
	f.Type = arrow.ListOfField(arrow.Field{Name: elem.Name(), Type: et,
		Nullable: elem.RepetitionType() == parquet.Repetitions.Optional, Metadata: fieldIDMeta(elem)})
	return f, true
}

// plainType is the Arrow type of a leaf the page decoder reads (strings and
// binary only when allowBinary), or nil.
func plainType(p *schema.PrimitiveNode, allowBinary bool) arrow.DataType {
	lt := p.LogicalType()
	none := lt.IsNone()
	if it, ok := lt.(schema.IntLogicalType); ok && it.IsSigned() {
		none = it.BitWidth() == 32 && p.PhysicalType() == parquet.Types.Int32 ||
			it.BitWidth() == 64 && p.PhysicalType() == parquet.Types.Int64
	}
	switch {
	case p.PhysicalType() == parquet.Types.Int32 && none:
		return arrow.PrimitiveTypes.Int32
	case p.PhysicalType() == parquet.Types.Int64 && none:
		return arrow.PrimitiveTypes.Int64
	case p.PhysicalType() == parquet.Types.Float && none:
		return arrow.PrimitiveTypes.Float32
	case p.PhysicalType() == parquet.Types.Double && none:
		return arrow.PrimitiveTypes.Float64
	case p.PhysicalType() == parquet.Types.ByteArray && allowBinary && none:
		return arrow.BinaryTypes.Binary
	case p.PhysicalType() == parquet.Types.ByteArray && allowBinary && lt.Equals(schema.StringLogicalType{}):
		return arrow.BinaryTypes.String
	}
	return nil
}

// fieldIDMeta is the metadata pqarrow gives every field: its Parquet field
// id, -1 when it has none.
func fieldIDMeta(n schema.Node) arrow.Metadata {
	return arrow.NewMetadata([]string{"PARQUET:field_id"}, []string{strconv.Itoa(int(n.FieldID()))})
}

// nodeString describes a node for an error: its physical and logical type,
// or that it is a group.
func nodeString(n schema.Node) string {
	if p, ok := n.(*schema.PrimitiveNode); ok {
		return fmt.Sprintf("%s %s %s", p.RepetitionType(), p.PhysicalType(), p.LogicalType())
	}
	return fmt.Sprintf("%s group %s", n.RepetitionType(), n.LogicalType())
}

// storedSchema decodes the Arrow schema a writer stored in a footer, or
// returns nil when there is none.
func storedSchema(kv metadata.KeyValueMetadata) (*arrow.Schema, error) {
	b, err := storedSchemaMessage(kv)
	if b == nil || err != nil {
		return nil, err
	}
	return decodeSchema(b)
}
