// Package gocloud serves a gocloud.dev/blob bucket as a croupier
// store.Bucket, for the drivers of stores that croupier reaches through
// gocloud.dev (gs://, azblob://): their SDKs, credentials and URL parameters
// come from gocloud.dev's openers, and what croupier needs beyond its
// portable API (a version's identity, conditional reads) from the driver's
// Hooks.
package gocloud

import (
	"bytes"
	"context"
	"io"
	"net/http"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/store"
)

// Hooks are what a store's driver adds to gocloud.dev/blob's portable API,
// each through the As escape hatch of the value named.
type Hooks struct {
	// Identify fills in the identity fields of o that the store reports
	// beside gocloud's attributes (GCS's generation); as is
	// blob.Attributes.As or, for a listed object, blob.ListObject.As. A
	// listing that names each version spares a stat of each object where
	// the version matters (the catalog's keys).
	Identify func(o *store.Object, as func(any) bool)
	// Condition makes the read request that as (blob.ReaderOptions'
	// BeforeRead) exposes fail, with 412 Precondition Failed or the store's
	// equivalent, unless the store holds the version o describes.
	Condition func(o store.Object, as func(any) bool)
	// Observe fills in found with the identity of the version a read got
	// (ETag, generation) where the store reports it with the data; as is
	// blob.Reader.As.
	Observe func(found *store.Object, as func(any) bool)
	// Upload makes writes that fit in one buffer go to the store through
	// Bucket.Upload rather than WriteAll. gocloud.dev v0.47's Azure
	// writer, fed by Write, dereferences a nil pipe in Close whenever the
	// upload fails (an exclusive create that lost, a refused request) and
	// panics instead of returning the error; Upload, which takes the whole
	// body, does not (fixed in v0.49, not yet served).
	Upload bool
	// CloseIdle, when not nil, closes the idle connections of the bucket's
	// own HTTP transport; it is called after the bucket is closed.
	CloseIdle func()
}

// NewBucket returns b as a store.Bucket, with h's additions.
func NewBucket(b *blob.Bucket, h Hooks) store.Bucket { return &bucket{b: b, h: h} }

type bucket struct {
	b *blob.Bucket
	h Hooks
}

func (b *bucket) Stat(ctx context.Context, key string) (store.Object, error) {
	a, err := b.b.Attributes(ctx, key)
	if err != nil {
		return store.Object{}, classified(err)
	}
	o := store.Object{Key: key, Size: a.Size, ModTime: a.ModTime, ETag: a.ETag}
	if b.h.Identify != nil {
		b.h.Identify(&o, a.As)
	}
	return o, nil
}

func (b *bucket) NewRangeReader(ctx context.Context, key string, off, length int64, pin *store.Object) (io.ReadCloser, store.Object, error) {
	var opts *blob.ReaderOptions
	if pin != nil && b.h.Condition != nil {
		o := *pin
		opts = &blob.ReaderOptions{BeforeRead: func(as func(any) bool) error {
			b.h.Condition(o, as)
			return nil
		}}
	}
	rr, err := b.b.NewRangeReader(ctx, key, off, length, opts)
	if err != nil {
		return nil, store.Object{}, classified(err)
	}
	found := store.Object{Key: key, Size: rr.Size(), ModTime: rr.ModTime()}
	if b.h.Observe != nil {
		b.h.Observe(&found, rr.As)
	}
	return readCloser{rr}, found, nil
}

// uploadBuffer is the most a writer holds before it streams to the store:
// manifests, permutation chunks and commit markers fit, and are written in
// one request; data files stream.
const uploadBuffer = 8 << 20

func (b *bucket) NewWriter(ctx context.Context, key string, opts store.WriterOptions) (io.WriteCloser, error) {
	return &writer{ctx: ctx, b: b, key: key, opts: &blob.WriterOptions{ContentType: opts.ContentType, IfNotExist: opts.IfNotExist}}, nil
}

