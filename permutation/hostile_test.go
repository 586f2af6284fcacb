package permutation_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/internal/seal"
	"github.com/croupier-data/croupier/internal/seedtest"
	"github.com/croupier-data/croupier/internal/tabletest"
	"github.com/croupier-data/croupier/permutation"
)

// persisted builds a shuffled permutation of a 100-row table, splits of 70
// and 30 rows, and returns its folder, its manifest's path and its first
// split's chunk path.
func persisted(t *testing.T) (dir, manifest, chunk string) {
	t.Helper()
	tb := openTable(t, t.TempDir(), 60, 40)
	dir = t.TempDir()
	p, err := permutation.Build(context.Background(), tb, permutation.Spec{
		Split: &permutation.SplitSpec{Kind: "sequential", Counts: []int64{70, 30}}, Shuffle: &permutation.ShuffleSpec{Seed: 3},
	}, "file://"+dir, permutation.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	id := p.ID()
	p.Close()
	return dir, filepath.Join(dir, "permutation.json"), filepath.Join(dir, id, "0", "00000000.ids")
}

// readSplit opens the permutation at dir and reads all of split i.
func readSplit(dir string, i int) ([]uint64, error) {
	p, err := permutation.Open(context.Background(), "file://"+dir)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	s, err := p.SplitAt(i)
	if err != nil {
		return nil, err
	}
	return s.RowIDs(context.Background(), 0, s.Len())
}

func wantCorrupt(t *testing.T, what string, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error", what)
		return
	}
	if errcode.Of(err) != errcode.Corrupt {
		t.Errorf("%s: %v (%s), want Corrupt", what, err, errcode.Of(err))
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("%s: %v does not name %q", what, err, p)
		}
	}
}

func TestCorruptPermutationManifest(t *testing.T) {
	dir, manifest, _ := persisted(t)
	orig, _ := os.ReadFile(manifest)
	edit := func(f func(m map[string]any)) []byte { return tabletest.EditedJSON(t, orig, f) }
	cases := map[string][]byte{
		"trailing data":  append(slices.Clone(orig), "]"...),
		"garbage":        []byte("\x89PNG\r\n\x1a\n"),
		"empty":          nil,
		"unknown field":  edit(func(m map[string]any) { m["extra"] = true }),
		"id width":       edit(func(m map[string]any) { m["id_width"] = 3 }),
		"no splits":      edit(func(m map[string]any) { m["splits"] = []any{} }),
		"negative split": edit(func(m map[string]any) { m["splits"].([]any)[0].(map[string]any)["num_rows"] = -1 }),
	}
	for n := 1; n < len(orig); n += max(1, len(orig)/40) {
		cases[fmt.Sprintf("truncated to %d bytes", n)] = orig[:n]
	}
	for name, b := range cases {
		os.WriteFile(manifest, b, 0o644)
		_, err := readSplit(dir, 0)
		wantCorrupt(t, name, err, "permutation.json")
	}
	os.WriteFile(manifest, orig, 0o644)
	if _, err := readSplit(dir, 0); err != nil {
		t.Fatal(err)
	}
}

// TestPermutationKeysStayInside tampers with what a permutation manifest
// names: its ID (the folder of its chunks) and its table pin's file keys.
// Every one is refused with Corrupt at open, before any chunk or data file
// is read.
func TestPermutationKeysStayInside(t *testing.T) {
	dir, manifest, chunk := persisted(t)
	orig, _ := os.ReadFile(manifest)
	// A chunk the tampered IDs would reach, outside the permutation's folder.
	outside := filepath.Join(filepath.Dir(dir), "0", "00000000.ids")
	os.MkdirAll(filepath.Dir(outside), 0o755)
	b, _ := os.ReadFile(chunk)
	os.WriteFile(outside, b, 0o644)
	for _, id := range []string{"..", "../" + filepath.Base(dir), "/etc", "s3://other-bucket/x", `..\x`, "%2e%2e", "",
		"a/b", "6ba7b810-9dad-11d1-80b4-00c04fd430c8/../..", "{6BA7B810-9DAD-11D1-80B4-00C04FD430C8}"} {
		os.WriteFile(manifest, orig, 0o644)
		tabletest.EditJSON(t, manifest, func(m map[string]any) { m["id"] = id })
		_, err := readSplit(dir, 0)
		wantCorrupt(t, fmt.Sprintf("id %q", id), err, "permutation.json", "not a UUID")
	}
	for _, key := range []string{"../elsewhere/part-000.parquet", "/etc/passwd", "s3://other-bucket/part-000.parquet",
		`..\part-000.parquet`, "%2e%2e/part-000.parquet", "a//part-000.parquet", "", "./part-000.parquet"} {
		os.WriteFile(manifest, orig, 0o644)
		tabletest.EditJSON(t, manifest, func(m map[string]any) {
			m["table"].(map[string]any)["files"].([]any)[0].(map[string]any)["key"] = key
		})
		_, err := readSplit(dir, 0)
		wantCorrupt(t, fmt.Sprintf("pin key %q", key), err, "corrupt pin", filepath.Base(dir))
	}
}

