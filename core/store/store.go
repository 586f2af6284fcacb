// Package store opens the object-store locations that croupier tables live in.
//
// A location is a bucket plus a key prefix, named by one URI:
//
//	file:///abs/path/to/folder       local files (the bucket is rooted at the folder)
//	mem://bucket/prefix              process-wide in-memory buckets, by name
//	s3://bucket/prefix?region=…      S3, with the driver drivers/s3 linked in
//	gs://bucket/prefix               GCS, with drivers/gcs
//	azblob://container/prefix        Azure Blob Storage, with drivers/azure
//
// file:// and mem:// are built in; the remote stores are opened by a Driver
// that the application links in with a blank import (see Driver), so that
// importing croupier brings no cloud SDK a program does not use.
//
// A mem:// bucket lives, by name, for the life of the process, so that a
// table written to mem:// is there for the next open.
//
// Location is the portable type, in front of each store's Bucket (see
// Driver). It adds what croupier needs on top: URI parsing, error
// classification (Code),
// ReaderAt, a random-access reader over one pinned object that fails with
// errcode.Changed when the object is not the one that was pinned (and reads
// through the location's disk cache, Location.Cache, on a remote store: see
// core/blockcache), CheckKey and
// Location.Holds, which refuse keys read from manifests and pins that would
// lead out of a table's folder, and bounded retries. Every request croupier makes goes through a Location's methods
// (Stat, Exists, ReadAll, List, Match, ReaderAt, WriteAll, Delete,
// CreateExclusive), which retry transient failures under the Location's
// RetryPolicy; only the streamed upload of a new data file (NewWriter) is
// retried by its driver, part by part, under the same policy.
//
// The s3:// driver retries nothing itself but a streamed upload's parts, so
// that one policy with one per-attempt deadline governs every request. Other
// stores' SDKs (GCS, Azure) keep their own retries inside each attempt, under
// its deadline.
//
// Credentials never travel in a URI: Open refuses a URI whose query has a
// parameter that looks like a credential, or that has a user:password part,
// because URIs are recorded in pins, manifests and permutation provenance and
// printed in messages. Pass credentials through the environment or the SDK's
// profile. Error messages name objects with ObjectURI, without the query.
package store

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/croupier-data/croupier/core/blockcache"
	"github.com/croupier-data/croupier/core/errcode"
)

// Location is an opened URI: a bucket and the key (prefix, object or glob) in it.
type Location struct {
	URI string // the URI as given
	Key string // key, prefix or glob inside the bucket; "" is the whole bucket
	// Retry bounds the retries of the location's requests; Open sets it to
	// the process's policy (see SetRetryPolicy).
	Retry RetryPolicy
	// Cache, when not nil, keeps on local disk the bytes that ReaderAts read
	// of the objects of a remote store, and serves them again (see
	// blockcache); nil reads every byte from the store.
	Cache  *blockcache.Cache
	bucket Bucket    // shared by the Locations open on one remote store (see Close)
	base   string    // URI of the bucket's root, without query, ending in "/"
	root   string    // file:// only: the folder the bucket is rooted at
	shared bool      // a process-wide mem:// bucket, never closed
	pooled string    // the key of the pooled bucket it holds (see pool), or ""
	remote bool      // opened by a Driver: not file:// or mem://
	files  openFiles // file:// only: the files held open for reads
	paths  sync.Map  // file:// only: key -> the path localPath found for it, "" for none
	lat    hedging   // remote only: first-byte latency and hedges of range requests (hedge.go)
	served latency   // remote only: latency of range reads as served, from the store or the disk cache
	closed atomic.Bool
}

// Close releases the Location's hold on its bucket. A file:// bucket is
// closed; a process-wide mem:// bucket stays; a bucket of a remote store is
// closed, with the idle connections of its HTTP transport, when the last
// Location open on it closes. Closing twice is a no-op.
func (l *Location) Close() error {
	switch {
	case l.closed.Swap(true) || l.shared:
		return nil
	case l.pooled != "":
		return release(l.pooled)
	}
	l.files.close()
	return l.bucket.Close()
}

// pooledBucket is the bucket of one remote store, and with it the store's
// client and HTTP transport, shared by every Location open on it:
// opening a table, its permutation and a dataset over them uses one pool of
// connections, not one each, and the last of them to close closes the pool's
// connections. So a process that opens and closes tables in a loop holds a
// constant number of descriptors and goroutines, even against a server that
// keeps idle connections open for minutes.
type pooledBucket struct {
	bucket Bucket
	refs   int
}

var (
	poolMu sync.Mutex
	pool   = map[string]*pooledBucket{} // by bucket URL and retry policy
)

// acquire returns the pooled bucket of key, opening it with open when no
// Location holds it.
func acquire(key string, open func() (Bucket, error)) (Bucket, error) {
	poolMu.Lock()
	defer poolMu.Unlock()
	if pb, ok := pool[key]; ok {
		pb.refs++
		return pb.bucket, nil
	}
	b, err := open()
	if err != nil {
		return nil, err
	}
	pool[key] = &pooledBucket{bucket: b, refs: 1}
	return b, nil
}

