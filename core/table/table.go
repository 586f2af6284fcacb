// Package table opens pinned versions of tables on object stores and reads any
// list of row ids from them as one Arrow record batch; it also creates and
// appends to croupier tables.
//
// # Formats
//
// Table is the one portable type. Behind it, a format (the driver) only finds a
// version of a table and describes it as a Pin; pinning, column checks, reads
// and error wrapping are the Table's and the same for every format:
//
//   - plain Parquet datasets: a folder, prefix, object or glob of .parquet files
//     written by anyone, pinned at open by every file's key, size, modification
//     time and ETag. Its version is "p" and a hash of those ("p3fa…").
//   - croupier tables: a folder holding _versions/ and data/ (see below), at any
//     committed version. Its version is the decimal version number ("3").
//
// Open detects the format: a folder with a _versions/ folder is a croupier table.
//
// # Pins and row ids
//
// A Table is one exact version: the path, size, modification time and ETag of
// every data file, their row counts and row-group layout, and the Arrow schema.
// That description is a Pin; it can be serialised, sent to another process and
// reopened there with OpenPin without listing the store again. Reads check each
// file against its pin and fail with errcode.Changed when it was overwritten or
// removed, so a pinned version never silently returns other data.
//
// Manifests and pins come from outside (the store, another process, a pickle),
// so they are checked before anything they name is read: every key must stay
// inside the table (store.CheckKey, store.Location.Holds), row counts must add
// up, and the schema message must be well formed. Anything else is an
// errcode.Corrupt error naming the manifest or pin.
//
// Row ids are ordinals inside the pinned version: row i of the table is row
// i − start(f) of the file f that holds it, files in pin order (key order for
// plain Parquet, commit order for croupier tables, so a croupier version's row
// ids are also valid, for the same rows, in every later version). They never
// move while the version is pinned.
//
// # Croupier tables
//
// Layout under the table's URI:
//
//	_versions/00000000000000000001.json   manifest of version 1 (JSON)
//	_versions/00000000000000000002.json   …
//	_versions/_croupier                   empty: written first by Create
//	data/<uuid>.parquet                   immutable data files, never rewritten
//	_tmp/                                 file:// only: temporary files of commits
//
// A manifest holds the format number, its version and parent version, a
// timestamp, the Arrow schema (IPC message, base64), and every data file of the
// version with its size, modification time, ETag, row count, row-group
// sizes and footer digest (see bindLocal for what identifies a file). A
// version is visible once its manifest exists, and a manifest is made
// with an exclusive create (store.Location.CreateExclusive: a conditional PUT on
// S3, GCS and Azure, link(2) on file://), so of the writers racing for version
// N+1 exactly one wins; the others re-read N+1, check their schema against it
// again and try N+2. Data files are written before the manifest that names
// them: a writer that dies leaves orphan data files, never a partial version.
// Create writes the empty _versions/_croupier before any data, so that the
// folder of a create that died before its commit opens as a croupier table
// without versions (errcode.NotFound), not as a plain Parquet dataset of the
// orphans. Cleanup removes old versions and orphans.
//
// Append requires data whose schema is exactly the table's after a round trip
// through Parquet: same field names in the same order, same types, same
// nullability. Adding columns, even nullable ones, is not supported: every
// reader of a version would have to fill columns absent from older files, and
// split_hash and permutations pin one schema per version. The error names the
// first differing field and both types.
//
// # Data file layout
//
// Data files are Parquet written by pqarrow with lz4, a page index (column and
// offset indexes), the Arrow schema stored, DefaultRowGroupRows rows per row
// group and DefaultPageBytes pages. The Reader decodes, of each row group a
// read touches, only the pages that hold its rows (see pages.go), so the cost
// of a random row is the decode of one page per column. Measured with
// BenchmarkRandomRows (64 random rows of a 1M-row zstd file of id, 16–48 int32
// tokens, reward, text, no dictionaries; cold cache; 2 cores shared with other
// work; 5 reads each), ms per 64 rows:
//
//	rows per row group    4,096   16,384   65,536   262,144
//	8 KiB pages              15       21       13        20
//	64 KiB pages             30       37       27        50
//	1 MiB pages              84      166      117       245
//
// (280–2,930 ms when whole row groups were decoded.) The file was 99.9, 98.2
// and 97.4 MiB with 8 KiB, 64 KiB and 1 MiB pages. Row-group size now matters
// little; 4,096 rows keeps a column chunk, decoded whole when a read needs most
// of its pages, small.
//
// BenchmarkLayout writes croupier's own layout (4,096-row groups, zstd, an
// offset index) of 256k such rows, with and without dictionaries; a quiet
// machine, two runs each:
//
//	pages                       8 KiB     16 KiB    64 KiB    1 MiB
//	scan, M rows/s, dictionary   3.2       3.1–3.2   3.4–3.5   3.3–3.6
//	scan, M rows/s, none         3.0–3.1   3.2       3.5       3.0–3.2
//	64 random rows, ms, dict.    14        16        16–17     32–34
//	64 random rows, ms, none     7.6–8.4   7.8–9.0   11.3–11.6 34
//
// Files were 28.3–28.8 MiB with dictionaries, 24.4–25.0 without. Every sparse
// read of a dictionary-encoded chunk pays its whole dictionary page, so
// croupier writes none, and 16 KiB pages: random rows cost about three
// quarters of 64 KiB pages' for a tenth less scan speed, and a page holds a
// few rows of token lists, so a horizon that needs few rows of a row group
// decodes few pages.
//
// WriteOptions.Compression picks the pages' codec: lz4 (Parquet's LZ4_RAW)
// by default, or zstd, the smallest files, or none. The page decoder's time
// goes mostly to decompressing, and a full shuffle of a table N times its
// budget decompresses each page about min(N, its rows) times an epoch, so
// there the codec decides the speed. BenchmarkBeyondBudget (loader) measures
// it: with lz4, files of token lists were 1.6 times as large as with zstd, a
// full shuffle at N = 4 read 2.2–3.3 times as fast and a scan 1.6–1.8 times
// (docs/tuning.md has the figures). Tables to shuffle are many budgets large,
// and a read from an object store costs its latency far more than its bytes,
// so lz4 is the default; zstd is for tables read in order or kept for their
// size.
//
// # Decoding
//
// Decoding uses arrow-go's pqarrow: it is the reader that produces Arrow memory
// directly (parquet-go has no Arrow interop), and it decodes a whole row group's
// projected columns at ≈10 M rows/s on two cores. Its per-row SeekToRow is slow and
// unreliable on list columns, so the Reader never seeks to rows: it decodes each
// row group a read touches once, a column at a time (only the pages holding
// the rows it needs, where the file has an offset index: pages.go), copies out
// the rows the read names (Keep, see keep.go) and drops the rest, and
// assembles the requested rows from those copies.
//
// # The general codec
//
// The page decoder (decode.go) reads the columns training tables hold;
// pqarrow writes files, converts schemas of every kind and decodes the
// columns the page decoder does not. pqarrow links gRPC and protobuf, so
// this package reaches it through a registered codec
// (internal/general), which a program links in by importing
// core/table/parquetio. Without it, schemas are converted by plainSchema
// (schema.go) and what needs pqarrow fails naming that import.
//
// # Catalog
//
// OpenOptions.Catalog (core/catalog) caches footers and manifests on the host,
// keyed by object URI and identity, so reopening a dataset of thousands of
// files reads no footer from the store; the store stays the authority. It
// also keeps where the pages of column chunks without an offset index lie,
// once reads have located them (see pages.go), so that the next open on the
// host reads only the pages it needs from its first read on.
package table

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/singleflight"

	"github.com/croupier-data/croupier/core/blockcache"
	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/store"
	"github.com/croupier-data/croupier/internal/jsonargs"
	"github.com/croupier-data/croupier/internal/seal"
)

