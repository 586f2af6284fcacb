// Package jsonargs decodes JSON given from outside (options at the C ABI,
// checkpoints, pins, manifests) with errors that speak of JSON keys and
// values, never of Go types, and, when asked, refuses keys that name no
// field: a misspelt option would otherwise be dropped without a word and its
// default used. Every decoding of such JSON goes through Unmarshal (or
// Decode), so that no message of encoding/json's, which names Go types and
// struct fields, reaches a user.
package jsonargs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"slices"
	"strings"

	// levenshtein ranks the valid keys by edit distance to name the one a
	// misspelt key meant; it is small, dependency-free and maintained.
	"github.com/agnivade/levenshtein"

	"github.com/croupier-data/croupier/core/errcode"
)

// Decode decodes the JSON object b into v, a pointer to a struct, as
// Unmarshal does; its errors are InvalidArgument, on op and path.
func Decode(b []byte, v any, strict bool, op, path string) error {
	if err := Unmarshal(b, v, strict); err != nil {
		return &errcode.Error{Code: errcode.InvalidArgument, Op: op, Path: path, Err: err}
	}
	return nil
}

// Unmarshal decodes the JSON value b, and nothing after it, into v, a
// pointer. With strict, every key must be one of v's fields, at every level
// of nesting, and an unknown one is refused naming the nearest valid key.
// Its errors speak of keys and JSON values (see explain).
func Unmarshal(b []byte, v any, strict bool) error {
	t := reflect.TypeOf(v).Elem()
	var raw any
	if !json.Valid(b) {
		return explain(json.Unmarshal(b, &raw), t, b)
	}
	if strict {
		// Numbers stay text here: a number beyond float64 is the field's
		// decoding to refuse, in its terms.
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		if err := dec.Decode(&raw); err != nil {
			return explain(err, t, b)
		}
		if err := checkKeys(raw, t, ""); err != nil {
			return err
		}
	}
	return explain(json.Unmarshal(b, v), t, b)
}

// explain returns err, an error of encoding/json's decoding of b into a
// value of type t, in JSON's words: a value of the wrong type names its key,
// the JSON value and what the key takes; a syntax error says where. Other
// errors, those of a type's own UnmarshalJSON, are kept as they are.
func explain(err error, t reflect.Type, b []byte) error {
	var (
		te *json.UnmarshalTypeError
		se *json.SyntaxError
		ue *json.UnsupportedTypeError
		ie *json.InvalidUnmarshalError
	)
	switch {
	case err == nil:
		return nil
	case errors.As(err, &te) && te.Field == "":
		if k := te.Type.Kind(); k == reflect.Struct || k == reflect.Map {
			return fmt.Errorf("the JSON is %s, but it must be an object", te.Value)
		}
		return fmt.Errorf("a value is %s, but it must be %s", te.Value, describe(te.Type))
	case errors.As(err, &te):
		key := jsonKey(t, te.Field)
		return fmt.Errorf("%q is %s, but it must be %s", key, valueAt(b, key, te.Value), describe(te.Type))
	case errors.As(err, &se):
		return fmt.Errorf("malformed JSON at byte %d: %s", se.Offset, se.Error())
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		return errors.New("unexpected end of JSON input")
	case errors.As(err, &ue) || errors.As(err, &ie):
		return errors.New("a value that JSON cannot hold") // a bug: decoding into a type that takes none
	}
	return err
}

// maxShown bounds the bytes of a JSON value an error shows.
const maxShown = 64