// release drops one hold on the pooled bucket of key, and closes it and its
// connections with the last.
func release(key string) error {
	poolMu.Lock()
	pb := pool[key]
	pb.refs--
	if pb.refs > 0 {
		poolMu.Unlock()
		return nil
	}
	delete(pool, key)
	poolMu.Unlock()
	return pb.bucket.Close()
}

var (
	memMu      sync.Mutex
	memBuckets = map[string]*memBucket{}
)

// memBucketNamed returns the process-wide in-memory bucket called name.
func memBucketNamed(name string) *memBucket {
	memMu.Lock()
	defer memMu.Unlock()
	b, ok := memBuckets[name]
	if !ok {
		b = &memBucket{objs: map[string]memObject{}}
		memBuckets[name] = b
	}
	return b
}

// Open parses uri and opens its bucket. It refuses a URI that carries
// credentials (see the package doc).
func Open(ctx context.Context, uri string) (*Location, error) {
	p := currentPolicy()
	loc, err := open(ctx, uri, p)
	if err != nil {
		return nil, err
	}
	loc.Retry = p
	return loc, nil
}

func open(ctx context.Context, uri string, p RetryPolicy) (*Location, error) {
	const op = "open location"
	where := redact(uri)
	u, err := url.Parse(uri)
	if err != nil {
		// url.Error repeats the URI: keep only its reason.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, errcode.Wrap(err, errcode.InvalidArgument, op, where)
	}
	if err := checkNoCredentials(u); err != nil {
		return nil, errcode.Wrap(err, errcode.InvalidArgument, op, where)
	}
	switch u.Scheme {
	case "":
		return nil, errcode.New(errcode.InvalidArgument, op, where,
			"no scheme: use a URI such as file:///abs/path, mem://bucket/prefix or s3://bucket/prefix")
	case "file":
		return openFile(uri, u)
	case "mem":
		if u.Host == "" {
			return nil, errcode.New(errcode.InvalidArgument, op, where, "mem:// URI needs a bucket name: mem://bucket/prefix")
		}
		return &Location{URI: uri, bucket: memBucketNamed(u.Host), Key: strings.TrimPrefix(u.Path, "/"),
			base: "mem://" + u.Host + "/", shared: true}, nil
	}
	d, err := driverFor(u.Scheme)
	if err != nil {
		return nil, errcode.Wrap(err, errcode.InvalidArgument, op, where)
	}
	if err := checkRemote(u); err != nil {
		return nil, errcode.Wrap(err, errcode.InvalidArgument, op, where)
	}
	bucketURL := *u
	bucketURL.Path = ""
	// A driver may hand the policy to its SDK (drivers/s3 does, for uploads).
	key := fmt.Sprintf("%s %+v", &bucketURL, p)
	b, err := acquire(key, func() (Bucket, error) {
		return d.OpenBucket(ctx, &bucketURL, p)
	})
	if err != nil {
		code := errcode.InvalidArgument
		if c := Code(err); c == errcode.ResourceExhausted || c == errcode.PermissionDenied {
			code = c
		}
		return nil, errcode.Wrap(err, code, op, where)
	}
	return &Location{URI: uri, bucket: b, Key: strings.TrimPrefix(u.Path, "/"),
		base: u.Scheme + "://" + u.Host + "/", pooled: key, remote: true}, nil
}

// checkRemote refuses a remote store's URI that is malformed, before any
// request: no bucket (s3://, s3:///key), not of the form scheme://bucket
// (s3:bucket), or a query parameter without a value (?endpoint=). Sent as
// it is, such a URI makes the store's SDK try a host that does not exist,
// and fail as a store that cannot be reached, after every retry.
func checkRemote(u *url.URL) error {
	form := u.Scheme + "://bucket/prefix"
	switch {
	case u.Opaque != "":
		return fmt.Errorf("not of the form %s", form)
	case u.Host == "":
		return fmt.Errorf("the URI names no bucket: use %s", form)
	}
	for name, vals := range u.Query() {
		if slices.Contains(vals, "") {
			return fmt.Errorf("query parameter %q has no value", name)
		}
	}
	return nil
}

// credentialWords are the parts of a query parameter's name that mark it as
// (likely) carrying a secret: access keys, secret keys, session and SAS
// tokens, passwords, signatures of presigned URLs (sig, X-Amz-Signature,
// X-Goog-Signature), credential scopes (X-Amz-Credential).
var credentialWords = []string{"key", "secret", "token", "passw", "pwd", "credential", "sig", "sas", "auth"}

// notCredentials are parameters of the stores' URIs whose names contain
// a credential word but whose values are not secrets: a KMS key's id (s3) and
// the path of a key file (gs).
var notCredentials = map[string]bool{"kmskeyid": true, "private_key_path": true}