// PinFormat is the version of the Pin encoding.
const PinFormat = 1

// File is one data file of a pinned version.
type File struct {
	store.Object
	NumRows   int64   `json:"num_rows"`
	RowGroups []int64 `json:"row_groups"` // rows in each row group
	// Version is the version of a croupier table that added the file, as
	// the manifests written since they record it say; 0 where not recorded
	// (plain Parquet, older manifests).
	Version int64 `json:"version,omitempty"`
	// FooterSHA256 is the seal.Sum of the file's Parquet footer (its Thrift
	// FileMetaData, as stored) where a croupier table's manifest records it
	// (format 3 on): with the page CRCs in the file, it is what identifies
	// the file's bytes wherever the table is copied (see bindLocal).
	FooterSHA256 string `json:"footer_sha256,omitempty"`
}

// Pin describes one exact version of a table.
type Pin struct {
	Format  int    `json:"format"`
	Kind    string `json:"kind,omitempty"` // KindParquet or KindCroupier
	URI     string `json:"uri"`
	Version string `json:"version"`
	Schema  []byte `json:"schema"` // Arrow IPC encapsulated schema message
	Files   []File `json:"files"`
}

// Table is an open, pinned table version. It is safe for concurrent use.
type Table struct {
	loc    *store.Location
	cat    Cache // may be nil
	pin    Pin
	schema *arrow.Schema
	// Every row group of the version in row id order, and the row id of the
	// first row of each; groupStarts[len(groups)] is NumRows.
	groups      []GroupRef
	groupStarts []int64
	// bucket[b] is the group holding row b<<bucketShift: a search for a row's
	// group starts between bucket[b] and bucket[b+1], usually one group.
	bucket      []int32
	bucketShift uint
	keyIndices  sync.Pool // of *[]int32, see keyIndex

	refs atomic.Int32 // Close releases the store connection when this reaches 0

	mu          sync.Mutex
	footers     []*metadata.FileMetaData // loaded lazily by OpenPin, eagerly by Open
	footerReads singleflight.Group       // by file index: one read of a footer at a time

	pageIndex pageIndex // offset indexes read so far
}

