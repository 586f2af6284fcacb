// Package catalog is croupier's local, per-host catalog: table names → URIs,
// a cache of immutable metadata (Parquet footers, version manifests, where
// the pages of column chunks lie) so that reopening a dataset of thousands of
// files reads no footer from the store, and facts learnt about a store by
// probing it (that it honours conditional writes), so that each host probes
// a store once.
//
// It is one bbolt file, by default $XDG_CACHE_HOME/croupier/catalog.db (or
// ~/.cache/croupier/catalog.db). It is only ever a cache: what it serves is
// what was put in it, or nothing. Invariants and caveats:
//
//   - The object store is the authority. Cache entries are keyed by the
//     object's URI and its whole identity as the store tells versions apart
//     (size, modification time to the nanosecond, ETag, GCS generation, and
//     on file:// the inode), so a changed object is a miss, never a stale
//     hit.
//   - Every entry is sealed: a CRC-32C of its bucket, key and value follows
//     the value, so that a bit flipped in the file (a bad disk, a careless
//     edit) is never served. An entry that does not match its seal shows a
//     damaged file.
//   - A damaged file never crashes the process and is never read twice. bbolt
//     maps the file and trusts its pages: a page past the end of a truncated
//     file faults (SIGBUS) and a child pointer that leads back up the tree
//     recurses without end. So every operation locks the file as bbolt does,
//     checks every page its bbolt calls will read (the meta pages, the
//     file's size against the pages in use, the freelist for a write, the
//     path from the root to each key, and the seals of every leaf on it),
//     and only then lets bbolt map it, with faults turned into panics
//     (debug.SetPanicOnFault) and panics into a damaged file. A file found
//     damaged (by that check, by bbolt's errors, by a seal) is renamed to
//     catalog.db.damaged-<UTC time> (the one set aside before is removed),
//     its lock released at once, and the operation runs once more on a new
//     file: the cache is cold again, and the names registered are lost.
//   - Several processes on one host (e.g. 8 ranks) use it at once. bbolt holds
//     an exclusive file lock while a writable DB is open and a shared one
//     while a read-only DB is open, so the catalog never keeps the file open:
//     every operation opens it, runs one short transaction and closes it, and
//     every open waits at most Options.Timeout for the lock. Lookups open
//     read-only. A writer killed mid-transaction leaves the transaction
//     before it (bbolt writes its meta page last).
//   - Cached entries are never evicted; delete the file to reclaim space.
//     Files written before entries were sealed keep theirs in buckets that
//     are no longer read ("names", "cache").
package catalog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/croupier-data/croupier/core/errcode"
)

// Buckets of the bbolt file, whose entries are sealed.
var (
	namesBucket = []byte("sealed names")
	cacheBucket = []byte("sealed cache")
)

// DefaultTimeout bounds the wait for the file lock when Options.Timeout is 0.
const DefaultTimeout = 2 * time.Second

// Options configure a Catalog.
type Options struct {
	// Path of the bbolt file; "" is DefaultPath().
	Path string `json:"path,omitempty"`
	// Timeout bounds each wait for the file lock; 0 is DefaultTimeout.
	Timeout time.Duration `json:"timeout,omitempty"`
}

// Catalog is a handle on a catalog file. It holds no open file and is safe for
// concurrent use.
type Catalog struct {
	path    string
	timeout time.Duration
}

// DefaultPath is $XDG_CACHE_HOME/croupier/catalog.db, else
// ~/.cache/croupier/catalog.db, else catalog.db in the temporary folder.
func DefaultPath() string {
	dir := os.Getenv("XDG_CACHE_HOME")
	if dir == "" {
		if home, err := os.UserHomeDir(); err == nil {
			dir = filepath.Join(home, ".cache")
		} else {
			dir = os.TempDir()
		}
	}
	return filepath.Join(dir, "croupier", "catalog.db")
}

// Open returns a catalog at opts.Path. It creates no file until the first write.
func Open(opts Options) *Catalog {
	c := &Catalog{path: opts.Path, timeout: opts.Timeout}
	if c.path == "" {
		c.path = DefaultPath()
	}
	if c.timeout <= 0 {
		c.timeout = DefaultTimeout
	}
	return c
}

// Path returns the catalog file's path.
func (c *Catalog) Path() string { return c.path }

// Register records that name refers to uri, replacing an earlier entry.
func (c *Catalog) Register(name, uri string) error {
	if name == "" || len(name) > bolt.MaxKeySize {
		return errcode.New(errcode.InvalidArgument, "register", c.path, "table names have 1 to %d bytes, not %d", bolt.MaxKeySize, len(name))
	}
	key := []byte(name)
	_, err := c.do(true, scope{bucket: namesBucket, keys: [][]byte{key}}, func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(namesBucket)
		if err != nil {
			return err
		}
		return b.Put(key, seal(namesBucket, key, []byte(uri)))
	})
	if err != nil {
		return errcode.Wrap(err, code(err), "register "+strconv.Quote(name)+" in catalog", c.path)
	}
	return nil
}

