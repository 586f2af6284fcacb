package table

import (
	"runtime"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
)

// TestDecodeSchemaBoundsAllocations garbles every byte of encoded schemas, in
// several ways, and checks that decoding either fails or gives a schema, and
// never allocates more than a few megabytes: arrow-go's IPC reader would
// allocate whatever a garbled count says, and die of it.
func TestDecodeSchemaBoundsAllocations(t *testing.T) {
	md := arrow.NewMetadata([]string{"k1", "k2"}, []string{"v1", "v2"})
	schemas := []*arrow.Schema{
		arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}}, nil),
		arrow.NewSchema([]arrow.Field{
			{Name: "tokens", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32), Nullable: true, Metadata: md},
			{Name: "meta", Type: arrow.StructOf(
				arrow.Field{Name: "source", Type: arrow.BinaryTypes.String},
				arrow.Field{Name: "deep", Type: arrow.StructOf(arrow.Field{Name: "x", Type: arrow.PrimitiveTypes.Float64})},
			)},
			{Name: "ts", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "Europe/Paris"}},
			{Name: "m", Type: arrow.MapOf(arrow.BinaryTypes.String, arrow.PrimitiveTypes.Int16)},
			{Name: "d", Type: &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: arrow.BinaryTypes.String}},
			{Name: "u", Type: arrow.SparseUnionOf([]arrow.Field{{Name: "a", Type: arrow.PrimitiveTypes.Int8}}, []arrow.UnionTypeCode{3})},
			{Name: "f", Type: arrow.FixedSizeListOf(4, arrow.PrimitiveTypes.Uint8)},
		}, &md),
	}
	for _, s := range schemas {
		enc, err := encodeSchema(s)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeSchema(enc)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		if !got.Equal(s) {
			t.Fatalf("round trip: %s, want %s", got, s)
		}
		var before, after runtime.MemStats
		for i := range enc {
			for _, garble := range []func(b byte) byte{
				func(b byte) byte { return b ^ 0x80 }, func(b byte) byte { return 0xff }, func(b byte) byte { return b + 1 },
			} {
				b := append([]byte{}, enc...)
				b[i] = garble(b[i])
				runtime.ReadMemStats(&before)
				decodeSchema(b)
				runtime.ReadMemStats(&after)
				if n := after.TotalAlloc - before.TotalAlloc; n > 4<<20 {
					t.Fatalf("byte %d garbled: decoding allocated %d bytes", i, n)
				}
			}
		}
		for n := range len(enc) - 8 { // the last 8 bytes are the end-of-stream marker
			if _, err := decodeSchema(enc[:n]); err == nil {
				t.Errorf("truncated to %d bytes: no error", n)
			}
		}
	}
}
