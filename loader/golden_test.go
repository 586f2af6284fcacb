package loader_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"

	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/internal/tabletest"
	"github.com/croupier-data/croupier/loader"
	"github.com/croupier-data/croupier/permutation"
)

// The golden checkpoints are Python's (python/tests/golden/README.md): a
// Loader, a Mixture and a Follower read and write the state dicts of a
// StreamingDataset, a Mixture and a FollowingDataset key for key, so Go is
// held to the same files. The fixture here is the one
// python/tests/test_golden_checkpoints.py writes, row for row: the same
// table, permutation specs and appends, hence the same row ids and dealing.
const goldenDir = "../python/tests/golden"

// The fixture (python/tests/test_golden_checkpoints.py, build_fixture).
var (
	goldenFiles                = []int64{150, 90}
	goldenRowGroup       int64 = 16
	goldenFollowRows     int64 = 30
	goldenFollowVersions int64 = 6
	goldenSchema               = arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "prompt", Type: arrow.PrimitiveTypes.Int64},
		{Name: "tokens", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32)},
	}, nil)
	goldenSpecs = map[string]permutation.Spec{
		"split": {Split: &permutation.SplitSpec{Kind: permutation.SplitHash, Columns: []string{"id"},
			Weights: []int64{3, 1}, Names: []string{"train", "val"}}, Shuffle: &permutation.ShuffleSpec{Seed: 11}},
		"tokens": {Lengths: "tokens", Shuffle: &permutation.ShuffleSpec{Seed: 7}},
		"groups": {GroupBy: []string{"prompt"}, Shuffle: &permutation.ShuffleSpec{Seed: 9}},
	}
)

// goldenHashed are the fields whose values hash the fixture's files (or, for
// a plain table's version, their modification times): a golden checkpoint
// takes them from the fresh fixture.
var goldenHashed = []string{"table_id", "table_version", "head"}

// goldenCase is how the Go API deals a golden file's run: a Loader over a
// source, a Mixture of two, or a Follower.
type goldenCase struct {
	source string // "table", or a permutation of goldenSpecs and its split
	split  string
	opts   loader.Options
}

var (
	goldenSplitOpts = loader.Options{GlobalBatchSize: 8, NumSplits: 4, ShuffleSeed: 3, DropLast: true}
	goldenLoaders   = map[string]goldenCase{
		"streaming-table":   {"table", "", loader.Options{GlobalBatchSize: 8, NumSplits: 4, ShuffleSeed: 5, DropLast: true}},
		"streaming-split":   {"split", "train", goldenSplitOpts},
		"streaming-workers": {"split", "train", goldenSplitOpts},
		"streaming-format1": {"split", "train", goldenSplitOpts},
		"streaming-tokens":  {"tokens", "all", loader.Options{TokensPerStep: 40, Oversize: loader.OversizeError, ShuffleSeed: 2}},
		"streaming-groups":  {"groups", "all", loader.Options{GlobalBatchSize: 8, NumSplits: 4, ShuffleSeed: 8, DropLast: true}},
	}
	goldenMixSources = []goldenCase{
		{"table", "", loader.Options{GlobalBatchSize: 8, NumSplits: 4, ShuffleSeed: 1, DropLast: true}},
		{"split", "train", loader.Options{GlobalBatchSize: 4, ShuffleSeed: 2, DropLast: true}},
	}
	goldenMix = loader.MixtureOptions{Seed: 4, Weights: []float64{2, 1},
		Schedule: []loader.MixturePoint{{Step: 12, Weights: []float64{1, 3}}}, OnExhausted: loader.ExhaustedCycle, Slots: 2}
	goldenFollowers = map[string]goldenFollowCase{
		"follow": {loader.Options{GlobalBatchSize: 8, NumSplits: 4, ShuffleSeed: 6, DropLast: true},
			loader.FollowOptions{RowsPerRound: 24, ReplayCount: 2, StartVersion: 1}},
		"follow-tokens": {loader.Options{TokensPerStep: 40, Oversize: loader.OversizeError, ShuffleSeed: 6},
			loader.FollowOptions{RowsPerRound: 24, ReplayFraction: 0.25, GroupBy: []string{"prompt"}, Lengths: "tokens", StartVersion: 1}},
	}
	// goldenOthers are the golden files of loaders Go has no part in.
	goldenOthers = map[string]string{
		"streaming-stateful": "torchdata's StatefulDataLoader state dict; its workers' dicts are those of streaming-split",
	}
)