// Kinds of table, as Pin.Kind records them.
const (
	KindParquet  = "parquet"  // a plain Parquet dataset, pinned at open
	KindCroupier = "croupier" // a versioned croupier table
)

// OpenOptions configure OpenWith. The zero value opens the latest version and
// reads all metadata from the store.
type OpenOptions struct {
	// Version of a croupier table to open; 0 is the latest. A plain Parquet
	// dataset has only its current version: Version must be 0.
	Version int64 `json:"version,omitempty"`
	// Catalog caches Parquet footers and manifests on this host, so that a
	// reopen reads none of them from the store, and the page locations
	// learnt of files without an offset index. nil disables the cache.
	Catalog Cache `json:"-"`
	// BlockCache keeps on local disk the bytes read of the data files of a
	// remote store, so that reading them again reads the disk (see
	// blockcache); nil, the default, reads every byte from the store.
	BlockCache *blockcache.Cache `json:"-"`
}

// Open opens the table at uri at its latest version. A uri whose folder holds
// _versions/ is a croupier table; any other names a plain Parquet dataset: a
// folder or prefix (every .parquet object under it), one object, or a glob of
// objects (file:///data/*.parquet), pinned as it is now.
func Open(ctx context.Context, uri string) (*Table, error) {
	return OpenWith(ctx, uri, OpenOptions{})
}

// OpenVersion opens version of the croupier table at uri; 0 is the latest.
func OpenVersion(ctx context.Context, uri string, version int64) (*Table, error) {
	return OpenWith(ctx, uri, OpenOptions{Version: version})
}

// OpenWith opens the table at uri as opts say.
func OpenWith(ctx context.Context, uri string, opts OpenOptions) (*Table, error) {
	loc, err := store.Open(ctx, uri)
	if err != nil {
		return nil, err
	}
	loc.Cache = opts.BlockCache
	f, err := detect(ctx, loc)
	if err == nil {
		var t *Table
		if t, err = f.open(ctx, loc, opts); err == nil {
			t.cat = opts.Catalog
			return t, nil
		}
	}
	loc.Close()
	return nil, err
}

// format is a table format (a driver): it finds a version of the table at a
// location and describes it as a Pin. Everything after that, reading rows by
// id, checking files against the pin and wrapping errors, is the Table's and
// the same for every format.
type format interface {
	// open pins version opts.Version (0: latest) of the table at loc. The
	// returned Table may carry the footers that pinning parsed.
	open(ctx context.Context, loc *store.Location, opts OpenOptions) (*Table, error)
}

// detect returns the format of the table at loc: a croupier table when its
// folder holds a _versions/ folder, else plain Parquet.
func detect(ctx context.Context, loc *store.Location) (format, error) {
	if hasGlob(loc.Key) {
		return parquetFormat{match: loc.Match}, nil
	}
	// The files of a plain Parquet folder are listed while the check for a
	// croupier table runs: a distant store answers both in one round trip.
	mctx, cancel := context.WithCancel(ctx)
	var objs []store.Object
	var g errgroup.Group
	g.Go(func() (err error) {
		defer errcode.Recover(&err, errcode.Internal, "list", loc.URI)
		objs, err = loc.Match(mctx)
		return err
	})
	ok, err := isCroupier(ctx, loc)
	if err != nil || ok {
		cancel()
		g.Wait() // its error, a cancellation, no longer matters
		if err != nil {
			return nil, err
		}
		return croupierFormat{}, nil
	}
	return parquetFormat{match: func(context.Context) ([]store.Object, error) {
		defer cancel()
		return objs, g.Wait()
	}}, nil
}

func hasGlob(s string) bool { return strings.ContainsAny(s, "*?[") }

