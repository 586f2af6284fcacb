package main

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/parquet/compress"

	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/internal/tabletest"
)

// columnOf reads column name of every row of the table at uri, in row id order.
func columnOf(t *testing.T, uri, name string) arrow.Array {
	t.Helper()
	tb, err := table.Open(context.Background(), uri)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	r, err := tb.NewReader(table.ReaderOptions{Columns: []string{name}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ids := make([]uint64, tb.NumRows())
	for i := range ids {
		ids[i] = uint64(i)
	}
	rec, err := r.Read(context.Background(), ids)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rec.Release)
	return rec.Column(0)
}

func TestRewrite(t *testing.T) {
	dir := t.TempDir()
	tabletest.Write(t, dir, []int64{2500, 1500}, 2000) // row groups of 2,000 rows
	src := "file://" + dir
	dst := "file://" + filepath.Join(t.TempDir(), "tbl")
	r := croupier(t, "rewrite", src, dst, "--columns", "text,id", "--row-group-rows", "1000", "--page-bytes", "4096")
	if r.code != 0 {
		t.Fatalf("rewrite: exit %d: %s", r.code, r.stderr)
	}
	if want := "rewrote 4000 rows of " + src + " into " + dst + " at version 1\n"; r.stdout != want {
		t.Errorf("rewrite printed %q, want %q", r.stdout, want)
	}
	// One line per tenth of the rows, on stderr: not a terminal.
	if !strings.HasPrefix(r.stderr, "rewrite: 2000/4000 (50%)\n") || !strings.HasSuffix(r.stderr, "rewrite: 4000/4000 (100%)\n") {
		t.Errorf("rewrite progress:\n%s", r.stderr)
	}

	var in inspectOutput
	okJSON(t, &in, "tables", "inspect", dst)
	if in.Kind != table.KindCroupier || in.Version != "1" || in.NumRows != 4000 || len(in.Files) != 1 ||
		!slices.Equal(in.Files[0].RowGroups, []int64{1000, 1000, 1000, 1000}) {
		t.Fatalf("inspect: %+v", in)
	}
	if len(in.Schema) != 2 || in.Schema[0].Name != "text" || in.Schema[1].Name != "id" {
		t.Fatalf("inspect schema: %+v", in.Schema)
	}
	for _, col := range []string{"id", "text"} {
		if !array.Equal(columnOf(t, dst, col), columnOf(t, src, col)) {
			t.Errorf("column %s differs from the source's", col)
		}
	}

	// --json; a croupier table rewrites too, here into lz4 pages.
	var out struct {
		URI     string `json:"uri"`
		Version int64  `json:"version"`
		NumRows int64  `json:"num_rows"`
	}
	again := "file://" + filepath.Join(t.TempDir(), "again")
	okJSON(t, &out, "rewrite", dst, again, "--quiet", "--compression", "lz4")
	if out.URI != again || out.Version != 1 || out.NumRows != 4000 {
		t.Fatalf("rewrite --json: %+v", out)
	}
	tb, err := table.Open(context.Background(), again)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	md, err := tb.Footer(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if col, err := md.RowGroup(0).ColumnChunk(0); err != nil || col.Compression() != compress.Codecs.Lz4Raw {
		t.Errorf("--compression lz4 wrote a column chunk of %v (%v)", col.Compression(), err)
	}

	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"rewrite", src}, 2, "missing arguments"},
		{[]string{"rewrite", src, dst, "--quiet"}, 1, "a croupier table exists here"},
		{[]string{"rewrite", src, dst + "2", "--columns", "id,nope"}, 1, `unknown column "nope"`},
		{[]string{"rewrite", src, dst + "3", "--compression", "brotli"}, 1, `compression "brotli": use one of`},
	} {
		r := croupier(t, c.args...)
		if r.code != c.code || !strings.Contains(r.stderr, c.want) {
			t.Errorf("croupier %q: exit %d, stderr %q; want exit %d and %q", c.args, r.code, r.stderr, c.code, c.want)
		}
	}
}
