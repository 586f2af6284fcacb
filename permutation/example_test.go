package permutation_test

import (
	"context"
	"fmt"
	"log"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/permutation"
)

// exampleTable creates a croupier table of n rollouts at uri:
// id, problem_id (ten rollouts per problem) and reward.
func exampleTable(ctx context.Context, uri string, n int64) *table.Table {
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "problem_id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "reward", Type: arrow.PrimitiveTypes.Float64},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	for i := range n {
		b.Field(0).(*array.Int64Builder).Append(i)
		b.Field(1).(*array.Int64Builder).Append(i / 10)
		b.Field(2).(*array.Float64Builder).Append(float64(i%4) - 1) // -1, 0, 1, 2, …
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	r, err := array.NewRecordReader(schema, []arrow.RecordBatch{rec})
	if err != nil {
		log.Fatal(err)
	}
	t, err := table.Create(ctx, uri, r, table.WriteOptions{})
	if err != nil {
		log.Fatal(err)
	}
	return t
}

func ExampleBuild() {
	ctx := context.Background()
	t := exampleTable(ctx, "mem://example-build/rollouts", 1000)
	defer t.Close()

	perms, err := permutation.Build(ctx, t, permutation.Spec{
		Filter: "reward > 0", // keeps half of the rows
		Split: &permutation.SplitSpec{
			Kind:    permutation.SplitHash, // by problem_id: stable across appends
			Columns: []string{"problem_id"},
			Weights: []int64{9, 1},
			Names:   []string{"train", "val"},
		},
		Shuffle: &permutation.ShuffleSpec{Seed: 1234},
	}, "mem://example-build/perms/run-1", permutation.BuildOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer perms.Close()

	// Any process can open the persisted permutation by its URI.
	again, err := permutation.Open(ctx, perms.URI())
	if err != nil {
		log.Fatal(err)
	}
	defer again.Close()
	fmt.Println("same permutation:", again.ID() == perms.ID())

	m := again.Manifest()
	fmt.Printf("scanned %d rows, kept %d\n", m.RowsScanned, m.RowsKept)
	for _, s := range again.Splits() {
		fmt.Printf("%s: %d rows\n", s.Name(), s.Len())
	}
	// Output:
	// same permutation: true
	// scanned 1000 rows, kept 500
	// train: 460 rows
	// val: 40 rows
}
