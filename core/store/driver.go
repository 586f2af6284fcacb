package store

import (
	"context"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"gocloud.dev/blob"
)

// A Driver opens the buckets of one URI scheme of a remote store (s3://,
// gs://, azblob://, …) and does what croupier needs of that store beyond
// gocloud.dev/blob's portable API: it reports the identity of an object's
// version and makes reads conditional on it (see pinned.go).
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
	// OpenBucket opens the bucket that u names (u has no path) for requests
	// retried under p. closeIdle, when not nil, closes the idle connections
	// of the bucket's own HTTP transport; it is called after the bucket is
	// closed.
	OpenBucket(ctx context.Context, u *url.URL, p RetryPolicy) (b *blob.Bucket, closeIdle func(), err error)
	// Identify fills in the identity fields of o (Generation) that the
	// store reports beside gocloud's portable attributes; as is
	// blob.Attributes.As.
	Identify(o *Object, as func(any) bool)
	// Condition makes the read request that as (blob.ReaderOptions'
	// BeforeRead) exposes fail, with 412 Precondition Failed or the store's
	// equivalent, unless the store holds the version o describes.
	Condition(o Object, as func(any) bool)
	// Observe fills in found with the identity of the version a read got
	// (ETag, Generation) where the store reports it with the data; as is
	// blob.Reader.As.
	Observe(found *Object, as func(any) bool)
}

// An UploadAborter is a Driver of a store that keeps the parts of an
// incomplete multipart upload until it is aborted (see
// Location.AbortUploads).
type UploadAborter interface {
	AbortUploads(ctx context.Context, l *Location, prefix string, cutoff time.Time) ([]string, error)
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
	if a, ok := l.driver.(UploadAborter); ok {
		return a.AbortUploads(ctx, l, prefix, cutoff)
	}
	return nil, nil
}
