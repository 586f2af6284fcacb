package table

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/apache/thrift/lib/go/thrift"
)

// A Thrift compact struct as a tree of fields, whatever their types. Writing
// page CRCs (crcwrite.go) changes a few fields of Parquet's page headers,
// offset indexes and footer, the ones that hold positions and sizes in the
// file; the tree keeps every other field exactly as the writer set it,
// including fields this package has never heard of.

// tField is one field of a struct: its id, its wire type and its value, an
// int64 for every integer type, bool, float64, []byte for strings and
// binaries, *tStruct, *tList (lists and sets) or *tMap.
type tField struct {
	id  int16
	typ thrift.TType
	val any
}

// tStruct is a struct's fields in the order they came.
type tStruct struct{ fields []tField }

// tList is a list or a set.
type tList struct {
	elem thrift.TType
	set  bool
	vals []any
}

// tMap is a map: keys and values alternate in vals.
type tMap struct {
	key, elem thrift.TType
	vals      []any
}

// maxTreeDepth bounds the nesting a tree is read to: Parquet's metadata
// nests a few levels.
const maxTreeDepth = 32

// field returns the field with id, or nil.
func (s *tStruct) field(id int16) *tField {
	for i := range s.fields {
		if s.fields[i].id == id {
			return &s.fields[i]
		}
	}
	return nil
}

// int returns the integer field id.
func (s *tStruct) int(id int16) (int64, bool) {
	if f := s.field(id); f != nil {
		v, ok := f.val.(int64)
		return v, ok
	}
	return 0, false
}

// setInt sets the integer field id, adding it in id order if it is not there.
func (s *tStruct) setInt(id int16, typ thrift.TType, v int64) {
	if f := s.field(id); f != nil {
		f.val = v
		return
	}
	i := 0
	for i < len(s.fields) && s.fields[i].id < id {
		i++
	}
	s.fields = append(s.fields, tField{})
	copy(s.fields[i+1:], s.fields[i:])
	s.fields[i] = tField{id: id, typ: typ, val: v}
}

// child returns the struct field id, or nil.
func (s *tStruct) child(id int16) *tStruct {
	if f := s.field(id); f != nil {
		c, _ := f.val.(*tStruct)
		return c
	}
	return nil
}

// structs returns the structs of the list field id.
func (s *tStruct) structs(id int16) []*tStruct {
	f := s.field(id)
	if f == nil {
		return nil
	}
	l, _ := f.val.(*tList)
	if l == nil {
		return nil
	}
	out := make([]*tStruct, 0, len(l.vals))
	for _, v := range l.vals {
		if c, ok := v.(*tStruct); ok {
			out = append(out, c)
		}
	}
	return out
}

// decodeStruct reads the compact struct at the start of b; it returns the
// struct and its length in bytes. A b that ends inside the struct is
// errShortHeader.
func decodeStruct(b []byte) (*tStruct, int, error) {
	ctx := context.Background()
	buf := &thrift.TMemoryBuffer{Buffer: bytes.NewBuffer(b)}
	p := thrift.NewTCompactProtocolConf(buf, &thrift.TConfiguration{MaxMessageSize: int32(min(len(b), 1<<30))})
	s, err := readStruct(ctx, p, 0)
	if err != nil && (buf.Len() == 0 || beyond(err, b)) { // it needed more bytes than b has
		return nil, 0, errShortHeader
	}
	if err != nil {
		return nil, 0, err
	}
	return s, len(b) - buf.Len(), nil
}

// beyond reports whether err, from reading a compact struct out of b with
// b's length as the protocol's MaxMessageSize, is a field or list that
// declares more bytes than b holds: thrift checks a declared size before it
// reads, so a header whose statistics hold a 4 KiB value fails so when b is
// its first kilobyte, and is whole in more bytes.
func beyond(err error, b []byte) bool {
	var pe thrift.TProtocolException
	return len(b) < 1<<30 && errors.As(err, &pe) && pe.TypeId() == thrift.SIZE_LIMIT
}

