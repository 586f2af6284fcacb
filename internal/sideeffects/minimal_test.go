package sideeffects_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/croupier-data/croupier/core/table"
)

// Bounds on examples/go-minimal, built without cgo and stripped. Measured:
// 488 packages (the standard library's included) and 36.1 MiB on linux/amd64;
// before the cloud drivers and the SQL parser left the core, 997 packages and
// 71.6 MiB (with cgo: it did not build without). The floor is arrow-go's: pqarrow
// imports arrow/flight (for the schema it stores in footers), which brings
// gRPC and protobuf, 407 packages in all.
const (
	maxPackages = 520
	maxBytes    = 40 << 20
)

// TestMinimalProgram builds examples/go-minimal, a module of its own that
// imports loader, defines its own -v flag and reads a file:// table, with
// CGO_ENABLED=0, bounds the packages it links and its stripped size, and
// runs it on a table.
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
	pkgs := strings.Count(goCmd("list", "-deps", "."), "\n")
	bin := filepath.Join(t.TempDir(), "go-minimal")
	goCmd("build", "-ldflags=-s -w", "-o", bin, ".")
	fi, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("go-minimal (CGO_ENABLED=0, stripped): %d packages, %.1f MB", pkgs, float64(fi.Size())/(1<<20))
	if pkgs > maxPackages {
		t.Errorf("go-minimal links %d packages, more than %d", pkgs, maxPackages)
	}
	if fi.Size() > maxBytes {
		t.Errorf("go-minimal is %d bytes, more than %d", fi.Size(), maxBytes)
	}

	uri := "file://" + t.TempDir() + "/t"
	writeRows(t, uri, 100)
	out, err := exec.Command(bin, "-v", "-global-batch-size", "10", uri).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "step 9: 10 rows\n") || !strings.HasSuffix(string(out), "100 rows in 10 batches\n") {
		t.Errorf("go-minimal: %v\n%s", err, out)
	}
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
