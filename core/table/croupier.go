package table

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/google/uuid"
	"golang.org/x/sync/errgroup"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/store"
	"github.com/croupier-data/croupier/core/table/internal/general"
	"github.com/croupier-data/croupier/internal/jsonargs"
	"github.com/croupier-data/croupier/internal/seal"
)

// Layout of a croupier table under its URI:
//
//	_versions/00000000000000000001.json   one immutable manifest per version
//	_versions/_croupier                   empty; written by Create before any data
//	data/<uuid>.parquet                   immutable, uniquely named data files
const (
	versionsDir = "_versions/"
	// createdMarker makes the folder of a table whose Create has not
	// committed yet (or never will: its writer died) a croupier table with no
	// version, so that Open does not take the orphaned data files under data/
	// for a plain Parquet dataset.
	createdMarker = versionsDir + "_croupier"
	dataDir       = "data/"
	// ManifestFormat is the version of the manifest encoding. Version 3
	// manifests record the SHA-256 of each data file's footer
	// (File.FooterSHA256; files kept from a version written before may lack
	// it), on which the file's identity rests wherever the table is copied
	// (see bindLocal). Version 2 manifests are sealed (see internal/seal) and
	// name the commit that wrote them; version 1 manifests, written before,
	// carry no digest and are read unchecked (the package doc says what that
	// leaves undetected).
	ManifestFormat = 3
	// footerlessManifestFormat is the last format without footer digests.
	footerlessManifestFormat = 2
	// unsealedManifestFormat is the last format without a digest.
	unsealedManifestFormat = 1
)

// Defaults of WriteOptions; see the package doc for the measurement behind them.
const (
	DefaultRowGroupRows = 4096
	DefaultPageBytes    = 16 << 10
	DefaultCompression  = "lz4"
	DefaultMaxAttempts  = 1000
)

// WriteOptions configure Create and Append. The zero value uses the defaults.
type WriteOptions struct {
	// RowGroupRows is the most rows in one Parquet row group.
	RowGroupRows int64 `json:"row_group_rows,omitempty"`
	// PageBytes is the target size of one data page.
	PageBytes int64 `json:"page_bytes,omitempty"`
	// Compression is the codec of the data pages: "lz4" (the default),
	// "zstd" or "none" (see the package doc for when each pays).
	Compression string `json:"compression,omitempty"`
	// MaxAttempts bounds the commit attempts of one Append: a writer that loses
	// the race for a version retries on the next one.
	MaxAttempts int `json:"max_attempts,omitempty"`
	// Catalog caches the manifests the commit reads, and records the stores
	// that passed the check of their conditional writes (may be nil).
	Catalog Cache `json:"-"`
	// TrustConditionalWrites skips the check, before a process's first
	// commit to a store, that the store honours exclusive creates (see
	// store.CreateExclusive): a second create of one key must fail. Set it
	// only for a store you know honours them, or a table only one writer
	// ever commits to; on a store that ignores them, concurrent commits
	// overwrite each other's versions and their rows are lost.
	TrustConditionalWrites bool `json:"trust_conditional_writes,omitempty"`
}

// withDefaults fills in the defaults of o, and fails naming a compression
// it does not know.
func (o WriteOptions) withDefaults() (WriteOptions, error) {
	if o.Compression == "" {
		o.Compression = DefaultCompression
	}
	if _, ok := codecs[o.Compression]; !ok {
		return o, fmt.Errorf("compression %q: use one of %q", o.Compression, slices.Sorted(maps.Keys(codecs)))
	}
	if o.RowGroupRows <= 0 {
		o.RowGroupRows = DefaultRowGroupRows
	}
	if o.PageBytes <= 0 {
		o.PageBytes = DefaultPageBytes
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = DefaultMaxAttempts
	}
	return o, nil
}

// codecs are the compressions WriteOptions.Compression names. LZ4 is
// Parquet's LZ4_RAW, the framing every current reader agrees on.
var codecs = map[string]compress.Compression{
	"zstd": compress.Codecs.Zstd,
	"lz4":  compress.Codecs.Lz4Raw,
	"none": compress.Codecs.Uncompressed,
}

// manifest describes one version of a croupier table. It holds every data file
// of the version, not only those the commit added, so that one manifest is all
// a reader needs.
type manifest struct {
	Format    int       `json:"format"`
	Version   int64     `json:"version"`
	Parent    int64     `json:"parent"` // 0 for the first version
	Timestamp time.Time `json:"timestamp"`
	Schema    []byte    `json:"schema"` // Arrow IPC schema message (base64 in JSON)
	NumRows   int64     `json:"num_rows"`
	Files     []File    `json:"files"` // keys relative to the table's folder
	Added     int       `json:"added"` // the last Added files are new in this version
	// Writer is a random id of the commit that wrote the manifest: no two
	// commits write equal manifests, even of equal data at the same instant.
	Writer string `json:"writer,omitempty"`
	// SHA256 is the manifest's seal (see internal/seal), set by decoding.
	SHA256 string `json:"sha256,omitempty"`
}

