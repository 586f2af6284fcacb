package table

import (
	"context"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"golang.org/x/sync/errgroup"

	"github.com/croupier-data/croupier/core/errcode"
)

// RewriteOptions configure Rewrite. The zero value copies every column into
// croupier's default layout.
type RewriteOptions struct {
	// WriteOptions lay out the new table's data files.
	WriteOptions
	// Columns to keep, in output order; nil keeps every column.
	Columns []string `json:"columns,omitempty"`
	// Progress, when set, is called from the goroutine running Rewrite once
	// the writer has taken each row group of the source; the last call
	// reports the totals.
	Progress func(RewriteProgress) `json:"-"`
}

// RewriteProgress reports how far a rewrite is. Bytes count the compressed
// column chunks of the kept columns, as the source's footers record them.
type RewriteProgress struct {
	Rows, TotalRows   int64 // rows written, rows of the source
	Bytes, TotalBytes int64 // bytes of the source read, and in all
}

// Rewrite creates a croupier table at uri whose version 1 holds the rows of
// src in row id order, laid out for shuffled reads as opts.WriteOptions say
// (DefaultRowGroupRows rows per row group, DefaultPageBytes pages and a page
// index by default); src may be a plain Parquet dataset or a croupier table.
//
// The source is read one row group at a time, so memory holds one decoded
// row group of src and one buffered row group of the new table, however
// large src is. Like Create, Rewrite commits atomically: one that is canceled
// or fails leaves no version at uri, and another may start there afresh. It
// fails with errcode.AlreadyExists when a croupier table exists at uri.
func Rewrite(ctx context.Context, src *Table, uri string, opts RewriteOptions) (*Table, error) {
	r, err := src.NewReader(ReaderOptions{Columns: opts.Columns})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	byteStarts, err := groupByteStarts(ctx, r)
	if err != nil {
		return nil, err
	}
	groups := &groupReader{ctx: ctx, r: r, byteStarts: byteStarts, progress: opts.Progress}
	defer groups.Release()
	return Create(ctx, uri, groups, opts.WriteOptions)
}

// groupByteStarts returns, for each row group of r's table in row id order,
// the compressed bytes of r's columns in the row groups before it, and the
// bytes of all of them last. It reads the footers not read yet, 16 at a time.
func groupByteStarts(ctx context.Context, r *Reader) ([]int64, error) {
	t := r.t
	footers := make([]*metadata.FileMetaData, len(t.pin.Files))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i, f := range t.pin.Files {
		g.Go(func() (err error) {
			defer errcode.Recover(&err, errcode.Internal, "read footer", t.loc.ObjectURI(f.Key))
			footers[i], err = t.Footer(gctx, i)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	starts := make([]int64, len(t.groups)+1)
	for i, ref := range t.groups {
		starts[i+1] = starts[i]
		rg := footers[ref.File].RowGroup(ref.Group)
		for _, leaves := range r.leaves {
			for _, leaf := range leaves {
				col, err := rg.ColumnChunk(leaf)
				if err != nil {
					return nil, errcode.Wrap(err, errcode.Corrupt, "read footer", t.loc.ObjectURI(t.pin.Files[ref.File].Key))
				}
				starts[i+1] += col.TotalCompressedSize()
			}
		}
	}
	return starts, nil
}

// groupReader is an array.RecordReader of the row groups of a Reader's table,
// one record per row group in row id order, each decoded when the writer asks
// for it. It reports progress when the writer comes back for the next one.
type groupReader struct {
	ctx        context.Context
	r          *Reader
	byteStarts []int64 // see groupByteStarts
	progress   func(RewriteProgress)

	next int // index in r.t.groups of the next row group
	cur  arrow.RecordBatch
	err  error
}

func (g *groupReader) Schema() *arrow.Schema { return g.r.Schema() }

func (g *groupReader) Next() bool {
	t := g.r.t
	if g.cur != nil { // the writer has taken it
		g.cur.Release()
		g.cur = nil
		if g.progress != nil {
			g.progress(RewriteProgress{Rows: t.groupStarts[g.next], TotalRows: t.NumRows(),
				Bytes: g.byteStarts[g.next], TotalBytes: g.byteStarts[len(t.groups)]})
		}
	}
	if g.err != nil || g.next == len(t.groups) {
		return false
	}
	if err := g.ctx.Err(); err != nil {
		g.err = errcode.Wrap(err, errcode.Canceled, "rewrite", t.URI())
		return false
	}
	ref := t.groups[g.next]
	if g.cur, g.err = g.r.ReadGroup(g.ctx, ref.File, ref.Group); g.err != nil {
		return false
	}
	g.next++
	return true
}

func (g *groupReader) RecordBatch() arrow.RecordBatch { return g.cur }

// Record returns the current record.
//
// Deprecated: use RecordBatch.
func (g *groupReader) Record() arrow.RecordBatch { return g.cur }

func (g *groupReader) Err() error { return g.err }

// Retain does nothing: the reader has one owner.
func (g *groupReader) Retain() {}

// Release drops the current record.
func (g *groupReader) Release() {
	if g.cur != nil {
		g.cur.Release()
		g.cur = nil
	}
}

var _ array.RecordReader = (*groupReader)(nil)
