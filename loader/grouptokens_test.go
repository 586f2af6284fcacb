package loader_test

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"

	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/internal/seedtest"
	"github.com/croupier-data/croupier/internal/tabletest"
	"github.com/croupier-data/croupier/loader"
	"github.com/croupier-data/croupier/permutation"
)

// groupLengthOrder is a grouped epoch order held in memory: position i is
// row ids[i], of length lengths[i], and groups start at starts (then the
// end).
type groupLengthOrder struct {
	lengthOrder
	starts []int64
}

func (o groupLengthOrder) Groups(_ context.Context, a, b int64) ([]int64, error) {
	i, _ := slices.BinarySearch(o.starts[:len(o.starts)-1], a)
	j, _ := slices.BinarySearch(o.starts[:len(o.starts)-1], b)
	if i == j {
		return nil, nil
	}
	return slices.Clone(o.starts[i : j+1]), nil
}

// referenceGroupDeal is the rule of docs/concepts.md ("Token-budget steps",
// groups), written out plainly: each step's shares, rank by rank, as
// positions. A group's tokens are its rows' lengths, each at most T; groups
// are taken in order while the step's tokens and theirs fit T; a group of
// more than T is a step of its own (oversize="truncate"); a step's groups
// go, most tokens first (the earlier of equal ones first), to the rank of
// fewest tokens (the lowest of equal ones), and a rank lists its groups in
// order.
func referenceGroupDeal(starts []int64, lengths []uint64, budget int64, w int) [][][]int64 {
	n := len(starts) - 1
	tokens := make([]int64, n)
	raw := make([]int64, n)
	for g := range n {
		for p := starts[g]; p < starts[g+1]; p++ {
			tokens[g] += min(int64(lengths[p]), budget)
			raw[g] += int64(lengths[p])
		}
	}
	var steps [][]int // groups of each step
	var sum int64
	for g := range n {
		switch {
		case raw[g] > budget:
			steps = append(steps, []int{g})
			sum = budget + 1 // nothing joins it
		case len(steps) == 0 || sum+raw[g] > budget:
			steps = append(steps, []int{g})
			sum = raw[g]
		default:
			steps[len(steps)-1] = append(steps[len(steps)-1], g)
			sum += raw[g]
		}
	}
	var out [][][]int64
	for _, groups := range steps {
		byTokens := slices.Clone(groups)
		slices.SortStableFunc(byTokens, func(a, b int) int { return int(tokens[b] - tokens[a]) })
		load := make([]int64, w)
		owner := map[int]int{}
		for _, g := range byTokens {
			r := 0
			for i := range load {
				if load[i] < load[r] {
					r = i
				}
			}
			owner[g] = r
			load[r] += tokens[g]
		}
		shares := make([][]int64, w)
		for _, g := range groups {
			for p := starts[g]; p < starts[g+1]; p++ {
				shares[owner[g]] = append(shares[owner[g]], p)
			}
		}
		out = append(out, shares)
	}
	return out
}

