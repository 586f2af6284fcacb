package permutation_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/internal/tabletest"
	"github.com/croupier-data/croupier/permutation"
)

// TestLengths records the length of every row beside its id, from a list
// column and from an integer column, and reads them back in the stored order
// and in a later epoch's order: each length is that of the row id at the
// same position.
func TestLengths(t *testing.T) {
	ctx := context.Background()
	tb := openTable(t, t.TempDir(), 70_000, 30_000) // two chunks in the large split
	for column, want := range map[string]func(id uint64) uint64{
		"tokens": func(id uint64) uint64 { return uint64(len(tabletest.Tokens(int64(id)))) },
		"id":     func(id uint64) uint64 { return id },
	} {
		p := build(t, tb, permutation.Spec{Filter: "id % 3 <> 1", Lengths: column,
			Split:   &permutation.SplitSpec{Kind: "random", Ratios: []float64{0.8, 0.2}, Seed: 2},
			Shuffle: &permutation.ShuffleSpec{Seed: 9, ClumpSize: 4}})
		if p.Manifest().Format != 3 { // groups and lengths are format 3
			t.Errorf("%s: format %d, want 3", column, p.Manifest().Format)
		}
		for _, s := range p.Splits() {
			for _, o := range []permutation.Order{s, s.ForEpoch(5, 3)} {
				lo := o.(permutation.LengthOrder)
				if lo.LengthsColumn() != column {
					t.Fatalf("lengths column %q, want %q", lo.LengthsColumn(), column)
				}
				ids, err := o.RowIDs(ctx, 0, o.Len())
				if err != nil {
					t.Fatal(err)
				}
				// Read in pieces that straddle chunks.
				var got []uint64
				for start := int64(0); start < o.Len(); start += 40_000 {
					n, err := lo.Lengths(ctx, start, min(start+40_000, o.Len()))
					if err != nil {
						t.Fatal(err)
					}
					got = append(got, n...)
				}
				if len(got) != len(ids) {
					t.Fatalf("%d lengths for %d rows", len(got), len(ids))
				}
				for i, id := range ids {
					if got[i] != want(id) {
						t.Fatalf("%s, %v: position %d (row %d) has length %d, want %d", column, o, i, id, got[i], want(id))
					}
				}
			}
		}
	}
}

// TestNoLengthsKeepsFormat2: a permutation without lengths is written in
// format 2, as before lengths existed, and asking for its lengths says how
// to record them.
func TestNoLengthsKeepsFormat2(t *testing.T) {
	tb := openTable(t, t.TempDir(), 50)
	p := build(t, tb, permutation.Spec{Shuffle: &permutation.ShuffleSpec{Seed: 1}})
	if p.Manifest().Format != 2 {
		t.Fatalf("format %d, want 2", p.Manifest().Format)
	}
	s := p.Splits()[0]
	for _, o := range []permutation.LengthOrder{s, s.ForEpoch(0, 1).(permutation.LengthOrder)} {
		_, err := o.Lengths(context.Background(), 0, 1)
		if errcode.Of(err) != errcode.InvalidArgument || !strings.Contains(err.Error(), "lengths=") {
			t.Errorf("lengths of a permutation without: %v", err)
		}
	}
}