// writer buffers up to uploadBuffer bytes, written at Close in one request;
// past that it streams through a blob.Writer.
type writer struct {
	ctx  context.Context
	b    *bucket
	key  string
	opts *blob.WriterOptions
	buf  []byte
	w    *blob.Writer
}

func (w *writer) Write(p []byte) (int, error) {
	if w.w == nil && len(w.buf)+len(p) <= uploadBuffer {
		w.buf = append(w.buf, p...)
		return len(p), nil
	}
	if w.w == nil {
		bw, err := w.b.b.NewWriter(w.ctx, w.key, w.opts)
		if err != nil {
			return 0, classified(err)
		}
		w.w = bw
		if _, err := bw.Write(w.buf); err != nil {
			return 0, classified(err)
		}
		w.buf = nil
	}
	n, err := w.w.Write(p)
	return n, classified(err)
}

func (w *writer) Close() error {
	if w.w != nil {
		return classified(w.w.Close())
	}
	if !w.b.h.Upload {
		return classified(w.b.b.WriteAll(w.ctx, w.key, w.buf, w.opts))
	}
	opts := *w.opts
	if opts.ContentType == "" {
		opts.ContentType = http.DetectContentType(w.buf)
	}
	return classified(w.b.b.Upload(w.ctx, w.key, bytes.NewReader(w.buf), &opts))
}

func (b *bucket) List(ctx context.Context, prefix, token string, size int) ([]store.Object, string, error) {
	t := blob.FirstPageToken
	if token != "" {
		t = []byte(token)
	}
	objs, next, err := b.b.ListPage(ctx, t, size, &blob.ListOptions{Prefix: prefix})
	if err != nil {
		return nil, "", classified(err)
	}
	out := make([]store.Object, 0, len(objs))
	for _, o := range objs {
		if o.IsDir {
			continue
		}
		obj := store.Object{Key: o.Key, Size: o.Size, ModTime: o.ModTime}
		if b.h.Identify != nil {
			b.h.Identify(&obj, o.As)
		}
		out = append(out, obj)
	}
	return out, string(next), nil
}

func (b *bucket) Delete(ctx context.Context, key string) error {
	return classified(b.b.Delete(ctx, key))
}

func (b *bucket) Close() error {
	err := b.b.Close()
	if b.h.CloseIdle != nil {
		b.h.CloseIdle()
	}
	return err
}

// readCloser classifies the errors of a blob.Reader.
type readCloser struct{ r *blob.Reader }

func (r readCloser) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err == io.EOF {
		return n, err
	}
	return n, classified(err)
}

func (r readCloser) Close() error { return classified(r.r.Close()) }

// codes are croupier's codes of gocloud's, where they are final.
var codes = map[gcerrors.ErrorCode]errcode.Code{
	gcerrors.NotFound:           errcode.NotFound,
	gcerrors.InvalidArgument:    errcode.InvalidArgument,
	gcerrors.Canceled:           errcode.Canceled,
	gcerrors.FailedPrecondition: errcode.Changed,
	gcerrors.AlreadyExists:      errcode.AlreadyExists,
	gcerrors.PermissionDenied:   errcode.PermissionDenied,
}

// classified returns err in a form store.Code reads: gocloud's error codes
// for what the store's SDK reported, where store.Code cannot tell otherwise
// (an HTTP status, croupier's own error, a network error in the chain decide
// first).
func classified(err error) error {
	if err == nil || store.Transient(err) || store.Code(err) != errcode.Unavailable {
		return err
	}
	switch c := gcerrors.Code(err); c {
	case gcerrors.Unknown, gcerrors.Internal, gcerrors.ResourceExhausted, gcerrors.DeadlineExceeded:
		return store.TransientError{Err: err}
	default:
		if code, ok := codes[c]; ok {
			return store.WithCode(code, err)
		}
	}
	return err
}