// encode returns m sealed, as it is stored.
func (m *manifest) encode() ([]byte, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return seal.JSON(b), nil
}

// commitHook, when set, is called as a commit passes each phase:
//
//	"data-writing"  rows are written to a data file whose upload is not finished
//	"data-written"  the data file is a complete object that no manifest names
//	"manifest"      the manifest is encoded, not yet created
//	"committed"     the manifest exists: the version is visible, not yet reported
//
// Only tests set it, to kill a writer process at each phase and check that
// none leaves a half-written version visible or the table unwritable.
var commitHook func(phase string)

func passPhase(phase string) {
	if commitHook != nil {
		commitHook(phase)
	}
}

func manifestName(v int64) string { return fmt.Sprintf("%s%020d.json", versionsDir, v) }

// parseManifestName returns the version a key under _versions/ names, or
// false for anything else (such as a temporary file of a commit in flight).
func parseManifestName(name string) (int64, bool) {
	name = strings.TrimPrefix(name, versionsDir)
	digits, ok := strings.CutSuffix(name, ".json")
	if !ok || len(digits) != 20 {
		return 0, false
	}
	v, err := strconv.ParseInt(digits, 10, 64)
	return v, err == nil && v > 0
}

// croupierFormat opens croupier tables through their manifests.
type croupierFormat struct{}

// isCroupier reports whether loc's folder holds a _versions/ folder.
func isCroupier(ctx context.Context, loc *store.Location) (bool, error) {
	objs, err := loc.List(ctx, loc.Join(versionsDir), 1)
	return len(objs) > 0, err
}

func (croupierFormat) open(ctx context.Context, loc *store.Location, opts OpenOptions) (*Table, error) {
	const op = "open table"
	v := opts.Version
	if v < 0 {
		return nil, errcode.New(errcode.InvalidArgument, op, loc.URI, "version %d: versions start at 1 (0 is the latest)", v)
	}
	var m *manifest
	var err error
	if v == 0 {
		m, err = readLatest(ctx, loc, opts.Catalog, op)
	} else {
		m, err = readManifest(ctx, loc, opts.Catalog, v)
	}
	if err != nil {
		return nil, err
	}
	return m.table(ctx, loc)
}

// table returns the pinned Table of manifest m.
func (m *manifest) table(ctx context.Context, loc *store.Location) (*Table, error) {
	schema, err := decodeSchema(m.Schema)
	if err != nil {
		return nil, errcode.Wrap(err, errcode.Corrupt, "open table", loc.ObjectURI(loc.Join(manifestName(m.Version))))
	}
	files := slices.Clone(m.Files)
	for i := range files {
		files[i].Key = loc.Join(files[i].Key)
	}
	if err := bindLocal(ctx, loc, files); err != nil {
		return nil, err
	}
	pin := Pin{Format: PinFormat, Kind: KindCroupier, URI: loc.URI, Version: strconv.FormatInt(m.Version, 10),
		Schema: m.Schema, Files: files}
	return newTable(loc, pin, schema, make([]*metadata.FileMetaData, len(files))), nil
}

// A data file of a croupier table is identified by what its version's
// manifest records of its bytes: its key in the table, its size, its rows in
// each row group and, from manifest format 3 on, the SHA-256 of its footer.
// Each page of the file carries the CRC of its bytes in its header, checked
// on every read (crc.go), so that the footer, which says where every page
// lies, and the pages' CRCs answer for the rest of the file. None of this
// changes when the table is copied: cp -a, cp -r, rsync, a restore from a
// backup, whatever they do to inodes and modification times.
//
// What a manifest also records of each file, the modification time, inode,
// ETag or generation its writer saw, names one copy of it: the original. On
// a local disk, where a stat costs microseconds, a table opened from its
// manifest binds each file with a footer digest to the version found now
// (bindLocal), and every read of the open table is conditional on that
// version, as any pinned read is: a file replaced or rewritten under an open
// table is refused with errcode.Changed, and the catalog and the disk cache
// find what they hold of the file by the version bound. The bytes bound are
// then checked against the manifest: the footer against its digest when it
// is read, each page against its CRC. On a remote store, a file is read as
// the version its manifest records, without a stat of each file at open.
// Files recorded without a digest, by manifests of format 2 and before, are
// read as the version recorded too, everywhere: nothing but that version
// answers for their bytes.

