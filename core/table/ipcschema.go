package table

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"

	"github.com/apache/arrow-go/v18/parquet/metadata"
)

// checkSchemaMessage checks an Arrow IPC schema message that a manifest or
// pin holds, or a Parquet footer under the key ARROW:schema, before arrow-go
// decodes it. arrow-go's IPC reader trusts the
// message's flatbuffer: a length or count garbled into a large number makes it
// allocate that much (a 100 GB slice from a 700-byte manifest) and the process
// dies of it, with no panic to recover. This walks every table, vector and
// string the reader follows (Message.fbs and Schema.fbs) and checks that each
// lies inside the message, so that no count can exceed the bytes there are.
//
// The message is encapsulated as the IPC format says: the continuation marker
// 0xFFFFFFFF (absent in the format before Arrow 0.15, which old writers used
// for Parquet's ARROW:schema), the flatbuffer's length, the flatbuffer; a
// schema message has no body.
func checkSchemaMessage(b []byte) error {
	if len(b) >= 4 && binary.LittleEndian.Uint32(b) == 0xFFFFFFFF {
		b = b[4:]
	}
	if len(b) < 4 {
		return fmt.Errorf("not an encapsulated IPC message")
	}
	n := binary.LittleEndian.Uint32(b)
	if uint64(n) > uint64(len(b)-4) {
		return fmt.Errorf("message length %d exceeds its %d bytes", n, len(b)-4)
	}
	fb := flatbuf(b[4 : 4+n])
	msg, err := fb.root()
	if err != nil {
		return err
	}
	const (
		msgHeaderType, msgHeader, msgBodyLength, msgMetadata = 1, 2, 3, 4
		headerSchema                                         = 1
	)
	if t, err := fb.scalar(msg, msgHeaderType, 1); err != nil || t != headerSchema {
		return fmt.Errorf("not a schema message (header type %d): %v", t, err)
	}
	if l, err := fb.scalar(msg, msgBodyLength, 8); err != nil || l != 0 {
		return fmt.Errorf("schema message with a body of %d bytes: %v", l, err)
	}
	if err := fb.keyValues(msg, msgMetadata); err != nil {
		return err
	}
	schema, err := fb.table(msg, msgHeader)
	if err != nil || schema == 0 {
		return fmt.Errorf("schema message without a schema: %v", err)
	}
	const schemaFields, schemaMetadata, schemaFeatures = 1, 2, 3
	if _, _, err := fb.vector(schema, schemaFeatures, 8); err != nil {
		return err
	}
	if err := fb.keyValues(schema, schemaMetadata); err != nil {
		return err
	}
	return fb.fields(schema, schemaFields, 0)
}

// flatbuf reads a flatbuffer defensively: every accessor checks that what it
// reads lies inside the buffer. Positions are absolute; 0 is "absent".
type flatbuf []byte

func (b flatbuf) u32(at int) (uint32, error) {
	if at < 0 || at > len(b)-4 {
		return 0, fmt.Errorf("offset %d outside the %d-byte schema message", at, len(b))
	}
	return binary.LittleEndian.Uint32(b[at:]), nil
}

func (b flatbuf) u16(at int) (int, error) {
	if at < 0 || at > len(b)-2 {
		return 0, fmt.Errorf("offset %d outside the %d-byte schema message", at, len(b))
	}
	return int(binary.LittleEndian.Uint16(b[at:])), nil
}

// root returns the root table.
func (b flatbuf) root() (int, error) {
	return b.tableAt(0)
}

// tableAt returns the table the uoffset at `at` points to, with its vtable checked.
func (b flatbuf) tableAt(at int) (int, error) {
	u, err := b.u32(at)
	if err != nil {
		return 0, err
	}
	tab := at + int(u)
	so, err := b.u32(tab)
	if err != nil {
		return 0, err
	}
	vt := tab - int(int32(so))
	vtLen, err := b.u16(vt)
	if err != nil {
		return 0, err
	}
	objLen, err := b.u16(vt + 2)
	if err != nil {
		return 0, err
	}
	if vtLen < 4 || vtLen%2 != 0 || vt+vtLen > len(b) || tab+objLen > len(b) || tab <= 0 {
		return 0, fmt.Errorf("malformed table at offset %d", tab)
	}
	return tab, nil
}

// field returns the position of field slot of table tab (0: absent), which
// holds size bytes.
func (b flatbuf) field(tab, slot, size int) (int, error) {
	so, _ := b.u32(tab) // checked by tableAt
	vt := tab - int(int32(so))
	vtLen, _ := b.u16(vt)
	if 4+2*slot >= vtLen {
		return 0, nil
	}
	off, _ := b.u16(vt + 4 + 2*slot)
	if off == 0 {
		return 0, nil
	}
	if tab+off+size > len(b) {
		return 0, fmt.Errorf("field %d of the table at %d lies outside the schema message", slot, tab)
	}
	return tab + off, nil
}

