package table_test

import (
	"context"
	"fmt"
	"log"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/croupier-data/croupier/core/table"
)

// exampleRows returns n rows of (id int64, reward float32), ids starting at start.
func exampleRows(start, n int64) array.RecordReader {
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "reward", Type: arrow.PrimitiveTypes.Float32},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	for i := start; i < start+n; i++ {
		b.Field(0).(*array.Int64Builder).Append(i)
		b.Field(1).(*array.Float32Builder).Append(float32(i) / 10)
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	r, err := array.NewRecordReader(schema, []arrow.RecordBatch{rec})
	if err != nil {
		log.Fatal(err)
	}
	return r
}

func ExampleOpen() {
	ctx := context.Background()
	uri := "mem://example-open/rollouts"

	// Version 1: ids 0..9. Appending makes version 2 with ids 10..14.
	t1, err := table.Create(ctx, uri, exampleRows(0, 10), table.WriteOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer t1.Close()
	if _, err := t1.Append(ctx, exampleRows(10, 5), table.WriteOptions{}); err != nil {
		log.Fatal(err)
	}

	// Open pins the latest version; OpenVersion any committed one.
	latest, err := table.Open(ctx, uri)
	if err != nil {
		log.Fatal(err)
	}
	defer latest.Close()
	first, err := table.OpenVersion(ctx, uri, 1)
	if err != nil {
		log.Fatal(err)
	}
	defer first.Close()

	versions, err := latest.Versions(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("kind:", latest.Kind())
	fmt.Println("versions:", versions)
	fmt.Printf("version %s: %d rows\n", latest.Version(), latest.NumRows())
	fmt.Printf("version %s: %d rows\n", first.Version(), first.NumRows())
	// Output:
	// kind: croupier
	// versions: [1 2]
	// version 2: 15 rows
	// version 1: 10 rows
}

func ExampleTable_NewReader() {
	ctx := context.Background()
	t, err := table.Create(ctx, "mem://example-reader/rollouts", exampleRows(0, 100), table.WriteOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer t.Close()

	// Read any row ids, in any order, projected to one column.
	r, err := t.NewReader(table.ReaderOptions{Columns: []string{"reward"}})
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()
	rec, err := r.Read(ctx, []uint64{42, 7, 99})
	if err != nil {
		log.Fatal(err)
	}
	defer rec.Release()

	fmt.Println(rec.Schema().Field(0).Name, rec.Column(0))
	// Output:
	// reward [4.2 0.7 9.9]
}

func ExampleRewrite() {
	ctx := context.Background()
	// A table in row groups of 10,000 rows, too large for shuffled reads.
	src, err := table.Create(ctx, "mem://example-rewrite/export", exampleRows(0, 10000), table.WriteOptions{RowGroupRows: 10000})
	if err != nil {
		log.Fatal(err)
	}
	defer src.Close()

	// Its id column again, in row groups of 4,096 rows with a page index.
	t, err := table.Rewrite(ctx, src, "mem://example-rewrite/rollouts", table.RewriteOptions{
		WriteOptions: table.WriteOptions{RowGroupRows: 4096},
		Columns:      []string{"id"},
		Progress:     func(p table.RewriteProgress) { fmt.Printf("%d of %d rows\n", p.Rows, p.TotalRows) },
	})
	if err != nil {
		log.Fatal(err)
	}
	defer t.Close()

	fmt.Println(t.Schema().Field(0).Name, t.Files()[0].RowGroups)
	// Output:
	// 10000 of 10000 rows
	// id [4096 4096 1808]
}