// bindLocal binds files, the data files of a croupier table at loc (keys
// joined to loc's), to the versions of them found now when loc is local,
// where the manifest records their footers' digests and the sizes agree. A
// file that is gone, or of another size, keeps the version recorded: its
// reads fail naming what they find. The files are stat'ed 16 at a time: a
// "local" disk may be a network file system, where a stat takes a round trip.
func bindLocal(ctx context.Context, loc *store.Location, files []File) error {
	if loc.Remote() {
		return nil
	}
	var g errgroup.Group
	g.SetLimit(16)
	for i, f := range files {
		if f.FooterSHA256 == "" {
			continue
		}
		g.Go(func() (err error) {
			defer errcode.Recover(&err, errcode.Internal, "stat", loc.ObjectURI(f.Key))
			obj, err := loc.Stat(ctx, f.Key)
			switch {
			case errcode.Of(err) == errcode.NotFound:
				return nil
			case err != nil:
				return err
			case obj.Size == f.Size:
				files[i].Object = obj
			}
			return nil
		})
	}
	return g.Wait()
}

// listVersions returns the committed versions of the table at loc, ascending.
func listVersions(ctx context.Context, loc *store.Location) ([]int64, error) {
	ms, err := listManifests(ctx, loc)
	out := make([]int64, len(ms))
	for i, m := range ms {
		out[i] = m.version
	}
	return out, err
}

// manifestObject is a manifest as listed: its version and when it was made.
type manifestObject struct {
	version int64
	modTime time.Time
}

// listManifests returns the manifests of the table at loc, by version.
func listManifests(ctx context.Context, loc *store.Location) ([]manifestObject, error) {
	prefix := loc.Join(versionsDir)
	objs, err := loc.List(ctx, prefix, 0)
	if err != nil {
		return nil, err
	}
	var out []manifestObject
	for _, obj := range objs {
		if v, ok := parseManifestName(versionsDir + strings.TrimPrefix(obj.Key, prefix)); ok {
			out = append(out, manifestObject{version: v, modTime: obj.ModTime})
		}
	}
	slices.SortFunc(out, func(a, b manifestObject) int { return cmp.Compare(a.version, b.version) })
	return out, nil
}

// readLatest reads the manifest of the latest version. A Cleanup may delete
// that manifest between the listing and the read, once newer versions exist
// and it is older than the grace period; then the listing is repeated.
func readLatest(ctx context.Context, loc *store.Location, cat Cache, op string) (*manifest, error) {
	for attempt := 1; ; attempt++ {
		versions, err := listVersions(ctx, loc)
		if err != nil {
			return nil, err
		}
		if len(versions) == 0 {
			return nil, errcode.New(errcode.NotFound, op, loc.URI, "croupier table has no committed version")
		}
		m, err := readManifest(ctx, loc, cat, versions[len(versions)-1])
		if errcode.Of(err) == errcode.NotFound && attempt < 10 {
			continue
		}
		return m, err
	}
}

// readManifest reads and checks the manifest of version v. With a catalog it
// stats the manifest and reads it from the store only on a cache miss.
func readManifest(ctx context.Context, loc *store.Location, cat Cache, v int64) (*manifest, error) {
	const op = "read manifest"
	key := loc.Join(manifestName(v))
	where := loc.ObjectURI(key)
	notFound := func(err error) error {
		if errcode.Of(err) != errcode.NotFound {
			return err
		}
		versions, lerr := listVersions(ctx, loc)
		if lerr != nil || len(versions) == 0 {
			return errcode.New(errcode.NotFound, "open version", loc.URI, "version %d does not exist", v)
		}
		return errcode.New(errcode.NotFound, "open version", loc.URI, "version %d does not exist (versions %d to %d exist)",
			v, versions[0], versions[len(versions)-1])
	}
	var ckey string
	if cat != nil {
		obj, err := loc.Stat(ctx, key)
		if err != nil {
			return nil, notFound(err)
		}
		ckey = cacheKey("manifest", where, obj)
		// A cached manifest that does not decode is a miss, not an error:
		// the store's copy decides.
		if data := cat.Get([]string{ckey})[0]; data != nil {
			if m, err := decodeManifest(data, v); err == nil {
				return m, nil
			}
		}
	}
	data, err := loc.ReadAll(ctx, key)
	if err != nil {
		return nil, notFound(err)
	}
	m, err := decodeManifest(data, v)
	if err != nil {
		return nil, errcode.Wrap(err, errcode.Corrupt, op, where)
	}
	if cat != nil {
		cat.Put([]string{ckey}, [][]byte{data})
	}
	return m, nil
}