// scalar returns the little-endian unsigned value of size bytes in field slot
// of table tab, 0 when absent.
func (b flatbuf) scalar(tab, slot, size int) (uint64, error) {
	at, err := b.field(tab, slot, size)
	if err != nil || at == 0 {
		return 0, err
	}
	var v uint64
	for i := size - 1; i >= 0; i-- {
		v = v<<8 | uint64(b[at+i])
	}
	return v, nil
}

// table returns the table field slot of tab points to (0: absent).
func (b flatbuf) table(tab, slot int) (int, error) {
	at, err := b.field(tab, slot, 4)
	if err != nil || at == 0 {
		return 0, err
	}
	return b.tableAt(at)
}

// vector returns the position and length of the vector (or string) field
// slot of tab points to, of elem bytes per element, checked to fit.
func (b flatbuf) vector(tab, slot, elem int) (start, n int, err error) {
	at, err := b.field(tab, slot, 4)
	if err != nil || at == 0 {
		return 0, 0, err
	}
	u, _ := b.u32(at)
	v := at + int(u)
	l, err := b.u32(v)
	if err != nil {
		return 0, 0, err
	}
	if uint64(l)*uint64(elem) > uint64(len(b)-v-4) {
		return 0, 0, fmt.Errorf("a vector of %d elements does not fit in the %d-byte schema message", l, len(b))
	}
	return v + 4, int(l), nil
}

// tables calls fn with each table of the vector of tables in field slot of tab.
func (b flatbuf) tables(tab, slot int, fn func(t int) error) error {
	start, n, err := b.vector(tab, slot, 4)
	if err != nil {
		return err
	}
	for i := range n {
		t, err := b.tableAt(start + 4*i)
		if err != nil {
			return err
		}
		if err := fn(t); err != nil {
			return err
		}
	}
	return nil
}

// keyValues checks a vector of KeyValue tables (custom metadata).
func (b flatbuf) keyValues(tab, slot int) error {
	return b.tables(tab, slot, func(kv int) error {
		for _, s := range []int{0, 1} { // key, value
			if _, _, err := b.vector(kv, s, 1); err != nil {
				return err
			}
		}
		return nil
	})
}

// fields checks a vector of Field tables, recursively.
func (b flatbuf) fields(tab, slot, depth int) error {
	const (
		fieldName, fieldTypeType, fieldType, fieldDictionary, fieldChildren, fieldMetadata = 0, 2, 3, 4, 5, 6
		typeTimestamp, typeUnion                                                           = 10, 14
		maxDepth                                                                           = 64
	)
	if depth > maxDepth {
		return fmt.Errorf("fields nested deeper than %d", maxDepth)
	}
	return b.tables(tab, slot, func(f int) error {
		if _, _, err := b.vector(f, fieldName, 1); err != nil {
			return err
		}
		tt, err := b.scalar(f, fieldTypeType, 1)
		if err != nil {
			return err
		}
		typ, err := b.table(f, fieldType)
		if err != nil {
			return err
		}
		if typ != 0 {
			switch tt {
			case typeTimestamp: // timezone: string
				_, _, err = b.vector(typ, 1, 1)
			case typeUnion: // typeIds: [int]
				_, _, err = b.vector(typ, 1, 4)
			}
			if err != nil {
				return err
			}
		}
		dict, err := b.table(f, fieldDictionary)
		if err != nil {
			return err
		}
		if dict != 0 {
			if _, err := b.table(dict, 1); err != nil { // indexType: Int
				return err
			}
		}
		if err := b.keyValues(f, fieldMetadata); err != nil {
			return err
		}
		return b.fields(f, fieldChildren, depth+1)
	})
}

// checkFooterSchema checks the Arrow schema that a writer stored in a Parquet
// footer and that arrowSchema decodes whenever it reads the file, as it
// decodes a manifest's. Text that is not base64 is left to arrowSchema, which
// reports it as an error.
func checkFooterSchema(md *metadata.FileMetaData) error {
	b, err := storedSchemaMessage(md.KeyValueMetadata())
	if b == nil || err != nil {
		return nil
	}
	if err := checkSchemaMessage(b); err != nil {
		return fmt.Errorf("ARROW:schema: %w", err)
	}
	return nil
}

// storedSchemaMessage returns the IPC schema message that pqarrow and
// pyarrow store in a footer (base64, under ARROW:schema), decoded as pqarrow
// decodes it, or nil when there is none.
func storedSchemaMessage(kv metadata.KeyValueMetadata) ([]byte, error) {
	v := kv.FindValue("ARROW:schema")
	if v == nil {
		return nil, nil
	}
	var b []byte
	var err error
	if len(*v)%4 == 0 { // pqarrow's order: padded, then unpadded
		b, err = base64.StdEncoding.DecodeString(*v)
	}
	if len(b) == 0 || err != nil {
		if b, err = base64.RawStdEncoding.DecodeString(*v); err != nil {
			return nil, fmt.Errorf("ARROW:schema: %w", err)
		}
	}
	return b, nil
}