// Lookup returns the URI registered under name.
func (c *Catalog) Lookup(name string) (string, error) {
	key := []byte(name)
	var uri []byte
	aside, err := c.do(false, scope{bucket: namesBucket, keys: [][]byte{key}}, func(tx *bolt.Tx) (err error) {
		if b := tx.Bucket(namesBucket); b != nil {
			uri, err = unseal(namesBucket, key, b.Get(key))
		}
		return err
	})
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", errcode.Wrap(err, code(err), "look up "+strconv.Quote(name)+" in catalog", c.path)
	}
	if uri == nil {
		if aside != "" {
			return "", errcode.New(errcode.NotFound, "look up", c.path,
				"no table named %q in the catalog: its file was damaged, set aside as %s and started anew; register the name again", name, aside)
		}
		return "", errcode.New(errcode.NotFound, "look up", c.path, "no table named %q in the catalog", name)
	}
	return string(uri), nil
}

// Names returns every registered name with its URI.
func (c *Catalog) Names() (map[string]string, error) {
	var out map[string]string
	_, err := c.do(false, scope{bucket: namesBucket, all: true}, func(tx *bolt.Tx) error {
		out = map[string]string{}
		b := tx.Bucket(namesBucket)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			uri, err := unseal(namesBucket, k, v)
			out[string(k)] = string(uri)
			return err
		})
	})
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, errcode.Wrap(err, code(err), "list catalog", c.path)
	}
	if out == nil {
		out = map[string]string{}
	}
	return out, nil
}

// Get returns the cached values of keys (nil where absent) with one read-only
// open. Any failure to read the catalog is a miss; a nil Catalog misses
// every key.
func (c *Catalog) Get(keys []string) [][]byte {
	out := make([][]byte, len(keys))
	if c == nil || len(keys) == 0 {
		return out
	}
	bkeys := make([][]byte, len(keys))
	for i, k := range keys {
		bkeys[i] = []byte(k)
	}
	_, err := c.do(false, scope{bucket: cacheBucket, keys: bkeys}, func(tx *bolt.Tx) error {
		clear(out)
		b := tx.Bucket(cacheBucket)
		if b == nil {
			return nil
		}
		for i, k := range bkeys {
			v, err := unseal(cacheBucket, k, b.Get(k))
			if err != nil {
				return err
			}
			out[i] = v
		}
		return nil
	})
	if err != nil {
		clear(out)
	}
	return out
}

// Put stores values[i] under keys[i], in one transaction. It is best
// effort: the cache is an optimisation, so a locked catalog drops the
// entries silently, and so does a nil one.
func (c *Catalog) Put(keys []string, values [][]byte) {
	if c == nil {
		return
	}
	var bkeys, sealed [][]byte
	for i, k := range keys {
		if k != "" && len(k) <= bolt.MaxKeySize && len(values[i]) <= bolt.MaxValueSize-sealSize {
			bkeys = append(bkeys, []byte(k))
			sealed = append(sealed, seal(cacheBucket, []byte(k), values[i]))
		}
	}
	if len(bkeys) == 0 {
		return
	}
	c.do(true, scope{bucket: cacheBucket, keys: bkeys}, func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(cacheBucket)
		if err != nil {
			return err
		}
		for i, k := range bkeys {
			if err := b.Put(k, sealed[i]); err != nil {
				return err
			}
		}
		return nil
	})

}

// sealSize is the length of the seal that follows each value: a CRC-32C of
// the bucket's name, the key's length, the key and the value.
const sealSize = 4

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func sealSum(bucket, key, value []byte) uint32 {
	head := binary.AppendUvarint(append(bytes.Clone(bucket), 0), uint64(len(key)))
	crc := crc32.Update(0, castagnoli, head)
	return crc32.Update(crc32.Update(crc, castagnoli, key), castagnoli, value)
}

// seal returns value followed by its seal.
func seal(bucket, key, value []byte) []byte {
	return binary.LittleEndian.AppendUint32(append(make([]byte, 0, len(value)+sealSize), value...), sealSum(bucket, key, value))
}

// unseal returns a copy of the value that v, the entry of key in bucket,
// seals (nil for nil), or an errDamaged when v does not match its seal.
func unseal(bucket, key, v []byte) ([]byte, error) {
	if v == nil {
		return nil, nil
	}
	n := len(v) - sealSize
	if n < 0 || binary.LittleEndian.Uint32(v[n:]) != sealSum(bucket, key, v[:n]) {
		return nil, damaged("the entry of %q in %q does not match its seal", key, bucket)
	}
	return append(make([]byte, 0, n), v[:n]...), nil
}