// decodeManifest parses and checks a manifest that should be version v's.
func decodeManifest(data []byte, v int64) (*manifest, error) {
	sealed, err := seal.Check(data)
	if err != nil {
		return nil, fmt.Errorf("corrupt manifest: %w", err)
	}
	var m manifest
	if err := jsonargs.Unmarshal(data, &m, true); err != nil {
		return nil, fmt.Errorf("corrupt manifest: %w", err)
	}
	switch {
	case m.Format < unsealedManifestFormat || m.Format > ManifestFormat:
		return nil, fmt.Errorf("unsupported manifest format %d (this build reads %d to %d)", m.Format, unsealedManifestFormat, ManifestFormat)
	case m.Format > unsealedManifestFormat && !sealed:
		return nil, fmt.Errorf("corrupt manifest: format %d without its %s seal at the end", m.Format, seal.Field)
	case m.Format == unsealedManifestFormat && (sealed || m.Writer != ""):
		return nil, fmt.Errorf("corrupt manifest: format %d with fields of format %d", m.Format, footerlessManifestFormat)
	case m.Format <= footerlessManifestFormat && slices.ContainsFunc(m.Files, func(f File) bool { return f.FooterSHA256 != "" }):
		return nil, fmt.Errorf("corrupt manifest: format %d with fields of format %d", m.Format, ManifestFormat)
	}
	if m.Version != v {
		return nil, fmt.Errorf("manifest says version %d, its name says %d", m.Version, v)
	}
	if m.Parent < 0 || m.Parent >= m.Version {
		return nil, fmt.Errorf("corrupt manifest: parent version %d of version %d", m.Parent, m.Version)
	}
	if _, err := decodeSchema(m.Schema); err != nil {
		return nil, fmt.Errorf("corrupt manifest: %w", err)
	}
	// Keys are relative to the table's folder and must stay inside it.
	rows, err := checkFiles(m.Files, store.CheckKey)
	if err != nil {
		return nil, fmt.Errorf("corrupt manifest: %w", err)
	}
	if rows != m.NumRows {
		return nil, fmt.Errorf("corrupt manifest: %d rows in files, %d recorded", rows, m.NumRows)
	}
	if m.Added < 0 || m.Added > len(m.Files) {
		return nil, fmt.Errorf("corrupt manifest: %d files added of %d", m.Added, len(m.Files))
	}
	return &m, nil
}

// Versions returns the committed versions of the croupier table at uri,
// ascending. Versions removed by Cleanup are not listed.
func Versions(ctx context.Context, uri string) ([]int64, error) {
	loc, err := store.Open(ctx, uri)
	if err != nil {
		return nil, err
	}
	defer loc.Close()
	if err := mustBeCroupier(ctx, loc); err != nil {
		return nil, err
	}
	return listVersions(ctx, loc)
}

// Versions returns the committed versions of t's croupier table, now.
func (t *Table) Versions(ctx context.Context) ([]int64, error) {
	if t.pin.Kind != KindCroupier {
		return nil, errcode.New(errcode.InvalidArgument, "list versions", t.pin.URI,
			"a plain Parquet dataset has only its pinned version %s", t.pin.Version)
	}
	return listVersions(ctx, t.loc)
}

func mustBeCroupier(ctx context.Context, loc *store.Location) error {
	ok, err := isCroupier(ctx, loc)
	if err != nil {
		return err
	}
	if !ok {
		return errcode.New(errcode.NotFound, "open table", loc.URI, "no croupier table here (no _versions/ folder)")
	}
	return nil
}

// Create creates a croupier table at uri whose version 1 holds data (which may
// yield no rows; its schema is the table's). It fails with
// errcode.AlreadyExists when a croupier table exists there.
func Create(ctx context.Context, uri string, data array.RecordReader, opts WriteOptions) (*Table, error) {
	const op = "create table"
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, errcode.Wrap(err, errcode.InvalidArgument, op, uri)
	}
	loc, err := store.OpenCreate(ctx, uri)
	if err != nil {
		return nil, err
	}
	t, err := create(ctx, loc, data, opts)
	if err != nil {
		loc.Close()
		if errcode.Of(err) == errcode.Internal {
			err = errcode.Wrap(err, errcode.Internal, op, uri)
		}
		return nil, err
	}
	t.cat = opts.Catalog
	return t, nil
}