// TestLengthErrors: a column that gives no length, or a kept row whose length
// is null or negative, fails the build naming the column and the row; rows
// the filter drops are not asked.
func TestLengthErrors(t *testing.T) {
	ctx := context.Background()
	tb := openTable(t, t.TempDir(), 50)
	for column, want := range map[string]string{"nope": `unknown column "nope"`, "text": `column "text" is utf8`} {
		_, err := permutation.Build(ctx, tb, permutation.Spec{Lengths: column}, "file://"+t.TempDir(), permutation.BuildOptions{})
		if errcode.Of(err) != errcode.InvalidArgument || !strings.Contains(err.Error(), want) {
			t.Errorf("lengths=%s: %v, want %q", column, err, want)
		}
	}

	// A table whose n column is null in row 3 and negative in row 5.
	dir := t.TempDir()
	schema := arrow.NewSchema([]arrow.Field{{Name: "n", Type: arrow.PrimitiveTypes.Int32, Nullable: true}}, nil)
	b := array.NewInt32Builder(memory.DefaultAllocator)
	b.AppendValues([]int32{1, 2, 3, 0, 4, -1, 6}, []bool{true, true, true, false, true, true, true})
	col := b.NewArray()
	rec := array.NewRecordBatch(schema, []arrow.Array{col}, 7)
	if err := os.WriteFile(filepath.Join(dir, "a.parquet"), tabletest.EncodeRecord(t, rec), 0o644); err != nil {
		t.Fatal(err)
	}
	tn, err := table.Open(ctx, "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	defer tn.Close()
	for filter, want := range map[string]string{"": "row 3", "n IS NOT NULL": "row 5: lengths column \"n\": length -1"} {
		_, err := permutation.Build(ctx, tn, permutation.Spec{Filter: filter, Lengths: "n"}, "file://"+t.TempDir(), permutation.BuildOptions{})
		if errcode.Of(err) != errcode.InvalidArgument || !strings.Contains(err.Error(), want) {
			t.Errorf("filter %q: %v, want %q", filter, err, want)
		}
	}
	p, err := permutation.Build(ctx, tn, permutation.Spec{Filter: "n >= 0", Lengths: "n"}, "file://"+t.TempDir(), permutation.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	got, err := p.Splits()[0].Lengths(ctx, 0, p.Splits()[0].Len())
	if err != nil || len(got) != 5 || got[4] != 6 {
		t.Errorf("lengths of the kept rows: %v, %v", got, err)
	}
}

// TestCorruptLengths: a length chunk that changed, or a manifest whose
// lengths do not match its format, is Corrupt naming the object.
func TestCorruptLengths(t *testing.T) {
	ctx := context.Background()
	tb := openTable(t, t.TempDir(), 60)
	dir := t.TempDir()
	p, err := permutation.Build(ctx, tb, permutation.Spec{Lengths: "tokens", Shuffle: &permutation.ShuffleSpec{Seed: 3}},
		"file://"+dir, permutation.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	id := p.ID()
	p.Close()
	chunk := filepath.Join(dir, id, "0", "00000000.len")
	orig, err := os.ReadFile(chunk)
	if err != nil || len(orig) != 60*permutation.LengthWidth {
		t.Fatalf("length chunk: %d bytes, %v", len(orig), err)
	}
	lengthsOf := func() error {
		p, err := permutation.Open(ctx, "file://"+dir)
		if err != nil {
			return err
		}
		defer p.Close()
		_, err = p.Splits()[0].Lengths(ctx, 0, 60)
		return err
	}
	flipped := append([]byte{orig[0] ^ 1}, orig[1:]...)
	os.WriteFile(chunk, flipped, 0o644)
	wantCorrupt(t, "flipped length", lengthsOf(), "00000000.len", "changed after it was written")
	os.WriteFile(chunk, orig[:8], 0o644)
	wantCorrupt(t, "short length chunk", lengthsOf(), "00000000.len", "want 60 lengths of 4 bytes")
	os.Remove(chunk)
	wantCorrupt(t, "missing length chunk", lengthsOf(), "00000000.len", "missing")
	os.WriteFile(chunk, orig, 0o644)
	if err := lengthsOf(); err != nil {
		t.Fatal(err)
	}

	manifest := filepath.Join(dir, "permutation.json")
	origManifest, _ := os.ReadFile(manifest)
	for what, edit := range map[string]func(m map[string]any){
		"format 2 with lengths": func(m map[string]any) { m["format"] = 2 },
		"no length digests": func(m map[string]any) {
			delete(m["splits"].([]any)[0].(map[string]any), "length_sha256")
		},
	} {
		os.WriteFile(manifest, origManifest, 0o644)
		tabletest.EditJSON(t, manifest, edit)
		wantCorrupt(t, what, lengthsOf(), "permutation.json")
	}
}
