// Package jsonargs decodes JSON arguments given from outside (options at the
// C ABI, checkpoints given to the croupier command) with errors that speak of
// JSON keys and values, never of Go types, and, when asked, refuses keys that
// name no field: a misspelt option would otherwise be dropped without a word
// and its default used.
package jsonargs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"

	// levenshtein ranks the valid keys by edit distance to name the one a
	// misspelt key meant; it is small, dependency-free and maintained.
	"github.com/agnivade/levenshtein"

	"github.com/croupier-data/croupier/core/errcode"
)

// Decode decodes the JSON object b into v, a pointer to a struct. With
// strict, every key must be one of v's fields, at every level of nesting, and
// an unknown one is refused naming the nearest valid key. Errors are
// InvalidArgument, on op and path, and speak of keys and JSON values.
func Decode(b []byte, v any, strict bool, op, path string) error {
	bad := func(format string, args ...any) error {
		return errcode.New(errcode.InvalidArgument, op, path, format, args...)
	}
	var raw any
	if !json.Valid(b) {
		return bad("%v", json.Unmarshal(b, &raw))
	}
	// Numbers stay text here: a number beyond float64 is the field's
	// decoding to refuse, in its terms.
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return bad("%v", err)
	}
	if strict {
		if err := checkKeys(raw, reflect.TypeOf(v).Elem(), ""); err != nil {
			return bad("%v", err)
		}
	}
	if err := json.Unmarshal(b, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field == "" {
			return bad("the JSON is %s, but it must be an object", te.Value)
		}
		if errors.As(err, &te) {
			return bad("%q is %s, but it must be %s", te.Field, te.Value, describe(te.Type))
		}
		return bad("%v", err)
	}
	return nil
}

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
