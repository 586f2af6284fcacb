package loader_test

import (
	"context"
	"encoding/json"
	"io"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/loader"
)

// slowWriter appends versions to a followed table after the last step of
// each round a learner trains on, many at a time: generators faster than
// the learner, landing at points of the learning that do not depend on
// timing.
type slowWriter struct {
	t       *testing.T
	uri     string
	next    int64 // the id of the next row
	latest  int64 // the latest version
	rounds  int   // rounds after which versions land
	each    int   // versions landing after a round
	rowsPer int64 // rows of each
}

func (w *slowWriter) land() {
	if w.rounds == 0 {
		return
	}
	w.rounds--
	for range w.each {
		appendRows(w.t, w.uri, w.next, []int64{w.rowsPer})
		w.next += w.rowsPer
		w.latest++
	}
}

// learned is what a slow learner was dealt: each global step's row ids,
// sorted, and the rows each round skipped, by round.
type learned struct {
	steps   map[int64][]int64
	skipped map[int64]int64
	total   int64 // rows the streams skipped (FollowStats), summed over the rounds they formed
}

// learn follows w's table at world ranks, a global step at a time, each
// rank in turn, from the checkpoint c (nil: from the start), while w lands
// versions after each round's last step; it stops after global step stop
// (-1: when the streams end) and returns what it was dealt and the
// checkpoint after its last step, through JSON. Every row dealt must be of
// a version at most k behind the newest committed when it is dealt.
func learn(t *testing.T, w *slowWriter, opts loader.Options, fo loader.FollowOptions, k int64, world int, c []byte, stop int64) (learned, []byte) {
	t.Helper()
	ctx := context.Background()
	out := learned{steps: map[int64][]int64{}, skipped: map[int64]int64{}}
	var streams []*loader.FollowStream
	var f0 *loader.Follower
	var step int64
	for rank := range world {
		opts.Rank, opts.WorldSize = int64(rank), int64(world)
		f := newFollower(t, w.uri, opts, fo)
		pos := f.Start()
		step = 0
		if c != nil {
			cp, err := loader.ParseFollowCheckpoint(c, "checkpoint")
			if err != nil {
				t.Fatal(err)
			}
			if pos, step, err = f.Resume(cp); err != nil {
				t.Fatal(err)
			}
		}
		s, err := f.Stream(ctx, pos, step, loader.StreamOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		streams = append(streams, s)
		if rank == 0 {
			f0 = f
		}
	}
	var at loader.FollowPosition
	for ; stop < 0 || step <= stop; step++ {
		var r loader.Round
		for rank, s := range streams {
			b, err := s.Next(ctx)
			if err == io.EOF && rank == 0 {
				for _, s := range streams[1:] {
					if _, err := s.Next(ctx); err != io.EOF {
						t.Fatalf("rank 0 ended before step %d, another rank did not: %v", step, err)
					}
				}
				for _, s := range streams {
					out.total += s.FollowStats().SkippedRows
				}
				return out, nil
			}
			if err != nil {
				t.Fatalf("rank %d, step %d: %v", rank, step, err)
			}
			if b.Step != step {
				t.Fatalf("rank %d dealt step %d, not %d", rank, b.Step, step)
			}
			ids := b.Record.Column(0).(*array.Int64).Int64Values()
			versions := b.Record.Column(b.Record.Schema().FieldIndices(loader.VersionColumn)[0]).(*array.Int64).Int64Values()
			for i, v := range versions {
				if v < w.latest-k {
					t.Fatalf("step %d: row %d of version %d dealt while version %d is the newest: more than %d behind", step, ids[i], v, w.latest, k)
				}
			}
			out.steps[step] = append(out.steps[step], ids...)
			b.Record.Release()
			if r = s.Round(); rank > 0 && r.SkippedRows != out.skipped[r.Round] {
				t.Fatalf("round %d skips %d rows on rank %d, %d on rank 0", r.Round, r.SkippedRows, rank, out.skipped[r.Round])
			}
			out.skipped[r.Round] = r.SkippedRows
		}
		slices.Sort(out.steps[step])
		at = r.FollowPosition
		if step == r.Step+r.Steps-1 {
			at = r.Next()
			w.land()
		}
	}
	for _, s := range streams {
		out.total += s.FollowStats().SkippedRows
	}
	cp, err := json.Marshal(f0.Checkpoint(at, stop+1))
	if err != nil {
		t.Fatal(err)
	}
	return out, cp
}

// TestFollowBoundedByNewest checks max_versions_behind_newest on a learner
// slower than its writers: four versions land after each round, and every
// row dealt is of a version at most k behind the newest committed when it
// is dealt, the learner skipping ahead; the steps and the rows each round
// skips are the same at 1, 2 and 3 ranks, and after a run at 2 ranks is
// stopped at any step, versions land, and it resumes at 3 ranks from its
// checkpoint.
func TestFollowBoundedByNewest(t *testing.T) {
	const k = 2
	opts := loader.Options{GlobalBatchSize: 12, Columns: []string{"id"}, ShuffleSeed: 7, MemoryBudget: 1 << 20}
	fo := loader.FollowOptions{WaitTimeout: 20 * time.Millisecond, PollInterval: time.Millisecond, MaxVersionsBehindNewest: new(int64)}
	*fo.MaxVersionsBehindNewest = k
	writer := func() *slowWriter {
		// 18 rows a version: a round of one version deals one step of 12
		// and carries 6, which the next round skips when it skips ahead.
		w := &slowWriter{t: t, uri: growingTable(t, []int64{18}), next: 18, latest: 1, rounds: 4, each: 4, rowsPer: 18}
		appendRows(t, w.uri, w.next, []int64{18, 18, 18})
		w.next, w.latest = w.next+3*18, 4
		return w
	}
	want, _ := learn(t, writer(), opts, fo, k, 1, nil, -1)
	if want.total == 0 || len(want.steps) < 6 {
		t.Fatalf("the slow learner skipped %d rows in %d steps: the test deals too little", want.total, len(want.steps))
	}
	var sum int64
	for _, n := range want.skipped {
		sum += n
	}
	if sum != want.total {
		t.Fatalf("the rounds dealt skip %d rows, the stream counts %d", sum, want.total)
	}
	for world := 2; world <= 3; world++ {
		got, _ := learn(t, writer(), opts, fo, k, world, nil, -1)
		if !maps.EqualFunc(got.steps, want.steps, slices.Equal) || !maps.Equal(got.skipped, want.skipped) || got.total != int64(world)*want.total {
			t.Fatalf("%d ranks: %d steps skipping %d rows (%v), 1 rank: %d steps skipping %d (%v)",
				world, len(got.steps), got.total, got.skipped, len(want.steps), want.total, want.skipped)
		}
	}
	for stop := range int64(len(want.steps)) {
		w := writer()
		before, c := learn(t, w, opts, fo, k, 2, nil, stop)
		after, _ := learn(t, w, opts, fo, k, 3, c, -1)
		steps := maps.Clone(before.steps)
		maps.Copy(steps, after.steps)
		skipped := maps.Clone(before.skipped)
		maps.Copy(skipped, after.skipped)
		if !maps.EqualFunc(steps, want.steps, slices.Equal) || !maps.Equal(skipped, want.skipped) {
			t.Fatalf("stopped after step %d and resumed: %d steps skipping %v, uninterrupted: %d steps skipping %v",
				stop, len(steps), skipped, len(want.steps), want.skipped)
		}
	}
}

// TestFollowDecisionsAreTheTables checks that the first follower to need a
// round decides its newest version and records it in the table: another
// follower of the run forming the round after more versions landed deals
// the same rows, as does an observer (Observe), while one of another run
// decides afresh, and an observer of that run, before, forms no round.
func TestFollowDecisionsAreTheTables(t *testing.T) {
	ctx := context.Background()
	uri := growingTable(t, []int64{8, 8, 8})
	opts := loader.Options{GlobalBatchSize: 8, Columns: []string{"id"}}
	k := int64(0)
	fo := loader.FollowOptions{MaxVersionsBehindNewest: &k, WaitTimeout: time.Millisecond}
	first, _, err := newFollower(t, uri, opts, fo).Round(ctx, loader.FollowPosition{Carry: []uint64{}})
	if err != nil {
		t.Fatal(err)
	}
	appendRows(t, uri, 24, []int64{8, 8})
	again, _, err := newFollower(t, uri, opts, fo).Round(ctx, loader.FollowPosition{Carry: []uint64{}})
	if err != nil {
		t.Fatal(err)
	}
	observer := newFollower(t, uri, opts, fo)
	observer.Observe()
	seen, _, err := observer.Round(ctx, loader.FollowPosition{Carry: []uint64{}})
	if err != nil || seen.Newest != 3 {
		t.Fatalf("an observer of the run forms round 0 decided at version %d (%v), not 3", seen.Newest, err)
	}
	// Steps, which waits for nothing, reads the decision too.
	observer = newFollower(t, uri, opts, fo)
	observer.Observe()
	dealt, err := observer.Steps(ctx, loader.FollowPosition{Carry: []uint64{}}, 0, 1)
	if err != nil || len(dealt) != 1 {
		t.Fatalf("an observer of the run deals step 0 as %v (%v)", dealt, err)
	}
	fo.Run = "another"
	observer = newFollower(t, uri, opts, fo)
	observer.Observe()
	if _, _, err := observer.Round(ctx, loader.FollowPosition{Carry: []uint64{}}); err != io.EOF {
		t.Fatalf("an observer of a run that decided nothing formed a round: %v", err)
	}
	other, _, err := newFollower(t, uri, opts, fo).Round(ctx, loader.FollowPosition{Carry: []uint64{}})
	if err != nil {
		t.Fatal(err)
	}
	if first.Newest != 3 || first.Version != 3 || first.SkippedRows != 16 || again.Newest != 3 || again.Version != 3 ||
		other.Newest != 5 || other.Version != 5 || other.SkippedRows != 32 {
		t.Fatalf("rounds 0 decided at versions %d, %d and %d (another run) end at %d, %d and %d, skipping %d, %d and %d rows",
			first.Newest, again.Newest, other.Newest, first.Version, again.Version, other.Version, first.SkippedRows, again.SkippedRows, other.SkippedRows)
	}
	tb, err := table.Open(ctx, uri)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	if _, err := tb.Decide(ctx, "../escape", []byte("{}")); err == nil {
		t.Fatal("a decision named ../escape was recorded")
	}
}
