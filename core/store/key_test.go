package store_test

import (
	"context"
	"strings"
	"testing"

	"github.com/croupier-data/croupier/core/store"
)

// hostileKeys are keys a tampered manifest or pin could hold to lead a
// reader out of its table's folder, each with a word its error must hold.
var hostileKeys = map[string]string{
	"":                            "empty",
	"../other/a.parquet":          "..",
	"data/../../a.parquet":        "..",
	"data/./a.parquet":            ".",
	"/etc/passwd":                 "absolute",
	"s3://other-bucket/a.parquet": "URI",
	"file:///etc/passwd":          "URI",
	`data\..\a.parquet`:           "backslash",
	"%2e%2e/a.parquet":            "decodes",
	"data/%2E%2E%2Fa.parquet":     "decodes",
	"data%2f..%5ca.parquet":       "decodes",
	"data//a.parquet":             "empty path element",
	"data/":                       "empty path element",
	"data/a.parquet\x00.txt":      "control character",
	"data/\xff.parquet":           "UTF-8",
}

func TestCheckKeyRefusesEscapes(t *testing.T) {
	for key, word := range hostileKeys {
		err := store.CheckKey(key)
		if err == nil || !strings.Contains(err.Error(), word) {
			t.Errorf("CheckKey(%q) = %v, want an error about %q", key, err, word)
		}
	}
	for _, key := range []string{"data/0b7c.parquet", "a.parquet", "date=2024-01-01/part-0.parquet",
		"year=2024%2F01/x.parquet", "100%.parquet", "x/..a/b..", "名前.parquet", "a b/c:d.parquet"} {
		if err := store.CheckKey(key); err != nil {
			t.Errorf("CheckKey(%q) = %v, want nil", key, err)
		}
	}
}

func TestHolds(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		uri     string
		in, out []string
	}{
		{"mem://holds/t", []string{"t/data/a.parquet", "t/x.parquet", "t"},
			[]string{"u/a.parquet", "tt/a.parquet", "t/_versions/1.json", "t/.hidden/a.parquet", "t/../u/a.parquet", "/t/a.parquet"}},
		{"mem://holds/t/", []string{"t/a.parquet"}, []string{"t", "u/a.parquet"}},
		{"mem://holds/d/part-*.parquet", []string{"d/part-0.parquet"}, []string{"d/other.parquet", "e/part-0.parquet", "d/part-*.parquet/../x"}},
		{"mem://holds/d/a.parquet", []string{"d/a.parquet"}, []string{"d/b.parquet", "d/a.parquet/../b.parquet"}},
		{"mem://holds", []string{"a.parquet", "t/data/b.parquet"}, []string{"_tmp/a.parquet", "../a.parquet", ""}},
	} {
		loc, err := store.Open(ctx, tc.uri)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range tc.in {
			if err := loc.Holds(k); err != nil {
				t.Errorf("%s: Holds(%q) = %v, want nil", tc.uri, k, err)
			}
		}
		for _, k := range tc.out {
			if err := loc.Holds(k); err == nil {
				t.Errorf("%s: Holds(%q) = nil, want an error", tc.uri, k)
			}
		}
		for k := range hostileKeys {
			if err := loc.Holds(k); err == nil {
				t.Errorf("%s: Holds(%q) = nil, want an error", tc.uri, k)
			}
		}
	}
}