// goldenFollowCase is how a Follower deals a golden file's run.
type goldenFollowCase struct {
	opts   loader.Options
	follow loader.FollowOptions
}

// goldenFile is a golden checkpoint with the steps that follow it.
type goldenFile struct {
	Current bool `json:"current"`
	Fixture struct {
		Root         string            `json:"root"`
		Permutations map[string]string `json:"permutations"`
	} `json:"fixture"`
	StepsBefore     int64           `json:"steps_before"`
	ResumeWorldSize int64           `json:"resume_world_size"`
	StateDict       json.RawMessage `json:"state_dict"`
	NextSteps       json.RawMessage `json:"next_steps"`
}

// goldenFixture is the fixture written under root.
type goldenFixture struct {
	root   string
	table  *table.Table
	perms  map[string]*permutation.Permutations
	follow string // the followed croupier table's URI
}

func (f *goldenFixture) uri() string { return "file://" + f.root }

// goldenRows builds rows [start, start+n) of the fixture (rows in
// python/tests/test_golden_checkpoints.py).
func goldenRows(start, n int64) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, goldenSchema)
	defer b.Release()
	toks := b.Field(2).(*array.ListBuilder)
	vals := toks.ValueBuilder().(*array.Int32Builder)
	for id := start; id < start+n; id++ {
		b.Field(0).(*array.Int64Builder).Append(id)
		b.Field(1).(*array.Int64Builder).Append(id / 4)
		toks.Append(true)
		for v := 3 * id; v < 3*id+(7*id)%11+1; v++ {
			vals.Append(int32(v))
		}
	}
	return b.NewRecordBatch()
}

func goldenReader(start, n int64) array.RecordReader {
	rec := goldenRows(start, n)
	defer rec.Release()
	r, err := array.NewRecordReader(goldenSchema, []arrow.RecordBatch{rec})
	if err != nil {
		panic(err) // the record has goldenSchema
	}
	return r
}