// scope is what an operation reads of the file: the entries of keys in
// bucket, or every entry of it.
type scope struct {
	bucket []byte
	keys   [][]byte
	all    bool
}

// do runs fn in one transaction of the catalog file, read-only unless
// write. When the file turns out to be damaged, it is set aside and fn
// runs once more, on a new file; aside is then where the damaged file went
// ("" if another process moved it first). A read finds os.ErrNotExist
// where there is no file yet.
func (c *Catalog) do(write bool, sc scope, fn func(*bolt.Tx) error) (aside string, err error) {
	for attempt := 1; ; attempt++ {
		moved, err := c.attempt(write, sc, fn)
		if moved != "" {
			aside = moved
		}
		if !errors.Is(err, errDamaged) || attempt == 2 {
			return aside, err
		}
	}
}

// attempt is one run of do: it opens and locks the file, checks it, and
// runs fn with bbolt on it, turning faults and panics into a damaged file,
// which it sets aside.
func (c *Catalog) attempt(write bool, sc scope, fn func(*bolt.Tx) error) (aside string, err error) {
	flag := os.O_RDONLY
	if write {
		if err := os.MkdirAll(filepath.Dir(c.path), 0o755); err != nil {
			return "", err
		}
		flag = os.O_RDWR | os.O_CREATE
	}
	f, err := os.OpenFile(c.path, flag, 0o644)
	if err != nil {
		return "", err
	}
	open := true // until bbolt closes f
	var fi os.FileInfo
	defer func() {
		if p := recover(); p != nil {
			// bbolt's state is unknown after a panic: its DB is dropped,
			// not closed, and closing f releases the lock.
			err = damaged("bbolt: %v", p)
		}
		if errors.Is(err, errDamaged) && fi != nil {
			aside = c.setAside(fi)
		}
		if open {
			f.Close()
		}
	}()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	if err := lockFile(f, write, c.timeout); err != nil {
		return "", err
	}
	if fi, err = f.Stat(); err != nil {
		return "", err
	}
	switch err := checkFile(f, fi.Size(), write, sc); {
	case errors.Is(err, errEmpty) && !write:
		return "", os.ErrNotExist
	case err != nil && !errors.Is(err, errEmpty):
		return "", err
	}
	db, err := bolt.Open(c.path, 0o644, &bolt.Options{ReadOnly: !write, Timeout: c.timeout,
		OpenFile: func(string, int, os.FileMode) (*os.File, error) { return f, nil }})
	if err != nil {
		open = false // bbolt closed it
		return "", openError(err)
	}
	run := func(tx *bolt.Tx) error {
		err := fn(tx)
		if err != nil && !errors.Is(err, errDamaged) {
			// What fn asks of bbolt fails only on a damaged file.
			err = fmt.Errorf("%w: %w", errDamaged, err)
		}
		return err
	}
	if write {
		err = db.Update(run)
	} else {
		err = db.View(run)
	}
	cerr := db.Close()
	open = false
	if err == nil {
		err = cerr
	}
	return "", boltError(err)
}

// openError marks the errors of bbolt's Open that show a damaged file: all
// but a lock wait that timed out and the system's refusals (to open, map or
// write the file). The file was checked, but another program may have cut
// or rewritten it since, without the lock ("file size too small").
func openError(err error) error {
	var errno syscall.Errno
	var perr *fs.PathError
	if errors.Is(err, berrors.ErrTimeout) || errors.As(err, &errno) || errors.As(err, &perr) {
		return err
	}
	return fmt.Errorf("%w: %w", errDamaged, err)
}

// boltError marks bbolt's errors that show a damaged file.
func boltError(err error) error {
	if errors.Is(err, berrors.ErrInvalid) || errors.Is(err, berrors.ErrChecksum) || errors.Is(err, berrors.ErrVersionMismatch) {
		return fmt.Errorf("%w: %w", errDamaged, err)
	}
	return err
}

// setAside renames the damaged file fi, while the path still names it, to
// catalog.db.damaged-<UTC time>, removing any file set aside before, and
// returns its new path.
func (c *Catalog) setAside(fi os.FileInfo) string {
	if cur, err := os.Stat(c.path); err != nil || !os.SameFile(fi, cur) {
		return "" // another process set it aside first
	}
	earlier, _ := filepath.Glob(c.path + ".damaged-*")
	aside := c.path + ".damaged-" + time.Now().UTC().Format("20060102T150405.000000000Z")
	if os.Rename(c.path, aside) != nil {
		return ""
	}
	for _, e := range earlier {
		os.Remove(e)
	}
	return aside
}

func code(err error) errcode.Code {
	if errors.Is(err, errDamaged) {
		return errcode.Corrupt
	}
	return errcode.Unavailable
}
