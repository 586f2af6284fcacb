package loader_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/internal/tabletest"
	"github.com/croupier-data/croupier/loader"
	"github.com/croupier-data/croupier/permutation"
)

// lengthOrder is an epoch order held in memory: position i is row ids[i], of
// length lengths[i].
type lengthOrder struct{ ids, lengths []uint64 }

func (o lengthOrder) ID() string            { return "test" }
func (o lengthOrder) Len() int64            { return int64(len(o.ids)) }
func (o lengthOrder) LengthsColumn() string { return "n" }
func (o lengthOrder) RowIDs(_ context.Context, a, b int64) ([]uint64, error) {
	return slices.Clone(o.ids[a:b]), nil
}
func (o lengthOrder) Lengths(_ context.Context, a, b int64) ([]uint64, error) {
	return slices.Clone(o.lengths[a:b]), nil
}

// referenceSteps is the step rule of docs/concepts.md ("Token-budget
// steps"), written out plainly: the positions each step holds.
func referenceSteps(lengths []uint64, budget int64) [][]int {
	var steps [][]int
	var cur []int
	var sum int64
	for p, n := range lengths {
		n := int64(n)
		if n > budget { // truncated: a step of its own
			if len(cur) > 0 {
				steps = append(steps, cur)
			}
			steps = append(steps, []int{p})
			cur, sum = nil, 0
			continue
		}
		if sum+n > budget && len(cur) > 0 {
			steps = append(steps, cur)
			cur, sum = nil, 0
		}
		cur = append(cur, p)
		sum += n
	}
	if len(cur) > 0 {
		steps = append(steps, cur)
	}
	return steps
}

// TestTokenStepsProperties checks the token-budget deal against the
// reference rule on seeded random lengths, budgets and world sizes: the same
// steps at every world size, every row once, every step within the budget
// (a row longer than it alone), the ranks' token loads within one row of
// each other, and Place finding each row where its step's shares put it.
func TestTokenStepsProperties(t *testing.T) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(7, 11))
	for trial := range 300 {
		m := 1 + r.IntN(300)
		o := lengthOrder{ids: make([]uint64, m), lengths: make([]uint64, m)}
		maxLen := 1 + r.IntN(64)
		ids := r.Perm(4 * m) // distinct row ids
		for i := range m {
			o.ids[i] = uint64(ids[i])
			o.lengths[i] = uint64(r.IntN(maxLen + 1))
		}
		budget := int64(1 + r.IntN(2*maxLen))
		want := referenceSteps(o.lengths, budget)
		for w := int64(1); w <= 8; w++ {
			d, err := loader.PlanTokens(ctx, o, budget, w, loader.OversizeTruncate)
			if err != nil {
				t.Fatal(err)
			}
			if d.Steps() != int64(len(want)) {
				t.Fatalf("trial %d, W=%d: %d steps, want %d", trial, w, d.Steps(), len(want))
			}
			for step, positions := range want {
				shares, err := d.Shares(ctx, o, int64(step))
				if err != nil {
					t.Fatal(err)
				}
				var got, wantIDs []uint64
				var most, least, longest, total int64 = 0, 1 << 62, 0, 0
				for _, s := range shares {
					got = append(got, s.RowIDs...)
					most, least = max(most, s.Tokens), min(least, s.Tokens)
					total += s.Tokens
					for i, n := range s.Lengths {
						if i > 0 && slices.Index(o.ids, s.RowIDs[i]) < slices.Index(o.ids, s.RowIDs[i-1]) {
							t.Fatalf("trial %d step %d: a rank's rows out of epoch order", trial, step)
						}
						longest = max(longest, min(int64(n), budget))
					}
				}
				for _, p := range positions {
					wantIDs = append(wantIDs, o.ids[p])
				}
				slices.Sort(got)
				slices.Sort(wantIDs)
				if !slices.Equal(got, wantIDs) {
					t.Fatalf("trial %d, W=%d, step %d: rows %v, want %v", trial, w, step, got, wantIDs)
				}
				if most-least > longest {
					t.Fatalf("trial %d, W=%d, step %d: loads from %d to %d, more apart than the longest row %d", trial, w, step, least, most, longest)
				}
				if total > budget {
					t.Fatalf("trial %d, step %d: %d tokens over the budget %d", trial, step, total, budget)
				}
				// Place names the step and rank that deal each position.
				for _, p := range positions {
					gotStep, rank, ok, err := d.Place(ctx, o, int64(p))
					if err != nil || !ok || gotStep != int64(step) || !slices.Contains(shares[rank].RowIDs, o.ids[p]) {
						t.Fatalf("trial %d, W=%d: position %d placed at step %d rank %d (ok %t, %v), want step %d", trial, w, p, gotStep, rank, ok, err, step)
					}
				}
			}
		}
	}
}

