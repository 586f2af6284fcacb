package jsonargs_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/store"
	"github.com/croupier-data/croupier/core/table"
	_ "github.com/croupier-data/croupier/drivers/all"
	"github.com/croupier-data/croupier/internal/jsonargs"
	"github.com/croupier-data/croupier/internal/tabletest"
	"github.com/croupier-data/croupier/loader"
	"github.com/croupier-data/croupier/permutation"
)

// TestNoGoWords hands croupier bad input of every kind a user gives it:
// garbled pins (an unpickled Table's), checkpoints of each kind, options,
// the manifests of tables and permutations edited and sealed again, and
// malformed store URIs. Each must fail with its code, and its message must
// hold none of Go's words (GoWords): no type, struct field or package name.
func TestNoGoWords(t *testing.T) {
	ctx := context.Background()
	check := func(what string, err error, code errcode.Code, parts ...string) {
		t.Helper()
		if err == nil {
			t.Errorf("%s: no error", what)
			return
		}
		if errcode.Of(err) != code {
			t.Errorf("%s: %v (%s), want %s", what, err, errcode.Of(err), code)
		}
		if m := jsonargs.GoWord(err.Error()); m != "" {
			t.Errorf("%s: %q holds %q", what, err, m)
		}
		for _, p := range parts {
			if !strings.Contains(err.Error(), p) {
				t.Errorf("%s: %q does not name %q", what, err, p)
			}
		}
	}

	for _, pin := range []string{`{"format": "1"}`, `{"files": 3}`, `{"files": [{"row_groups": "x"}]}`,
		`{"files": [{"size": 1.5}]}`, `{"uri": ["a"]}`, `[]`, `{"format": 1`, `{"format": 1e400}`, `"pin"`} {
		_, err := table.DecodePin([]byte(pin))
		check("pin "+pin, err, errcode.InvalidArgument)
	}
	_, err := table.DecodePin([]byte(`{"format": "1"}`))
	check("pin format", err, errcode.InvalidArgument, `"format" is string "1", but it must be an integer`)

	for _, cp := range []string{`{"format": "2"}`, `{"format": 2, "epoch": "x"}`, `{"format": 2, "table_version": true}`,
		`{"format": 2, "shuffle_seed": -1}`, `{"format": 2, "permutation_uri": 3}`, `{"format": 2, "steps_consumed": 1.5}`,
		`{"format": 2, "stepz_consumed": 1}`, `[2]`, `{`} {
		_, err := loader.ParseCheckpoint([]byte(cp), "state.json")
		check("checkpoint "+cp, err, errcode.InvalidArgument, "state.json")
	}
	_, err = loader.ParseCheckpoint([]byte(`{"format": 2, "global_batch_size": 8, "stepz_consumed": 1}`), "state.json")
	check("checkpoint with an unknown key", err, errcode.InvalidArgument, `unknown key "stepz_consumed" (did you mean "steps_consumed"?)`)
	for _, cp := range []string{`{"schedule": [[1, "x"]]}`, `{"schedule": [["a", [1]]]}`, `{"schedule": [1]}`,
		`{"sources": [{"epoch": "x"}]}`, `{"out_of_draw": {}}`, `{"seed": -1}`} {
		_, err := loader.ParseMixtureCheckpoint([]byte(cp), "mix.json")
		check("mixture checkpoint "+cp, err, errcode.InvalidArgument, "mix.json")
	}
	for _, cp := range []string{`{"position": {"carry": "x"}}`, `{"follow": 3}`, `{"position": {"round": "1"}}`} {
		_, err := loader.ParseFollowCheckpoint([]byte(cp), "follow.json")
		check("follow checkpoint "+cp, err, errcode.InvalidArgument, "follow.json")
	}

	for _, o := range []struct {
		json string
		v    any
	}{
		{`{"row_group_rows": "x"}`, &table.WriteOptions{}},
		{`{"columns": [1]}`, &loader.Options{}},
		{`{"split": {"counts": ["a"]}}`, &permutation.Spec{}},
		{`{"shuffle": []}`, &permutation.Spec{}},
		{`{"epoch": {"a": 1}}`, &loader.StreamOptions{}},
	} {
		check("options "+o.json, jsonargs.Decode([]byte(o.json), o.v, true, "decode options", ""), errcode.InvalidArgument)
	}

	// A table's and a permutation's manifests, edited and sealed again, so
	// that their JSON is read.
	dir := t.TempDir()
	tb, err := table.Create(ctx, "file://"+filepath.Join(dir, "t"), tabletest.Reader(0, 20), table.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := permutation.Build(ctx, tb, permutation.Spec{Shuffle: &permutation.ShuffleSpec{Seed: 1}},
		"file://"+filepath.Join(dir, "p"), permutation.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	tb.Close()
	for _, m := range []struct {
		file string
		edit func(m map[string]any)
		open func() error
	}{
		{"t/_versions/00000000000000000001.json", func(m map[string]any) { m["version"] = "1" }, func() error {
			_, err := table.Open(ctx, "file://"+filepath.Join(dir, "t"))
			return err
		}},
		{"t/_versions/00000000000000000001.json", func(m map[string]any) { m["files"] = map[string]any{} }, func() error {
			_, err := table.Open(ctx, "file://"+filepath.Join(dir, "t"))
			return err
		}},
		{"p/permutation.json", func(m map[string]any) { m["id_width"] = "4" }, func() error {
			_, err := permutation.Open(ctx, "file://"+filepath.Join(dir, "p"))
			return err
		}},
		{"p/permutation.json", func(m map[string]any) { m["splits"] = []any{map[string]any{"num_rows": true}} }, func() error {
			_, err := permutation.Open(ctx, "file://"+filepath.Join(dir, "p"))
			return err
		}},
	} {
		path := filepath.Join(dir, m.file)
		orig, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		tabletest.EditJSON(t, path, m.edit)
		check("manifest "+m.file, m.open(), errcode.Corrupt, filepath.Base(m.file))
		os.WriteFile(path, orig, 0o644)
	}

	// Malformed URIs are refused before any request: none of these waits
	// for retries against a host that does not exist.
	for _, uri := range []string{"s3://", "s3:///x", "s3://b?endpoint=", "s3://b/t?region=", "s3:b/t", "gs://", "gs:///t",
		"azblob://", "azblob:///c/t", "ftp://host/t", "mem://", "file://"} {
		_, err := store.Open(ctx, uri)
		check("uri "+uri, err, errcode.InvalidArgument)
		_, err = table.Open(ctx, uri)
		check("open table "+uri, err, errcode.InvalidArgument)
	}
	_, err = table.Open(ctx, "s3://b?endpoint=")
	check("empty endpoint", err, errcode.InvalidArgument, `query parameter "endpoint" has no value`, "s3://b")
	_, err = store.Open(ctx, "s3:///x")
	check("no bucket", err, errcode.InvalidArgument, "names no bucket", "s3:///x")
}