func TestCorruptChunks(t *testing.T) {
	dir, manifest, chunk := persisted(t)
	orig, _ := os.ReadFile(chunk)
	origManifest, _ := os.ReadFile(manifest)
	var m struct {
		IDWidth int `json:"id_width"`
	}
	json.Unmarshal(origManifest, &m)
	if m.IDWidth != 4 || len(orig) != 70*4 {
		t.Fatalf("chunk of %d bytes, width %d", len(orig), m.IDWidth)
	}
	outOfRange := slices.Clone(orig)
	binary.LittleEndian.PutUint32(outOfRange[8:], 100) // the table has rows 0..99
	for name, tc := range map[string]struct {
		chunk  []byte
		digest bool // record the chunk's digest in the manifest, as a writer would
		want   []string
	}{
		"one byte short":                {orig[:len(orig)-1], false, []string{"279 bytes", "70 row ids of 4 bytes"}},
		"one id too many":               {append(slices.Clone(orig), 0, 0, 0, 0), false, []string{"284 bytes"}},
		"empty":                         {[]byte{}, false, []string{"0 bytes"}},
		"row id too large":              {outOfRange, false, []string{"sha256", "changed after it was written"}},
		"row id too large, digest kept": {outOfRange, true, []string{"row id 100", "100 rows"}},
		"missing":                       {nil, false, []string{"chunk 0", "missing"}},
	} {
		os.WriteFile(manifest, origManifest, 0o644)
		if tc.chunk == nil {
			os.Remove(chunk)
		} else {
			os.WriteFile(chunk, tc.chunk, 0o644)
		}
		if tc.digest {
			tabletest.EditJSON(t, manifest, func(m map[string]any) {
				m["splits"].([]any)[0].(map[string]any)["chunk_sha256"] = []string{seal.Sum(tc.chunk)}
			})
		}
		_, err := readSplit(dir, 0)
		wantCorrupt(t, name, err, append(tc.want, "00000000.ids")...)
	}
	os.WriteFile(chunk, orig, 0o644)

	// Counts in the manifest that disagree with the chunks, or with the
	// number of chunk digests.
	for n, where := range map[int64]string{69: ".ids", 71: ".ids", 1 << 16: ".ids", 1<<16 + 1: "1 chunk digests, want 2"} {
		os.WriteFile(manifest, origManifest, 0o644)
		tabletest.EditJSON(t, manifest, func(m map[string]any) { m["splits"].([]any)[0].(map[string]any)["num_rows"] = n })
		_, err := readSplit(dir, 0)
		wantCorrupt(t, fmt.Sprintf("num_rows %d", n), err, where)
	}
	os.WriteFile(manifest, origManifest, 0o644)
	tabletest.EditJSON(t, manifest, func(m map[string]any) { m["id_width"] = 8 })
	_, err := readSplit(dir, 0)
	wantCorrupt(t, "id_width 8", err, "280 bytes", "8 bytes")
}

// TestFlippedPermutationBits flips one seeded bit in each byte of the
// manifest and of every chunk of a permutation in turn: every flip makes
// opening it or reading its rows fail with Corrupt naming the object flipped,
// never deal a row twice and another never.
func TestFlippedPermutationBits(t *testing.T) {
	dir, manifest, _ := persisted(t)
	chunks, _ := filepath.Glob(filepath.Join(dir, "*", "*", "*.ids"))
	if len(chunks) != 2 {
		t.Fatalf("%d chunks, want one per split", len(chunks))
	}
	rng := rand.New(rand.NewPCG(seedtest.Seed(t), 0))
	for _, obj := range append(chunks, manifest) {
		orig, _ := os.ReadFile(obj)
		for p := range orig {
			b := slices.Clone(orig)
			b[p] ^= 1 << rng.IntN(8)
			os.WriteFile(obj, b, 0o644)
			_, err0 := readSplit(dir, 0)
			_, err1 := readSplit(dir, 1)
			err := errors.Join(err0, err1)
			if errcode.Of(err) != errcode.Corrupt || !strings.Contains(err.Error(), filepath.Base(obj)) {
				t.Fatalf("bit flipped at byte %d of %s: %v (%s), want Corrupt naming it", p, obj, err, errcode.Of(err))
			}
		}
		os.WriteFile(obj, orig, 0o644)
	}
	for i, n := range []int{70, 30} {
		if ids, err := readSplit(dir, i); err != nil || len(ids) != n {
			t.Fatalf("split %d restored: %d ids, %v", i, len(ids), err)
		}
	}
}

