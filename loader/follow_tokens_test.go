package loader_test

import (
	"context"
	"io"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/internal/seedtest"
	"github.com/croupier-data/croupier/loader"
	"github.com/croupier-data/croupier/permutation"
)

// rollout is one row of a GRPO table the tests follow.
type rollout struct {
	prompt, tokens int64
	reward, abort  bool // reward false: a null reward
}

// rolloutVersion yields rows of rolloutSchema, ids from start on.
func rolloutVersion(t *testing.T, start int64, rows []rollout) array.RecordReader {
	t.Helper()
	b := array.NewRecordBuilder(memory.DefaultAllocator, rolloutSchema)
	defer b.Release()
	for i, r := range rows {
		b.Field(0).(*array.Int64Builder).Append(start + int64(i))
		b.Field(1).(*array.Int64Builder).Append(r.prompt)
		tokens := b.Field(2).(*array.ListBuilder)
		tokens.Append(true)
		for j := range r.tokens {
			tokens.ValueBuilder().(*array.Int32Builder).Append(int32(j))
		}
		if r.reward {
			b.Field(3).(*array.Float64Builder).Append(1)
		} else {
			b.Field(3).(*array.Float64Builder).AppendNull()
		}
		b.Field(4).(*array.BooleanBuilder).Append(r.abort)
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	out, err := array.NewRecordReader(rolloutSchema, []arrow.RecordBatch{rec})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestFollowGroupsInTokenSteps follows a table of GRPO rollouts (each
// version the 1 to 6 samples of each of a few prompts, appended together;
// some aborted, some without a reward) grouped by prompt, filtered, in
// token-budget steps: every rank's share of every step holds whole groups
// of kept samples (no aborted sample, none without a reward, whatever its
// place in its group), each group in one step and on one rank; the ranks'
// tokens differ by at most the step's largest group; every kept row is
// dealt once or left carried at the end; the steps are the same at 1, 2 and
// 3 ranks with 1 or 2 workers, each rank's share that of the reference rule
// (referenceGroupDeal) over the round's order, and from a resume at every
// step.
func TestFollowGroupsInTokenSteps(t *testing.T) {
	rng := rand.New(rand.NewPCG(seedtest.Seed(t), 21))
	ctx := context.Background()
	const budget = 60
	var versions [][]rollout
	var prompt int64
	for range 14 {
		var v []rollout
		for range 1 + rng.IntN(6) {
			for range 1 + rng.IntN(6) {
				v = append(v, rollout{prompt: prompt, tokens: rng.Int64N(10), reward: rng.IntN(6) != 0, abort: rng.IntN(6) == 0})
			}
			prompt++
		}
		versions = append(versions, v)
	}
	uri := "file://" + t.TempDir()
	tb, err := table.Create(ctx, uri, rolloutVersion(t, 0, versions[0]), table.WriteOptions{RowGroupRows: 16})
	if err != nil {
		t.Fatal(err)
	}
	tb.Close()
	var rows []rollout
	rows = append(rows, versions[0]...)
	for _, v := range versions[1:] {
		if _, err := table.Append(ctx, uri, rolloutVersion(t, int64(len(rows)), v), table.WriteOptions{RowGroupRows: 16}); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, v...)
	}
	opts := loader.Options{TokensPerStep: budget, Columns: []string{"id", "tokens"}, ShuffleSeed: 5}
	fo := loader.FollowOptions{GroupBy: []string{"problem_id"}, Filter: "NOT abort AND reward IS NOT NULL", Lengths: "tokens",
		RowsPerRound: 20, ReplayFraction: 0.25, WaitTimeout: time.Millisecond, PollInterval: time.Millisecond}

	// Each rank of world from the position and step, alone: the rows of
	// each of its steps, and its tokens.
	deal := func(world, workers int, pos *loader.FollowPosition, from int64) (map[int64][][]int64, map[int64]loader.Round) {
		steps, rounds := map[int64][][]int64{}, map[int64]loader.Round{}
		for rank := range world {
			opts.Rank, opts.WorldSize = int64(rank), int64(world)
			f := newFollower(t, uri, opts, fo)
			p := f.Start()
			if pos != nil {
				p = *pos
			}
			for w := range workers {
				s, err := f.Stream(ctx, p, from, loader.StreamOptions{Worker: w, NumWorkers: workers, CoalesceBytes: 1 << 20})
				if err != nil {
					t.Fatal(err)
				}
				for b, err := range s.All(ctx) {
					if err != nil {
						t.Fatal(err)
					}
					if b.Steps != 1 {
						t.Fatalf("a token-budget batch of %d steps", b.Steps)
					}
					if steps[b.Step] == nil {
						steps[b.Step] = make([][]int64, world)
					}
					steps[b.Step][rank] = slices.Clone(b.Record.Column(0).(*array.Int64).Int64Values())
					rounds[b.Step] = s.Round()
					b.Record.Release()
				}
				s.Close()
			}
		}
		return steps, rounds
	}
	sorted := func(steps map[int64][][]int64) map[int64][]int64 {
		out := map[int64][]int64{}
		for step, ranks := range steps {
			out[step] = slices.Sorted(slices.Values(slices.Concat(ranks...)))
		}
		return out
	}
	want, rounds := deal(1, 1, nil, 0)
	ref := sorted(want)
	if len(ref) < 4 {
		t.Fatalf("%d steps: the test deals too little", len(ref))
	}
	// Each round's order, as its loader deals it: the rank of every row of
	// every step is the reference rule's (referenceGroupDeal).
	f := newFollower(t, uri, opts, fo)
	type roundOrder struct {
		ids     []uint64
		lengths []uint64
		starts  []int64
	}
	orders := map[int64]roundOrder{}
	for _, r := range rounds {
		if _, ok := orders[r.Round]; ok {
			continue
		}
		r, _, err := f.Round(ctx, r.FollowPosition) // formed by this follower, which reads its versions
		if err != nil {
			t.Fatal(err)
		}
		l, err := f.Loader(ctx, &r)
		if err != nil {
			t.Fatal(err)
		}
		o := l.Order().(interface {
			permutation.GroupedOrder
			permutation.LengthOrder
		})
		var ro roundOrder
		ro.ids, _ = o.RowIDs(ctx, 0, o.Len())
		ro.lengths, _ = o.Lengths(ctx, 0, o.Len())
		ro.starts, _ = o.Groups(ctx, 0, o.Len())
		orders[r.Round] = ro
		l.Close()
	}
	for world := 1; world <= 3; world++ {
		for workers := 1; workers <= 2; workers++ {
			got, _ := deal(world, workers, nil, 0)
			if !maps.EqualFunc(sorted(got), ref, slices.Equal) {
				t.Fatalf("%d ranks, %d workers: other steps than 1 rank's", world, workers)
			}
			for step, ranks := range got {
				r := rounds[step]
				o := orders[r.Round]
				for rank, positions := range referenceGroupDeal(o.starts, o.lengths, budget, world)[step-r.Step] {
					var want []int64
					for _, p := range positions {
						want = append(want, int64(o.ids[p]))
					}
					if !slices.Equal(ranks[rank], want) && len(ranks[rank])+len(want) > 0 {
						t.Fatalf("%d ranks, step %d, rank %d: rows %v, the reference %v", world, step, rank, ranks[rank], want)
					}
				}
			}
			for step, ranks := range got {
				where := map[[2]int64]int{} // the rank of each (prompt, version) group
				var most, least, largest int64 = 0, 1 << 62, 0
				groups := map[[2]int64]int64{}
				for rank, ids := range ranks {
					var tokens int64
					for _, id := range ids {
						r := rows[id]
						if r.abort || !r.reward {
							t.Fatalf("step %d: row %d, which the filter drops, is dealt", step, id)
						}
						key := [2]int64{r.prompt, rounds[step].Round}
						if at, ok := where[key]; ok && at != rank {
							t.Fatalf("step %d: prompt %d on ranks %d and %d", step, r.prompt, at, rank)
						}
						where[key] = rank
						tokens += r.tokens
						groups[key] += r.tokens
					}
					most, least = max(most, tokens), min(least, tokens)
				}
				for _, n := range groups {
					largest = max(largest, n)
				}
				if most-least > largest {
					t.Fatalf("step %d, %d ranks: tokens from %d to %d, the largest group %d", step, world, least, most, largest)
				}
			}
		}
	}
	// A prompt's kept samples are in one step (a replayed group may come
	// again in a later round, whole), and every kept row is dealt.
	first := map[int64]int64{}
	for step := int64(0); step < int64(len(ref)); step++ {
		for _, id := range ref[step] {
			p := rows[id].prompt
			if s, ok := first[p]; ok && s != step && rounds[s].Round == rounds[step].Round {
				t.Fatalf("prompt %d in steps %d and %d of one round", p, s, step)
			}
			if _, ok := first[p]; !ok {
				first[p] = step
			}
		}
	}
	// The rounds after the last step's deal no step: they carry.
	last := rounds[int64(len(ref))-1].Next()
	for {
		r, _, err := f.Round(ctx, last)
		if err == io.EOF {
			break
		}
		if err != nil || r.Steps != 0 {
			t.Fatalf("a round after the last step: %d steps, %v", r.Steps, err)
		}
		last = r.Next()
	}
	var upto int // rows of the versions of the rounds formed
	for _, v := range versions[:last.After] {
		upto += len(v)
	}
	for id, r := range rows[:upto] {
		if dealt := slices.ContainsFunc(slices.Collect(maps.Values(ref)), func(ids []int64) bool { return slices.Contains(ids, int64(id)) }); r.reward && !r.abort && !dealt && !slices.Contains(last.Carry, uint64(id)) {
			t.Fatalf("row %d is kept but neither dealt nor carried", id)
		}
	}
	// Resumed at every step from its round, at 2 ranks.
	for at := range int64(len(ref)) {
		r := rounds[at]
		got, _ := deal(2, 1, &r.FollowPosition, at)
		resumed := sorted(got)
		for step := at; step < int64(len(ref)); step++ {
			if !slices.Equal(resumed[step], ref[step]) {
				t.Fatalf("resumed at step %d: step %d differs", at, step)
			}
		}
		if len(resumed) != len(ref)-int(at) {
			t.Fatalf("resumed at step %d: %d steps, want %d", at, len(resumed), len(ref)-int(at))
		}
	}
}

// TestFollowFilterDropsWholeVersions: a version all of whose rows the
// filter drops adds no group and no row, only its count, also when it is
// the first, and a group whose middle sample is dropped keeps the others.
func TestFollowFilterDropsWholeVersions(t *testing.T) {
	ctx := context.Background()
	uri := "file://" + t.TempDir()
	aborted := []rollout{{prompt: 0, tokens: 3, reward: true, abort: true}, {prompt: 0, tokens: 2, reward: true, abort: true}}
	tb, err := table.Create(ctx, uri, rolloutVersion(t, 0, aborted), table.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tb.Close()
	kept := []rollout{{prompt: 1, tokens: 3, reward: true}, {prompt: 1, tokens: 4}, {prompt: 1, tokens: 1, reward: true}, {prompt: 2, tokens: 2, reward: true}}
	if _, err := table.Append(ctx, uri, rolloutVersion(t, 2, kept), table.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	opts := loader.Options{TokensPerStep: 4, Columns: []string{"id"}}
	fo := loader.FollowOptions{GroupBy: []string{"problem_id"}, Filter: "NOT abort AND reward IS NOT NULL", Lengths: "tokens",
		WaitTimeout: time.Millisecond, PollInterval: time.Millisecond}
	f := newFollower(t, uri, opts, fo)
	r0, _, err := f.Round(ctx, f.Start())
	if err != nil || r0.Steps != 0 || r0.FilteredRows != 2 || r0.NewRows != 0 {
		t.Fatalf("round of the aborted version: %d steps, %d filtered, %d new, %v", r0.Steps, r0.FilteredRows, r0.NewRows, err)
	}
	r1, _, err := f.Round(ctx, r0.Next())
	// Groups {2, 4} (4 tokens; row 3 has no reward) and {5} (2): the first
	// step holds one, the newest is carried.
	if err != nil || r1.Steps != 1 || r1.FilteredRows != 1 || r1.NewRows != 3 || !slices.Equal(r1.Next().Carry, []uint64{5}) {
		t.Fatalf("round of the mixed version: %d steps, %d filtered, %d new, carry %v, %v", r1.Steps, r1.FilteredRows, r1.NewRows, r1.Next().Carry, err)
	}
	l, err := f.Loader(ctx, &r1)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if step, err := l.Step(ctx, 0, 0); err != nil || !slices.Equal(step[0], []uint64{2, 4}) {
		t.Fatalf("the step holds %v, %v; want the group [2 4]", step, err)
	}
}
