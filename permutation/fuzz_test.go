package permutation_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/internal/tabletest"
	"github.com/croupier-data/croupier/permutation"
)

// fuzzDir stands for the fuzz process's own folder in the committed seeds:
// a permutation's manifest names its table by URI.
const fuzzDir = "/croupier-fuzz"

// fuzzPermutations lays out, in a new folder, the 100-row table FuzzOpen's
// permutations are over, and returns the folder and the manifest and first
// chunk of two permutations built over it: one split unshuffled, and two
// shuffled splits in clumps.
func fuzzPermutations(f testing.TB) (dir string, seeds [][2][]byte) {
	ctx := context.Background()
	dir = f.TempDir()
	// The table's files have a fixed modification time, so that its pin, and
	// the committed seeds, are the same in every process.
	mtime := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	os.MkdirAll(filepath.Join(dir, "table"), 0o755)
	tabletest.Write(f, filepath.Join(dir, "table"), []int64{60, 40}, 50)
	for _, name := range []string{"part-000.parquet", "part-001.parquet"} {
		os.Chtimes(filepath.Join(dir, "table", name), mtime, mtime)
	}
	tb, err := table.Open(ctx, "file://"+filepath.Join(dir, "table"))
	if err != nil {
		f.Fatal(err)
	}
	defer tb.Close()
	for i, spec := range []permutation.Spec{
		{},
		{Split: &permutation.SplitSpec{Kind: permutation.SplitSequential, Counts: []int64{70, 30}},
			Shuffle: &permutation.ShuffleSpec{Seed: 3, ClumpSize: 4}},
	} {
		at := filepath.Join(dir, "seed", string(rune('a'+i)))
		p, err := permutation.Build(ctx, tb, spec, "file://"+at, permutation.BuildOptions{})
		if err != nil {
			f.Fatal(err)
		}
		m, _ := os.ReadFile(filepath.Join(at, "permutation.json"))
		chunk, _ := os.ReadFile(filepath.Join(at, p.ID(), "0", "00000000.ids"))
		p.Close()
		seeds = append(seeds, [2][]byte{bytes.ReplaceAll(m, []byte(dir), []byte(fuzzDir)), chunk})
	}
	return dir, seeds
}

// FuzzOpen opens a persisted permutation whose manifest and row id chunk are
// the inputs, over a real 100-row table (seeds: testdata/fuzz/FuzzOpen). The
// chunk is stored as chunk 0 of every split, under the folder the manifest's
// id names when that is a UUID. Opening and reading every split, in epoch 0
// and in a later epoch, either works, giving row ids inside the table, or
// fails with an error that names its cause: never a panic, a hang, or an
// Internal error.
func FuzzOpen(f *testing.F) {
	ctx := context.Background()
	dir, seeds := fuzzPermutations(f)
	for _, s := range seeds {
		f.Add(s[0], s[1])
	}
	perm := filepath.Join(dir, "perm")
	os.MkdirAll(perm, 0o755)
	f.Fuzz(func(t *testing.T, manifest, chunk []byte) {
		manifest = bytes.ReplaceAll(manifest, []byte("file://"+fuzzDir), []byte("file://"+dir))
		if err := os.WriteFile(filepath.Join(perm, "permutation.json"), manifest, 0o644); err != nil {
			t.Fatal(err)
		}
		var m struct {
			ID     string            `json:"id"`
			Splits []json.RawMessage `json:"splits"`
			Table  struct {
				URI string `json:"uri"`
			} `json:"table"`
		}
		json.Unmarshal(manifest, &m)
		if m.Table.URI != "file://"+filepath.Join(dir, "table") {
			return // keep the fuzzer to the test's own table
		}
		if u, err := uuid.Parse(m.ID); err == nil && u.String() == m.ID {
			for i := range min(len(m.Splits), 4) {
				c := filepath.Join(perm, m.ID, string(rune('0'+i)), "00000000.ids")
				os.MkdirAll(filepath.Dir(c), 0o755)
				os.WriteFile(c, chunk, 0o644)
			}
		}
		p, err := permutation.Open(ctx, "file://"+perm)
		if err != nil {
			switch errcode.Of(err) {
			case errcode.Corrupt, errcode.InvalidArgument, errcode.Changed:
			default:
				t.Fatalf("open: %v (%s)", err, errcode.Of(err))
			}
			return
		}
		defer p.Close()
		rows := uint64(p.Table().NumRows())
		for _, s := range p.Splits()[:min(len(p.Splits()), 4)] {
			for _, o := range []permutation.Order{s, s.ForEpoch(7, 1)} {
				n := min(o.Len(), 2*permutation.ChunkIDs+3)
				ids, err := o.RowIDs(ctx, o.Len()-n, o.Len())
				if err != nil {
					if errcode.Of(err) != errcode.Corrupt {
						t.Fatalf("split %q: %v (%s)", s.Name(), err, errcode.Of(err))
					}
					continue
				}
				if int64(len(ids)) != n {
					t.Fatalf("split %q: %d row ids, want %d", s.Name(), len(ids), n)
				}
				for _, id := range ids {
					if id >= rows {
						t.Fatalf("split %q: row id %d of a %d-row table", s.Name(), id, rows)
					}
				}
			}
		}
	})
}
