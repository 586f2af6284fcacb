package store

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"
)

// A Bucket is one bucket of a store as its driver serves it: the few
// requests croupier makes of an object store. Location, the portable type,
// stands in front of it and adds what every store shares: keys relative to
// the location, retries under a RetryPolicy, error classification (Code),
// pinned reads and listings that match globs.
//
// A Bucket's errors are classified by Code, so a driver returns errors that
// say what happened in one of the ways Code reads: an *errcode.Error, an
// error wrapping fs.ErrNotExist, fs.ErrExist or fs.ErrPermission, one with an
// HTTPStatusCode() int method (the stores' REST answers), a TransientError
// for a failure that a later attempt may not meet, or a network error.
// Methods are called concurrently.
type Bucket interface {
	// Stat returns the identity of the current version of the object at
	// key: its size, modification time and whatever else the store tells
	// apart versions by (ETag, generation, inode).
	Stat(ctx context.Context, key string) (Object, error)
	// NewRangeReader returns a reader of length bytes of the object at key
	// from offset off (length < 0: to its end), and the identity of the
	// version it reads as far as the store reports it with the data; its
	// Size is the size of the whole object. When pin is not nil the read is
	// conditional, in the store, on its holding the version pin describes
	// (see pinned.go), and fails with an error Code classifies as
	// errcode.Changed otherwise.
	NewRangeReader(ctx context.Context, key string, off, length int64, pin *Object) (io.ReadCloser, Object, error)
	// NewWriter returns a writer of a new version of the object at key,
	// which is written when Close returns nil. When ctx is canceled before
	// Close, nothing is written and Close returns an error. With
	// opts.IfNotExist, Close fails with an error classified
	// errcode.AlreadyExists (or Changed: a store's 412) when the object
	// exists.
	NewWriter(ctx context.Context, key string, opts WriterOptions) (io.WriteCloser, error)
	// List returns, in key order, at most size of the objects whose keys
	// start with prefix, each with its key, size and modification time,
	// following the page that token names ("" for the first); next names
	// the page after, "" after the last.
	List(ctx context.Context, prefix, token string, size int) (objs []Object, next string, err error)
	// Delete removes the object at key; an object that does not exist is an
	// error Code classifies NotFound, or none.
	Delete(ctx context.Context, key string) error
	// Close releases what the bucket holds: its connections, its open files.
	Close() error
}

// WriterOptions are the options of Bucket.NewWriter.
type WriterOptions struct {
	// ContentType is the object's media type; "" lets the store choose.
	ContentType string
	// IfNotExist makes the write fail if the object exists: an atomic
	// create-if-absent (If-None-Match: * on S3).
	IfNotExist bool
}

// A Driver opens the buckets of one URI scheme of a remote store (s3://,
// gs://, azblob://, …).
//
// file:// and mem:// are built in. Other stores are linked in by the
// application, the way gocloud.dev and database/sql drivers are: a blank
// import of the driver's package registers it,
//
//	import _ "github.com/croupier-data/croupier/drivers/s3"  // s3://
//	import _ "github.com/croupier-data/croupier/drivers/all" // s3://, gs:// and azblob://
//
// so that a program pays, in binary size and in what its imports do, only
// for the stores it uses. Open refuses a URI whose driver is not linked in,
// naming the package to import.
type Driver interface {
	// OpenBucket opens the bucket that u names (u has no path; its query
	// holds the store's parameters). p is the policy the Location retries
	// its requests under; a driver whose SDK retries some requests itself
	// (a streamed upload's parts) retries them under p.
	OpenBucket(ctx context.Context, u *url.URL, p RetryPolicy) (Bucket, error)
}

// An UploadAborter is a Bucket of a store that keeps the parts of an
// incomplete multipart upload until it is aborted (see
// Location.AbortUploads). AbortUploads aborts those under prefix started
// before cutoff, retrying its requests under p, and returns the keys of
// the objects they were to create.
type UploadAborter interface {
	AbortUploads(ctx context.Context, prefix string, cutoff time.Time, p RetryPolicy) ([]string, error)
}

var (
	driversMu sync.RWMutex
	drivers   = map[string]Driver{}
)

// Register makes d the driver of URIs of scheme. It panics if scheme is
// file or mem, or already has a driver: two packages claiming one scheme
// is a mistake in the program's imports.
func Register(scheme string, d Driver) {
	driversMu.Lock()
	defer driversMu.Unlock()
	if scheme == "file" || scheme == "mem" || drivers[scheme] != nil || d == nil {
		panic(fmt.Sprintf("store: Register of scheme %q twice, or of a built-in or nil driver", scheme))
	}
	drivers[scheme] = d
}

// Schemes returns the schemes Open takes: file, mem and those of the
// drivers linked in, sorted.
func Schemes() []string {
	driversMu.RLock()
	defer driversMu.RUnlock()
	s := []string{"file", "mem"}
	for scheme := range drivers {
		s = append(s, scheme)
	}
	sort.Strings(s)
	return s
}

// driverPackages are croupier's drivers, by scheme, for the error that says
// which to import.
var driverPackages = map[string]string{"s3": "s3", "gs": "gcs", "azblob": "azure"}

const driversPath = "github.com/croupier-data/croupier/drivers/"

// driverFor returns the driver of scheme, or an error that says how to link
// it in.
func driverFor(scheme string) (Driver, error) {
	driversMu.RLock()
	d := drivers[scheme]
	driversMu.RUnlock()
	if d != nil {
		return d, nil
	}
	if pkg, ok := driverPackages[scheme]; ok {
		return nil, fmt.Errorf("%s:// needs its driver, which this program does not link in: "+
			"import _ %q (or %q for every store)", scheme, driversPath+pkg, driversPath+"all")
	}
	return nil, fmt.Errorf("no driver for %s:// URIs; the schemes are %s (import _ %q for s3, gs and azblob)",
		scheme, strings.Join(Schemes(), ", "), driversPath+"all")
}

// AbortUploads aborts the incomplete multipart uploads to keys under prefix
// that were started before cutoff, and returns the URIs of the objects they
// were to create. A writer killed during a multipart upload leaves one
// behind: it is in no listing of objects, yet the store keeps (and bills) its
// parts until it is aborted. Only S3 has such uploads to list (its driver is
// an UploadAborter); GCS and Azure expire unfinished uploads themselves
// (resumable uploads after a week, uncommitted blocks after seven days), and
// file:// and mem:// have none.
func (l *Location) AbortUploads(ctx context.Context, prefix string, cutoff time.Time) ([]string, error) {
	a, ok := l.bucket.(UploadAborter)
	if !ok {
		return nil, nil
	}
	keys, err := a.AbortUploads(ctx, prefix, cutoff, l.Retry)
	uris := make([]string, len(keys))
	for i, k := range keys {
		uris[i] = l.ObjectURI(k)
	}
	return uris, err
}