// encodeStruct returns s in the compact protocol.
func encodeStruct(s *tStruct) ([]byte, error) {
	ctx := context.Background()
	buf := thrift.NewTMemoryBuffer()
	p := thrift.NewTCompactProtocolConf(buf, &thrift.TConfiguration{})
	if err := writeStruct(ctx, p, s); err != nil {
		return nil, err
	}
	if err := p.Flush(ctx); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func readStruct(ctx context.Context, p thrift.TProtocol, depth int) (*tStruct, error) {
	if depth > maxTreeDepth {
		return nil, fmt.Errorf("struct nested more than %d deep", maxTreeDepth)
	}
	if _, err := p.ReadStructBegin(ctx); err != nil {
		return nil, err
	}
	s := &tStruct{}
	for {
		_, typ, id, err := p.ReadFieldBegin(ctx)
		if err != nil {
			return nil, err
		}
		if typ == thrift.STOP {
			break
		}
		v, err := readValue(ctx, p, typ, depth)
		if err != nil {
			return nil, err
		}
		if err := p.ReadFieldEnd(ctx); err != nil {
			return nil, err
		}
		s.fields = append(s.fields, tField{id: id, typ: typ, val: v})
	}
	return s, p.ReadStructEnd(ctx)
}

func readValue(ctx context.Context, p thrift.TProtocol, typ thrift.TType, depth int) (any, error) {
	var v any
	var err error
	switch typ {
	case thrift.BOOL:
		v, err = p.ReadBool(ctx)
	case thrift.BYTE:
		var b int8
		b, err = p.ReadByte(ctx)
		v = int64(b)
	case thrift.I16:
		var i int16
		i, err = p.ReadI16(ctx)
		v = int64(i)
	case thrift.I32:
		var i int32
		i, err = p.ReadI32(ctx)
		v = int64(i)
	case thrift.I64:
		v, err = p.ReadI64(ctx)
	case thrift.DOUBLE:
		v, err = p.ReadDouble(ctx)
	case thrift.STRING:
		v, err = p.ReadBinary(ctx)
	case thrift.STRUCT:
		return readStruct(ctx, p, depth+1)
	case thrift.LIST, thrift.SET:
		l := &tList{set: typ == thrift.SET}
		var n int
		if l.set {
			l.elem, n, err = p.ReadSetBegin(ctx)
		} else {
			l.elem, n, err = p.ReadListBegin(ctx)
		}
		if err != nil {
			return nil, err
		}
		for range n {
			e, err := readValue(ctx, p, l.elem, depth+1)
			if err != nil {
				return nil, err
			}
			l.vals = append(l.vals, e)
		}
		if l.set {
			err = p.ReadSetEnd(ctx)
		} else {
			err = p.ReadListEnd(ctx)
		}
		v = l
	case thrift.MAP:
		m := &tMap{}
		var n int
		if m.key, m.elem, n, err = p.ReadMapBegin(ctx); err != nil {
			return nil, err
		}
		for range n {
			k, err := readValue(ctx, p, m.key, depth+1)
			if err != nil {
				return nil, err
			}
			e, err := readValue(ctx, p, m.elem, depth+1)
			if err != nil {
				return nil, err
			}
			m.vals = append(m.vals, k, e)
		}
		err = p.ReadMapEnd(ctx)
		v = m
	default:
		return nil, fmt.Errorf("unknown Thrift type %d", typ)
	}
	return v, err
}

func writeStruct(ctx context.Context, p thrift.TProtocol, s *tStruct) error {
	if err := p.WriteStructBegin(ctx, ""); err != nil {
		return err
	}
	for _, f := range s.fields {
		if err := p.WriteFieldBegin(ctx, "", f.typ, f.id); err != nil {
			return err
		}
		if err := writeValue(ctx, p, f.typ, f.val); err != nil {
			return err
		}
		if err := p.WriteFieldEnd(ctx); err != nil {
			return err
		}
	}
	if err := p.WriteFieldStop(ctx); err != nil {
		return err
	}
	return p.WriteStructEnd(ctx)
}

func writeValue(ctx context.Context, p thrift.TProtocol, typ thrift.TType, v any) error {
	switch typ {
	case thrift.BOOL:
		return p.WriteBool(ctx, v.(bool))
	case thrift.BYTE:
		return p.WriteByte(ctx, int8(v.(int64)))
	case thrift.I16:
		return p.WriteI16(ctx, int16(v.(int64)))
	case thrift.I32:
		return p.WriteI32(ctx, int32(v.(int64)))
	case thrift.I64:
		return p.WriteI64(ctx, v.(int64))
	case thrift.DOUBLE:
		return p.WriteDouble(ctx, v.(float64))
	case thrift.STRING:
		return p.WriteBinary(ctx, v.([]byte))
	case thrift.STRUCT:
		return writeStruct(ctx, p, v.(*tStruct))
	case thrift.LIST, thrift.SET:
		l := v.(*tList)
		var err error
		if l.set {
			err = p.WriteSetBegin(ctx, l.elem, len(l.vals))
		} else {
			err = p.WriteListBegin(ctx, l.elem, len(l.vals))
		}
		if err != nil {
			return err
		}
		for _, e := range l.vals {
			if err := writeValue(ctx, p, l.elem, e); err != nil {
				return err
			}
		}
		if l.set {
			return p.WriteSetEnd(ctx)
		}
		return p.WriteListEnd(ctx)
	case thrift.MAP:
		m := v.(*tMap)
		if err := p.WriteMapBegin(ctx, m.key, m.elem, len(m.vals)/2); err != nil {
			return err
		}
		for i := 0; i < len(m.vals); i += 2 {
			if err := writeValue(ctx, p, m.key, m.vals[i]); err != nil {
				return err
			}
			if err := writeValue(ctx, p, m.elem, m.vals[i+1]); err != nil {
				return err
			}
		}
		return p.WriteMapEnd(ctx)
	}
	return fmt.Errorf("unknown Thrift type %d", typ)
}