// TestGroupTokenStepsProperties checks token-budget steps of a grouped
// order against the reference rule on seeded random groups, lengths,
// budgets and world sizes: each rank's rows are exactly the reference's; so
// every group is whole in one step and on one rank, every row is dealt once,
// the steps are the same at every world size, a step holds at most T tokens
// unless it is one group longer than T, and the ranks' loads differ by at
// most the step's largest group; Place finds each row where its share is.
func TestGroupTokenStepsProperties(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seedtest.Seed(t), 13))
	for trial := range 300 {
		var o groupLengthOrder
		maxLen, maxGroup := 1+rng.IntN(40), 1+rng.IntN(8)
		ids := rng.Perm(1000)
		for p := 0; p < 1+rng.IntN(200); {
			o.starts = append(o.starts, int64(p))
			for range 1 + rng.IntN(maxGroup) {
				o.ids = append(o.ids, uint64(ids[p]))
				o.lengths = append(o.lengths, uint64(rng.IntN(maxLen+1)))
				p++
			}
		}
		o.starts = append(o.starts, int64(len(o.ids)))
		budget := int64(1 + rng.IntN(3*maxLen*maxGroup/2+1))
		var steps int64
		for w := 1; w <= 6; w++ {
			want := referenceGroupDeal(o.starts, o.lengths, budget, w)
			d, err := loader.PlanTokens(ctx, o, budget, int64(w), loader.OversizeTruncate)
			if err != nil {
				t.Fatal(err)
			}
			if d.Steps() != int64(len(want)) || (w > 1 && d.Steps() != steps) {
				t.Fatalf("trial %d, W=%d: %d steps, the reference %d", trial, w, d.Steps(), len(want))
			}
			steps = d.Steps()
			for step, ref := range want {
				shares, err := d.Shares(ctx, o, int64(step))
				if err != nil {
					t.Fatal(err)
				}
				var most, least, largest, total int64 = 0, 1 << 62, 0, 0
				for r, sh := range shares {
					var wantIDs []uint64
					for _, p := range ref[r] {
						wantIDs = append(wantIDs, o.ids[p])
					}
					if !slices.Equal(sh.RowIDs, wantIDs) {
						t.Fatalf("trial %d, W=%d, step %d, rank %d: rows %v, the reference %v", trial, w, step, r, sh.RowIDs, wantIDs)
					}
					most, least, total = max(most, sh.Tokens), min(least, sh.Tokens), total+sh.Tokens
					for _, id := range sh.RowIDs {
						p := int64(slices.Index(o.ids, id))
						if at, rank, ok, err := d.Place(ctx, o, p); err != nil || !ok || at != int64(step) || rank != int64(r) {
							t.Fatalf("trial %d: Place(%d) = step %d rank %d %v %v, want step %d rank %d", trial, p, at, rank, ok, err, step, r)
						}
					}
				}
				p0, p1 := d.Positions(int64(step))
				g0, _ := slices.BinarySearch(o.starts, p0)
				g1, _ := slices.BinarySearch(o.starts, p1)
				for g := g0; g < g1; g++ {
					var n int64
					for p := o.starts[g]; p < o.starts[g+1]; p++ {
						n += min(int64(o.lengths[p]), budget)
					}
					largest = max(largest, n)
				}
				if o.starts[g0] != p0 || o.starts[g1] != p1 {
					t.Fatalf("trial %d, step %d: positions [%d, %d) cut a group", trial, step, p0, p1)
				}
				if most-least > largest || (total > budget && g1-g0 != 1) {
					t.Fatalf("trial %d, W=%d, step %d: loads from %d to %d, %d in all of budget %d, largest group %d",
						trial, w, step, least, most, total, budget, largest)
				}
			}
		}
	}
}

// TestGroupTokenStepsOversize: a group longer than the budget fails naming
// its first row and size unless oversize="truncate".
func TestGroupTokenStepsOversize(t *testing.T) {
	o := groupLengthOrder{lengthOrder{ids: []uint64{5, 6, 7, 8}, lengths: []uint64{3, 4, 2, 1}}, []int64{0, 2, 4}}
	_, err := loader.PlanTokens(context.Background(), o, 6, 2, loader.OversizeError)
	if err == nil || !strings.Contains(err.Error(), "the group of 2 rows from row 5 (position 0 of test) is 7 long in \"n\", more than tokens_per_step 6") {
		t.Fatalf("err = %v", err)
	}
	d, err := loader.PlanTokens(context.Background(), o, 6, 2, loader.OversizeTruncate)
	if err != nil || d.Steps() != 2 {
		t.Fatalf("%v, %v", d, err)
	}
}

// rolloutSchema is a table of GRPO rollouts: each prompt's samples share a
// problem_id, tokens are their tokens, and a filter drops the aborted ones
// and those without a reward.
var rolloutSchema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "problem_id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "tokens", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32)},
	{Name: "reward", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	{Name: "abort", Type: arrow.FixedWidthTypes.Boolean},
}, nil)

// grpoRollouts writes a table of groups of 1 to 6 samples of 0 to 12 tokens,
// scattered over row groups of 32 rows, about one in eight aborted and one
// in eight without a reward. It returns the table and the kept rows' keys.
func grpoRollouts(t *testing.T, groups int) (*table.Table, map[int64]int64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seedtest.Seed(t), 17))
	var keys []int64
	for g := range groups {
		for range 1 + rng.IntN(6) {
			keys = append(keys, int64(g))
		}
	}
	rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	b := array.NewRecordBuilder(memory.DefaultAllocator, rolloutSchema)
	defer b.Release()
	kept := map[int64]int64{}
	for i, k := range keys {
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		b.Field(1).(*array.Int64Builder).Append(k)
		tokens := b.Field(2).(*array.ListBuilder)
		tokens.Append(true)
		for j := range rng.IntN(13) {
			tokens.ValueBuilder().(*array.Int32Builder).Append(int32(j))
		}
		reward, abort := rng.IntN(8) != 0, rng.IntN(8) == 0
		if reward {
			b.Field(3).(*array.Float64Builder).Append(rng.Float64())
		} else {
			b.Field(3).(*array.Float64Builder).AppendNull()
		}
		b.Field(4).(*array.BooleanBuilder).Append(abort)
		if reward && !abort {
			kept[int64(i)] = k
		}
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rollouts.parquet"), tabletest.EncodeRecord(t, rec, parquet.WithMaxRowGroupLength(32)), 0o644); err != nil {
		t.Fatal(err)
	}
	tb, err := table.Open(context.Background(), "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tb.Close() })
	return tb, kept
}

