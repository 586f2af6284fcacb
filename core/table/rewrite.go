package table

import (
	"context"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"golang.org/x/sync/errgroup"

	"github.com/croupier-data/croupier/core/cmem"
	"github.com/croupier-data/croupier/core/errcode"
)

// RewriteOptions configure Rewrite. The zero value copies every column into
// croupier's default layout.
type RewriteOptions struct {
	// WriteOptions lay out the new table's data files.
	WriteOptions
	// Columns to keep, in output order; nil keeps every column.
	Columns []string `json:"columns,omitempty"`
	// MemoryBudget bounds the bytes of source rows the rewrite holds
	// decoded at once (see Rewrite); 0 means DefaultRewriteBudget.
	MemoryBudget int64 `json:"memory_budget,omitempty"`
	// Progress, when set, is called from the goroutine running Rewrite once
	// the writer has taken each slice of the source; the last call reports
	// the totals.
	Progress func(RewriteProgress) `json:"-"`
}

// DefaultRewriteBudget is the memory budget of a rewrite that sets none.
const DefaultRewriteBudget = 256 << 20

// RewriteProgress reports how far a rewrite is. Bytes count the compressed
// column chunks of the kept columns, as the source's footers record them;
// within a row group, in proportion to its rows written.
type RewriteProgress struct {
	Rows, TotalRows   int64 // rows written, rows of the source
	Bytes, TotalBytes int64 // bytes of the source read, and in all
}

// Rewrite creates a croupier table at uri whose version 1 holds the rows of
// src in row id order, laid out for shuffled reads as opts.WriteOptions say
// (DefaultRowGroupRows rows per row group, DefaultPageBytes pages and a page
// index by default); src may be a plain Parquet dataset or a croupier table.
//
// The source is read in slices of consecutive rows, each decoding only the
// pages that hold its rows, so memory holds one slice of src and one
// buffered row group of the new table, however large src and its row groups
// are: a slice takes a quarter of opts.MemoryBudget at the rows' guessed
// size (GuessRowBytes), and one row at least. Like Create, Rewrite commits
// atomically: one that is canceled or fails leaves no version at uri, and
// another may start there afresh. It fails with errcode.AlreadyExists when a
// croupier table exists at uri.
func Rewrite(ctx context.Context, src *Table, uri string, opts RewriteOptions) (*Table, error) {
	if opts.MemoryBudget < 0 {
		return nil, errcode.New(errcode.InvalidArgument, "rewrite", src.URI(),
			"memory budget %d bytes; it takes a positive size, or 0 for the default", opts.MemoryBudget)
	}
	if opts.MemoryBudget == 0 {
		opts.MemoryBudget = DefaultRewriteBudget
	}
	share := opts.MemoryBudget / 4
	// Slices are freed as the writer takes them: their buffers are given
	// back at once, not at the next garbage collection.
	r, err := src.NewReader(ReaderOptions{Columns: opts.Columns, Allocator: cmem.New(),
		FetchBytes: share, DecodeBytes: share, PageBytes: opts.MemoryBudget})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	byteStarts, err := groupByteStarts(ctx, r)
	if err != nil {
		return nil, err
	}
	slices := &sliceReader{ctx: ctx, r: r, byteStarts: byteStarts, sliceBytes: share, progress: opts.Progress}
	defer slices.Release()
	return Create(ctx, uri, slices, opts.WriteOptions)
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

// sliceReader is an array.RecordReader of the rows of a Reader's table, in
// row id order, one record per slice of consecutive rows of one row group,
// each read when the writer asks for it. It reports progress when the writer
// comes back for the next one.
type sliceReader struct {
	ctx        context.Context
	r          *Reader
	byteStarts []int64 // see groupByteStarts
	sliceBytes int64   // the bytes of source rows a slice holds, at the guess
	progress   func(RewriteProgress)

	group int   // index in r.t.groups of the row group being read
	row   int64 // the next row of it to read
	cur   arrow.RecordBatch
	err   error
}

func (s *sliceReader) Schema() *arrow.Schema { return s.r.Schema() }

func (s *sliceReader) Next() bool {
	t := s.r.t
	if s.cur != nil { // the writer has taken it
		s.cur.Release()
		s.cur = nil
		s.report()
	}
	for s.group < len(t.groups) && s.row == t.groupRows(s.group) {
		s.group, s.row = s.group+1, 0
	}
	if s.err != nil || s.group == len(t.groups) {
		return false
	}
	if err := s.ctx.Err(); err != nil {
		s.err = errcode.Wrap(err, errcode.Canceled, "rewrite", t.URI())
		return false
	}
	s.cur, s.err = s.read()
	return s.err == nil
}

// read reads the next slice of the current row group.
func (s *sliceReader) read() (arrow.RecordBatch, error) {
	t := s.r.t
	rowBytes, err := s.r.GuessRowBytes(s.ctx, t.groups[s.group])
	if err != nil {
		return nil, err
	}
	n := min(max(s.sliceBytes/rowBytes, 1), t.groupRows(s.group)-s.row)
	ids := make([]uint64, n)
	first := uint64(t.groupStarts[s.group] + s.row)
	for i := range ids {
		ids[i] = first + uint64(i)
	}
	s.row += n
	return s.r.Read(s.ctx, ids)
}

// report calls progress with the rows before s.row of s.group written.
func (s *sliceReader) report() {
	t := s.r.t
	if s.progress == nil {
		return
	}
	groupBytes := s.byteStarts[s.group+1] - s.byteStarts[s.group]
	s.progress(RewriteProgress{Rows: t.groupStarts[s.group] + s.row, TotalRows: t.NumRows(),
		Bytes: s.byteStarts[s.group] + groupBytes*s.row/max(t.groupRows(s.group), 1), TotalBytes: s.byteStarts[len(t.groups)]})
}

func (s *sliceReader) RecordBatch() arrow.RecordBatch { return s.cur }

// Record returns the current record.
//
// Deprecated: use RecordBatch.
func (s *sliceReader) Record() arrow.RecordBatch { return s.cur }

func (s *sliceReader) Err() error { return s.err }

// Retain does nothing: the reader has one owner.
func (s *sliceReader) Retain() {}

// Release drops the current record.
func (s *sliceReader) Release() {
	if s.cur != nil {
		s.cur.Release()
		s.cur = nil
	}
}

var _ array.RecordReader = (*sliceReader)(nil)