// valueAt returns what encoding/json calls the value at the dotted key path
// of the JSON object b ("string", "number 7.5"), with the value itself where
// encoding/json gives only its type and the value is the key's own, not an
// element of a list or an object beneath it: "string \"7\"", "array [1,2]";
// at most maxShown bytes of it.
func valueAt(b []byte, key, what string) string {
	if strings.Contains(what, " ") { // a number, shown already
		return what
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if dec.Decode(&v) != nil {
		return what
	}
	for part := range strings.SplitSeq(key, ".") {
		obj, ok := v.(map[string]any)
		if !ok {
			return what
		}
		found := false
		for k, val := range obj { // as encoding/json matches keys
			if strings.EqualFold(k, part) && (!found || k == part) {
				v, found = val, true
			}
		}
		if !found {
			return what
		}
	}
	if jsonType(v) != what { // the value is an element of a list at key
		return what
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // "<" as the caller wrote it
	if enc.Encode(v) != nil {
		return what
	}
	shown := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	if len(shown) > maxShown {
		return fmt.Sprintf("%s %s…", what, shown[:maxShown])
	}
	return fmt.Sprintf("%s %s", what, shown)
}

// jsonType returns the name encoding/json gives the type of v, a value it
// decoded with UseNumber.
func jsonType(v any) string {
	switch v.(type) {
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case string:
		return "string"
	case bool:
		return "bool"
	case json.Number:
		return "number"
	}
	return "null"
}

// jsonKey returns field, the dotted path encoding/json gives a field of t,
// without the names of the embedded structs it passes through: those are
// Go's, the JSON has their fields in place.
func jsonKey(t reflect.Type, field string) string {
	var keys []string
	for part := range strings.SplitSeq(field, ".") {
		for t != nil && t.Kind() != reflect.Struct && elemKinds[t.Kind()] {
			t = t.Elem()
		}
		if t == nil || t.Kind() != reflect.Struct {
			keys, t = append(keys, part), nil
			continue
		}
		if f, ok := t.FieldByName(part); ok && f.Anonymous && f.Tag.Get("json") == "" {
			t = f.Type
			continue
		}
		fields := jsonFields(t)
		keys, t = append(keys, part), nil
		for _, f := range fields {
			if f.name == part {
				t = f.typ
			}
		}
	}
	return strings.Join(keys, ".")
}

// elemKinds are the kinds whose values JSON holds as their elements'.
var elemKinds = map[reflect.Kind]bool{reflect.Pointer: true, reflect.Slice: true, reflect.Array: true, reflect.Map: true}

// checkKeys checks that every key of the objects in raw names a field of t,
// recursively for fields that are structs.
func checkKeys(raw any, t reflect.Type, at string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	obj, ok := raw.(map[string]any)
	if !ok || t.Kind() != reflect.Struct {
		return nil // a type error, which decoding reports
	}
	fields := jsonFields(t)
	for key, val := range obj {
		// As encoding/json does, a key matches a field case-insensitively.
		i := slices.IndexFunc(fields, func(f field) bool { return strings.EqualFold(f.name, key) })
		if i < 0 {
			return unknownKey(at+key, fields)
		}
		if err := checkKeys(val, fields[i].typ, at+fields[i].name+"."); err != nil {
			return err
		}
	}
	return nil
}

type field struct {
	name string
	typ  reflect.Type
}

// jsonFields lists the fields encoding/json decodes into a struct of type t:
// exported, not tagged "-", and of a type JSON can fill, with the fields of
// embedded structs promoted.
func jsonFields(t reflect.Type) []field {
	var out []field
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			out = append(out, jsonFields(f.Type)...)
			continue
		}
		switch f.Type.Kind() {
		case reflect.Func, reflect.Chan, reflect.Interface, reflect.UnsafePointer:
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, field{name, f.Type})
	}
	return out
}

// unknownKey names key, the valid key nearest to it, and all valid keys.
func unknownKey(key string, fields []field) error {
	names := make([]string, len(fields))
	for i, f := range fields {
		names[i] = f.name
	}
	last := key[strings.LastIndex(key, ".")+1:]
	nearest := slices.MinFunc(names, func(a, b string) int {
		return levenshtein.ComputeDistance(last, a) - levenshtein.ComputeDistance(last, b)
	})
	slices.Sort(names)
	return fmt.Errorf("unknown key %q (did you mean %q?); the keys are: %s", key, nearest, strings.Join(names, ", "))
}

// describe says in JSON's terms what values a Go type takes.
func describe(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		bits := t.Bits()
		return fmt.Sprintf("an integer in [%d, %d]", -int64(1)<<(bits-1), int64(math.MaxInt64>>(64-bits)))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return fmt.Sprintf("an integer in [0, %d]", uint64(math.MaxUint64>>(64-t.Bits())))
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "a list of values that are each " + describe(t.Elem())
	case reflect.Pointer:
		return describe(t.Elem()) + " or null"
	}
	return "an object"
}