// parquetFormat pins plain Parquet datasets.
type parquetFormat struct {
	match func(context.Context) ([]store.Object, error) // the files, as Location.Match
}

func (f parquetFormat) open(ctx context.Context, loc *store.Location, opts OpenOptions) (*Table, error) {
	objs, err := f.match(ctx) // detect may have started it: awaited also when refused
	if opts.Version != 0 {
		return nil, errcode.New(errcode.InvalidArgument, "open table", loc.URI,
			"version %d asked of a plain Parquet dataset, which has only its current version (not a croupier table: no _versions/ folder)", opts.Version)
	}
	if err != nil {
		return nil, err
	}
	return pinParquet(ctx, loc, objs, opts.Catalog)
}

// OpenPin reopens exactly the version that pin describes.
func OpenPin(ctx context.Context, pin Pin) (*Table, error) {
	return OpenPinWith(ctx, pin, OpenOptions{})
}

// OpenPinWith is OpenPin with the catalog and the block cache of opts; the
// pin names the version, so opts.Version must be 0.
func OpenPinWith(ctx context.Context, pin Pin, opts OpenOptions) (*Table, error) {
	const op = "open pinned table"
	if opts.Version != 0 {
		return nil, errcode.New(errcode.InvalidArgument, op, pin.URI, "version %d asked of a pin, which names its version", opts.Version)
	}
	if pin.Format != PinFormat {
		return nil, errcode.New(errcode.InvalidArgument, op, pin.URI, "unsupported pin format %d (want %d)", pin.Format, PinFormat)
	}
	switch pin.Kind {
	case "", KindParquet:
	case KindCroupier:
		if v, err := strconv.ParseInt(pin.Version, 10, 64); err != nil || v <= 0 {
			return nil, errcode.New(errcode.Corrupt, op, pin.URI, "croupier table version %q is not a positive integer", pin.Version)
		}
	default:
		return nil, errcode.New(errcode.Corrupt, op, pin.URI, "unknown table kind %q (want %q or %q)", pin.Kind, KindParquet, KindCroupier)
	}
	schema, err := decodeSchema(pin.Schema)
	if err != nil {
		return nil, errcode.Wrap(err, errcode.Corrupt, op, pin.URI)
	}
	loc, err := store.Open(ctx, pin.URI)
	if err != nil {
		return nil, err
	}
	loc.Cache = opts.BlockCache
	// The files' keys are checked before anything is read: a pin must not
	// lead a reader outside its table.
	if _, err := checkFiles(pin.Files, loc.Holds); err != nil {
		loc.Close()
		return nil, errcode.Wrap(fmt.Errorf("corrupt pin: %w", err), errcode.Corrupt, op, pin.URI)
	}
	t := newTable(loc, pin, schema, make([]*metadata.FileMetaData, len(pin.Files)))
	t.cat = opts.Catalog
	return t, nil
}

// DecodePin parses a Pin from its JSON form.
func DecodePin(data []byte) (Pin, error) {
	var p Pin
	if err := jsonargs.Decode(data, &p, false, "decode pin", ""); err != nil {
		return Pin{}, err
	}
	return p, nil
}

// Bounds of a data file's size that checkFiles accepts: the smallest
// Parquet file (two magic numbers and a footer length) and more than any
// object store holds in one object (S3 and GCS: 5 TiB, Azure: 190 TiB).
const (
	minFileSize = 12
	maxFileSize = 1 << 48
)

// checkFiles checks the data files a manifest or a pin lists: each key passes
// keyOK and appears once, each size is one a Parquet object can have, each
// row count is the sum of its row groups', and nothing overflows. It returns
// the files' total row count.
func checkFiles(files []File, keyOK func(key string) error) (int64, error) {
	var rows int64
	seen := make(map[string]int, len(files))
	for i, f := range files {
		if err := keyOK(f.Key); err != nil {
			return 0, fmt.Errorf("file %d: %w", i, err)
		}
		if j, ok := seen[f.Key]; ok {
			return 0, fmt.Errorf("file %q is listed twice (files %d and %d)", f.Key, j, i)
		}
		seen[f.Key] = i
		var inGroups int64
		for _, n := range f.RowGroups {
			if n < 0 || inGroups > math.MaxInt64-n {
				return 0, fmt.Errorf("file %q: row group sizes %v", f.Key, f.RowGroups)
			}
			inGroups += n
		}
		if inGroups != f.NumRows || f.Size < minFileSize || f.Size > maxFileSize {
			return 0, fmt.Errorf("file %q: %d rows, %d in its row groups, %d bytes", f.Key, f.NumRows, inGroups, f.Size)
		}
		if f.FooterSHA256 != "" && !seal.IsSum(f.FooterSHA256) {
			return 0, fmt.Errorf("file %q: footer digest %q is not 64 lowercase hex digits", f.Key, f.FooterSHA256)
		}
		if rows > math.MaxInt64-f.NumRows {
			return 0, fmt.Errorf("file %q: row count overflows", f.Key)
		}
		rows += f.NumRows
	}
	return rows, nil
}