// TestGroupTokenStepsLoader deals a GRPO learner's steps from a real
// permutation: rollouts filtered (no aborted sample, none without a
// reward), grouped by prompt, shuffled, with their token counts, in steps
// of 80 tokens (a group holds at most 72), at world sizes 1 to 3 with 0 to 2 workers, in two epochs,
// from the start and resumed mid-epoch. Every rank's rows of every step are
// those of the reference rule applied to the epoch order (so every prompt's
// kept samples are whole in one step on one rank, and loads within one
// group); every kept row is dealt once an epoch, no other row ever.
func TestGroupTokenStepsLoader(t *testing.T) {
	ctx := context.Background()
	const budget = 80
	tb, kept := grpoRollouts(t, 150)
	p, err := permutation.Build(ctx, tb, permutation.Spec{Filter: "NOT abort AND reward IS NOT NULL", GroupBy: []string{"problem_id"},
		Lengths: "tokens", Shuffle: &permutation.ShuffleSpec{Seed: 9}}, "file://"+t.TempDir(), permutation.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	s := p.Splits()[0]
	for epoch := range int64(2) {
		order := s.ForEpoch(3, epoch).(interface {
			permutation.GroupedOrder
			permutation.LengthOrder
		})
		ids, _ := order.RowIDs(ctx, 0, order.Len())
		lengths, _ := order.Lengths(ctx, 0, order.Len())
		starts, _ := order.Groups(ctx, 0, order.Len())
		if len(ids) != len(kept) {
			t.Fatalf("the permutation keeps %d rows, the filter %d", len(ids), len(kept))
		}
		for w := 1; w <= 3; w++ {
			want := referenceGroupDeal(starts, lengths, budget, w)
			for k := range 3 {
				start := int64((w + k) % 3 * len(want) / 3) // from the start, a third or two thirds in
				for r := range w {
					opts := loader.Options{TokensPerStep: budget, WorldSize: int64(w), Rank: int64(r), ShuffleSeed: 3, Columns: []string{"id", "problem_id"}}
					got := streamTokenSteps(t, s, opts, epoch, start, k)
					if len(got) != len(want)-int(start) {
						t.Fatalf("epoch %d, W=%d, K=%d, rank %d from %d: %d steps, want %d", epoch, w, k, r, start, len(got), len(want)-int(start))
					}
					for step := start; step < int64(len(want)); step++ {
						var wantIDs []int64
						for _, p := range want[step][r] {
							wantIDs = append(wantIDs, int64(ids[p]))
						}
						if !slices.Equal(got[step], wantIDs) && !(len(got[step]) == 0 && len(wantIDs) == 0) {
							t.Fatalf("epoch %d, W=%d, K=%d, step %d, rank %d: rows %v, want %v", epoch, w, k, step, r, got[step], wantIDs)
						}
					}
				}
			}
		}
		// The reference itself: every kept row once, each prompt's kept
		// samples in one step on one rank.
		where := map[int64][2]int{}
		for step, shares := range referenceGroupDeal(starts, lengths, budget, 2) {
			for r, share := range shares {
				for _, p := range share {
					key := kept[int64(ids[p])]
					if at, ok := where[key]; ok && at != [2]int{step, r} {
						t.Fatalf("epoch %d: prompt %d at step %d rank %d and at %v", epoch, key, step, r, at)
					}
					where[key] = [2]int{step, r}
				}
			}
		}
		dealtKeys := map[int64]bool{}
		for _, k := range kept {
			dealtKeys[k] = true
		}
		if len(where) != len(dealtKeys) {
			t.Fatalf("epoch %d: %d prompts dealt, %d kept", epoch, len(where), len(dealtKeys))
		}
	}
}
