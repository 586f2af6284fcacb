package loader_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/loader"
	"github.com/croupier-data/croupier/permutation"
)

// TestCheckpointJSONIsPythons: the checkpoints in testdata are what
// Python's json.dump(ds.state_dict()) wrote, for a dataset over a
// permutation's split and over a table. ParseCheckpoint reads them, and a
// Checkpoint marshals back to the same JSON, key for key, value for value,
// in Python's order (python/tests/test_checkpoint.py holds Python to these
// files).
func TestCheckpointJSONIsPythons(t *testing.T) {
	for _, name := range []string{"checkpoint-split.json", "checkpoint-table.json"} {
		data, err := os.ReadFile("testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		c, err := loader.ParseCheckpoint(data, name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if (c.PermutationURI == nil) != (c.PermutationID == "identity") || c.TableVersion != "1" || c.Format != loader.CheckpointFormat {
			t.Errorf("%s: parsed as %+v", name, c)
		}
		got, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		var want bytes.Buffer
		if err := json.Compact(&want, data); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want.Bytes()) {
			t.Errorf("%s: marshals to\n%s\nwant\n%s", name, got, want.Bytes())
		}
	}
}

// TestCheckpointResume: a loader's checkpoint, through JSON, resumes a
// loader of the same run at its position, or at step 0 of the next epoch
// once the epoch is done; a checkpoint of another run is refused naming the
// field and both values, as Python's load_state_dict refuses it.
func TestCheckpointResume(t *testing.T) {
	ctx := context.Background()
	tb := openTable(t, 40, 24)
	perms, err := permutation.Build(ctx, tb, permutation.Spec{Shuffle: &permutation.ShuffleSpec{Seed: 7}},
		"file://"+t.TempDir()+"/perm", permutation.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer perms.Close()
	split, err := perms.SplitAt(0)
	if err != nil {
		t.Fatal(err)
	}
	opts := loader.Options{GlobalBatchSize: 8, NumSplits: 4, ShuffleSeed: 3, DropLast: true}
	l, err := loader.New(tb, split, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	resume := func(l *loader.Loader, c loader.Checkpoint) (int64, int64, error) {
		t.Helper()
		data, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		parsed, err := loader.ParseCheckpoint(data, "state.json")
		if err != nil {
			t.Fatal(err)
		}
		return l.Resume(ctx, parsed)
	}
	c := l.Checkpoint(2, 5)
	if c.PermutationURI == nil || *c.PermutationURI != perms.URI() || c.TableID != tb.ID() || c.PermutationID != split.ID() {
		t.Fatalf("checkpoint %+v", c)
	}
	// Another rank of another world size resumes the same run.
	other, err := loader.New(tb, split, loader.Options{GlobalBatchSize: 8, NumSplits: 4, ShuffleSeed: 3,
		DropLast: true, WorldSize: 4, Rank: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	for _, tc := range []struct {
		epoch, steps, wantEpoch, wantStep int64
	}{{2, 5, 2, 5}, {0, 0, 0, 0}, {1, l.StepsPerEpoch(), 2, 0}} {
		for _, into := range []*loader.Loader{l, other} {
			e, s, err := resume(into, l.Checkpoint(tc.epoch, tc.steps))
			if err != nil || e != tc.wantEpoch || s != tc.wantStep {
				t.Errorf("checkpoint (%d, %d): resumes at (%d, %d), %v; want (%d, %d)",
					tc.epoch, tc.steps, e, s, err, tc.wantEpoch, tc.wantStep)
			}
		}
	}
	past := l.Checkpoint(0, l.StepsPerEpoch()+1)
	if _, _, err := resume(l, past); errcode.Of(err) != errcode.InvalidArgument ||
		!strings.Contains(err.Error(), "past the end of an epoch of") {
		t.Errorf("past the end: %v", err)
	}
	past.WorkerPosition = true // a worker's own position may run past the end
	if e, s, err := resume(l, past); err != nil || e != 1 || s != 0 {
		t.Errorf("a worker's position past the end: (%d, %d), %v", e, s, err)
	}

	identity := newLoader(t, tb, opts)
	defer identity.Close()
	if c := identity.Checkpoint(0, 1); c.PermutationURI != nil || c.PermutationID != "identity" {
		t.Errorf("checkpoint of a table dealt in row order: %+v", c)
	}
	for _, tc := range []struct {
		edit func(*loader.Checkpoint)
		want string
	}{
		{func(c *loader.Checkpoint) {}, `checkpoint permutation_id is "` + split.ID() + `" but this loader's is "identity"`},
		{func(c *loader.Checkpoint) { c.PermutationID = "identity"; c.TableID = "t0" },
			`checkpoint table_id is "t0" but this loader's is "` + tb.ID() + `"`},
		{func(c *loader.Checkpoint) { c.PermutationID = "identity"; c.TableVersion = "7" }, `checkpoint table_version is "7"`},
		{func(c *loader.Checkpoint) { c.PermutationID = "identity"; c.NumSplits = 8 }, `checkpoint num_splits is 8 but this loader's is 4`},
		{func(c *loader.Checkpoint) { c.PermutationID = "identity"; c.GlobalBatchSize = 16 }, `checkpoint global_batch_size is 16`},
		{func(c *loader.Checkpoint) { c.PermutationID = "identity"; c.ShuffleSeed = 4 }, `checkpoint shuffle_seed is 4 but this loader's is 3`},
		// Format 1 binds its table by URI.
		{func(c *loader.Checkpoint) {
			c.PermutationID = "identity"
			c.Format = 1
			c.TableID = ""
			c.TableURI = "file:///elsewhere"
		},
			`checkpoint table_uri is "file:///elsewhere"`},
	} {
		c := l.Checkpoint(0, 1)
		tc.edit(&c)
		if _, _, err := resume(identity, c); errcode.Of(err) != errcode.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v\nwant an error with %s", err, tc.want)
		}
	}
	// Format 1, with the same URI, resumes.
	old := []byte(`{"format": 1, "permutation_id": "identity", "table_uri": "` + tb.URI() + `", "table_version": "` +
		tb.Version() + `", "num_splits": 4, "global_batch_size": 8, "shuffle_seed": 3, "epoch": 1, "steps_consumed": 2}`)
	c1, err := loader.ParseCheckpoint(old, "old.json")
	if err != nil {
		t.Fatal(err)
	}
	if e, s, err := identity.Resume(ctx, c1); err != nil || e != 1 || s != 2 {
		t.Errorf("format 1: (%d, %d), %v", e, s, err)
	}
	// A croupier table's version may be written as a number.
	if c, err := loader.ParseCheckpoint([]byte(`{"format": 1, "table_version": 3, "global_batch_size": 8}`), "v.json"); err != nil ||
		c.TableVersion != "3" {
		t.Errorf("version as a number: %q, %v", c.TableVersion, err)
	}
	for text, want := range map[string]string{
		`{"format": 3}`: "state dict format is 3, this croupier reads formats [1 2]",
		`{"format": 2, "global_batch_size": 8, "epoch": -1}`: "epoch must be an integer >= 0, got -1",
		`{"format": 2, "shuffle_seed": -1}`:                  `"shuffle_seed" is number -1`,
		`[]`:                                                 "state.json",
	} {
		if _, err := loader.ParseCheckpoint([]byte(text), "state.json"); errcode.Of(err) != errcode.InvalidArgument ||
			!strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error with %s", text, err, want)
		}
	}
}

// TestCheckpointResumeTokens: a checkpoint of token-budget steps records the
// budget and oversize, resumes at another world size, moves to the next
// epoch after that epoch's own last step, and is refused by a loader of
// another budget or of sample-count steps.
func TestCheckpointResumeTokens(t *testing.T) {
	ctx := context.Background()
	s := tokenPermutation(t, 300)
	opts := loader.Options{TokensPerStep: 40, ShuffleSeed: 3}
	l, err := loader.New(s.Permutations().Table(), s, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	steps1, err := l.EpochSteps(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(l.Checkpoint(1, steps1))
	if err != nil {
		t.Fatal(err)
	}
	c, err := loader.ParseCheckpoint(data, "state.json")
	if err != nil {
		t.Fatal(err)
	}
	if c.TokensPerStep != 40 || c.Oversize != loader.OversizeError || c.GlobalBatchSize != 0 {
		t.Fatalf("checkpoint %s", data)
	}
	other, err := loader.New(s.Permutations().Table(), s, loader.Options{TokensPerStep: 40, ShuffleSeed: 3, WorldSize: 3, Rank: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if e, step, err := other.Resume(ctx, c); err != nil || e != 2 || step != 0 {
		t.Fatalf("end of epoch 1 (%d steps): resumes at (%d, %d), %v; want (2, 0)", steps1, e, step, err)
	}
	c.StepsConsumed = steps1 - 1
	if e, step, err := other.Resume(ctx, c); err != nil || e != 1 || step != steps1-1 {
		t.Fatalf("resumes at (%d, %d), %v; want (1, %d)", e, step, err, steps1-1)
	}
	for _, o := range []loader.Options{{TokensPerStep: 41, ShuffleSeed: 3}, {GlobalBatchSize: 8, ShuffleSeed: 3}} {
		into, err := loader.New(s.Permutations().Table(), s, o)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := into.Resume(ctx, c); errcode.Of(err) != errcode.InvalidArgument || !strings.Contains(err.Error(), "checkpoint tokens_per_step is 40") {
			t.Errorf("into %+v: %v", o, err)
		}
		into.Close()
	}
	if _, err := loader.ParseCheckpoint([]byte(`{"format": 2, "global_batch_size": 8, "tokens_per_step": 40}`), "both.json"); errcode.Of(err) != errcode.InvalidArgument {
		t.Errorf("a checkpoint with a batch size and a token budget: %v", err)
	}
}

// TestCheckpointRefusesNull: a null where a value is due is refused, naming
// the key, rather than read as zero.
func TestCheckpointRefusesNull(t *testing.T) {
	_, err := loader.ParseCheckpoint([]byte(`{"format": 2, "global_batch_size": 8, "steps_consumed": null}`), "state.json")
	if errcode.Of(err) != errcode.InvalidArgument || !strings.Contains(err.Error(), `"steps_consumed" is null`) {
		t.Errorf("steps_consumed null: %v", err)
	}
	if _, err := loader.ParseCheckpoint([]byte(`{"format": 2, "global_batch_size": 8, "permutation_uri": null}`), "state.json"); err != nil {
		t.Errorf("permutation_uri null: %v", err)
	}
}

// TestCheckpointsRefuseUnknownKeys: following's and a mixture's checkpoints
// refuse a key they do not have, naming the nearest, as a dataset's and
// options do: a misspelt key would otherwise read as absent.
func TestCheckpointsRefuseUnknownKeys(t *testing.T) {
	for _, c := range []struct {
		parse func([]byte, string) error
		text  string
		want  string
	}{
		{func(b []byte, w string) error { _, err := loader.ParseFollowCheckpoint(b, w); return err },
			`{"format": 1, "kind": "follow", "stepz_consumed": 3}`, `unknown key "stepz_consumed" (did you mean "steps_consumed"?)`},
		{func(b []byte, w string) error { _, err := loader.ParseFollowCheckpoint(b, w); return err },
			`{"format": 1, "kind": "follow", "follow": {"rows_per_rond": 3}}`, `unknown key "follow.rows_per_rond"`},
		{func(b []byte, w string) error { _, err := loader.ParseMixtureCheckpoint(b, w); return err },
			`{"format": 1, "seeds": 3}`, `unknown key "seeds" (did you mean "seed"?)`},
	} {
		if err := c.parse([]byte(c.text), "state.json"); errcode.Of(err) != errcode.InvalidArgument || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %s", c.text, err, c.want)
		}
	}
}