func create(ctx context.Context, loc *store.Location, data array.RecordReader, opts WriteOptions) (*Table, error) {
	if versions, err := listVersions(ctx, loc); err != nil {
		return nil, err
	} else if len(versions) > 0 {
		return nil, errcode.New(errcode.AlreadyExists, "create table", loc.URI,
			"a croupier table exists here (latest version %d)", versions[len(versions)-1])
	}
	schema, err := canonicalSchema(data.Schema(), opts)
	if err != nil {
		return nil, errcode.Wrap(err, errcode.InvalidArgument, "create table", loc.URI)
	}
	enc, err := encodeSchema(schema)
	if err != nil {
		return nil, err
	}
	// The check comes first: a create it refuses leaves nothing behind (its
	// probe object is no Parquet file, were a crash to leave it).
	if err := checkExclusiveCreate(ctx, loc, opts); err != nil {
		return nil, err
	}
	if err := loc.WriteAll(ctx, loc.Join(createdMarker), nil, store.WriterOptions{}); err != nil {
		return nil, errcode.Wrap(err, store.Code(err), "create table", loc.ObjectURI(loc.Join(createdMarker)))
	}
	added, err := writeData(ctx, loc, data, opts)
	if err != nil {
		return nil, err
	}
	m := &manifest{Format: ManifestFormat, Version: 1, Timestamp: time.Now().UTC(), Schema: enc,
		Files: added, Added: len(added)}
	for i := range added {
		added[i].Version = 1
		m.NumRows += added[i].NumRows
	}
	if err := commitManifest(ctx, loc, m); err != nil {
		if errcode.Of(err) == errcode.AlreadyExists {
			removeFiles(ctx, loc, added)
			return nil, errcode.New(errcode.AlreadyExists, "create table", loc.URI, "a croupier table was created here concurrently")
		}
		// The manifest may have been created (see CreateExclusive): leave
		// its data in place; if it was not, Cleanup removes the orphans.
		return nil, err
	}
	return m.table(ctx, loc)
}

// Append adds data as a new version of the croupier table at uri and returns
// that version's number. Many writers, in any processes, may append at once:
// each commit is one exclusive create of the next version's manifest, a writer
// that loses the race re-reads the new latest version, checks its schema again
// and retries on the next number. data must have exactly the table's schema
// (see the package doc) and at least one row: an append of none is refused
// with errcode.InvalidArgument and makes no version.
func Append(ctx context.Context, uri string, data array.RecordReader, opts WriteOptions) (int64, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return 0, errcode.Wrap(err, errcode.InvalidArgument, "append", uri)
	}
	loc, err := store.Open(ctx, uri)
	if err != nil {
		return 0, err
	}
	defer loc.Close()
	return appendData(ctx, loc, data, opts)
}

// Append adds data as a new version of t's croupier table; see Append. t stays
// pinned at its own version: open the returned version to read the new rows.
func (t *Table) Append(ctx context.Context, data array.RecordReader, opts WriteOptions) (int64, error) {
	if t.pin.Kind != KindCroupier {
		return 0, errcode.New(errcode.InvalidArgument, "append", t.pin.URI,
			"a plain Parquet dataset cannot be appended to; create a croupier table")
	}
	if opts.Catalog == nil {
		opts.Catalog = t.cat
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return 0, errcode.Wrap(err, errcode.InvalidArgument, "append", t.pin.URI)
	}
	return appendData(ctx, t.loc, data, opts)
}

