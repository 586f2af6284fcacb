package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/croupier-data/croupier/core/catalog"
	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/table"
)

func tablesCmd(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 {
		return usagef("tables: missing subcommand (create, append, versions, inspect, cleanup, list)")
	}
	switch args[0] {
	case "list":
		return tablesList(ctx, e, args[1:])
	case "create":
		return tablesWrite(ctx, e, args[1:], true)
	case "append":
		return tablesWrite(ctx, e, args[1:], false)
	case "versions":
		return tablesVersions(ctx, e, args[1:])
	case "inspect":
		return tablesInspect(ctx, e, args[1:])
	case "cleanup":
		return tablesCleanup(ctx, e, args[1:])
	}
	return usagef("tables: unknown subcommand %q", args[0])
}

// tablesWrite creates a table from Parquet files, or appends them to one.
func tablesWrite(ctx context.Context, e *env, args []string, create bool) error {
	name := "tables append"
	if create {
		name = "tables create"
	}
	fs, asJSON := newFlags(e, name, name+" URI FILE.parquet... [--row-group-rows N] [--trust-conditional-writes]")
	rowGroup := fs.Int64("row-group-rows", 0, "most rows per row group (0: the default)")
	trust := trustFlag(fs)
	pos, err := parse(fs, args, 2, -1)
	if err != nil {
		return err
	}
	uri, err := toURI(pos[0])
	if err != nil {
		return err
	}
	data, err := openParquet(ctx, pos[1:])
	if err != nil {
		return err
	}
	defer data.Release()
	opts := table.WriteOptions{RowGroupRows: *rowGroup, TrustConditionalWrites: *trust}
	var version int64
	if create {
		t, err := table.Create(ctx, uri, data, opts)
		if err != nil {
			return err
		}
		defer t.Close()
		version = 1
	} else if version, err = table.Append(ctx, uri, data, opts); err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(e.stdout, map[string]any{"uri": uri, "version": version})
	}
	if create {
		fmt.Fprintf(e.stdout, "created %s at version %d\n", uri, version)
	} else {
		fmt.Fprintln(e.stdout, version)
	}
	return nil
}

func tablesVersions(ctx context.Context, e *env, args []string) error {
	fs, asJSON := newFlags(e, "tables versions", "tables versions URI [--long]")
	long := fs.Bool("long", false, "each version's commit time, rows and rows added (reads every manifest)")
	uri, err := parseURI(fs, args)
	if err != nil {
		return err
	}
	if *long {
		return tablesHistory(ctx, e, uri, *asJSON)
	}
	vs, err := table.Versions(ctx, uri)
	if err != nil {
		return err
	}
	if *asJSON {
		if vs == nil {
			vs = []int64{}
		}
		return writeJSON(e.stdout, vs)
	}
	for _, v := range vs {
		fmt.Fprintln(e.stdout, v)
	}
	return nil
}

// tablesHistory prints the versions of the table at uri with their commit
// times and rows.
func tablesHistory(ctx context.Context, e *env, uri string, asJSON bool) error {
	vs, err := table.History(ctx, uri)
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(e.stdout, vs)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "version\tcommitted\trows\tadded")
	for _, v := range vs {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\n", v.Version, v.Committed.Format(time.RFC3339), v.NumRows, v.AddedRows)
	}
	return tw.Flush()
}

// tablesList lists the croupier tables under a location, or the names a
// catalog holds when no location is given.
func tablesList(ctx context.Context, e *env, args []string) error {
	fs, asJSON := newFlags(e, "tables list", "tables list [URI] [--catalog PATH]")
	path := fs.String("catalog", "", "catalog whose names to list when no URI is given (default "+catalog.DefaultPath()+")")
	pos, err := parse(fs, args, 0, 1)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return catalogNames(e, *path, *asJSON)
	}
	if *path != "" {
		return usagef("tables list: --catalog lists a catalog's names; give it or a URI, not both")
	}
	uri, err := toURI(pos[0])
	if err != nil {
		return err
	}
	found, err := table.List(ctx, uri)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(e.stdout, found)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "table\tlatest\tversions")
	for _, t := range found {
		fmt.Fprintf(tw, "%s\t%d\t%d\n", t.URI, t.Latest, t.Versions)
	}
	return tw.Flush()
}