// checkNoCredentials refuses a URI that carries credentials.
func checkNoCredentials(u *url.URL) error {
	const how = "pass credentials through the environment (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, " +
		"GOOGLE_APPLICATION_CREDENTIALS, AZURE_STORAGE_KEY, …) or the SDK's profile (s3://bucket/prefix?profile=name), " +
		"never in the URI: URIs are recorded in pins, manifests and permutations, and printed in messages"
	if u.User != nil {
		return fmt.Errorf("the URI has a user name or password; %s", how)
	}
	for name := range u.Query() {
		n := strings.ToLower(name)
		if notCredentials[n] {
			continue
		}
		for _, w := range credentialWords {
			if strings.Contains(n, w) {
				return fmt.Errorf("query parameter %q looks like a credential; %s", name, how)
			}
		}
	}
	return nil
}

// redact returns uri without its query, fragment and user:password part: a
// form safe to print or record.
func redact(uri string) string {
	uri, _, _ = strings.Cut(uri, "#")
	uri, _, _ = strings.Cut(uri, "?")
	scheme, rest, ok := strings.Cut(uri, "://")
	if !ok {
		return uri
	}
	authority, path, slash := strings.Cut(rest, "/")
	if i := strings.LastIndex(authority, "@"); i >= 0 {
		authority = authority[i+1:]
	}
	if slash {
		path = "/" + path
	}
	return scheme + "://" + authority + path
}

// OpenCreate is Open for a location about to be written: for file:// URIs it
// first creates the folder the URI names, so that a new table can be rooted
// there. Other stores have no folders to create.
func OpenCreate(ctx context.Context, uri string) (*Location, error) {
	if u, err := url.Parse(uri); err == nil && u.Scheme == "file" && filepath.IsAbs(u.Path) && !hasGlob(u.Path) {
		if err := os.MkdirAll(filepath.Clean(u.Path), 0o755); err != nil {
			return nil, errcode.Wrap(err, errcode.InvalidArgument, "create folder", redact(uri))
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

// openFile roots a file bucket at the deepest existing folder of the path
// that holds no glob character, so that keys stay short and relative.
func openFile(uri string, u *url.URL) (*Location, error) {
	const op = "open location"
	where := redact(uri)
	if u.Host != "" && u.Host != "localhost" {
		return nil, errcode.New(errcode.InvalidArgument, op, where, "file URI must be absolute: file:///abs/path")
	}
	p := filepath.Clean(u.Path)
	if !filepath.IsAbs(p) {
		return nil, errcode.New(errcode.InvalidArgument, op, where, "file URI must be absolute: file:///abs/path")
	}
	root, key := p, ""
	if i := strings.IndexAny(p, "*?["); i >= 0 {
		root = filepath.Dir(p[:i+1])
	}
	fi, err := os.Stat(root)
	switch {
	case err != nil:
		return nil, errcode.New(errcode.NotFound, op, where, "%s does not exist", root)
	case !fi.IsDir():
		root = filepath.Dir(root)
	}
	if rel, err := filepath.Rel(root, p); err == nil && rel != "." {
		key = filepath.ToSlash(rel)
	}
	return &Location{URI: uri, bucket: &fileBucket{root: root}, Key: key, base: "file://" + strings.TrimSuffix(root, "/") + "/", root: root}, nil
}

// ObjectURI names an object of l's bucket as a URI, for messages. It never
// carries the query of the location's URI, which may hold credentials.
func (l *Location) ObjectURI(key string) string { return l.base + key }

// Remote reports whether the location is on a remote store, where each
// request costs a round trip, rather than local files or memory.
func (l *Location) Remote() bool { return l.remote }

// ReadLatency returns the usual latency of the location's range reads of a
// remote store as they are served (a moving average), once there has been
// one: the first byte of a request to the store, or the whole read where the
// disk cache (Cache) served every byte of it. A table's open reads its
// footers through the location, so a reader has it from its first read on.
func (l *Location) ReadLatency() (time.Duration, bool) { return l.served.usual() }

// Hedges returns how many range reads of the location were sent again
// because their first answer was late (see hedge.go), and how many range
// reads it made of a remote store.
func (l *Location) Hedges() (hedged, requests int64) {
	return l.lat.hedges.Load(), l.lat.requests.Load()
}

// Code classifies an error returned by a Bucket (see classify); a
// context's cancellation or deadline is Canceled.
func Code(err error) errcode.Code {
	switch {
	case err == nil:
		return errcode.OK
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return errcode.Canceled
	}
	code, _ := classify(err)
	return code
}

// wrap classifies a Bucket's error and names the operation and object.
func wrap(err error, op, where string) error {
	if err == nil {
		return nil
	}
	return &errcode.Error{Code: Code(err), Op: op, Path: where, Err: err}
}
