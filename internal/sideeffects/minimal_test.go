package sideeffects_test

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/internal/s3test"
)

// Bounds on examples/go-minimal, which reads file:// and, through
// drivers/s3, s3:// tables, built without cgo and stripped. Measured: 299
// packages (the standard library's 203 included) and 25.8 MiB on
// linux/amd64. Before arrow-go's pqarrow left what loader imports for
// core/table/parquetio (pqarrow links gRPC and protobuf through
// arrow/flight), 424 packages and 36.2 MiB; before core/store and
// drivers/s3 left gocloud.dev and the AWS SDK, 594 packages and 45.8 MiB;
// before the cloud drivers and the SQL parser left the core, 997 packages
// and 71.6 MiB (with cgo: it did not build without). docs/go.md has the
// breakdown. The bounds are the goal a service's build is held to: at most
// 300 packages and 40 MB.
const (
	maxPackages = 300
	maxBytes    = 40_000_000
)

// TestMinimalProgram builds examples/go-minimal, a module of its own that
// imports loader and drivers/s3 and defines its own -v flag, with
// CGO_ENABLED=0, bounds the packages it links and its stripped size, and
// runs it on a file:// table and on the same rows on the S3 test server:
// the program links no general Parquet codec, and reads them with table's
// own schema conversion and page decoder.
func TestMinimalProgram(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	dir, err := filepath.Abs("../../examples/go-minimal")
	if err != nil {
		t.Fatal(err)
	}
	goCmd := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(goTool, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	modules := strings.Fields(goCmd("list", "-deps", "-f", "{{with .Module}}{{.Path}}{{else}}std{{end}}", "."))
	bin := filepath.Join(t.TempDir(), "go-minimal")
	goCmd("build", "-ldflags=-s -w", "-o", bin, ".")
	fi, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("go-minimal (CGO_ENABLED=0, stripped): %d packages, %.1f MiB; by module: %s",
		len(modules), float64(fi.Size())/(1<<20), packagesByModule(modules))
	if len(modules) > maxPackages {
		t.Errorf("go-minimal links %d packages, more than %d", len(modules), maxPackages)
	}
	if fi.Size() > maxBytes {
		t.Errorf("go-minimal is %d bytes, more than %d", fi.Size(), maxBytes)
	}

	// The same rows as a croupier table on file:// and as a plain Parquet
	// dataset, the table's data files, on s3://: this test links no driver
	// to create a table there with, and a table's manifest pins the
	// identities its files have in their store.
	root := t.TempDir()
	writeRows(t, "file://"+root+"/t", 100)
	s, err := s3test.Start("bkt")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	files, err := filepath.Glob(filepath.Join(root, "t", "data", "*.parquet"))
	if err != nil || len(files) == 0 {
		t.Fatalf("the table's data files: %v %v", files, err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Put("bkt", "t/"+filepath.Base(f), data); err != nil {
			t.Fatal(err)
		}
	}
	for _, uri := range []string{"file://" + root + "/t", s.URI("bkt", "t")} {
		out, err := exec.Command(bin, "-v", "-global-batch-size", "10", uri).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "step 9: 10 rows\n") || !strings.HasSuffix(string(out), "100 rows in 10 batches\n") {
			t.Errorf("go-minimal %s: %v\n%s", uri, err, out)
		}
	}
}

// packagesByModule counts the packages of each module, one module per
// package as go list names them, most first: where the weight comes from.
func packagesByModule(modules []string) string {
	n := map[string]int{}
	for _, m := range modules {
		n[m]++
	}
	keys := slices.SortedFunc(maps.Keys(n), func(a, b string) int { return cmp.Or(n[b]-n[a], strings.Compare(a, b)) })
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s %d, ", k, n[k])
	}
	return strings.TrimSuffix(b.String(), ", ")
}

// writeRows creates a croupier table at uri of n rows of one column.
func writeRows(t *testing.T, uri string, n int64) {
	t.Helper()
	schema := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	for i := range n {
		b.Field(0).(*array.Int64Builder).Append(i)
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	r, err := array.NewRecordReader(schema, []arrow.RecordBatch{rec})
	if err != nil {
		t.Fatal(err)
	}
	tb, err := table.Create(context.Background(), uri, r, table.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tb.Close()
}
