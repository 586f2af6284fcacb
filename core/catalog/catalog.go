// Package catalog is croupier's local, per-host catalog: table names → URIs,
// a cache of immutable metadata (Parquet footers, version manifests) so that
// reopening a dataset of thousands of files reads no footer from the store,
// and facts learnt about a store by probing it (that it honours conditional
// writes), so that each host probes a store once.
//
// It is one bbolt file, by default $XDG_CACHE_HOME/croupier/catalog.db (or
// ~/.cache/croupier/catalog.db). Invariants and caveats:
//
//   - The object store is the authority. Cache entries are keyed by the object's
//     URI and identity (size, modification time, ETag), so a changed object is a
//     miss, never a stale hit. A missing, locked or corrupt catalog file only
//     makes opens cold: cache reads and writes never fail an open.
//   - Several processes on one host (e.g. 8 ranks) use it at once. bbolt holds an
//     exclusive file lock while a writable DB is open and a shared one while a
//     read-only DB is open, so the catalog never keeps the file open: every
//     operation opens it, runs one short transaction and closes it, and every
//     open waits at most Options.Timeout for the lock. Lookups open read-only.
//   - Cached entries are never evicted; delete the file to reclaim space.
package catalog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/croupier-data/croupier/core/errcode"
)

// Buckets of the bbolt file.
var (
	namesBucket = []byte("names")
	cacheBucket = []byte("cache")
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

// view runs fn in a read-only transaction of a read-only open. A catalog file
// that does not exist yet is reported as os.ErrNotExist.
func (c *Catalog) view(fn func(*bolt.Tx) error) (err error) {
	defer recoverTo(&err)
	if _, err := os.Stat(c.path); err != nil {
		return err
	}
	db, err := bolt.Open(c.path, 0o644, &bolt.Options{Timeout: c.timeout, ReadOnly: true})
	if err != nil {
		return err
	}
	defer db.Close()
	return db.View(fn)
}

// update runs fn in one write transaction.
func (c *Catalog) update(fn func(*bolt.Tx) error) (err error) {
	defer recoverTo(&err)
	if err := os.MkdirAll(filepath.Dir(c.path), 0o755); err != nil {
		return err
	}
	db, err := bolt.Open(c.path, 0o644, &bolt.Options{Timeout: c.timeout})
	if err != nil {
		return err
	}
	defer db.Close()
	return db.Update(fn)
}

// Register records that name refers to uri, replacing an earlier entry.
func (c *Catalog) Register(name, uri string) error {
	if name == "" {
		return errcode.New(errcode.InvalidArgument, "register", c.path, "empty table name")
	}
	err := c.update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(namesBucket)
		if err != nil {
			return err
		}
		return b.Put([]byte(name), []byte(uri))
	})
	if err != nil {
		return errcode.Wrap(err, code(err), "register "+strconv.Quote(name)+" in catalog", c.path)
	}
	return nil
}

// Lookup returns the URI registered under name.
func (c *Catalog) Lookup(name string) (string, error) {
	var uri []byte
	err := c.view(func(tx *bolt.Tx) error {
		if b := tx.Bucket(namesBucket); b != nil {
			uri = append(uri, b.Get([]byte(name))...)
		}
		return nil
	})
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", errcode.Wrap(err, code(err), "look up "+strconv.Quote(name)+" in catalog", c.path)
	}
	if uri == nil {
		return "", errcode.New(errcode.NotFound, "look up", c.path, "no table named %q in the catalog", name)
	}
	return string(uri), nil
}

// Names returns every registered name with its URI.
func (c *Catalog) Names() (map[string]string, error) {
	out := map[string]string{}
	err := c.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(namesBucket)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			out[string(k)] = string(v)
			return nil
		})
	})
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, errcode.Wrap(err, code(err), "list catalog", c.path)
	}
	return out, nil
}

// Get returns the cached values of keys (nil where absent) with one read-only
// open. Any failure to read the catalog is a miss.
func (c *Catalog) Get(keys []string) [][]byte {
	out := make([][]byte, len(keys))
	c.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(cacheBucket)
		if b == nil {
			return nil
		}
		for i, k := range keys {
			if v := b.Get([]byte(k)); v != nil {
				out[i] = append([]byte(nil), v...)
			}
		}
		return nil
	})
	return out
}

// Put stores values[i] under keys[i], in one transaction. It is best
// effort: the cache is an optimisation, so a locked or corrupt catalog drops
// the entries silently.
func (c *Catalog) Put(keys []string, values [][]byte) {
	if len(keys) == 0 {
		return
	}
	c.update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(cacheBucket)
		if err != nil {
			return err
		}
		for i, k := range keys {
			if err := b.Put([]byte(k), values[i]); err != nil {
				return err
			}
		}
		return nil
	})
}

// recoverTo turns a bbolt panic (it panics on some corrupt pages) into an error.
func recoverTo(err *error) {
	if p := recover(); p != nil {
		*err = fmt.Errorf("%w: %v", berrors.ErrInvalid, p)
	}
}

func code(err error) errcode.Code {
	if errors.Is(err, berrors.ErrTimeout) {
		return errcode.Unavailable
	}
	if errors.Is(err, berrors.ErrInvalid) || errors.Is(err, berrors.ErrChecksum) || errors.Is(err, berrors.ErrVersionMismatch) {
		return errcode.Corrupt
	}
	return errcode.Unavailable
}
