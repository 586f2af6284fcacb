package permutation_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/internal/tabletest"
	"github.com/croupier-data/croupier/permutation"
)

// BenchmarkEpochRowIDs reads the row ids of a shuffled split of 1M rows as a
// loader asks for them (runs of 128 positions), in epoch 0 (the stored
// order: the baseline) and in epoch 1 (reordered on the fly):
//
//	go test ./permutation -run '^$' -bench EpochRowIDs
func BenchmarkEpochRowIDs(b *testing.B) {
	ctx := context.Background()
	dir := b.TempDir()
	tabletest.Write(b, dir, []int64{1 << 20}, 1<<16)
	tb, err := table.Open(ctx, "file://"+dir)
	if err != nil {
		b.Fatal(err)
	}
	defer tb.Close()
	p, err := permutation.Build(ctx, tb, permutation.Spec{Shuffle: &permutation.ShuffleSpec{Seed: 1}},
		"file://"+b.TempDir(), permutation.BuildOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	split := p.Splits()[0]
	const run = 128
	for _, epoch := range []int64{0, 1} {
		b.Run(fmt.Sprintf("epoch=%d", epoch), func(b *testing.B) {
			order := split.ForEpoch(7, epoch)
			var ids int64
			for b.Loop() {
				for start := int64(0); start < order.Len(); start += run {
					got, err := order.RowIDs(ctx, start, min(start+run, order.Len()))
					if err != nil {
						b.Fatal(err)
					}
					ids += int64(len(got))
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(ids), "ns/id")
		})
	}
}
