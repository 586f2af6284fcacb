// Command go-minimal is the smallest program that deals batches with
// croupier, kept as a module of its own so that it builds exactly as a
// service importing croupier would: with its own go.mod, its own flags, the
// built-in file:// store and the one driver most services link in, s3://,
// and, by choice, without cgo.
//
//	cd examples/go-minimal && CGO_ENABLED=0 go build -ldflags='-s -w' .
//	./go-minimal -v -global-batch-size 64 file:///data/rollouts
//	./go-minimal 's3://bucket/rollouts?region=us-east-1'
//
// It defines -v itself: importing croupier registers no flags.
// internal/sideeffects' TestMinimalProgram builds it, runs it, and bounds
// the packages it links and the size of its binary.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	_ "github.com/croupier-data/croupier/drivers/s3" // s3:// URIs
	"github.com/croupier-data/croupier/loader"
)

var (
	verbose = flag.Bool("v", false, "print every batch")
	g       = flag.Int64("global-batch-size", 64, "rows per global step")
)

func main() {
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: go-minimal [-v] [-global-batch-size G] TABLE_URI")
		os.Exit(2)
	}
	if err := run(context.Background(), flag.Arg(0)); err != nil {
		fmt.Fprintln(os.Stderr, "go-minimal:", err)
		os.Exit(1)
	}
}

// run deals epoch 0 of the table at uri in row order and counts its rows.
func run(ctx context.Context, uri string) error {
	l, err := loader.Open(ctx, uri, loader.Options{GlobalBatchSize: *g})
	if err != nil {
		return err
	}
	defer l.Close()
	var rows, batches int64
	for b, err := range l.Batches(ctx, loader.StreamOptions{}) {
		if err != nil {
			return err
		}
		if *verbose {
			fmt.Printf("step %d: %d rows\n", b.Step, b.Record.NumRows())
		}
		rows += b.Record.NumRows()
		batches++
		b.Record.Release()
	}
	fmt.Printf("%d rows in %d batches\n", rows, batches)
	return nil
}
