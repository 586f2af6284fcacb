package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/loader"
)

// TestDealFollowCheckpoint follows a table of several versions at two ranks
// with replay, through the streams a learner reads, and checks that deal
// --checkpoint, given a following checkpoint taken after some steps, gives
// each rank's rows of the step after it, of a step before it (from the first
// round) and the version that added each row, as the streams dealt them;
// that --row finds every step before the checkpoint that trained on a row;
// and that a step of a round not committed yet is NotFound.
func TestDealFollowCheckpoint(t *testing.T) {
	const world, consumed = 2, 11
	ctx := context.Background()
	uri := "file://" + filepath.Join(t.TempDir(), "grows")
	src := t.TempDir()
	for v, n := range []int64{40, 25, 31, 50, 22, 37} {
		var start int64
		for _, m := range []int64{40, 25, 31, 50, 22, 37}[:v] {
			start += m
		}
		if v == 0 {
			ok(t, "tables", "create", uri, parquetFile(t, src, start, n))
		} else {
			ok(t, "tables", "append", uri, parquetFile(t, src, start, n))
		}
	}
	opts := loader.Options{GlobalBatchSize: 8, NumSplits: 4, ShuffleSeed: 3, WorldSize: world}
	fo := loader.FollowOptions{RowsPerRound: 30, ReplayCount: 4, WaitTimeout: time.Millisecond, PollInterval: time.Millisecond}
	// What the ranks' streams deal: ids and versions by global step and rank.
	ids := map[int64][][]int64{}
	versions := map[int64][][]int64{}
	var ckpt loader.FollowCheckpoint
	for rank := range int64(world) {
		tb, err := table.Open(ctx, uri)
		if err != nil {
			t.Fatal(err)
		}
		o := opts
		o.Rank = rank
		fl, err := loader.NewFollower(tb, o, fo)
		tb.Close()
		if err != nil {
			t.Fatal(err)
		}
		defer fl.Close()
		s, err := fl.Stream(ctx, fl.Start(), 0, loader.StreamOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		for {
			b, err := s.Next(ctx)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if b.Steps != 1 {
				t.Fatalf("a batch of %d steps", b.Steps)
			}
			if ids[b.Step] == nil {
				ids[b.Step], versions[b.Step] = make([][]int64, world), make([][]int64, world)
			}
			ids[b.Step][rank] = slices.Clone(b.Record.Column(0).(*array.Int64).Int64Values())
			vcol := b.Record.Schema().FieldIndices(loader.VersionColumn)[0]
			versions[b.Step][rank] = slices.Clone(b.Record.Column(vcol).(*array.Int64).Int64Values())
			if r := s.Round(); b.Step == consumed-1 {
				// As FollowingDataset.state_dict() records it after the step.
				pos := r.FollowPosition
				if b.Step+1 == r.Step+r.Steps {
					pos = r.Next()
				}
				ckpt = fl.Checkpoint(pos, consumed)
			}
			b.Record.Release()
		}
	}
	if int64(len(ids)) <= consumed+2 {
		t.Fatalf("the table made %d steps, too few for the test", len(ids))
	}
	data, err := json.Marshal(ckpt)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "follow.json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	ranksOf := func(out followOutput) (gotIDs, gotVersions [][]int64) {
		for _, rb := range out.Ranks {
			var row []int64
			for _, id := range rb.RowIDs {
				row = append(row, int64(id))
			}
			gotIDs, gotVersions = append(gotIDs, row), append(gotVersions, rb.Versions)
		}
		return gotIDs, gotVersions
	}
	for _, step := range []int64{consumed, 2, int64(len(ids)) - 1} {
		args := []string{"deal", "--checkpoint", path, "--world-size", strconv.Itoa(world)}
		if step != consumed {
			args = append(args, "--step", strconv.FormatInt(step, 10))
		}
		var out followOutput
		okJSON(t, &out, args...)
		gotIDs, gotVersions := ranksOf(out)
		if out.Step != step || !slices.EqualFunc(gotIDs, ids[step], slices.Equal) || !slices.EqualFunc(gotVersions, versions[step], slices.Equal) {
			t.Errorf("step %d: deal says step %d, rows %v, versions %v; the streams dealt %v, %v",
				step, out.Step, gotIDs, gotVersions, ids[step], versions[step])
		}
	}
	// --steps: a range of steps at once, each as --step gives it; by default
	// every step before the checkpoint (what trained it).
	for _, rng := range [][2]int64{{0, consumed}, {consumed - 2, int64(len(ids))}} {
		arg := strconv.FormatInt(rng[0], 10) + ":"
		if rng[1] != consumed {
			arg += strconv.FormatInt(rng[1], 10)
		}
		var out followOutput
		okJSON(t, &out, "deal", "--checkpoint", path, "--world-size", strconv.Itoa(world), "--steps", arg)
		if int64(len(out.Steps)) != rng[1]-rng[0] {
			t.Fatalf("--steps %s: %d steps, want %d", arg, len(out.Steps), rng[1]-rng[0])
		}
		for i, st := range out.Steps {
			step := rng[0] + int64(i)
			gotIDs, gotVersions := ranksOf(followOutput{Ranks: st.Ranks})
			if st.Step != step || !slices.EqualFunc(gotIDs, ids[step], slices.Equal) || !slices.EqualFunc(gotVersions, versions[step], slices.Equal) {
				t.Errorf("--steps %s: step %d (%d) dealt rows %v, versions %v; the streams %v, %v",
					arg, step, st.Step, gotIDs, gotVersions, ids[step], versions[step])
			}
			if st.Step < st.Round.Step || st.Step >= st.Round.Step+st.Round.Steps {
				t.Errorf("--steps %s: step %d in round %+v", arg, st.Step, st.Round)
			}
		}
	}
	if text := ok(t, "deal", "--checkpoint", path, "--steps", "0:3"); strings.Count(text, "  versions: ") != 3 || !strings.Contains(text, "step 2: round ") {
		t.Errorf("deal --steps 0:3:\n%s", text)
	}
	// The text output names the round and each rank's rows.
	text := ok(t, "deal", "--checkpoint", path, "--world-size", "2", "--rank", "1", "--columns", "text")
	if want := "rank 1: "; !strings.Contains(text, want) || strings.Contains(text, "rank 0: ") || !strings.Contains(text, "text=") {
		t.Errorf("deal --rank 1 --columns text:\n%s", text)
	}
	// --row: every step before the checkpoint that dealt a row, replays too.
	seen := map[int64]int{}
	replayed := int64(-1)
	for step := range int64(consumed) {
		for _, rank := range ids[step] {
			for _, id := range rank {
				if seen[id]++; seen[id] == 2 && replayed < 0 {
					replayed = id
				}
			}
		}
	}
	if replayed < 0 {
		t.Fatal("no row was replayed before the checkpoint")
	}
	for _, row := range []int64{ids[0][1][0], ids[consumed-1][0][0], ids[consumed][0][0], replayed} {
		var want []string
		for step := range int64(consumed) {
			for rank := range world {
				if slices.Contains(ids[step][rank], row) {
					want = append(want, strconv.FormatInt(step, 10)+"/"+strconv.Itoa(rank))
				}
			}
		}
		var out followOutput
		okJSON(t, &out, "deal", "--checkpoint", path, "--world-size", "2", "--row", strconv.FormatInt(row, 10))
		var got []string
		for _, tr := range out.Trained {
			got = append(got, strconv.FormatInt(tr.Step, 10)+"/"+strconv.FormatInt(tr.Rank, 10))
		}
		if !slices.Equal(got, want) {
			t.Errorf("--row %d: steps/ranks %v, the streams dealt it at %v", row, got, want)
		}
		t.Logf("row %d: trained at %v", row, got)
	}
	// Look-back flags are checked as for any checkpoint.
	if r := croupier(t, "deal", "--checkpoint", path, "--row", "-5"); r.code != 2 || !strings.Contains(r.stderr, "--row is -5") {
		t.Errorf("deal --row -5: exit %d: %s", r.code, r.stderr)
	}
	// A step of a round whose versions are not committed yet.
	r := croupier(t, "deal", "--checkpoint", path, "--step", strconv.Itoa(len(ids)+5))
	if r.code != 1 || !strings.Contains(r.stderr, "not committed yet") {
		t.Errorf("deal --step past the rounds: exit %d: %s", r.code, r.stderr)
	}
}
