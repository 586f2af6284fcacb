package table_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/internal/tabletest"
)

// TestIDSurvivesSpellingsAndCopies: a table's ID is the same whatever URI
// spelling reaches it and in a copy of its folder elsewhere, and differs
// between versions, between tables of equal rows, and when a file changes.
func TestIDSurvivesSpellingsAndCopies(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	id := func(uri string, version int64) string {
		t.Helper()
		tb, err := table.OpenVersion(ctx, uri, version)
		if err != nil {
			t.Fatal(err)
		}
		defer tb.Close()
		return tb.ID()
	}
	create := func(name string) string {
		uri := "file://" + filepath.Join(root, name)
		tb, err := table.Create(ctx, uri, tabletest.Reader(0, 50), table.WriteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		tb.Close()
		return uri
	}
	a := create("a")
	if _, err := table.Append(ctx, a, tabletest.Reader(50, 10), table.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	copied := filepath.Join(root, "moved")
	if out, err := exec.Command("cp", "-r", filepath.Join(root, "a"), copied).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	plain := filepath.Join(root, "plain")
	if err := os.Mkdir(plain, 0o755); err != nil {
		t.Fatal(err)
	}
	tabletest.Write(t, plain, []int64{30, 25}, 10)

	same := [][]string{
		{id(a, 2), id(a+"/", 2), id("file://"+root+"/./a", 2), id("file://"+copied, 2)},
		{id("file://"+plain, 0), id("file://"+plain+"/", 0), id("file://"+root+"//plain", 0)},
	}
	for _, ids := range same {
		for _, other := range ids[1:] {
			if other != ids[0] {
				t.Errorf("IDs %v differ", ids)
			}
		}
	}
	different := map[string]string{
		"version 2": id(a, 2), "version 1": id(a, 1), "another table of the same rows": id(create("b"), 1),
		"plain": id("file://"+plain, 0),
	}
	seen := map[string]string{}
	for what, v := range different {
		if prev, ok := seen[v]; ok {
			t.Errorf("%s and %s have the same ID %s", what, prev, v)
		}
		seen[v] = what
	}
	before := id("file://"+plain, 0)
	files, _ := filepath.Glob(filepath.Join(plain, "*.parquet"))
	if err := os.WriteFile(files[0], tabletest.Encode(t, 0, 31, 10), 0o644); err != nil {
		t.Fatal(err)
	}
	if after := id("file://"+plain, 0); after == before {
		t.Errorf("a changed file keeps the ID %s", after)
	}
}
