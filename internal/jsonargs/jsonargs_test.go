package jsonargs_test

import (
	"strings"
	"testing"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/internal/jsonargs"
	"github.com/croupier-data/croupier/loader"
	"github.com/croupier-data/croupier/permutation"
)

// TestDecode: every key of the JSON options of the C ABI, at every
// level, must be a field; a misspelt one is refused naming the nearest valid
// key, and values of the wrong type or range are refused naming the key, the
// value and what it may be, in JSON's terms.
func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		json string
		v    any
		want string
	}{
		{`{"global_batch_size": 8, "memory_budgt": 1}`, &loader.Options{}, `unknown key "memory_budgt" (did you mean "memory_budget"?); the keys are: columns, drop_last, global_batch_size`},
		{`{"epok": 1}`, &loader.StreamOptions{}, `unknown key "epok" (did you mean "epoch"?)`},
		{`{"split": {"kind": "hash", "wieghts": [1]}}`, &permutation.Spec{}, `unknown key "split.wieghts" (did you mean "weights"?)`},
		{`{"shufle": {"seed": 1}}`, &permutation.Spec{}, `unknown key "shufle" (did you mean "shuffle"?)`},
		{`{"keep_lsat": 1}`, &table.CleanupOptions{}, `unknown key "keep_lsat" (did you mean "keep_last"?)`},
		{`{"shuffle_seed": -1}`, &loader.Options{}, `"shuffle_seed" is number -1, but it must be an integer in [0, 18446744073709551615]`},
		{`{"global_batch_size": 1e30}`, &loader.Options{}, `"global_batch_size" is number 1e30, but it must be an integer in [-9223372036854775808, 9223372036854775807]`},
		{`{"global_batch_size": "8"}`, &loader.Options{}, `"global_batch_size" is string "8", but it must be an integer`},
		{`{"drop_last": 1}`, &loader.Options{}, `"drop_last" is number 1, but it must be true or false`},
		{`{"columns": "a"}`, &loader.Options{}, `"columns" is string "a", but it must be a list of values that are each a string`},
		{`{"columns": {"a": [1, 2]}}`, &loader.Options{}, `"columns" is object {"a":[1,2]}, but it must be a list`},
		{`{"columns": "` + strings.Repeat("x", 100) + `"}`, &loader.Options{}, `"columns" is string "` + strings.Repeat("x", 63) + `…, but`},
		{`{"split": {"weights": [true]}}`, &permutation.Spec{}, `"split.weights" is bool, but it must be an integer`},
		{`{"split": {"weights": [0.95, 0.05]}}`, &permutation.Spec{}, `"split.weights" is number 0.95, but it must be an integer`},
		{`{"global_batch_size": 8`, &loader.Options{}, `unexpected end of JSON input`},
		{`[1]`, &loader.Options{}, `the JSON is array, but it must be an object`},
		{`1E700`, &loader.Options{}, `the JSON is number, but it must be an object`},
		{`{"read_ahead": 1E700}`, &loader.Options{}, `"read_ahead" is number 1E700, but it must be an integer`},
	} {
		err := jsonargs.Decode([]byte(tc.json), tc.v, true, "decode options", "")
		if errcode.Of(err) != errcode.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want InvalidArgument with %q", tc.json, err, tc.want)
			continue
		}
		if m := jsonargs.GoWords.FindString(err.Error()); m != "" {
			t.Errorf("message %q holds %q", err, m)
		}
	}
	var o loader.Options
	if err := jsonargs.Decode([]byte(`{"Global_Batch_Size": 8, "columns": ["a"], "read_ahead": 2}`), &o, true, "decode options", ""); err != nil ||
		o.GlobalBatchSize != 8 || o.ReadAhead != 2 {
		t.Errorf("valid options: %v, %+v", err, o)
	}
}
