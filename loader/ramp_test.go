package loader_test

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/parquet"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/internal/s3test"
	"github.com/croupier-data/croupier/internal/seedtest"
	"github.com/croupier-data/croupier/internal/tabletest"
	"github.com/croupier-data/croupier/loader"
	"github.com/croupier-data/croupier/permutation"
)

// TestRampDealsTheDealingOrder deals random setups from tables on a remote
// store, where the first horizons are short and grow (horizon.go), and checks
// every step against the dealing order: full shuffles, token-budget steps and
// groups, at random world sizes and ranks, with workers taking turns at steps
// or runs or sharing steps, steps coalesced, and budgets from a few steps to
// the whole epoch, so that the ramp, the budget and the ends of horizons
// fall anywhere. Where a horizon starts or ends never changes a step's rows.
func TestRampDealsTheDealingOrder(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seedtest.Seed(t), 11))
	s, err := s3test.Start("bkt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	// A store whose reads take longer than a disk cache's: on one as fast
	// as local files the ramp ends after the first horizon.
	s.SetFaults(s3test.Faults{FirstByte: 3 * time.Millisecond})
	// Pages of 4 rows: the ramp goes on until a horizon takes an eighth of
	// the table's pages' worth of rows.
	rec := tabletest.Record(0, 600)
	defer rec.Release()
	small := tabletest.EncodeRecord(t, rec, parquet.WithMaxRowGroupLength(40), parquet.WithDataPageSize(1),
		parquet.WithBatchSize(4), parquet.WithPageIndexEnabled(true))
	if err := s.Put("bkt", "rows/part-0.parquet", small); err != nil {
		t.Fatal(err)
	}
	var keys []int64
	for g := range 150 {
		for range 1 + rng.IntN(4) {
			keys = append(keys, int64(g))
		}
	}
	rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	dir := t.TempDir()
	tabletest.WriteGroups(t, dir, keys, 40)
	data, err := os.ReadFile(filepath.Join(dir, "groups.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put("bkt", "groups/groups.parquet", data); err != nil {
		t.Fatal(err)
	}
	type dealt struct {
		tb    *table.Table
		split *permutation.Split
	}
	order := func(prefix string, spec permutation.Spec) dealt {
		tb, err := table.Open(ctx, s.URI("bkt", prefix))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tb.Close() })
		p, err := permutation.Build(ctx, tb, spec, "file://"+t.TempDir(), permutation.BuildOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		return dealt{tb, p.Splits()[0]}
	}
	orders := map[string]dealt{
		"full":   order("rows", permutation.Spec{Shuffle: &permutation.ShuffleSpec{Seed: 1}}),
		"tokens": order("rows", permutation.Spec{Lengths: "tokens", Shuffle: &permutation.ShuffleSpec{Seed: 2}}),
		"groups": order("groups", permutation.Spec{GroupBy: []string{"problem_id"}, Shuffle: &permutation.ShuffleSpec{Seed: 3}}),
	}
	ramped := false // a stream with the whole epoch in its budget planned horizons that grew
	for i := range 30 {
		kind := []string{"full", "tokens", "groups"}[i%3]
		w := 1 + rng.Int64N(2)
		opts := loader.Options{GlobalBatchSize: 4 * w * (1 + rng.Int64N(3)), WorldSize: w, Rank: rng.Int64N(w),
			Columns: []string{"id"}, MemoryBudget: []int64{24 << 10, 48 << 10, 256 << 10, 64 << 20}[rng.IntN(4)]}
		if i < 3 { // of each kind one whose epoch fits its budget: its horizons ramp up
			opts.MemoryBudget = 64 << 20
		}
		if kind == "tokens" {
			opts.GlobalBatchSize, opts.TokensPerStep = 0, 16+rng.Int64N(32)
		}
		k := 1 + rng.IntN(3)
		so := loader.StreamOptions{NumWorkers: k, Run: rng.IntN(3), ShareSteps: kind == "full" && rng.IntN(2) == 0}
		if kind == "full" && k == 1 && rng.IntN(2) == 0 {
			so.CoalesceBytes = 1 << 20
		}
		l, err := loader.New(orders[kind].tb, orders[kind].split, opts)
		if err != nil {
			t.Fatal(err)
		}
		got := map[int64][]uint64{} // each step's rows, as the workers dealt them
		place := func(step int64, at int, id uint64) {
			for len(got[step]) <= at {
				got[step] = append(got[step], 0)
			}
			got[step][at] = id
		}
		refused := false
		for worker := range k {
			so.Worker = worker
			st, err := l.Stream(ctx, so)
			if errcode.Of(err) == errcode.InvalidArgument && opts.MemoryBudget < 1<<20 {
				refused = true // a budget that cannot hold a step of this setup
				t.Logf("setup %d refused: %v", i, err)
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			for b, err := range st.All(ctx) {
				if err != nil {
					t.Fatal(err)
				}
				if b.Places != nil {
					for j, p := range b.Places {
						place(b.Step+int64(p.Step), int(p.Index), b.RowIDs[j])
					}
				} else { // steps b.Step, b.Step+1, …: coalesced only with one worker
					ids := b.RowIDs
					for step := b.Step; step < b.Step+int64(b.Steps); step++ {
						want, err := l.RowIDs(ctx, 0, step)
						if err != nil {
							t.Fatal(err)
						}
						n := min(len(want), len(ids))
						got[step] = append(got[step], ids[:n]...)
						ids = ids[n:]
					}
				}
				b.Record.Release()
			}
			ramped = ramped || opts.MemoryBudget == 64<<20 && st.Stats().Horizons > 2
			st.Close()
		}
		if !refused {
			for step := range l.StepsPerEpoch() {
				want, err := l.RowIDs(ctx, 0, step)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got[step], want) && (len(want) > 0 || len(got[step]) > 0) {
					t.Fatalf("setup %d (%s, %+v, %+v): step %d dealt %v, the dealing order says %v", i, kind, opts, so, step, got[step], want)
				}
			}
		}
		l.Close()
	}
	if !ramped {
		t.Fatal("no stream's horizons ramped up")
	}
}
