// Package store opens the object-store locations that croupier tables live in.
//
// A location is a *blob.Bucket plus a key prefix, named by one URI:
//
//	file:///abs/path/to/folder       local files (the bucket is rooted at the folder)
//	mem://bucket/prefix              process-wide in-memory buckets, by name
//	s3://bucket/prefix?region=…      and every other scheme gocloud.dev/blob opens
//
// gocloud's own mem:// opener makes a new empty bucket on every open, which would
// make a table written to mem:// unreadable by the next open; this package keeps
// one bucket per name for the life of the process instead.
//
// *blob.Bucket is already the portable type; this package does not wrap it. It adds
// what croupier needs on top: URI parsing, error classification (Code),
// ReaderAt, a random-access reader over one pinned object that fails with
// errcode.Changed when the object is not the one that was pinned, and
// CheckKey and Location.Holds, which refuse keys read from manifests and pins
// that would lead out of a table's folder.
package store

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"gocloud.dev/blob"
	_ "gocloud.dev/blob/azureblob" // azblob:// URLs
	_ "gocloud.dev/blob/fileblob"  // file:// URLs
	_ "gocloud.dev/blob/gcsblob"   // gs:// URLs
	"gocloud.dev/blob/memblob"
	_ "gocloud.dev/blob/s3blob" // s3:// URLs
	"gocloud.dev/gcerrors"

	"github.com/croupier-data/croupier/core/errcode"
)

// Location is an opened URI: a bucket and the key (prefix, object or glob) in it.
type Location struct {
	URI    string       // the URI as given
	Bucket *blob.Bucket // owned by the Location unless shared (mem://)
	Key    string       // key, prefix or glob inside Bucket; "" is the whole bucket
	base   string       // URI of the bucket's root, without query, ending in "/"
	root   string       // file:// only: the folder the bucket is rooted at
	shared bool
}

// Close releases the bucket unless it is a process-wide mem:// bucket.
func (l *Location) Close() error {
	if l.shared {
		return nil
	}
	return l.Bucket.Close()
}

var (
	memMu      sync.Mutex
	memBuckets = map[string]*blob.Bucket{}
)

// memBucket returns the process-wide in-memory bucket called name.
func memBucket(name string) *blob.Bucket {
	memMu.Lock()
	defer memMu.Unlock()
	b, ok := memBuckets[name]
	if !ok {
		b = memblob.OpenBucket(nil)
		memBuckets[name] = b
	}
	return b
}

// Open parses uri and opens its bucket.
func Open(ctx context.Context, uri string) (*Location, error) {
	const op = "open location"
	u, err := url.Parse(uri)
	if err != nil {
		return nil, errcode.Wrap(err, errcode.InvalidArgument, op, uri)
	}
	switch u.Scheme {
	case "":
		return nil, errcode.New(errcode.InvalidArgument, op, uri,
			"no scheme: use a URI such as file:///abs/path, mem://bucket/prefix or s3://bucket/prefix")
	case "file":
		return openFile(ctx, uri, u)
	case memblob.Scheme:
		if u.Host == "" {
			return nil, errcode.New(errcode.InvalidArgument, op, uri, "mem:// URI needs a bucket name: mem://bucket/prefix")
		}
		return &Location{URI: uri, Bucket: memBucket(u.Host), Key: strings.TrimPrefix(u.Path, "/"),
			base: "mem://" + u.Host + "/", shared: true}, nil
	}
	bucketURL := *u
	bucketURL.Path = ""
	b, err := blob.OpenBucket(ctx, bucketURL.String())
	if err != nil {
		return nil, errcode.Wrap(err, errcode.InvalidArgument, op, uri)
	}
	return &Location{URI: uri, Bucket: b, Key: strings.TrimPrefix(u.Path, "/"),
		base: u.Scheme + "://" + u.Host + "/"}, nil
}

// OpenCreate is Open for a location about to be written: for file:// URIs it
// first creates the folder the URI names, so that a new table can be rooted
// there. Other stores have no folders to create.
func OpenCreate(ctx context.Context, uri string) (*Location, error) {
	if u, err := url.Parse(uri); err == nil && u.Scheme == "file" && filepath.IsAbs(u.Path) && !hasGlob(u.Path) {
		if err := os.MkdirAll(filepath.Clean(u.Path), 0o755); err != nil {
			return nil, errcode.Wrap(err, errcode.InvalidArgument, "create folder", uri)
		}
	}
	return Open(ctx, uri)
}

// Join returns the key of name inside l.Key taken as a folder.
func (l *Location) Join(name string) string {
	if l.Key == "" {
		return name
	}
	return strings.TrimSuffix(l.Key, "/") + "/" + name
}

// openFile roots a fileblob bucket at the deepest existing folder of the path
// that holds no glob character, so that keys stay short and relative.
func openFile(ctx context.Context, uri string, u *url.URL) (*Location, error) {
	const op = "open location"
	if u.Host != "" && u.Host != "localhost" {
		return nil, errcode.New(errcode.InvalidArgument, op, uri, "file URI must be absolute: file:///abs/path")
	}
	p := filepath.Clean(u.Path)
	if !filepath.IsAbs(p) {
		return nil, errcode.New(errcode.InvalidArgument, op, uri, "file URI must be absolute: file:///abs/path")
	}
	root, key := p, ""
	if i := strings.IndexAny(p, "*?["); i >= 0 {
		root = filepath.Dir(p[:i+1])
	}
	fi, err := os.Stat(root)
	switch {
	case err != nil:
		return nil, errcode.New(errcode.NotFound, op, uri, "%s does not exist", root)
	case !fi.IsDir():
		root = filepath.Dir(root)
	}
	if rel, err := filepath.Rel(root, p); err == nil && rel != "." {
		key = filepath.ToSlash(rel)
	}
	q := url.Values{"no_tmp_dir": {"1"}}
	b, err := blob.OpenBucket(ctx, (&url.URL{Scheme: "file", Path: root, RawQuery: q.Encode()}).String())
	if err != nil {
		return nil, errcode.Wrap(err, errcode.NotFound, op, uri)
	}
	return &Location{URI: uri, Bucket: b, Key: key, base: "file://" + strings.TrimSuffix(root, "/") + "/", root: root}, nil
}

// ObjectURI names an object of l's bucket as a URI, for messages. It never
// carries the query of the location's URI, which may hold credentials.
func (l *Location) ObjectURI(key string) string { return l.base + key }

// Code classifies an error returned by gocloud.dev/blob.
func Code(err error) errcode.Code {
	switch gcerrors.Code(err) {
	case gcerrors.OK:
		return errcode.OK
	case gcerrors.NotFound:
		return errcode.NotFound
	case gcerrors.InvalidArgument:
		return errcode.InvalidArgument
	case gcerrors.Canceled, gcerrors.DeadlineExceeded:
		return errcode.Canceled
	case gcerrors.FailedPrecondition:
		return errcode.Changed
	case gcerrors.AlreadyExists:
		return errcode.AlreadyExists
	case gcerrors.ResourceExhausted, gcerrors.Internal, gcerrors.PermissionDenied:
		return errcode.Unavailable
	}
	return errcode.Unavailable
}

// wrap classifies a blob error and names the operation and object.
func wrap(err error, op, where string) error {
	if err == nil {
		return nil
	}
	return &errcode.Error{Code: Code(err), Op: op, Path: where, Err: err}
}