// catalogNames prints the names registered in the catalog at path (the
// default catalog when empty) with their URIs, by name.
func catalogNames(e *env, path string, asJSON bool) error {
	names, err := catalog.Open(catalog.Options{Path: path}).Names()
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(e.stdout, names)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "name\ttable")
	for _, name := range slices.Sorted(maps.Keys(names)) {
		fmt.Fprintf(tw, "%s\t%s\n", name, names[name])
	}
	return tw.Flush()
}

// inspectFile is one data file in the output of tables inspect.
type inspectFile struct {
	Key       string    `json:"key"`
	Size      int64     `json:"size"`
	ModTime   time.Time `json:"mod_time"`
	ETag      string    `json:"etag,omitempty"`
	NumRows   int64     `json:"num_rows"`
	RowGroups []int64   `json:"row_groups"`
}

type inspectField struct {
	Name     string `json:"name"`
	Type     string `json:"type"`
	Nullable bool   `json:"nullable"`
}

type inspectOutput struct {
	URI     string         `json:"uri"`
	Kind    string         `json:"kind"`
	Version string         `json:"version"`
	NumRows int64          `json:"num_rows"`
	Schema  []inspectField `json:"schema"`
	Files   []inspectFile  `json:"files"`
}

func tablesInspect(ctx context.Context, e *env, args []string) error {
	fs, asJSON := newFlags(e, "tables inspect", "tables inspect URI [--version N]")
	version := fs.Int64("version", 0, "version to inspect (0: the latest)")
	uri, err := parseURI(fs, args)
	if err != nil {
		return err
	}
	t, err := table.OpenWith(ctx, uri, table.OpenOptions{Version: *version})
	if err != nil {
		return err
	}
	defer t.Close()
	out := inspectOutput{URI: t.URI(), Kind: t.Kind(), Version: t.Version(), NumRows: t.NumRows(),
		Schema: []inspectField{}, Files: []inspectFile{}}
	for _, f := range t.Schema().Fields() {
		out.Schema = append(out.Schema, inspectField{Name: f.Name, Type: f.Type.String(), Nullable: f.Nullable})
	}
	for _, f := range t.Files() {
		out.Files = append(out.Files, inspectFile{Key: f.Key, Size: f.Size, ModTime: f.ModTime, ETag: f.ETag,
			NumRows: f.NumRows, RowGroups: f.RowGroups})
	}
	if *asJSON {
		return writeJSON(e.stdout, out)
	}
	w := e.stdout
	fmt.Fprintf(w, "table    %s\nkind     %s\nversion  %s\nrows     %d\nfiles    %d\n\nschema:\n",
		out.URI, out.Kind, out.Version, out.NumRows, len(out.Files))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, f := range out.Schema {
		null := "not null"
		if f.Nullable {
			null = "nullable"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", f.Name, f.Type, null)
	}
	tw.Flush()
	fmt.Fprintln(w, "\nfiles:")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  key\tbytes\trows\trow groups")
	for _, f := range out.Files {
		fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\n", f.Key, f.Size, f.NumRows, len(f.RowGroups))
	}
	return tw.Flush()
}

func tablesCleanup(ctx context.Context, e *env, args []string) error {
	fs, asJSON := newFlags(e, "tables cleanup", "tables cleanup URI --keep-last N [--grace DURATION]")
	keep := fs.Int("keep-last", 0, "versions to keep (at least 1)")
	grace := fs.Duration("grace", 0, "keep versions and unreferenced files younger than this (0: 24h)")
	pos, err := parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	if *keep < 1 {
		return usagef("tables cleanup: --keep-last must be at least 1")
	}
	uri, err := toURI(pos[0])
	if err != nil {
		return err
	}
	res, err := table.Cleanup(ctx, uri, table.CleanupOptions{KeepLast: *keep, Grace: *grace})
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(e.stdout, res)
	}
	vs := make([]string, len(res.DeletedVersions))
	for i, v := range res.DeletedVersions {
		vs[i] = fmt.Sprint(v)
	}
	fmt.Fprintf(e.stdout, "deleted %d versions [%s] and %d files; aborted %d incomplete uploads\n",
		len(vs), strings.Join(vs, " "), len(res.DeletedFiles), len(res.AbortedUploads))
	for _, u := range res.AbortedUploads {
		fmt.Fprintf(e.stdout, "aborted upload of %s\n", u)
	}
	for _, w := range res.Warnings {
		fmt.Fprintf(e.stderr, "warning: %s\n", w)
	}
	return nil
}

