package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/loader"
)

// readOutput is what reading a rank's steps cost: rows delivered, time, and
// the store's work (loader.Stats).
type readOutput struct {
	TableURI     string       `json:"table_uri"`
	Epoch        int64        `json:"epoch"`
	FirstStep    int64        `json:"first_step"`
	Rank         int64        `json:"rank"`
	WorldSize    int64        `json:"world_size"`
	Steps        int64        `json:"steps"`
	Rows         int64        `json:"rows"`
	Bytes        int64        `json:"bytes"` // of the Arrow batches delivered
	FirstBatch   float64      `json:"first_batch_seconds"`
	Seconds      float64      `json:"seconds"`
	RowsPerSec   float64      `json:"rows_per_second"`
	RequestsPerK float64      `json:"requests_per_1000_rows"`
	Stats        loader.Stats `json:"stats"`
}

// readCmd reads a rank's steps of an epoch as a training loop would, drops
// them, and reports what they cost: the rate, the range requests made, the
// bytes fetched and decoded for each byte delivered.
func readCmd(ctx context.Context, e *env, args []string) error {
	fs, asJSON := newFlags(e, "read",
		"read (--perm PERM_URI [--split NAME] | --table TABLE_URI [--version N]) --global-batch-size G [flags]")
	permURI, splitName, tableURI, version, g, s := dealtFlags(fs, "read")
	w := fs.Int64("world-size", 1, "number of ranks")
	rank := fs.Int64("rank", 0, "the rank whose steps are read")
	epoch := fs.Int64("epoch", 0, "epoch")
	seed := fs.Uint64("shuffle-seed", 0, "the run's shuffle seed")
	first := fs.Int64("step", 0, "the first global step read")
	steps := fs.Int64("steps", 0, "how many steps to read (0: to the end of the epoch)")
	columns := fs.String("columns", "", "columns to read: col1,col2 (default: every column)")
	budget := fs.Int64("memory-budget", 0, "bytes the stream may hold (0: the loader's default)")
	maxReads := fs.Int("max-reads", 0, "range requests in flight (0: the table's default)")
	cacheDir := cacheFlag(fs)
	if _, err := parse(fs, args, 0, 0); err != nil {
		return err
	}
	switch {
	case (*permURI == "") == (*tableURI == ""):
		return usagef("read: give exactly one of --perm and --table")
	case *g < 1:
		return usagef("read: --global-batch-size is %d; it must be at least 1", *g)
	case *rank < 0 || *rank >= *w:
		return usagef("read: --rank %d is not in [0, %d): --world-size is %d", *rank, *w, *w)
	case *first < 0 || *steps < 0:
		return usagef("read: --step and --steps must be at least 0")
	}
	cache, err := openCache(*cacheDir)
	if err != nil {
		return err
	}
	t, order, closeOrder, err := openDealt(ctx, *permURI, *splitName, *tableURI, *version, cache)
	if err != nil {
		return err
	}
	defer closeOrder()
	l, err := loader.New(t, order, loader.Options{GlobalBatchSize: *g, NumSplits: *s, WorldSize: *w, Rank: *rank,
		ShuffleSeed: *seed, DropLast: true, Columns: splitList(*columns), MemoryBudget: *budget, MaxReads: *maxReads})
	if err != nil {
		return err
	}
	defer l.Close()
	limitHeap(loader.GoHeapBase + loader.GoHeap(*budget))
	out := readOutput{TableURI: t.URI(), Epoch: *epoch, FirstStep: *first, Rank: *rank, WorldSize: *w}
	if err := readSteps(ctx, l, *epoch, *first, *steps, &out); err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(e.stdout, out)
	}
	st := out.Stats
	fmt.Fprintf(e.stdout, "%d steps, %d rows in %.2f s (first batch after %.2f s): %.0f rows/s\n",
		out.Steps, out.Rows, out.Seconds, out.FirstBatch, out.RowsPerSec)
	fmt.Fprintf(e.stdout, "%d range requests (%.1f per 1,000 rows, %d hedged), %d bytes fetched, %d decoded, %d delivered\n",
		st.Requests, out.RequestsPerK, st.Hedged, st.BytesRead, st.DecodedBytes, out.Bytes)
	fmt.Fprintf(e.stdout, "disk cache: %d blocks served (%d bytes of reads), %d fetched blocks not kept\n",
		st.CacheHits, st.CacheHitBytes, st.CacheUnstored)
	if out.Bytes > 0 {
		fmt.Fprintf(e.stdout, "fetched ÷ delivered %.2f, decoded ÷ delivered %.2f, %d horizons\n",
			float64(st.BytesRead)/float64(out.Bytes), float64(st.DecodedBytes)/float64(out.Bytes), st.Horizons)
	}
	if st.LayoutHint != "" {
		fmt.Fprintf(e.stderr, "croupier read: %s\n", st.LayoutHint)
	}
	return nil
}

// readSteps reads n steps (0: all) of epoch from step first on and fills
// out's counts, times and stats.
func readSteps(ctx context.Context, l *loader.Loader, epoch, first, n int64, out *readOutput) error {
	start := time.Now()
	s, err := l.Stream(ctx, loader.StreamOptions{Epoch: epoch, StartStep: first})
	if err != nil {
		return err
	}
	defer s.Close()
	for n == 0 || out.Steps < n {
		b, err := s.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if out.Steps == 0 {
			out.FirstBatch = time.Since(start).Seconds()
		}
		out.Steps++
		out.Rows += b.Record.NumRows()
		out.Bytes += table.RecordBytes(b.Record)
		b.Record.Release()
	}
	out.Seconds = time.Since(start).Seconds()
	out.Stats = s.Stats()
	if out.Seconds > 0 {
		out.RowsPerSec = float64(out.Rows) / out.Seconds
	}
	if out.Rows > 0 {
		out.RequestsPerK = 1000 * float64(out.Stats.Requests) / float64(out.Rows)
	}
	if out.Steps == 0 {
		return errcode.New(errcode.InvalidArgument, "read", l.Table().URI(), "no step to read from step %d of epoch %d", first, epoch)
	}
	return nil
}