func writeGoldenFixture(t *testing.T) *goldenFixture {
	t.Helper()
	ctx := context.Background()
	f := &goldenFixture{root: filepath.Join(t.TempDir(), "fixture"), perms: map[string]*permutation.Permutations{}}
	dir := filepath.Join(f.root, "table")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var start int64
	for i, n := range goldenFiles {
		rec := goldenRows(start, n)
		data := tabletest.EncodeRecord(t, rec, parquet.WithMaxRowGroupLength(goldenRowGroup))
		rec.Release()
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("part-%05d.parquet", i)), data, 0o644); err != nil {
			t.Fatal(err)
		}
		start += n
	}
	tb, err := table.Open(ctx, f.uri()+"/table")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tb.Close() })
	f.table = tb
	for name, spec := range goldenSpecs {
		perms, err := permutation.Build(ctx, tb, spec, f.uri()+"/perm-"+name, permutation.BuildOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { perms.Close() })
		f.perms[name] = perms
	}
	f.follow = f.uri() + "/follow"
	opts := table.WriteOptions{RowGroupRows: goldenRowGroup}
	created, err := table.Create(ctx, f.follow, goldenReader(0, goldenFollowRows), opts)
	if err != nil {
		t.Fatal(err)
	}
	created.Close()
	for v := int64(2); v <= goldenFollowVersions; v++ {
		if _, err := table.Append(ctx, f.follow, goldenReader(goldenFollowRows*(v-1), goldenFollowRows), opts); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// order returns the order a case's source deals.
func (f *goldenFixture) order(t *testing.T, c goldenCase) permutation.Order {
	t.Helper()
	if c.source == "table" {
		return permutation.Identity{N: f.table.NumRows()}
	}
	s, err := f.perms[c.source].Split(c.split)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// loader returns a case's loader on rank of world.
func (f *goldenFixture) loader(t *testing.T, c goldenCase, rank, world int64) *loader.Loader {
	t.Helper()
	opts := c.opts
	opts.Rank, opts.WorldSize, opts.Columns = rank, world, []string{"id"}
	l, err := loader.New(f.table, f.order(t, c), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func (f *goldenFixture) mixture(t *testing.T, rank, world int64) *loader.Mixture {
	t.Helper()
	var sources []loader.Source
	for _, c := range goldenMixSources {
		sources = append(sources, f.loader(t, c, rank, world))
	}
	m, err := loader.NewMixture(sources, goldenMix)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func (f *goldenFixture) follower(t *testing.T, c goldenFollowCase, rank, world int64) *loader.Follower {
	t.Helper()
	opts := c.opts
	opts.Rank, opts.WorldSize, opts.Columns = rank, world, []string{"id"}
	fo := c.follow
	fo.WaitTimeout, fo.PollInterval = 50*time.Millisecond, time.Millisecond
	return newFollower(t, f.follow, opts, fo)
}

// TestGoldenCheckpoints: each golden checkpoint, moved onto a fixture
// written afresh, is read by ParseCheckpoint, ParseMixtureCheckpoint or
// ParseFollowCheckpoint, resumes a Loader, Mixture or Follower of every
// rank of the golden file's resume world size, and their streams deal
// exactly the steps recorded after it; and Go writes, at the golden
// position, the same checkpoint, key for key.
func TestGoldenCheckpoints(t *testing.T) {
	names, err := filepath.Glob(filepath.Join(goldenDir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(names) < len(goldenLoaders)+len(goldenFollowers)+len(goldenOthers)+1 {
		t.Fatalf("golden files in %s: %v", goldenDir, names)
	}
	f := writeGoldenFixture(t)
	for _, path := range names {
		name := strings.TrimSuffix(filepath.Base(path), ".json")
		t.Run(name, func(t *testing.T) {
			var g goldenFile
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(data, &g); err != nil {
				t.Fatal(err)
			}
			var written any
			var got []json.RawMessage
			if why, ok := goldenOthers[name]; ok {
				t.Skip(why)
			}
			c, isLoader := goldenLoaders[name]
			fc, isFollower := goldenFollowers[name]
			switch {
			case isLoader:
				written, got = goldenLoader(t, f, c, &g)
			case name == "mixture":
				written, got = goldenMixture(t, f, &g)
			case isFollower:
				written, got = goldenFollower(t, f, fc, &g)
			default:
				t.Fatalf("no Go run for the golden file %s", path)
			}
			var want []json.RawMessage
			if err := json.Unmarshal(g.NextSteps, &want); err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Fatalf("%d steps, want %d", len(got), len(want))
			}
			for i := range want {
				if !sameJSON(t, got[i], want[i]) {
					t.Errorf("step %d after the checkpoint: %s, want %s", i, got[i], want[i])
				}
			}
			if g.Current {
				mine, err := json.Marshal(written)
				if err != nil {
					t.Fatal(err)
				}
				if !sameJSON(t, mine, relocated(t, f, &g, mine)) {
					t.Errorf("Go writes\n%s\nat the golden position; the golden file holds\n%s", mine, relocated(t, f, &g, mine))
				}
			}
		})
	}
}

// goldenLoader resumes the golden checkpoint of case c on every rank and
// returns the checkpoint a loader writes at the golden position and the
// steps dealt after it, each its sorted row ids.
func goldenLoader(t *testing.T, f *goldenFixture, c goldenCase, g *goldenFile) (loader.Checkpoint, []json.RawMessage) {
	ctx := context.Background()
	l := f.loader(t, c, 0, 1)
	epoch, step := int64(0), g.StepsBefore
	for {
		n, err := l.EpochSteps(ctx, epoch)
		if err != nil {
			t.Fatal(err)
		}
		if step < n {
			break
		}
		epoch, step = epoch+1, step-n
	}
	written := l.Checkpoint(epoch, step)
	cp, err := loader.ParseCheckpoint(relocated(t, f, g, mustJSON(t, written)), "golden")
	if err != nil {
		t.Fatal(err)
	}
	steps := int(len(rawSteps(t, g)))
	var ranks [][][]uint64
	for rank := range g.ResumeWorldSize {
		l := f.loader(t, c, rank, g.ResumeWorldSize)
		epoch, step, err := l.Resume(ctx, cp)
		if err != nil {
			t.Fatal(err)
		}
		var mine [][]uint64
		for len(mine) < steps {
			n := len(mine)
			s, err := l.Stream(ctx, loader.StreamOptions{Epoch: epoch, StartStep: step})
			if err != nil {
				t.Fatal(err)
			}
			for b, err := range s.All(ctx) {
				if err != nil {
					t.Fatal(err)
				}
				if b.Steps != 1 {
					t.Fatalf("a batch of %d steps", b.Steps)
				}
				mine = append(mine, slices.Clone(b.RowIDs))
				b.Record.Release()
				if len(mine) == steps {
					break
				}
			}
			s.Close()
			if len(mine) == n {
				t.Fatalf("rank %d: the stream ended after %d steps", rank, n)
			}
			epoch, step = epoch+1, 0
		}
		ranks = append(ranks, mine)
	}
	return written, mergeSteps(t, ranks)
}

// goldenMixture is goldenLoader for the mixture: a step is its slots, each
// [source, sorted row ids].
func goldenMixture(t *testing.T, f *goldenFixture, g *goldenFile) (loader.MixtureCheckpoint, []json.RawMessage) {
	ctx := context.Background()
	m := f.mixture(t, 0, 1)
	pos := m.Start()
	for range g.StepsBefore {
		var err error
		if _, pos, _, err = m.Next(ctx, pos); err != nil {
			t.Fatal(err)
		}
	}
	written := mustCheckpoint(t, m, pos)
	cp, err := loader.ParseMixtureCheckpoint(relocated(t, f, g, mustJSON(t, written)), "golden")
	if err != nil {
		t.Fatal(err)
	}
	steps := len(rawSteps(t, g))
	merged := make([][]any, steps)
	for rank := range g.ResumeWorldSize {
		m := f.mixture(t, rank, g.ResumeWorldSize)
		pos, err := m.Resume(ctx, cp)
		if err != nil {
			t.Fatal(err)
		}
		s, err := m.Stream(ctx, pos, loader.MixtureStreamOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range steps {
			b, err := s.Next(ctx)
			if err != nil {
				t.Fatalf("rank %d, step %d after the checkpoint: %v", rank, i, err)
			}
			if merged[i] == nil {
				merged[i] = make([]any, len(b.Slots))
			}
			for j, rec := range b.Records {
				ids := rec.Column(0).(*array.Int64).Int64Values()
				if merged[i][j] == nil {
					merged[i][j] = []any{b.Slots[j].Source, []int64{}}
				}
				slot := merged[i][j].([]any)
				if slot[0] != b.Slots[j].Source {
					t.Fatalf("rank %d: step %d slot %d from source %d, rank 0's from %v", rank, i, j, b.Slots[j].Source, slot[0])
				}
				slot[1] = append(slot[1].([]int64), ids...)
				rec.Release()
			}
		}
		if err := s.Close(); err != nil && !errors.Is(err, io.EOF) {
			t.Fatal(err)
		}
	}
	var out []json.RawMessage
	for _, step := range merged {
		for _, slot := range step {
			slices.Sort(slot.([]any)[1].([]int64))
		}
		out = append(out, mustJSON(t, step))
	}
	return written, out
}

// goldenFollower is goldenLoader for following.
func goldenFollower(t *testing.T, f *goldenFixture, c goldenFollowCase, g *goldenFile) (loader.FollowCheckpoint, []json.RawMessage) {
	ctx := context.Background()
	fl := f.follower(t, c, 0, 1)
	dealt, err := fl.Steps(ctx, fl.Start(), g.StepsBefore-1, g.StepsBefore)
	if err != nil {
		t.Fatal(err)
	}
	r := dealt[0].Round
	pos := r.FollowPosition
	if g.StepsBefore == r.Step+r.Steps {
		pos = r.Next()
	}
	written := fl.Checkpoint(pos, g.StepsBefore)
	cp, err := loader.ParseFollowCheckpoint(relocated(t, f, g, mustJSON(t, written)), "golden")
	if err != nil {
		t.Fatal(err)
	}
	steps := len(rawSteps(t, g))
	var ranks [][][]uint64
	for rank := range g.ResumeWorldSize {
		fl := f.follower(t, c, rank, g.ResumeWorldSize)
		pos, step, err := fl.Resume(cp)
		if err != nil {
			t.Fatal(err)
		}
		s, err := fl.Stream(ctx, pos, step, loader.StreamOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var mine [][]uint64
		for b, err := range s.All(ctx) {
			if err != nil {
				t.Fatal(err)
			}
			for i := range int64(b.Steps) {
				per := int64(len(b.RowIDs)) / int64(b.Steps)
				mine = append(mine, slices.Clone(b.RowIDs[i*per:(i+1)*per]))
			}
			b.Record.Release()
			if len(mine) >= steps {
				break
			}
		}
		s.Close()
		if len(mine) < steps {
			t.Fatalf("rank %d: the stream ended after %d steps", rank, len(mine))
		}
		ranks = append(ranks, mine[:steps])
	}
	return written, mergeSteps(t, ranks)
}

// mergeSteps joins the ranks' rows of each step, sorted.
func mergeSteps(t *testing.T, ranks [][][]uint64) []json.RawMessage {
	var out []json.RawMessage
	for i := range ranks[0] {
		var ids []uint64
		for _, r := range ranks {
			ids = append(ids, r[i]...)
		}
		slices.Sort(ids)
		out = append(out, mustJSON(t, ids))
	}
	return out
}

func rawSteps(t *testing.T, g *goldenFile) []json.RawMessage {
	var steps []json.RawMessage
	if err := json.Unmarshal(g.NextSteps, &steps); err != nil {
		t.Fatal(err)
	}
	return steps
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// relocated returns the golden state dict moved from the golden file's
// fixture onto f, as python/tests/test_golden_checkpoints.py's relocate
// does: URIs under the fixture's root under f's, its permutations' UUIDs
// f's, and the goldenHashed fields the values fresh (a checkpoint of f) has
// at the same place. Keys keep their order.
func relocated(t *testing.T, f *goldenFixture, g *goldenFile, fresh []byte) []byte {
	t.Helper()
	var was, now any
	if err := json.Unmarshal(g.StateDict, &was); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(fresh, &now); err != nil {
		t.Fatal(err)
	}
	var pairs []string
	var walk func(was, now any)
	walk = func(was, now any) {
		switch w := was.(type) {
		case map[string]any:
			n, _ := now.(map[string]any)
			for k, v := range w {
				if s, ok := v.(string); ok && slices.Contains(goldenHashed, k) {
					if ns, ok := n[k].(string); ok {
						pairs = append(pairs, mustQuote(t, s), mustQuote(t, ns))
					}
					continue
				}
				walk(v, n[k])
			}
		case []any:
			n, _ := now.([]any)
			for i, v := range w {
				var ni any
				if i < len(n) {
					ni = n[i]
				}
				walk(v, ni)
			}
		}
	}
	walk(was, now)
	pairs = append(pairs, `"`+g.Fixture.Root+`/`, `"`+f.uri()+`/`, `"`+g.Fixture.Root+`"`, `"`+f.uri()+`"`)
	for name, id := range g.Fixture.Permutations {
		pairs = append(pairs, id, f.perms[name].ID())
	}
	return []byte(strings.NewReplacer(pairs...).Replace(string(g.StateDict)))
}

func mustQuote(t *testing.T, s string) string { return string(mustJSON(t, s)) }

// sameJSON reports whether a and b are the same JSON, key order included;
// numbers compare by value (Python writes 0.0 where Go writes 0).
func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	tokens := func(data []byte) []any {
		var out []any
		d := json.NewDecoder(bytes.NewReader(data))
		for {
			tok, err := d.Token()
			if err == io.EOF {
				return out
			}
			if err != nil {
				t.Fatalf("%s: %v", data, err)
			}
			out = append(out, tok)
		}
	}
	return reflect.DeepEqual(tokens(a), tokens(b))
}