// parquetFiles reads local Parquet files one after the other as one
// RecordReader. Every file must have the first file's schema.
type parquetFiles struct {
	ctx   context.Context
	paths []string
	next  int // index of the next file to open

	schema *arrow.Schema
	pf     *file.Reader
	rr     pqarrow.RecordReader
	cur    arrow.RecordBatch
	err    error
}

// openParquet opens the first of paths and returns a reader of all of them.
func openParquet(ctx context.Context, paths []string) (*parquetFiles, error) {
	p := &parquetFiles{ctx: ctx, paths: paths}
	if err := p.open(); err != nil {
		return nil, err
	}
	p.schema = p.rr.Schema()
	return p, nil
}

func (p *parquetFiles) open() error {
	path := p.paths[p.next]
	p.next++
	pf, err := openParquetFile(path)
	if err != nil {
		return errcode.Wrap(err, errcode.NotFound, "open parquet", path)
	}
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 64 << 10}, memory.DefaultAllocator)
	if err != nil {
		pf.Close()
		return errcode.Wrap(err, errcode.Corrupt, "read parquet", path)
	}
	rr, err := fr.GetRecordReader(p.ctx, nil, nil)
	if err != nil {
		pf.Close()
		return errcode.Wrap(err, errcode.Corrupt, "read parquet", path)
	}
	if p.schema != nil && !p.schema.Equal(rr.Schema()) {
		rr.Release()
		pf.Close()
		return errcode.New(errcode.InvalidArgument, "read parquet", path,
			"schema differs from %s's:\n%s\nwant:\n%s", p.paths[0], rr.Schema(), p.schema)
	}
	p.pf, p.rr = pf, rr
	return nil
}

// openParquetFile opens the Parquet file at path with its pages bounded by
// what its footer says (table.BoundPages), not by arrow-go's fixed bounds.
func openParquetFile(path string) (*file.Reader, error) {
	pf, err := file.OpenParquetFile(path, false)
	if err != nil {
		return nil, err
	}
	md := pf.MetaData()
	pf.Close()
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	props := parquet.NewReaderProperties(memory.DefaultAllocator)
	table.BoundPages(props, md, fi.Size())
	return file.OpenParquetFile(path, false, file.WithMetadata(md), file.WithReadProps(props))
}

func (p *parquetFiles) closeFile() {
	if p.rr != nil {
		p.rr.Release()
		p.rr = nil
	}
	if p.pf != nil {
		p.pf.Close()
		p.pf = nil
	}
}

func (p *parquetFiles) Schema() *arrow.Schema { return p.schema }

func (p *parquetFiles) Next() bool {
	if p.cur != nil {
		p.cur.Release()
		p.cur = nil
	}
	for p.err == nil {
		if p.rr == nil {
			if p.next >= len(p.paths) {
				return false
			}
			if p.err = p.open(); p.err != nil {
				return false
			}
		}
		if p.rr.Next() {
			p.cur = p.rr.RecordBatch()
			p.cur.Retain()
			return true
		}
		if err := p.rr.Err(); err != nil {
			p.err = errcode.Wrap(err, errcode.Corrupt, "read parquet", p.paths[p.next-1])
		}
		p.closeFile()
	}
	return false
}

func (p *parquetFiles) RecordBatch() arrow.RecordBatch { return p.cur }

// Record returns the current batch.
//
// Deprecated: use RecordBatch.
func (p *parquetFiles) Record() arrow.RecordBatch { return p.cur }

func (p *parquetFiles) Err() error { return p.err }

// Retain does nothing: the reader has one owner.
func (p *parquetFiles) Retain() {}

// Release closes the open file and drops the current batch.
func (p *parquetFiles) Release() {
	if p.cur != nil {
		p.cur.Release()
		p.cur = nil
	}
	p.closeFile()
}

var _ array.RecordReader = (*parquetFiles)(nil)