func newTable(loc *store.Location, pin Pin, schema *arrow.Schema, footers []*metadata.FileMetaData) *Table {
	t := &Table{loc: loc, pin: pin, schema: schema, footers: footers, groupStarts: []int64{0}}
	var at int64
	for i, f := range pin.Files {
		for g, size := range f.RowGroups {
			at += size
			t.groups = append(t.groups, GroupRef{i, g})
			t.groupStarts = append(t.groupStarts, at)
		}
	}
	if at > 0 { // buckets of a power of two rows, about two per group
		t.bucketShift = uint(max(bits.Len64(uint64(at/int64(2*len(t.groups)))), 1) - 1)
		t.bucket = make([]int32, (at-1)>>t.bucketShift+2)
		for b := range t.bucket[:len(t.bucket)-1] {
			t.bucket[b] = int32(t.searchGroup(int64(b)<<t.bucketShift, 0, len(t.groups)))
		}
		t.bucket[len(t.bucket)-1] = int32(len(t.groups) - 1)
	}
	t.refs.Store(1)
	return t
}

// URI returns the URI the table was opened with.
func (t *Table) URI() string { return t.pin.URI }

// Remote reports whether the table lives on a remote object store (not
// file:// or mem://), where every request waits a round trip.
func (t *Table) Remote() bool { return t.loc.Remote() }

// cachedSamples is how many places of its data files Cached looks at.
const cachedSamples = 64

// Cached says whether the table's disk cache (OpenOptions.BlockCache) holds
// its data files, as far as a sample says: the blocks at cachedSamples
// places spread evenly over the files' bytes, in row id order, must all be
// on disk. A table read once through its cache, as a second epoch reads it,
// is; one whose footers alone were read, or a part of whose rows were, is
// not. False without a cache or on local files.
func (t *Table) Cached() bool {
	if t.loc.Cache == nil || !t.loc.Remote() {
		return false
	}
	var total int64
	for _, f := range t.pin.Files {
		total += f.Size
	}
	if total == 0 {
		return false
	}
	f, start := 0, int64(0) // file f holds bytes [start, start+size) of all
	for i := range int64(cachedSamples) {
		at := (2*i + 1) * total / (2 * cachedSamples)
		for at >= start+t.pin.Files[f].Size {
			start += t.pin.Files[f].Size
			f++
		}
		if !t.loc.Cached(t.pin.Files[f].Object, at-start) {
			return false
		}
	}
	return true
}

// ReadLatency returns the usual latency of range reads of the table's files
// on a remote store as they have been served, from the store or its disk
// cache (store.Location.ReadLatency), once there has been one.
func (t *Table) ReadLatency() (time.Duration, bool) { return t.loc.ReadLatency() }

// MaxReads is the default number of range requests a reader of the table
// keeps in flight: DefaultMaxReads, or RemoteMaxReads on a remote store.
func (t *Table) MaxReads() int {
	if t.Remote() {
		return RemoteMaxReads
	}
	return DefaultMaxReads
}

// BlockCache returns the disk cache the table reads its data files through
// (OpenOptions.BlockCache), or nil.
func (t *Table) BlockCache() *blockcache.Cache { return t.loc.Cache }

// Version returns the pinned version's name: the decimal version number of a
// croupier table ("3"), "p" and a hash of the files for plain Parquet.
func (t *Table) Version() string { return t.pin.Version }

// Kind returns KindCroupier or KindParquet.
func (t *Table) Kind() string { return t.pin.Kind }

// NumRows returns the number of rows in the pinned version.
func (t *Table) NumRows() int64 { return t.groupStarts[len(t.groupStarts)-1] }

// Schema returns the Arrow schema.
func (t *Table) Schema() *arrow.Schema { return t.schema }

// Pin returns the description of the pinned version.
func (t *Table) Pin() Pin { return t.pin }

// Files returns the pinned data files in row id order.
func (t *Table) Files() []File { return t.pin.Files }

// Info is a summary of a pinned table version, as the C library and Python
// report it.
type Info struct {
	URI      string `json:"uri"`
	Version  string `json:"version"`
	NumRows  int64  `json:"num_rows"`
	NumFiles int    `json:"num_files"`
}