func appendData(ctx context.Context, loc *store.Location, data array.RecordReader, opts WriteOptions) (int64, error) {
	const op = "append"
	if err := mustBeCroupier(ctx, loc); err != nil {
		return 0, err
	}
	parent, err := readLatest(ctx, loc, opts.Catalog, op)
	if err != nil {
		return 0, err
	}
	latest := parent.Version
	// Check the schema before writing anything.
	canon, err := canonicalSchema(data.Schema(), opts)
	if err != nil {
		return 0, errcode.Wrap(err, errcode.InvalidArgument, op, loc.URI)
	}
	if err := checkSchema(parent, canon, loc, latest); err != nil {
		return 0, err
	}
	if err := checkExclusiveCreate(ctx, loc, opts); err != nil {
		return 0, err
	}
	added, err := writeData(ctx, loc, data, opts)
	if err != nil {
		return 0, err
	}
	if len(added) == 0 {
		// A version would then hold the rows of the one before it: the
		// caller would take it for new rows (a follower waits for it).
		return 0, errcode.New(errcode.InvalidArgument, op, loc.URI,
			"no rows to append: a version is made of new rows; the table stays at version %d", latest)
	}
	for attempt := 1; ; attempt++ {
		if attempt > 1 {
			if parent, err = readManifest(ctx, loc, opts.Catalog, latest); err != nil {
				removeFiles(ctx, loc, added)
				return 0, err
			}
			if err := checkSchema(parent, canon, loc, latest); err != nil {
				removeFiles(ctx, loc, added)
				return 0, err
			}
		}
		m := &manifest{Format: ManifestFormat, Version: latest + 1, Parent: latest, Timestamp: time.Now().UTC(),
			Schema: parent.Schema, NumRows: parent.NumRows, Files: append(slices.Clone(parent.Files), added...), Added: len(added)}
		for i := len(parent.Files); i < len(m.Files); i++ {
			m.Files[i].Version = m.Version
			m.NumRows += m.Files[i].NumRows
		}
		err := commitManifest(ctx, loc, m)
		if err == nil {
			return m.Version, nil
		}
		if errcode.Of(err) != errcode.AlreadyExists {
			// The manifest may have been created (see CreateExclusive): leave
			// its data in place; if it was not, Cleanup removes the orphans.
			return 0, err
		}
		if attempt >= opts.MaxAttempts {
			removeFiles(ctx, loc, added)
			return 0, errcode.New(errcode.Unavailable, op, loc.URI,
				"lost the race for a new version %d times in a row (last tried version %d)", attempt, m.Version)
		}
		// Another writer committed latest+1: build on it next. (If more
		// versions exist, the next attempt loses at once and moves on again.)
		latest++
		if err := sleep(ctx, time.Duration(rand.Int64N(int64(min(attempt, 20))*int64(time.Millisecond)))); err != nil {
			removeFiles(ctx, loc, added)
			return 0, errcode.Wrap(err, errcode.Canceled, op, loc.URI)
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// checkSchema checks that data's canonical schema is the table's.
func checkSchema(parent *manifest, canon *arrow.Schema, loc *store.Location, v int64) error {
	const op = "append"
	want, err := decodeSchema(parent.Schema)
	if err != nil {
		return errcode.Wrap(err, errcode.Corrupt, op, loc.ObjectURI(loc.Join(manifestName(v))))
	}
	if err := diffSchema(want, canon); err != nil {
		return errcode.Wrap(fmt.Errorf("data does not match the schema of version %d: %w", v, err), errcode.InvalidArgument, op, loc.URI)
	}
	return nil
}

// diffSchema names the first difference between the table's schema and data's.
func diffSchema(table, data *arrow.Schema) error {
	for i, f := range table.Fields() {
		j := data.FieldIndices(f.Name)
		if len(j) == 0 {
			return fmt.Errorf("field %q (%s) is missing from the data", f.Name, f.Type)
		}
		g := data.Field(j[0])
		if !arrow.TypeEqual(f.Type, g.Type) {
			return fmt.Errorf("field %q: table has type %s, data has %s", f.Name, f.Type, g.Type)
		}
		if f.Nullable != g.Nullable {
			return fmt.Errorf("field %q (%s): table has nullable=%t, data has nullable=%t", f.Name, f.Type, f.Nullable, g.Nullable)
		}
		if j[0] != i {
			return fmt.Errorf("field %q is at position %d in the table, %d in the data", f.Name, i, j[0])
		}
	}
	for _, g := range data.Fields() {
		if len(table.FieldIndices(g.Name)) == 0 {
			return fmt.Errorf("field %q (%s) is not in the table (adding columns is not supported)", g.Name, g.Type)
		}
	}
	return nil
}

// writerProps are the Parquet properties of every data file croupier writes.
// No dictionaries: a read of a few rows would pay a column chunk's whole
// dictionary page, which for token ids and other mostly distinct values is as
// large as the values; zstd compresses repeats without one (BenchmarkLayout,
// see the package doc).
//
// Statistics of at most maxStatsBytes: the minimum and maximum of long strings
// seldom prune a row group, and a column chunk's metadata longer than the 4 KiB
// arrow-go buffers makes the CRC writer hold the rest of the file (see
// crcwrite.go): a table of 480 MB of RL rollouts with prompts of 1 to 4 KB
// was written in 8.1 s holding 1.8 GB more with arrow-go's 4,096, in 3.9 s
// holding nothing more with 256.
//
// batch is how many values of a column the writer adds to a page between
// checks of the page's size (see valuesPerCheck).
func writerProps(opts WriteOptions, batch int64) *parquet.WriterProperties {
	return parquet.NewWriterProperties(
		parquet.WithMaxRowGroupLength(opts.RowGroupRows),
		parquet.WithDataPageSize(opts.PageBytes),
		parquet.WithBatchSize(batch),
		parquet.WithMaxStatsSize(maxStatsBytes),
		parquet.WithPageIndexEnabled(true),
		parquet.WithCompression(codecs[opts.Compression]),
		parquet.WithDictionaryDefault(false),
	)
}

// maxStatsBytes bounds the statistics written of a column chunk or a page.
const maxStatsBytes = 256

// maxValuesPerCheck is arrow-go's own batch of values between checks of a
// page's size, which is right where values are a few bytes: checking more
// often only costs time there (a table of 8 numeric columns was written at
// 81 MB/s with checks every 1,024 values, 62 every 16 and 14 every value).
const maxValuesPerCheck = 1024

// valuesPerCheck is how many values of a column the writer adds to a page
// between checks of its size, for a file whose first rows are rec. arrow-go
// closes a page once a check finds it at PageBytes, so with 1,024 values
// between checks a column of 200-byte strings had pages of 200 KB against
// 16 KiB asked for: each row a shuffled read took from it decoded 12 times
// the bytes it should, and a rare 60 MB cell shared its page with 1,023
// rows, each of which paid for the cell. The batch is PageBytes over twice the
// mean bytes of a value of rec's widest leaf column, so that a page ends
// within about half a page of its size, and a huge value shares its page with
// at most that many others.
func valuesPerCheck(rec arrow.RecordBatch, pageBytes int64) int64 {
	widest := 1.0
	for _, col := range rec.Columns() {
		widest = max(widest, meanValueBytes(col, 0, int64(col.Len())))
	}
	return int64(min(max(float64(pageBytes)/(2*widest), 1), maxValuesPerCheck))
}

// meanValueBytes is the mean bytes of a value of the widest leaf of rows
// [from, to) of a: for a list, of its elements; for a leaf, its values'
// bytes as rangeBytes counts them.
func meanValueBytes(a arrow.Array, from, to int64) float64 {
	switch a := a.(type) {
	case array.ListLike:
		if to <= from {
			return 0
		}
		start, _ := a.ValueOffsets(int(from))
		_, end := a.ValueOffsets(int(to - 1))
		return meanValueBytes(a.ListValues(), start, end)
	case *array.Struct:
		widest := 0.0
		for i := range a.NumField() {
			widest = max(widest, meanValueBytes(a.Field(i), from, to))
		}
		return widest
	case *array.Dictionary:
		return meanValueBytes(a.Dictionary(), 0, int64(a.Dictionary().Len()))
	}
	if to <= from {
		return 0
	}
	return float64(rangeBytes(a, from, to)) / float64(to-from)
}

// canonicalSchema is s as readers will see it after a round trip through
// Parquet: the schema of an empty file written with croupier's properties.
func canonicalSchema(s *arrow.Schema, opts WriteOptions) (*arrow.Schema, error) {
	c, err := generalCodec("writing a table")
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	w, err := c.NewWriter(s, &buf, writerProps(opts, maxValuesPerCheck))
	if err != nil {
		return nil, fmt.Errorf("schema cannot be stored in Parquet: %w", err)
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("schema cannot be stored in Parquet: %w", err)
	}
	b := buf.Bytes()
	md, err := parseFooter(b[len(b)-8-int(uint32le(b[len(b)-8:])):len(b)-8], "schema")
	if err != nil {
		return nil, err
	}
	return arrowSchema(md)
}

func uint32le(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

// writeData writes data as one new Parquet file under data/ and returns it
// (with its key relative to the table's folder), or nothing when data has no
// rows. The file is unique (a random UUID) and never rewritten; until a
// manifest names it, it is an orphan that Cleanup removes after a grace period.
func writeData(ctx context.Context, loc *store.Location, data array.RecordReader, opts WriteOptions) (files []File, err error) {
	rel := dataDir + uuid.NewString() + ".parquet"
	key := loc.Join(rel)
	where := loc.ObjectURI(key)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var bw io.WriteCloser
	c, err := generalCodec("writing a table")
	if err != nil {
		return nil, err
	}
	var pw general.Writer
	var cw *pageCRCWriter
	defer func() {
		if p := recover(); p != nil {
			err = errcode.New(errcode.Internal, "write", where, "panic: %v", p)
		}
		if err != nil && bw != nil {
			cancel() // a writer canceled before Close discards what it wrote
			bw.Close()
		}
	}()
	var rows int64
	for data.Next() {
		rec := data.RecordBatch()
		if rec.NumRows() == 0 {
			continue
		}
		if pw == nil {
			if bw, err = loc.NewWriter(wctx, key, store.WriterOptions{ContentType: "application/vnd.apache.parquet"}); err != nil {
				return nil, err
			}
			cw = newPageCRCWriter(bw)
			if pw, err = c.NewWriter(data.Schema(), cw, writerProps(opts, valuesPerCheck(rec, opts.PageBytes))); err != nil {
				return nil, errcode.Wrap(err, errcode.InvalidArgument, "write", where)
			}
		}
		if err := pw.WriteBuffered(rec); err != nil {
			return nil, errcode.Wrap(err, writeCode(err, errcode.InvalidArgument), "write", where)
		}
		rows += rec.NumRows()
	}
	if err := data.Err(); err != nil {
		return nil, errcode.Wrap(err, errcode.InvalidArgument, "read input data for", where)
	}
	if pw == nil {
		return nil, nil
	}
	passPhase("data-writing")
	// Closing the Parquet writer closes the CRC writer, which closes the
	// store's writer, which commits the object; after an error the deferred cleanup
	// discards it.
	if err = pw.Close(); err != nil {
		loc.Delete(context.WithoutCancel(ctx), key)
		return nil, errcode.Wrap(err, writeCode(err, store.Code(err)), "write", where)
	}
	bw = nil
	passPhase("data-written")
	obj, err := loc.Stat(ctx, key)
	if err != nil {
		return nil, err
	}
	meta, err := pw.FileMetadata()
	if err != nil {
		return nil, errcode.Wrap(err, errcode.Internal, "write", where)
	}
	f := File{Object: obj, NumRows: rows, RowGroups: make([]int64, meta.NumRowGroups()), FooterSHA256: cw.footerSHA256}
	for i := range f.RowGroups {
		f.RowGroups[i] = meta.RowGroup(i).NumRows()
	}
	if f.NumRows != meta.NumRows {
		return nil, errcode.New(errcode.Internal, "write", where, "wrote %d rows, footer says %d", rows, meta.NumRows)
	}
	f.Key = rel
	return []File{f}, nil
}

// removeFiles deletes data files a failed commit wrote; what it cannot delete
// stays an orphan for Cleanup.
func removeFiles(ctx context.Context, loc *store.Location, files []File) {
	for _, f := range files {
		loc.Delete(context.WithoutCancel(ctx), loc.Join(f.Key))
	}
}

// Appended describes the rows one committed version of a croupier table
// added to its parent: row ids [Start, End) of that version and of every
// later one, for appends keep the parent's files and add theirs at the end.
// Base and Head identify the files the version kept from its parent and all
// its files (as Table.ID does), so that a reader following the table can
// check that version v+1 kept exactly v's files: v+1's Base is v's Head.
type Appended struct {
	Version int64  `json:"version"`
	Start   int64  `json:"start"`
	End     int64  `json:"end"`
	Base    string `json:"base"`
	Head    string `json:"head"`
}

// Rows is the number of rows the version added.
func (a Appended) Rows() int64 { return a.End - a.Start }

// AppendedThrough returns what each version from from to to of t's croupier
// table added, as Appended does, from version to's manifest alone, when its
// files record the versions that added them (as the manifests croupier
// writes do) in order: one read where Appended reads a manifest a version.
// ok is false when the manifest does not say (written before files recorded
// their versions); then call Appended for each.
func (t *Table) AppendedThrough(ctx context.Context, from, to int64) (as []Appended, ok bool, err error) {
	if t.pin.Kind != KindCroupier {
		return nil, false, errcode.New(errcode.InvalidArgument, "read version", t.pin.URI,
			"a plain Parquet dataset has no versions to follow")
	}
	if from < 1 || to < from {
		return nil, false, errcode.New(errcode.InvalidArgument, "read version", t.pin.URI, "versions %d to %d: versions start at 1", from, to)
	}
	m, err := readManifest(ctx, t.loc, t.cat, to)
	if err != nil {
		return nil, false, err
	}
	for i, f := range m.Files {
		if f.Version < 1 || f.Version > to || (i > 0 && f.Version < m.Files[i-1].Version) {
			return nil, false, nil
		}
	}
	// The files of versions up to v are a prefix of the manifest's; their
	// identities are those of the prefixes, hashed once.
	prefix := 0 // files of the versions before v
	var rows int64
	ids := prefixIDs(KindCroupier, m.Files)
	for v := int64(1); v <= to; v++ {
		end, start := prefix, rows
		for end < len(m.Files) && m.Files[end].Version == v {
			rows += m.Files[end].NumRows
			end++
		}
		if v >= from {
			as = append(as, Appended{Version: v, Start: start, End: rows, Base: ids[prefix], Head: ids[end]})
		}
		prefix = end
	}
	return as, true, nil
}

// OpenVersion opens version v of t's croupier table (0: the latest) with
// t's catalog and block cache.
func (t *Table) OpenVersion(ctx context.Context, v int64) (*Table, error) {
	return OpenWith(ctx, t.pin.URI, OpenOptions{Version: v, Catalog: t.cat, BlockCache: t.BlockCache()})
}

// Appended returns what version v of t's croupier table added to its
// parent. It fails with errcode.NotFound when v is not committed, yet or any
// more (see Cleanup).
func (t *Table) Appended(ctx context.Context, v int64) (Appended, error) {
	if t.pin.Kind != KindCroupier {
		return Appended{}, errcode.New(errcode.InvalidArgument, "read version", t.pin.URI,
			"a plain Parquet dataset has no versions to follow")
	}
	if v < 1 {
		return Appended{}, errcode.New(errcode.InvalidArgument, "read version", t.pin.URI, "version %d: versions start at 1", v)
	}
	m, err := readManifest(ctx, t.loc, t.cat, v)
	if err != nil {
		return Appended{}, err
	}
	kept := m.Files[:len(m.Files)-m.Added]
	a := Appended{Version: v, End: m.NumRows, Base: filesID(KindCroupier, kept), Head: filesID(KindCroupier, m.Files)}
	for _, f := range kept {
		a.Start += f.NumRows
	}
	return a, nil
}
