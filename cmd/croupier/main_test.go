package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/croupier-data/croupier/core/catalog"
	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/internal/jsonargs"
	"github.com/croupier-data/croupier/internal/s3test"
	"github.com/croupier-data/croupier/internal/tabletest"
	"github.com/croupier-data/croupier/loader"
	"github.com/croupier-data/croupier/permutation"
)

// result is one run of the command.
type result struct {
	code           int
	stdout, stderr string
}

func croupier(t *testing.T, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, &out, &errOut)
	return result{code, out.String(), errOut.String()}
}

// ok runs the command and fails the test unless it exits 0.
func ok(t *testing.T, args ...string) string {
	t.Helper()
	r := croupier(t, args...)
	if r.code != 0 {
		t.Fatalf("croupier %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

func okJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	out := ok(t, append(args, "--json")...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("croupier %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// parquetFile writes rows [start, start+n) as a Parquet file and returns its path.
func parquetFile(t *testing.T, dir string, start, n int64) string {
	t.Helper()
	p := filepath.Join(dir, fmt.Sprintf("rows-%d-%d.parquet", start, n))
	if err := os.WriteFile(p, tabletest.Encode(t, start, n, 50), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// makeTable creates a croupier table of 300 rows at version 1 (two files)
// and 200 more at version 2, and returns its URI.
func makeTable(t *testing.T) string {
	t.Helper()
	src := t.TempDir()
	uri := "file://" + filepath.Join(t.TempDir(), "tbl")
	out := ok(t, "tables", "create", uri, parquetFile(t, src, 0, 100), parquetFile(t, src, 100, 200), "--row-group-rows", "64")
	if !strings.Contains(out, "version 1") {
		t.Fatalf("create printed %q", out)
	}
	if out := ok(t, "tables", "append", uri, parquetFile(t, src, 300, 200)); strings.TrimSpace(out) != "2" {
		t.Fatalf("append printed %q, want 2", out)
	}
	return uri
}

func TestTables(t *testing.T) {
	uri := makeTable(t)
	if out := ok(t, "tables", "versions", uri); out != "1\n2\n" {
		t.Fatalf("versions printed %q", out)
	}
	var vs []int64
	okJSON(t, &vs, "tables", "versions", uri)
	if !slices.Equal(vs, []int64{1, 2}) {
		t.Fatalf("versions --json: %v", vs)
	}

	var in inspectOutput
	okJSON(t, &in, "tables", "inspect", uri, "--version", "1")
	if in.Version != "1" || in.NumRows != 300 || in.Kind != table.KindCroupier || len(in.Files) != 1 {
		t.Fatalf("inspect v1: %+v", in)
	}
	var groups int64
	for _, g := range in.Files[0].RowGroups {
		groups += g
	}
	if groups != 300 || len(in.Files[0].RowGroups) != 5 { // 300 rows in groups of 64
		t.Fatalf("inspect v1 row groups: %v", in.Files[0].RowGroups)
	}
	var names []string
	for _, f := range in.Schema {
		names = append(names, f.Name)
	}
	if !slices.Equal(names, []string{"id", "tokens", "reward", "text", "meta"}) {
		t.Fatalf("inspect schema: %v", in.Schema)
	}
	okJSON(t, &in, "tables", "inspect", uri)
	if in.Version != "2" || in.NumRows != 500 || len(in.Files) != 2 {
		t.Fatalf("inspect latest: %+v", in)
	}
	out := ok(t, "tables", "inspect", uri)
	for _, want := range []string{"version  2", "rows     500", "tokens", "list<element: int32, nullable>"} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect output lacks %q:\n%s", want, out)
		}
	}

	var res table.CleanupResult
	okJSON(t, &res, "tables", "cleanup", uri, "--keep-last", "1", "--grace", "1ns")
	if !slices.Equal(res.DeletedVersions, []int64{1}) {
		t.Fatalf("cleanup deleted %v", res.DeletedVersions)
	}
	if out := ok(t, "tables", "versions", uri); out != "2\n" {
		t.Fatalf("versions after cleanup: %q", out)
	}
	if out := ok(t, "tables", "cleanup", uri, "--keep-last", "1"); out != "deleted 0 versions [] and 0 files; aborted 0 incomplete uploads\n" {
		t.Fatalf("cleanup output: %q", out)
	}
}

// TestTablesListAndLongVersions: tables versions --long says when each
// version was committed and its rows; tables list finds the tables under a
// folder given as a plain path, or lists a catalog's names.
func TestTablesListAndLongVersions(t *testing.T) {
	uri := makeTable(t)
	var hs []table.VersionInfo
	okJSON(t, &hs, "tables", "versions", uri, "--long")
	if len(hs) != 2 || hs[0].NumRows != 300 || hs[0].AddedRows != 300 || hs[1].NumRows != 500 ||
		hs[1].AddedRows != 200 || hs[1].Committed.IsZero() {
		t.Fatalf("versions --long --json: %+v", hs)
	}
	out := ok(t, "tables", "versions", uri, "--long")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "version  committed") ||
		!strings.HasSuffix(lines[2], "500   200") || !strings.Contains(lines[2], hs[1].Committed.Format("2006-01-02T15:04:05Z")) {
		t.Fatalf("versions --long printed:\n%s", out)
	}

	parent := filepath.Dir(strings.TrimPrefix(uri, "file://"))
	var found []table.Listed
	okJSON(t, &found, "tables", "list", parent)
	if want := []table.Listed{{URI: uri, Versions: 2, Latest: 2}}; !slices.Equal(found, want) {
		t.Fatalf("tables list %s: %+v, want %+v", parent, found, want)
	}
	if out := ok(t, "tables", "list", parent); out != "table"+strings.Repeat(" ", len(uri)-3)+"latest  versions\n"+uri+"  2       2\n" {
		t.Fatalf("tables list printed:\n%q", out)
	}

	cat := filepath.Join(t.TempDir(), "catalog.db")
	if err := catalog.Open(catalog.Options{Path: cat}).Register("rollouts", uri); err != nil {
		t.Fatal(err)
	}
	var names map[string]string
	okJSON(t, &names, "tables", "list", "--catalog", cat)
	if !maps.Equal(names, map[string]string{"rollouts": uri}) {
		t.Fatalf("tables list --catalog: %v", names)
	}
	if r := croupier(t, "tables", "list", parent, "--catalog", cat); r.code != 2 || !strings.Contains(r.stderr, "not both") {
		t.Fatalf("tables list URI --catalog: exit %d, %s", r.code, r.stderr)
	}
}

// TestCleanupWarns: on a store that refuses to list multipart uploads,
// cleanup exits 0, prints what it deleted, and warns on standard error that
// the uploads could not be listed.
func TestCleanupWarns(t *testing.T) {
	s, err := s3test.Start("bkt")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	uri, src := s.URI("bkt", "tbl"), t.TempDir()
	ok(t, "tables", "create", uri, parquetFile(t, src, 0, 100))
	ok(t, "tables", "append", uri, parquetFile(t, src, 100, 100))
	s.RefuseUploadListings(true)
	r := croupier(t, "tables", "cleanup", uri, "--keep-last", "1", "--grace", "1ns")
	if r.code != 0 || r.stdout != "deleted 1 versions [1] and 0 files; aborted 0 incomplete uploads\n" ||
		!strings.HasPrefix(r.stderr, "warning: incomplete multipart uploads not aborted: ") || !strings.Contains(r.stderr, "NotImplemented") {
		t.Fatalf("cleanup: exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
}

func TestPermute(t *testing.T) {
	uri := makeTable(t)
	perm := "file://" + filepath.Join(t.TempDir(), "perm")
	r := croupier(t, "permute", uri, perm, "--filter", "id >= 100 AND reward < 200",
		"--split-hash", "id:9,1", "--split-names", "train,val", "--shuffle-seed", "7", "--clump", "2")
	if r.code != 0 {
		t.Fatalf("permute: exit %d: %s", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, "scan: ") {
		t.Errorf("no progress on stderr: %q", r.stderr)
	}
	if !strings.Contains(r.stdout, "train") || !strings.Contains(r.stdout, "300 kept of 500 scanned") {
		t.Errorf("permute output:\n%s", r.stdout)
	}

	var show permOutput
	okJSON(t, &show, "permute", "show", perm)
	if show.RowsKept != 300 || show.RowsScanned != 500 || show.TableVersion != "2" || show.TableURI != uri {
		t.Fatalf("permute show: %+v", show)
	}
	if len(show.Splits) != 2 || show.Splits[0].Name != "train" || show.Splits[1].Name != "val" ||
		show.Splits[0].NumRows+show.Splits[1].NumRows != 300 || show.Splits[0].NumRows < show.Splits[1].NumRows {
		t.Fatalf("permute show splits: %+v", show.Splits)
	}
	sp := show.Spec
	if sp.Filter != "id >= 100 AND reward < 200" || sp.Split == nil || sp.Split.Kind != permutation.SplitHash ||
		!slices.Equal(sp.Split.Columns, []string{"id"}) || !slices.Equal(sp.Split.Weights, []int64{9, 1}) ||
		sp.Shuffle == nil || sp.Shuffle.Seed != 7 || sp.Shuffle.ClumpSize != 2 {
		t.Fatalf("permute show spec: %+v", sp)
	}

	// --build-memory bounds the build, never changes what it builds, and is
	// refused below what a build takes; progress says the rows kept.
	var bounded permOutput
	okJSON(t, &bounded, "permute", uri, "file://"+filepath.Join(t.TempDir(), "p2"), "--quiet", "--filter", "id >= 100 AND reward < 200",
		"--split-hash", "id:9,1", "--split-names", "train,val", "--shuffle-seed", "7", "--clump", "2", "--build-memory", "268435456")
	if bounded.ID != show.ID {
		t.Errorf("--build-memory 256 MiB built %s, without %s", bounded.ID, show.ID)
	}
	if r := croupier(t, "permute", uri, "file://"+filepath.Join(t.TempDir(), "p3"), "--build-memory", "1000"); r.code != 1 ||
		!strings.Contains(r.stderr, "below the") {
		t.Errorf("--build-memory 1000: exit %d: %s", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, "300 kept") {
		t.Errorf("permute progress without the rows kept: %q", r.stderr)
	}

	// The same build again is refused: permutations are written once.
	if r := croupier(t, "permute", uri, perm, "--quiet"); r.code != 1 || !strings.Contains(r.stderr, "croupier: ") {
		t.Fatalf("permute over an existing permutation: exit %d: %s", r.code, r.stderr)
	}
	// --clump auto records page-aligned clumps; anything else but a count is refused.
	var auto permOutput
	okJSON(t, &auto, "permute", uri, "file://"+filepath.Join(t.TempDir(), "p4"), "--quiet", "--shuffle-seed", "1", "--clump", "auto")
	if c := auto.Spec.Shuffle.ClumpSize; c != permutation.AutoClump {
		t.Fatalf("--clump auto recorded clump size %d, want %d", c, permutation.AutoClump)
	}
	if r := croupier(t, "permute", uri, "file://"+filepath.Join(t.TempDir(), "p5"), "--clump", "many"); r.code != 2 ||
		!strings.Contains(r.stderr, `--clump "many"`) {
		t.Fatalf("--clump many: exit %d: %s", r.code, r.stderr)
	}
	// Random and sequential splits parse ratios and counts.
	ok(t, "permute", uri, "file://"+filepath.Join(t.TempDir(), "p2"), "--quiet", "--split-random", "0.9,0.1", "--seed", "3")
	var seq permOutput
	okJSON(t, &seq, "permute", uri, "file://"+filepath.Join(t.TempDir(), "p3"), "--quiet", "--split-sequential", "100,50")
	if len(seq.Splits) != 2 || seq.Splits[0].NumRows != 100 || seq.Splits[1].NumRows != 50 {
		t.Fatalf("sequential counts: %+v", seq.Splits)
	}
}

// dealRun runs deal --json and returns its output.
func dealRun(t *testing.T, args ...string) dealOutput {
	t.Helper()
	var out dealOutput
	okJSON(t, &out, append([]string{"deal"}, args...)...)
	return out
}

func TestDeal(t *testing.T) {
	ctx := context.Background()
	uri := makeTable(t)
	perm := "file://" + filepath.Join(t.TempDir(), "perm")
	ok(t, "permute", uri, perm, "--quiet", "--split-random", "0.8,0.2", "--split-names", "train,val", "--shuffle-seed", "11")

	p, err := permutation.Open(ctx, perm)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	train, err := p.Split("train")
	if err != nil {
		t.Fatal(err)
	}
	want := func(w, r, epoch, step int64) []uint64 {
		l, err := loader.New(p.Table(), train, loader.Options{GlobalBatchSize: 16, NumSplits: 8, WorldSize: w, Rank: r, ShuffleSeed: 5, DropLast: true})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ids, err := l.RowIDs(ctx, epoch, step)
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}

	common := []string{"--perm", perm, "--split", "train", "--global-batch-size", "16", "--num-splits", "8", "--shuffle-seed", "5"}
	for _, epoch := range []string{"0", "2"} {
		e := int64(epoch[0] - '0')
		one := dealRun(t, append(common, "--epoch", epoch, "--step", "3")...)
		two := dealRun(t, append(common, "--epoch", epoch, "--step", "3", "--world-size", "2")...)
		if len(one.Ranks) != 1 || len(two.Ranks) != 2 || one.StepsPerEpoch != 400/8/2 {
			t.Fatalf("ranks: %d and %d; steps per epoch %d", len(one.Ranks), len(two.Ranks), one.StepsPerEpoch)
		}
		if !slices.Equal(one.Ranks[0].RowIDs, want(1, 0, e, 3)) {
			t.Fatalf("epoch %s W=1: %v, loader says %v", epoch, one.Ranks[0].RowIDs, want(1, 0, e, 3))
		}
		union := slices.Concat(two.Ranks[0].RowIDs, two.Ranks[1].RowIDs)
		for r := range two.Ranks {
			if !slices.Equal(two.Ranks[r].RowIDs, want(2, int64(r), e, 3)) {
				t.Fatalf("epoch %s W=2 rank %d differs from the loader", epoch, r)
			}
		}
		a, b := slices.Clone(one.Ranks[0].RowIDs), union
		slices.Sort(a)
		slices.Sort(b)
		if len(a) != 16 || !slices.Equal(a, b) {
			t.Fatalf("epoch %s: W=2 union %v != W=1 %v", epoch, b, a)
		}
	}
	// --rank prints one rank; the text form lists each.
	only := dealRun(t, append(common, "--step", "3", "--world-size", "2", "--rank", "1")...)
	if len(only.Ranks) != 1 || only.Ranks[0].Rank != 1 || !slices.Equal(only.Ranks[0].RowIDs, want(2, 1, 0, 3)) {
		t.Fatalf("--rank 1: %+v", only.Ranks)
	}
	text := ok(t, append([]string{"deal"}, append(common, "--step", "0", "--world-size", "4")...)...)
	if !strings.Contains(text, "rank 3: ") || !strings.Contains(text, "epoch 0, step 0:") {
		t.Fatalf("deal text:\n%s", text)
	}

	// A checkpoint shows the next step; at the end of an epoch, step 0 of the next.
	ckpt := func(permID string, epoch, steps int64) string {
		path := filepath.Join(t.TempDir(), "state.json")
		b, _ := json.Marshal(map[string]any{"format": 1, "permutation_id": permID, "table_uri": uri,
			"table_version": "2", "num_splits": 8, "global_batch_size": 16, "shuffle_seed": 5,
			"epoch": epoch, "steps_consumed": steps})
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	got := dealRun(t, "--perm", perm, "--split", "train", "--checkpoint", ckpt(train.ID(), 1, 7), "--world-size", "2")
	if got.Epoch != 1 || got.Step != 7 || !slices.Equal(got.Ranks[1].RowIDs, want(2, 1, 1, 7)) {
		t.Fatalf("from checkpoint: epoch %d step %d", got.Epoch, got.Step)
	}
	got = dealRun(t, "--perm", perm, "--split", "train", "--checkpoint", ckpt(train.ID(), 1, 25))
	if got.Epoch != 2 || got.Step != 0 || !slices.Equal(got.Ranks[0].RowIDs, want(1, 0, 2, 0)) {
		t.Fatalf("from end-of-epoch checkpoint: epoch %d step %d", got.Epoch, got.Step)
	}
	// --steps A:B: steps A to B-1 of the epoch at once, each rank's rows as
	// the loader deals them and the version that added each row (rows 300
	// on were appended as version 2).
	checkSteps := func(args []string, w, epoch, from, to int64) {
		t.Helper()
		var many stepsOutput
		okJSON(t, &many, append([]string{"deal", "--world-size", strconv.FormatInt(w, 10)}, args...)...)
		if int64(len(many.Steps)) != to-from {
			t.Fatalf("deal %v: %d steps, want %d", args, len(many.Steps), to-from)
		}
		for i, st := range many.Steps {
			step := from + int64(i)
			if st.Epoch != epoch || st.Step != step || int64(len(st.Ranks)) != w {
				t.Fatalf("deal %v: step %d is epoch %d step %d with %d ranks", args, i, st.Epoch, st.Step, len(st.Ranks))
			}
			for r, rb := range st.Ranks {
				if !slices.Equal(rb.RowIDs, want(w, int64(r), epoch, step)) {
					t.Fatalf("deal %v: epoch %d step %d rank %d differs from the loader", args, epoch, step, r)
				}
				for j, id := range rb.RowIDs {
					if v := rb.Versions[j]; v != 1+int64(id/300) {
						t.Fatalf("deal %v: row %d is of version %d", args, id, v)
					}
				}
			}
		}
	}
	checkSteps(append(common, "--epoch", "2", "--steps", "3:6"), 2, 2, 3, 6)
	checkSteps([]string{"--perm", perm, "--split", "train", "--checkpoint", ckpt(train.ID(), 1, 7), "--steps", ":"}, 1, 1, 0, 7)
	checkSteps([]string{"--perm", perm, "--split", "train", "--checkpoint", ckpt(train.ID(), 1, 7), "--steps", "5:"}, 2, 1, 5, 7)
	text = ok(t, append([]string{"deal"}, append(common, "--steps", "0:2", "--columns", "id")...)...)
	if !strings.Contains(text, "epoch 0, step 1:") || !strings.Contains(text, "  versions: ") || !strings.Contains(text, "id=") {
		t.Fatalf("deal --steps text:\n%s", text)
	}
	for _, bad := range [][]string{{"--steps", "3"}, {"--steps", "5:3"}, {"--steps", "-1:3"}, {"--steps", "0:26"}, {"--steps", "0:2", "--step", "1"}} {
		if r := croupier(t, append([]string{"deal"}, append(common, bad...)...)...); r.code != 2 || !strings.Contains(r.stderr, "--step") {
			t.Errorf("deal %v: exit %d: %s", bad, r.code, r.stderr)
		}
	}
	// The wrong split: an error naming both ids.
	r := croupier(t, "deal", "--perm", perm, "--split", "val", "--checkpoint", ckpt(train.ID(), 0, 1))
	if r.code != 1 || !strings.Contains(r.stderr, train.ID()) || !strings.Contains(r.stderr, p.ID()+"/val") {
		t.Fatalf("mismatched checkpoint: exit %d: %s", r.code, r.stderr)
	}
	// An identity checkpoint needs no --perm or --table: it names its table.
	got = dealRun(t, "--checkpoint", ckpt("identity", 0, 3))
	if got.OrderID != "identity" || got.Step != 3 || !slices.Equal(got.Ranks[0].RowIDs, []uint64{6, 68, 130, 192, 254, 316, 378, 440, 7, 69, 131, 193, 255, 317, 379, 441}) {
		t.Fatalf("identity checkpoint: %+v", got)
	}
	// Format 2 records where its permutation lives, so no --perm is needed,
	// and the table's identity; the version may be a number.
	travel := map[string]any{"format": 2, "permutation_id": train.ID(), "permutation_uri": perm,
		"table_id": p.Table().ID(), "table_uri": "file:///elsewhere", "table_version": 2, "num_splits": 8,
		"global_batch_size": 16, "shuffle_seed": 5, "epoch": 1, "steps_consumed": 7}
	got = dealRun(t, "--checkpoint", writeState(t, travel), "--world-size", "2")
	if got.OrderID != train.ID() || got.Epoch != 1 || got.Step != 7 || !slices.Equal(got.Ranks[1].RowIDs, want(2, 1, 1, 7)) {
		t.Fatalf("format 2 checkpoint: %+v", got)
	}
	for field, c := range map[string]struct {
		value any
		want  string
	}{
		"steps_consumed": {26, "steps_consumed is 26, past the end of an epoch of 25 steps"},
		"table_id":       {"t0000000000000000", `checkpoint table_id is "t0000000000000000"`},
		"table_version":  {"3", `checkpoint table_version is "3"`},
		"epoch":          {-1, "epoch must be an integer >= 0, got -1"},
		"shuffle_seed":   {-1, `"shuffle_seed" is number -1, but it must be an integer in [0, 18446744073709551615]`},
	} {
		r := croupier(t, "deal", "--checkpoint", writeState(t, map[string]any{field: c.value}, travel))
		if r.code != 1 || !strings.Contains(r.stderr, c.want) || jsonargs.GoWords.MatchString(r.stderr) {
			t.Errorf("checkpoint with %s %v: exit %d: %s", field, c.value, r.code, r.stderr)
		}
	}
	// --table deals the table in row id order.
	got = dealRun(t, "--table", uri, "--global-batch-size", "4", "--num-splits", "4", "--step", "0")
	if !slices.Equal(got.Ranks[0].RowIDs, []uint64{0, 125, 250, 375}) {
		t.Fatalf("identity deal: %v", got.Ranks[0].RowIDs)
	}
}

// writeState writes a state dict of the fields of maps, the first given
// winning, and returns its path.
func writeState(t *testing.T, fields ...map[string]any) string {
	t.Helper()
	state := map[string]any{}
	for _, m := range slices.Backward(fields) {
		maps.Copy(state, m)
	}
	path := filepath.Join(t.TempDir(), "state.json")
	b, _ := json.Marshal(state)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestSplitSizes: integers are row counts, and permute says so; fractions are
// written 0.95,0.05 or 95%,5%.
func TestSplitSizes(t *testing.T) {
	uri := makeTable(t)
	for flagValue, want := range map[string][]int64{"95,5": {95, 5}, "0.95,0.05": {475, 25}, "95%,5%": {475, 25}} {
		r := croupier(t, "permute", uri, "file://"+filepath.Join(t.TempDir(), "p"), "--quiet", "--json", "--split-random", flagValue)
		var out permOutput
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &out) != nil {
			t.Fatalf("--split-random %s: exit %d: %s", flagValue, r.code, r.stderr)
		}
		got := []int64{out.Splits[0].NumRows, out.Splits[1].NumRows}
		if !slices.Equal(got, want) {
			t.Errorf("--split-random %s: splits of %v rows, want %v", flagValue, got, want)
		}
		note := strings.Contains(r.stderr, "is read as row counts: splits of 95, 5 rows")
		if note != (flagValue == "95,5") {
			t.Errorf("--split-random %s: stderr %q", flagValue, r.stderr)
		}
	}
	// Filter errors name SQL, never the parser's types.
	r := croupier(t, "permute", uri, "file://"+filepath.Join(t.TempDir(), "p"), "--quiet", "--filter", "id ->> '$.a' = 1")
	if r.code != 1 || !strings.Contains(r.stderr, "the JSON operator ->> (json_unquote) is not supported") || jsonargs.GoWords.MatchString(r.stderr) {
		t.Errorf("JSON filter: exit %d: %s", r.code, r.stderr)
	}
}

func TestBadInput(t *testing.T) {
	missing := "file://" + filepath.Join(t.TempDir(), "nope")
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "no command"},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"tables"}, 2, "missing subcommand"},
		{[]string{"tables", "versions"}, 2, "missing arguments"},
		{[]string{"tables", "create", missing}, 2, "missing arguments"},
		{[]string{"tables", "inspect", missing, "--bogus"}, 2, "flag provided but not defined"},
		{[]string{"tables", "cleanup", missing}, 2, "--keep-last"},
		{[]string{"deal", "--table", missing}, 2, "--global-batch-size"},
		{[]string{"deal", "--global-batch-size", "4", "--step", "0"}, 2, "--perm and --table"},
		{[]string{"permute", missing, missing + "p", "--split-hash", "id"}, 2, "--split-hash"},
		{[]string{"tables", "versions", missing}, 1, missing},
		{[]string{"tables", "inspect", missing}, 1, missing},
		{[]string{"permute", "show", missing}, 1, missing},
		{[]string{"deal", "--perm", missing, "--global-batch-size", "4", "--step", "0"}, 1, missing},
		{[]string{"tables", "create", missing, filepath.Join(t.TempDir(), "x.parquet")}, 1, "x.parquet"},
		{[]string{"deal", "--checkpoint", filepath.Join(t.TempDir(), "none.json")}, 1, "none.json"},
		{[]string{"deal", "--table", missing, "--global-batch-size", "0", "--step", "0"}, 2, "--global-batch-size is 0; it must be at least 1"},
		{[]string{"deal", "--table", missing, "--global-batch-size", "4", "--world-size", "-2", "--step", "0"}, 2, "--world-size is -2"},
		{[]string{"deal", "--table", missing, "--global-batch-size", "4", "--world-size", "2", "--rank", "2", "--step", "0"}, 2, "--rank 2 is not in [0, 2)"},
		{[]string{"permute", missing, missing + "p", "--split-random", "a,b"}, 2, "want fractions"},
		{[]string{"read", "--table", missing}, 2, "--global-batch-size is 0"},
		{[]string{"read", "--global-batch-size", "4"}, 2, "--perm and --table"},
		{[]string{"read", "--table", missing, "--global-batch-size", "4"}, 1, missing},
	} {
		r := croupier(t, c.args...)
		if r.code != c.code || !strings.Contains(r.stderr, c.want) || !strings.Contains(r.stderr, "croupier: ") {
			t.Errorf("croupier %q: exit %d, stderr %q; want exit %d and %q", c.args, r.code, r.stderr, c.code, c.want)
		}
	}
	// Bad dealing numbers come from the loader with the numbers in them.
	uri := makeTable(t)
	r := croupier(t, "deal", "--table", uri, "--global-batch-size", "10", "--num-splits", "4", "--step", "0")
	if r.code != 1 || !strings.Contains(r.stderr, "10") || !strings.Contains(r.stderr, uri) {
		t.Errorf("G %% S != 0: exit %d: %s", r.code, r.stderr)
	}
	r = croupier(t, "deal", "--table", uri, "--global-batch-size", "4", "--step", "1000")
	if r.code != 1 || !strings.Contains(r.stderr, "step 1000 out of range") {
		t.Errorf("step out of range: exit %d: %s", r.code, r.stderr)
	}
}

// TestRead reads every step of a shuffled epoch of rank 1 of 2, and a few
// steps from the middle, and reports the rows and what they cost.
func TestRead(t *testing.T) {
	uri := makeTable(t)
	perm := "file://" + filepath.Join(t.TempDir(), "perm")
	ok(t, "permute", uri, perm, "--quiet", "--shuffle-seed", "3")
	var all readOutput
	okJSON(t, &all, "read", "--perm", perm, "--global-batch-size", "16", "--world-size", "2", "--rank", "1", "--columns", "id,tokens")
	// 500 rows: 31 whole steps of 16, 8 rows of each for rank 1.
	if all.Steps != 31 || all.Rows != 31*8 || all.Stats.Rows != all.Rows || all.Stats.Requests == 0 ||
		all.Stats.BytesRead == 0 || all.Bytes == 0 || all.Stats.DecodedBytes < all.Bytes {
		t.Fatalf("read an epoch: %+v", all)
	}
	var some readOutput
	okJSON(t, &some, "read", "--perm", perm, "--global-batch-size", "16", "--step", "20", "--steps", "5")
	if some.Steps != 5 || some.Rows != 5*16 || some.FirstStep != 20 {
		t.Fatalf("read 5 steps from step 20: %+v", some)
	}
	if out := ok(t, "read", "--perm", perm, "--global-batch-size", "16"); !strings.Contains(out, "31 steps, 496 rows") ||
		!strings.Contains(out, "range requests") || !strings.Contains(out, "fetched ÷ delivered") {
		t.Errorf("read printed %q", out)
	}
	if r := croupier(t, "read", "--perm", perm, "--global-batch-size", "16", "--step", "31"); r.code != 1 || !strings.Contains(r.stderr, "step 31") {
		t.Errorf("read past the last step: exit %d: %s", r.code, r.stderr)
	}
}

func TestBenchDryRun(t *testing.T) {
	var run benchRun
	okJSON(t, &run, "bench", "--dry-run", "--quick", "--dir", "../..")
	if strings.Join(run.Command, " ") != "make bench BENCH_FLAGS=--quick" || run.Skipped != "" {
		t.Fatalf("bench --dry-run --quick: %+v", run)
	}
	r := croupier(t, "bench", "--dry-run", "--dir", t.TempDir())
	if r.code != 1 || !strings.Contains(r.stderr, "Makefile not found") {
		t.Fatalf("bench outside the repository: exit %d: %s", r.code, r.stderr)
	}
}

func TestHelp(t *testing.T) {
	if out := ok(t, "help"); !strings.Contains(out, "tables create URI") {
		t.Fatalf("help: %s", out)
	}
	if r := croupier(t, "deal", "-h"); r.code != 0 || !strings.Contains(r.stderr, "-global-batch-size") {
		t.Fatalf("deal -h: exit %d: %s", r.code, r.stderr)
	}
}

// TestPermuteGroupBy: --group-by builds a grouped permutation (format 3),
// and deal gives every group of a step to one rank.
func TestPermuteGroupBy(t *testing.T) {
	dir := t.TempDir()
	keys := make([]int64, 300)
	for i := range keys {
		keys[i] = int64(i*7) % 61 // 61 groups of 4 or 5 rows, scattered
	}
	tabletest.WriteGroups(t, dir, keys, 64)
	perm := "file://" + filepath.Join(t.TempDir(), "perm")
	var out permOutput
	okJSON(t, &out, "permute", "file://"+dir, perm, "--quiet", "--group-by", "problem_id", "--shuffle-seed", "2",
		"--split-hash", "problem_id:3,1", "--split-names", "train,val")
	if out.Format != 3 || !slices.Equal(out.Spec.GroupBy, []string{"problem_id"}) || out.Splits[0].NumGroups == 0 {
		t.Fatalf("permute --group-by: %+v", out)
	}
	d := dealRun(t, "--perm", perm, "--global-batch-size", "24", "--world-size", "3", "--step", "1", "--epoch", "1", "--shuffle-seed", "4")
	owner := map[int64]int64{}
	for _, r := range d.Ranks {
		for _, id := range r.RowIDs {
			if o, ok := owner[keys[id]]; ok && o != r.Rank {
				t.Fatalf("group %d on ranks %d and %d", keys[id], o, r.Rank)
			}
			owner[keys[id]] = r.Rank
		}
	}
	if len(owner) < 3 {
		t.Fatalf("step 1 holds %d groups: %+v", len(owner), d.Ranks)
	}
	if r := croupier(t, "permute", "file://"+dir, "file://"+filepath.Join(t.TempDir(), "p2"), "--group-by", "problem_id", "--clump", "4"); r.code != 1 ||
		!strings.Contains(r.stderr, "clump_size and window do not apply") {
		t.Fatalf("--group-by with --clump: exit %d: %s", r.code, r.stderr)
	}
}

// TestDealProvenance: deal --columns prints the rows of a step; --which-steps
// and --row name every step up to a checkpoint that trained on the rows, as
// the loader deals them.
func TestDealProvenance(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	keys := make([]int64, 400)
	for i := range keys {
		keys[i] = int64(i*13) % 97
	}
	tabletest.WriteGroups(t, dir, keys, 64)
	for _, grouped := range []bool{false, true} {
		perm := "file://" + filepath.Join(t.TempDir(), "perm")
		args := []string{"permute", "file://" + dir, perm, "--quiet", "--shuffle-seed", "2"}
		if grouped {
			args = append(args, "--group-by", "problem_id")
		}
		ok(t, args...)
		d := dealRun(t, "--perm", perm, "--global-batch-size", "24", "--world-size", "2", "--step", "1", "--columns", "problem,id")
		for _, r := range d.Ranks {
			for i, row := range r.Rows {
				if id := row["id"].(float64); uint64(id) != r.RowIDs[i] || row["problem"] != fmt.Sprintf("p%d", keys[r.RowIDs[i]]) {
					t.Fatalf("grouped=%t: rank %d row %d: %v", grouped, r.Rank, r.RowIDs[i], row)
				}
			}
		}
		if out := ok(t, "deal", "--perm", perm, "--global-batch-size", "24", "--step", "0", "--columns", "problem"); !strings.Contains(out, "problem=\"p") {
			t.Fatalf("grouped=%t: text output without the column:\n%s", grouped, out)
		}

		p, err := permutation.Open(ctx, perm)
		if err != nil {
			t.Fatal(err)
		}
		ckpt := filepath.Join(t.TempDir(), "state.json")
		state := fmt.Sprintf(`{"format": 2, "permutation_id": %q, "permutation_uri": %q, "table_id": %q, "table_uri": %q,
			"table_version": %q, "num_splits": 24, "global_batch_size": 24, "shuffle_seed": 4, "epoch": 2, "steps_consumed": 5}`,
			p.Splits()[0].ID(), perm, p.Table().ID(), p.Table().URI(), p.Table().Version())
		os.WriteFile(ckpt, []byte(state), 0o644)
		l, err := loader.New(p.Table(), p.Splits()[0], loader.Options{GlobalBatchSize: 24, WorldSize: 2, ShuffleSeed: 4, DropLast: true})
		if err != nil {
			t.Fatal(err)
		}
		// What the loader dealt of key 5's rows up to the checkpoint.
		var want []trained
		for e := range int64(3) {
			for step := range l.StepsPerEpoch() {
				if e == 2 && step >= 5 {
					break
				}
				ranks, err := l.Step(ctx, e, step)
				if err != nil {
					t.Fatal(err)
				}
				for r, ids := range ranks {
					for _, id := range ids {
						if keys[id] == 5 {
							want = append(want, trained{RowID: id, Epoch: e, Step: step, Rank: int64(r)})
						}
					}
				}
			}
		}
		l.Close()
		p.Close()
		slices.SortFunc(want, func(a, b trained) int {
			return cmp.Or(cmp.Compare(a.Epoch, b.Epoch), cmp.Compare(a.Step, b.Step), cmp.Compare(a.RowID, b.RowID))
		})
		var got whichOutput
		okJSON(t, &got, "deal", "--checkpoint", ckpt, "--which-steps", "problem_id=5", "--world-size", "2")
		if !slices.Equal(got.Trained, want) || len(got.Rows) != 4 || len(want) < 4 {
			t.Fatalf("grouped=%t: --which-steps problem_id=5 gives %+v for rows %v, want %+v", grouped, got.Trained, got.Rows, want)
		}
		okJSON(t, &got, "deal", "--checkpoint", ckpt, "--row", fmt.Sprint(want[0].RowID), "--world-size", "2")
		for _, tr := range got.Trained {
			if tr.RowID != want[0].RowID || !slices.Contains(want, tr) {
				t.Fatalf("grouped=%t: --row %d gives %+v", grouped, want[0].RowID, got.Trained)
			}
		}
		if r := croupier(t, "deal", "--checkpoint", ckpt, "--which-steps", "problem=nope"); r.code != 1 || !strings.Contains(r.stderr, `no row has problem = "nope"`) {
			t.Fatalf("--which-steps of no row: exit %d: %s", r.code, r.stderr)
		}
	}
}

// TestDealTokens: deal answers which rows made a token-budget step and each
// rank's share, as the loader deals them, from flags and from a checkpoint,
// and which token-budget steps trained on a row.
func TestDealTokens(t *testing.T) {
	ctx := context.Background()
	uri := makeTable(t)
	perm := "file://" + filepath.Join(t.TempDir(), "perm")
	ok(t, "permute", uri, perm, "--quiet", "--lengths", "tokens", "--shuffle-seed", "3")
	p, err := permutation.Open(ctx, perm)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	split := p.Splits()[0]

	common := []string{"--perm", perm, "--tokens-per-step", "30", "--shuffle-seed", "5", "--epoch", "1"}
	one := dealRun(t, append(common, "--step", "4")...)
	three := dealRun(t, append(common, "--step", "4", "--world-size", "3")...)
	var union []uint64
	for r, rank := range three.Ranks {
		l, err := loader.New(p.Table(), split, loader.Options{TokensPerStep: 30, WorldSize: 3, Rank: int64(r), ShuffleSeed: 5})
		if err != nil {
			t.Fatal(err)
		}
		want, err := l.RowIDs(ctx, 1, 4)
		l.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(rank.RowIDs, want) {
			t.Fatalf("rank %d: %v, the loader deals %v", r, rank.RowIDs, want)
		}
		var tokens int64
		for i, id := range rank.RowIDs {
			if n := uint64(len(tabletest.Tokens(int64(id)))); rank.Lengths[i] != n {
				t.Fatalf("row %d: length %d, want %d", id, rank.Lengths[i], n)
			}
			tokens += int64(rank.Lengths[i])
		}
		if rank.Tokens == nil || *rank.Tokens != tokens {
			t.Fatalf("rank %d: tokens %v, want %d", r, rank.Tokens, tokens)
		}
		union = append(union, rank.RowIDs...)
	}
	a := slices.Clone(one.Ranks[0].RowIDs)
	slices.Sort(a)
	slices.Sort(union)
	if !slices.Equal(a, union) || *one.Ranks[0].Tokens > 30 || one.TokensPerStep != 30 || one.Oversize != "error" {
		t.Fatalf("W=1: %v (%d tokens), W=3: %v", a, *one.Ranks[0].Tokens, union)
	}

	// From a checkpoint: the step after it.
	state := writeState(t, map[string]any{"format": 2, "permutation_id": split.ID(), "permutation_uri": perm,
		"table_id": p.Table().ID(), "table_uri": uri, "table_version": 2, "num_splits": 0, "global_batch_size": 0,
		"tokens_per_step": 30, "oversize": "error", "shuffle_seed": 5, "epoch": 1, "steps_consumed": 4})
	var fromState dealOutput
	okJSON(t, &fromState, "deal", "--checkpoint", state)
	if fromState.Step != 4 || !slices.Equal(fromState.Ranks[0].RowIDs, one.Ranks[0].RowIDs) {
		t.Fatalf("checkpoint: step %d %v, want step 4 %v", fromState.Step, fromState.Ranks[0].RowIDs, one.Ranks[0].RowIDs)
	}
	// --row looks back over token-budget steps: a row of epoch 1's step 3 was
	// trained on there, by the rank that deals it, and in some step of epoch 0.
	before := dealRun(t, append(common, "--step", "3", "--world-size", "3")...)
	for r, rank := range before.Ranks {
		if len(rank.RowIDs) == 0 {
			continue
		}
		var got whichOutput
		okJSON(t, &got, "deal", "--checkpoint", state, "--row", fmt.Sprint(rank.RowIDs[0]), "--world-size", "3")
		if len(got.Trained) != 2 || got.Trained[0].Epoch != 0 || got.Trained[1] != (trained{RowID: rank.RowIDs[0], Epoch: 1, Step: 3, Rank: int64(r)}) {
			t.Fatalf("--row %d: %+v, want epoch 0 and epoch 1 step 3 rank %d", rank.RowIDs[0], got.Trained, r)
		}
	}
	if out := ok(t, slices.Concat([]string{"deal"}, common, []string{"--step", "0", "--world-size", "2"})...); !strings.Contains(out, "tokens_per_step=30") ||
		!strings.Contains(out, "rank 1 (") {
		t.Fatalf("text output:\n%s", out)
	}
	for want, args := range map[string][]string{
		"give one of --global-batch-size and --tokens-per-step": {"--global-batch-size", "4", "--tokens-per-step", "30", "--step", "0"},
		"more than tokens_per_step 5":                           {"--tokens-per-step", "5", "--step", "0"},
	} {
		r := croupier(t, append([]string{"deal", "--perm", perm}, args...)...)
		if r.code == 0 || !strings.Contains(r.stderr, want) {
			t.Errorf("%v: exit %d: %s, want %q", args, r.code, r.stderr, want)
		}
	}
}