// Info returns the summary of the pinned version.
func (t *Table) Info() Info {
	return Info{URI: t.URI(), Version: t.Version(), NumRows: t.NumRows(), NumFiles: len(t.Files())}
}

// Retain adds a reference to the table: each Retain needs its own Close.
// Objects that keep a table (a loader) retain it, so that the table's opener
// may close it first.
func (t *Table) Retain() { t.refs.Add(1) }

// Close drops a reference and releases the table's store connection with the
// last one.
func (t *Table) Close() error {
	if t.refs.Add(-1) == 0 {
		t.pageIndex.learnt.writing.Wait()
		return t.loc.Close()
	}
	return nil
}

// pinParquet pins the .parquet objects among those listed, reading their
// footers.
func pinParquet(ctx context.Context, loc *store.Location, listed []store.Object, cat Cache) (*Table, error) {
	const op = "open table"
	var files []File
	for _, o := range listed {
		if o.Key == loc.Key || strings.HasSuffix(o.Key, ".parquet") {
			files = append(files, File{Object: o})
		}
	}
	if len(files) == 0 {
		return nil, errcode.New(errcode.NotFound, op, loc.URI, "no .parquet files found")
	}
	objs := make([]store.Object, len(files))
	early := make([][]byte, len(files)) // footers read while their files were stat'ed
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i, f := range files {
		g.Go(func() (err error) {
			defer errcode.Recover(&err, errcode.Internal, "stat", loc.ObjectURI(f.Key))
			// Match stat'ed it, or listed it. With a catalog, a listed object
			// that the listing does not name a version of (a size and
			// modification time only) is stat'ed, so that the catalog finds
			// its footer by the whole identity of that version.
			if !f.ModTime.IsZero() && (cat == nil || cacheable(f.Object)) {
				objs[i] = f.Object
				return nil
			}
			// With no catalog to consult first, the footer is read at the
			// listed size while the file is stat'ed: one round trip instead
			// of two. It stands if the stat finds the version it read.
			var raw []byte
			var read store.Object
			var tail errgroup.Group
			if cat == nil {
				tail.Go(func() (err error) {
					defer errcode.Recover(&err, errcode.Internal, "read footer", loc.ObjectURI(f.Key))
					raw, _, read, _ = fetchFooter(gctx, loc, f.Object) // readFooters meets any error again
					return nil
				})
			}
			objs[i], err = loc.Stat(gctx, f.Key)
			tail.Wait()
			if err == nil && raw != nil && objs[i].Matches(read) {
				early[i] = raw
			}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	footers, _, err := readFooters(ctx, loc, cat, objs, early, nil)
	if err != nil {
		return nil, err
	}
	for i := range files {
		files[i] = describe(objs[i], footers[i])
	}
	schema, err := arrowSchema(footers[0])
	if err != nil {
		return nil, errcode.Wrap(err, errcode.Corrupt, op, loc.ObjectURI(files[0].Key))
	}
	for i := 1; i < len(files); i++ {
		s, err := arrowSchema(footers[i])
		if err != nil {
			return nil, errcode.Wrap(err, errcode.Corrupt, op, loc.ObjectURI(files[i].Key))
		}
		if !s.Equal(schema) {
			return nil, errcode.New(errcode.InvalidArgument, op, loc.ObjectURI(files[i].Key),
				"schema differs from %s's:\n%s\nvs\n%s", loc.ObjectURI(files[0].Key), s, schema)
		}
	}
	enc, err := encodeSchema(schema)
	if err != nil {
		return nil, errcode.Wrap(err, errcode.Internal, op, loc.URI)
	}
	pin := Pin{Format: PinFormat, Kind: KindParquet, URI: loc.URI, Schema: enc, Files: files}
	pin.Version = pinVersion(files)
	return newTable(loc, pin, schema, footers), nil
}

func describe(obj store.Object, md *metadata.FileMetaData) File {
	f := File{Object: obj, NumRows: md.NumRows, RowGroups: make([]int64, md.NumRowGroups())}
	for i := range f.RowGroups {
		f.RowGroups[i] = md.RowGroup(i).NumRows()
	}
	return f
}

// pinVersion names a plain Parquet pin: "p" and 16 hex digits of the SHA-256 of
// every file's key, size, modification time and ETag, in order.
func pinVersion(files []File) string {
	h := sha256.New()
	var n [8]byte
	for _, f := range files {
		h.Write([]byte(f.Key))
		h.Write([]byte{0})
		binary.LittleEndian.PutUint64(n[:], uint64(f.Size))
		h.Write(n[:])
		binary.LittleEndian.PutUint64(n[:], uint64(f.ModTime.UnixNano()))
		h.Write(n[:])
		h.Write([]byte(f.ETag))
		h.Write([]byte{0})
	}
	return "p" + hex.EncodeToString(h.Sum(nil)[:8])
}

func encodeSchema(s *arrow.Schema) ([]byte, error) {
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(s))
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// decodeSchema decodes a schema that a manifest or pin holds. The IPC reader
// panics on some malformed messages: that is a Corrupt error too.
func decodeSchema(b []byte) (s *arrow.Schema, err error) {
	defer errcode.Recover(&err, errcode.Corrupt, "decode schema", "")
	if err := checkSchemaMessage(b); err != nil {
		return nil, fmt.Errorf("decode schema: %w", err)
	}
	r, err := ipc.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("decode schema: %w", err)
	}
	defer r.Release()
	return r.Schema(), nil
}

// VersionOf returns the version of t's croupier table that added row id, as
// its manifest records it, or 0 where it does not (plain Parquet, manifests
// written before files recorded their versions) or id is not in
// [0, NumRows). Appends keep row ids, so the answer is the same in every
// version holding the row.
func (t *Table) VersionOf(id int64) int64 {
	if id < 0 || id >= t.NumRows() {
		return 0
	}
	return t.pin.Files[t.groups[t.groupOf(id)].File].Version
}

// RowGroupOf returns the row group holding row id, numbered through the
// table's files in order, and the row's index in it. id must be in
// [0, NumRows).
func (t *Table) RowGroupOf(id int64) (group int, row int64) {
	g := t.groupOf(id)
	return g, id - t.groupStarts[g]
}

// groupRows returns the rows of t.groups[g].
func (t *Table) groupRows(g int) int64 { return t.groupStarts[g+1] - t.groupStarts[g] }

// groupOf returns the index in t.groups of the row group holding row id,
// which must be < NumRows.
func (t *Table) groupOf(id int64) int {
	b := id >> t.bucketShift
	lo, hi := int(t.bucket[b]), int(t.bucket[b+1])
	return t.searchGroup(id, lo, hi+1)
}

// keyIndex returns a zeroed slice with an entry per row group, with which
// locate numbers the groups of a batch: faster than a map, and recycled.
func (t *Table) keyIndex() []int32 {
	if p, ok := t.keyIndices.Get().(*[]int32); ok {
		return *p
	}
	return make([]int32, len(t.groups))
}

// putKeyIndex zeroes the entries of groups in index and recycles it.
func (t *Table) putKeyIndex(index []int32, groups []int32) {
	for _, g := range groups {
		index[g] = 0
	}
	t.keyIndices.Put(&index)
}

// searchGroup returns the group holding row id among groups [lo, hi), which
// must hold it. The binary search has no branch to mispredict: shuffled ids
// land in groups at random.
func (t *Table) searchGroup(id int64, lo, hi int) int {
	base, n := lo, hi-lo
	for n > 1 {
		half := n / 2
		if t.groupStarts[base+half] <= id {
			base += half
		}
		n -= half
	}
	return base
}

// Footer returns file i's parsed Parquet footer, reading it on first use.
// Concurrent first uses share one read: the first steps of a shuffle ask for
// most files' footers at once.
func (t *Table) Footer(ctx context.Context, i int) (*metadata.FileMetaData, error) {
	for {
		t.mu.Lock()
		md := t.footers[i]
		t.mu.Unlock()
		if md != nil {
			return md, nil
		}
		ch := t.footerReads.DoChan(strconv.Itoa(i), func() (any, error) { return t.readFooter(ctx, i) })
		select {
		case res := <-ch:
			// A read canceled by the caller that started it is retried by
			// the others.
			if res.Err != nil && errcode.Of(res.Err) == errcode.Canceled && ctx.Err() == nil {
				continue
			}
			if res.Err != nil {
				return nil, res.Err
			}
			return res.Val.(*metadata.FileMetaData), nil
		case <-ctx.Done():
			return nil, errcode.Wrap(ctx.Err(), errcode.Canceled, "read footer", t.loc.ObjectURI(t.pin.Files[i].Key))
		}
	}
}

// LoadFooters reads the footers not read yet of the files that hold rows
// ids, several at a time, so that reading the rows later waits for none of
// them. Ids past the last row are ignored, and so are errors: a read that
// needs a footer meets them again.
func (t *Table) LoadFooters(ctx context.Context, ids []uint64) {
	files := make([]int, 0, len(ids))
	for _, id := range ids {
		if id < uint64(t.NumRows()) {
			files = append(files, t.groups[t.groupOf(int64(id))].File)
		}
	}
	t.loadFooters(ctx, t.unreadFooters(files))
}

// unreadFooters returns, each once, the files among files whose footers are
// not read yet.
func (t *Table) unreadFooters(files []int) []int {
	var unread []int
	seen := map[int]bool{}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, f := range files {
		if t.footers[f] == nil && !seen[f] {
			unread, seen[f] = append(unread, f), true
		}
	}
	return unread
}

// loadFooters reads the footers of files, several at a time, and ignores
// errors: Footer meets them again where a footer is needed.
func (t *Table) loadFooters(ctx context.Context, files []int) {
	var g errgroup.Group
	g.SetLimit(16)
	for _, f := range files {
		g.Go(func() (err error) {
			defer errcode.Recover(&err, errcode.Internal, "read footer", t.loc.ObjectURI(t.pin.Files[f].Key))
			t.Footer(ctx, f) //nolint:errcheck // met again where it is needed
			return nil
		})
	}
	g.Wait()
}

// readFooter reads file i's footer, checks it against the pin and keeps it.
func (t *Table) readFooter(ctx context.Context, i int) (*metadata.FileMetaData, error) {
	f := t.pin.Files[i]
	mds, tails, err := readFooters(ctx, t.loc, t.cat, []store.Object{f.Object}, nil, []string{f.FooterSHA256})
	if err != nil {
		return nil, err
	}
	md := mds[0]
	if got := describe(t.pin.Files[i].Object, md); !equalLayout(got, t.pin.Files[i]) {
		return nil, errcode.New(errcode.Changed, "read footer", t.loc.ObjectURI(t.pin.Files[i].Key),
			"row layout differs from the pin (%d rows in %d row groups; pinned %d in %d)",
			got.NumRows, len(got.RowGroups), t.pin.Files[i].NumRows, len(t.pin.Files[i].RowGroups))
	}
	t.pageIndex.tails.keep(i, md, tails[0])
	t.mu.Lock()
	t.footers[i] = md
	t.mu.Unlock()
	return md, nil
}

func equalLayout(a, b File) bool {
	if a.NumRows != b.NumRows || len(a.RowGroups) != len(b.RowGroups) {
		return false
	}
	for i := range a.RowGroups {
		if a.RowGroups[i] != b.RowGroups[i] {
			return false
		}
	}
	return true
}

// Verify checks that the pinned version still exists (for a croupier table,
// its manifest) and that every file of it is still the pinned one, and fails
// with errcode.Changed naming the first that is not. It reads the footers not
// read yet while it stats their files, since a reader needs them next: on a
// distant store that saves a round trip before the first batch.
func (t *Table) Verify(ctx context.Context) error {
	if t.pin.Kind == KindCroupier {
		v, err := strconv.ParseInt(t.pin.Version, 10, 64)
		if err != nil {
			return errcode.Wrap(err, errcode.Corrupt, "verify pinned version", t.pin.URI)
		}
		key := t.loc.Join(manifestName(v))
		ok, err := t.loc.Exists(ctx, key)
		if err != nil {
			return errcode.Wrap(err, errcode.Unavailable, "verify pinned version "+t.pin.Version, t.loc.ObjectURI(key))
		}
		if !ok {
			return errcode.New(errcode.Changed, "verify pinned version "+t.pin.Version, t.pin.URI,
				"version %d no longer exists (removed by cleanup?)", v)
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i, f := range t.pin.Files {
		g.Go(func() (err error) {
			defer errcode.Recover(&err, errcode.Internal, "verify pinned version "+t.pin.Version, t.loc.ObjectURI(f.Key))
			where := t.loc.ObjectURI(f.Key)
			var footer errgroup.Group
			footer.Go(func() (err error) {
				defer errcode.Recover(&err, errcode.Internal, "read footer", where)
				_, _ = t.Footer(gctx, i) // a reader meets any error again
				return nil
			})
			obj, err := t.loc.Stat(gctx, f.Key)
			footer.Wait()
			if errcode.Of(err) == errcode.NotFound {
				return errcode.New(errcode.Changed, "verify pinned version "+t.pin.Version, where, "pinned file vanished")
			}
			if err != nil {
				return err
			}
			if !f.Matches(obj) {
				return errcode.New(errcode.Changed, "verify pinned version "+t.pin.Version, where,
					"pinned file changed (%s; pinned %s)", obj, f.Object)
			}
			return nil
		})
	}
	return g.Wait()
}
