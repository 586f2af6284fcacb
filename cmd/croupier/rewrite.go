package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/croupier-data/croupier/core/table"
)

// rewriteCmd rewrites a table (plain Parquet or croupier) into a new croupier
// table laid out for shuffled reads.
func rewriteCmd(ctx context.Context, e *env, args []string) error {
	fs, asJSON := newFlags(e, "rewrite",
		"rewrite SRC DST [--columns a,b] [--row-group-rows N] [--page-bytes N] [--compression lz4|zstd|none] [--memory-budget BYTES] [--version N] [--quiet] [--trust-conditional-writes]")
	columns := fs.String("columns", "", "columns to keep, comma-separated, in that order (default: all)")
	rowGroup := fs.Int64("row-group-rows", 0, "most rows per row group (0: the default)")
	pageBytes := fs.Int64("page-bytes", 0, "target size of a data page in bytes (0: the default)")
	compression := fs.String("compression", "", "codec of the data pages: lz4, zstd or none (default lz4)")
	budget := fs.Int64("memory-budget", 0, "bytes of SRC's rows held decoded at once (0: 256 MiB)")
	version := fs.Int64("version", 0, "version of a croupier table SRC to rewrite (0: the latest)")
	quiet := fs.Bool("quiet", false, "no progress on stderr")
	trust := trustFlag(fs)
	pos, err := parse(fs, args, 2, 2)
	if err != nil {
		return err
	}
	srcURI, err := toURI(pos[0])
	if err != nil {
		return err
	}
	dstURI, err := toURI(pos[1])
	if err != nil {
		return err
	}
	src, err := table.OpenVersion(ctx, srcURI, *version)
	if err != nil {
		return err
	}
	defer src.Close()
	opts := table.RewriteOptions{Columns: splitList(*columns), MemoryBudget: *budget,
		WriteOptions: table.WriteOptions{RowGroupRows: *rowGroup, PageBytes: *pageBytes, Compression: *compression,
			TrustConditionalWrites: *trust}}
	var pr *progress
	if !*quiet {
		pr = newProgress(e.stderr)
		opts.Progress = func(p table.RewriteProgress) { pr.update("rewrite", p.Rows, p.TotalRows, "") }
	}
	t, err := table.Rewrite(ctx, src, dstURI, opts)
	if pr != nil {
		pr.done()
	}
	if err != nil {
		return err
	}
	defer t.Close()
	if *asJSON {
		return writeJSON(e.stdout, map[string]any{"uri": dstURI, "version": 1, "num_rows": t.NumRows()})
	}
	fmt.Fprintf(e.stdout, "rewrote %d rows of %s into %s at version 1\n", t.NumRows(), srcURI, dstURI)
	return nil
}

// trustFlag declares --trust-conditional-writes, which sets
// table.WriteOptions.TrustConditionalWrites.
func trustFlag(fs *flag.FlagSet) *bool {
	return fs.Bool("trust-conditional-writes", false,
		"commit without first checking that the store honours conditional writes (If-None-Match: *); "+
			"only for a store known to honour them or a table one writer commits to")
}