// TestFormat1Permutations reads a permutation of format 1, persisted before
// manifests and chunks carried digests: it opens and deals the same rows,
// unchecked. A manifest of format 2 without its seal or its chunk digests is
// Corrupt.
func TestFormat1Permutations(t *testing.T) {
	dir, manifest, _ := persisted(t)
	want, err := readSplit(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	orig, _ := os.ReadFile(manifest)
	rewrite := func(format int, digests bool) {
		var m map[string]any
		if err := json.Unmarshal(orig, &m); err != nil {
			t.Fatal(err)
		}
		delete(m, "sha256")
		m["format"] = format
		if !digests {
			for _, s := range m["splits"].([]any) {
				delete(s.(map[string]any), "chunk_sha256")
			}
		}
		b, _ := json.Marshal(m)
		os.WriteFile(manifest, b, 0o644)
	}
	rewrite(1, false)
	if got, err := readSplit(dir, 0); err != nil || !slices.Equal(got, want) {
		t.Fatalf("format 1: %v, %v; want the rows of format 2", got, err)
	}
	rewrite(permutation.FormatVersion, true)
	_, err = readSplit(dir, 0)
	wantCorrupt(t, "no seal", err, "permutation.json", "without its sha256 seal")
	os.WriteFile(manifest, orig, 0o644)
	tabletest.EditJSON(t, manifest, func(m map[string]any) {
		for _, s := range m["splits"].([]any) {
			delete(s.(map[string]any), "chunk_sha256")
		}
	})
	_, err = readSplit(dir, 0)
	wantCorrupt(t, "no chunk digests", err, "permutation.json", "0 chunk digests, want 1")
}

// TestRowDealtTwice edits a permutation as a writer could: one row id of a
// chunk replaced by another of the split, the chunk's digest recorded and
// the manifest sealed again. Every check of its bytes passes; reading the
// split is Corrupt naming the permutation, the split, the chunk and the row,
// whether the row is twice in one chunk or in two.
func TestRowDealtTwice(t *testing.T) {
	const rows = 1<<16 + 100 // two chunks
	dir := t.TempDir()
	p, err := permutation.Build(context.Background(), openTable(t, t.TempDir(), rows),
		permutation.Spec{Shuffle: &permutation.ShuffleSpec{Seed: 3}}, "file://"+dir, permutation.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	id, split := p.ID(), p.Splits()[0].Name()
	p.Close()
	manifest := filepath.Join(dir, "permutation.json")
	origManifest, _ := os.ReadFile(manifest)
	chunkPath := func(c int) string { return filepath.Join(dir, id, "0", fmt.Sprintf("%08d.ids", c)) }
	orig := [][]byte{nil, nil}
	orig[0], _ = os.ReadFile(chunkPath(0))
	orig[1], _ = os.ReadFile(chunkPath(1))
	for _, tc := range []struct {
		name  string
		chunk int
		from  int // the chunk whose first row id replaces the chunk's second
	}{
		{"twice in a chunk", 0, 0},
		{"in two chunks", 1, 0},
	} {
		b := slices.Clone(orig[tc.chunk])
		row := binary.LittleEndian.Uint32(orig[tc.from])
		binary.LittleEndian.PutUint32(b[4:], row)
		os.WriteFile(chunkPath(tc.chunk), b, 0o644)
		os.WriteFile(manifest, origManifest, 0o644)
		tabletest.EditJSON(t, manifest, func(m map[string]any) {
			m["splits"].([]any)[0].(map[string]any)["chunk_sha256"].([]any)[tc.chunk] = seal.Sum(b)
		})
		_, err := readSplit(dir, 0)
		wantCorrupt(t, tc.name, err, id, fmt.Sprintf("split %q, chunk %d: row %d is", split, tc.chunk, row))
		os.WriteFile(chunkPath(tc.chunk), orig[tc.chunk], 0o644)
	}
	os.WriteFile(manifest, origManifest, 0o644)
	if ids, err := readSplit(dir, 0); err != nil || len(ids) != rows {
		t.Fatalf("restored: %d ids, %v", len(ids), err)
	}
}