// TestTokenStepsOversize: a row longer than the budget is an error naming
// it, unless oversize is truncate.
func TestTokenStepsOversize(t *testing.T) {
	o := lengthOrder{ids: []uint64{10, 11, 12, 13}, lengths: []uint64{3, 9, 2, 2}}
	_, err := loader.PlanTokens(context.Background(), o, 5, 2, loader.OversizeError)
	if errcode.Of(err) != errcode.InvalidArgument || !strings.Contains(err.Error(), "row 11 (position 1") ||
		!strings.Contains(err.Error(), "is 9 long") || !strings.Contains(err.Error(), `oversize="truncate"`) {
		t.Fatalf("oversize row: %v", err)
	}
	d, err := loader.PlanTokens(context.Background(), o, 5, 2, loader.OversizeTruncate)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for step := range d.Steps() {
		p0, p1 := d.Positions(step)
		got = append(got, fmt.Sprint(p0, p1))
	}
	if want := []string{"0 1", "1 2", "2 4"}; !slices.Equal(got, want) {
		t.Fatalf("steps %v, want %v", got, want)
	}
}

// tokenPermutation builds a shuffled permutation of a table of rows whose
// token lists are 1 to 7 long, recording their lengths.
func tokenPermutation(t *testing.T, rows int64) *permutation.Split {
	t.Helper()
	tb := openTable(t, rows)
	p, err := permutation.Build(context.Background(), tb, permutation.Spec{Lengths: "tokens",
		Shuffle: &permutation.ShuffleSpec{Seed: 5}}, "file://"+t.TempDir(), permutation.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p.Splits()[0]
}

// streamTokenSteps deals one rank's steps of an epoch from start with k
// workers and returns the ids of each step.
func streamTokenSteps(t *testing.T, s *permutation.Split, opts loader.Options, epoch, start int64, k int) map[int64][]int64 {
	t.Helper()
	l, err := loader.New(s.Permutations().Table(), s, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	out := map[int64][]int64{}
	for w := range max(k, 1) {
		st, err := l.Stream(context.Background(), loader.StreamOptions{Epoch: epoch, StartStep: start, Worker: w, NumWorkers: k})
		if err != nil {
			t.Fatal(err)
		}
		for b, err := range st.All(context.Background()) {
			if err != nil {
				t.Fatal(err)
			}
			if b.Steps != 1 {
				t.Fatalf("batch of %d steps", b.Steps)
			}
			out[b.Step] = append([]int64{}, b.Record.Column(0).(*array.Int64).Int64Values()...)
			b.Record.Release()
		}
		st.Close()
	}
	return out
}

// TestTokenStepsLoader deals token-budget steps from a real permutation at
// world sizes 1 to 4 with 0 to 3 workers, in two epochs, from the start and
// resumed mid-epoch: every step holds the same rows at every world size and
// worker count, the rows the reference rule gives from the recorded
// lengths, each row of the epoch once.
func TestTokenStepsLoader(t *testing.T) {
	ctx := context.Background()
	const budget = 20
	s := tokenPermutation(t, 600)
	for epoch := range int64(2) {
		order := s.ForEpoch(3, epoch).(permutation.LengthOrder)
		ids, _ := order.RowIDs(ctx, 0, order.Len())
		lengths, _ := order.Lengths(ctx, 0, order.Len())
		want := referenceSteps(lengths, budget)
		for w := int64(1); w <= 4; w++ {
			for k := range 4 {
				start := int64((int(w) + k) % 3 * len(want) / 3) // resume at 0, a third or two thirds
				union := map[int64][]int64{}
				for r := range w {
					opts := loader.Options{TokensPerStep: budget, WorldSize: w, Rank: r, ShuffleSeed: 3, Columns: []string{"id", "tokens"}}
					for step, got := range streamTokenSteps(t, s, opts, epoch, start, k) {
						union[step] = append(union[step], got...)
					}
				}
				if len(union) != len(want)-int(start) {
					t.Fatalf("epoch %d, W=%d, K=%d from %d: %d steps, want %d", epoch, w, k, start, len(union), len(want)-int(start))
				}
				for step, positions := range want[start:] {
					var wantIDs []int64
					for _, p := range positions {
						wantIDs = append(wantIDs, int64(ids[p]))
					}
					got := union[start+int64(step)]
					slices.Sort(got)
					slices.Sort(wantIDs)
					if !slices.Equal(got, wantIDs) {
						t.Fatalf("epoch %d, W=%d, K=%d, step %d: rows %v, want %v", epoch, w, k, start+int64(step), got, wantIDs)
					}
					var tokens int
					for _, id := range got {
						tokens += len(tabletest.Tokens(id))
					}
					if tokens > budget {
						t.Fatalf("step %d holds %d tokens", step, tokens)
					}
				}
			}
		}
	}
}

// TestTokenStepsEmptyShare: a step with fewer rows than ranks leaves a rank
// a batch of no rows, so that every rank still makes every step.
func TestTokenStepsEmptyShare(t *testing.T) {
	s := tokenPermutation(t, 40)
	opts := loader.Options{TokensPerStep: 7, WorldSize: 4, Rank: 3, Columns: []string{"id"}}
	steps := streamTokenSteps(t, s, opts, 0, 0, 0)
	l, err := loader.New(s.Permutations().Table(), s, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if int64(len(steps)) != l.StepsPerEpoch() {
		t.Fatalf("%d steps, want %d", len(steps), l.StepsPerEpoch())
	}
	empty := 0
	for _, ids := range steps {
		if len(ids) == 0 {
			empty++
		}
	}
	if empty == 0 {
		t.Fatalf("no step left rank 3 without a row: %v", steps)
	}
}

// TestTokenStepsOptions: options that do not fit token-budget steps fail
// at construction, naming the fix.
func TestTokenStepsOptions(t *testing.T) {
	s := tokenPermutation(t, 50)
	tb := s.Permutations().Table()
	l, err := loader.New(tb, s, loader.Options{TokensPerStep: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := l.Stream(context.Background(), loader.StreamOptions{CoalesceBytes: 1 << 20}); errcode.Of(err) != errcode.InvalidArgument ||
		!strings.Contains(err.Error(), "a batch is one step") {
		t.Errorf("coalesced token-budget steps: %v", err)
	}
	for _, tc := range []struct {
		order permutation.Order
		opts  loader.Options
		want  string
	}{
		{s, loader.Options{TokensPerStep: 10, GlobalBatchSize: 4}, "give one"},
		{s, loader.Options{TokensPerStep: 10, DropLast: true}, "drop_last does not apply"},
		{s, loader.Options{TokensPerStep: 10, Oversize: "drop"}, `oversize "drop"`},
		{s, loader.Options{TokensPerStep: -1}, "tokens_per_step is -1"},
		{s, loader.Options{TokensPerStep: 5}, `is 6 long in "tokens", more than tokens_per_step 5`},
		{permutation.Identity{N: 50}, loader.Options{TokensPerStep: 10}, "lengths=<column>"},
	} {
		_, err := loader.New(tb, tc.order, tc.opts)
		if errcode.Of(err) != errcode.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.opts, err, tc.want)
		}
	}
}
