package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/croupier-data/croupier/core/blockcache"
	"github.com/croupier-data/croupier/core/errcode"
)

// Object identifies one version of one object: what a pin records about a file.
type Object struct {
	Key     string    `json:"key"`
	Size    int64     `json:"size"`
	ModTime time.Time `json:"mod_time"`
	ETag    string    `json:"etag,omitempty"`
	// Generation is the version's generation number on GCS (0 elsewhere).
	Generation int64 `json:"generation,omitempty"`
	// Inode is the file's inode number on file:// (0 elsewhere).
	Inode uint64 `json:"inode,omitempty"`
}

// Stat returns the current identity of the object at key.
func (l *Location) Stat(ctx context.Context, key string) (Object, error) {
	return Do(ctx, l.Retry, "stat", l.ObjectURI(key), func(ctx context.Context) (Object, error) {
		o, err := l.bucket.Stat(ctx, key)
		o.Key = key
		return o, err
	})
}

// Exists reports whether an object exists at key.
func (l *Location) Exists(ctx context.Context, key string) (bool, error) {
	_, err := l.Stat(ctx, key)
	switch errcode.Of(err) {
	case errcode.OK:
		return true, nil
	case errcode.NotFound:
		return false, nil
	}
	return false, err
}

// ReadAll reads the whole object at key: a manifest, a chunk of row ids.
// Its error is errcode.NotFound when the object does not exist.
func (l *Location) ReadAll(ctx context.Context, key string) ([]byte, error) {
	return Do(ctx, l.Retry, "read", l.ObjectURI(key), func(ctx context.Context) ([]byte, error) {
		r, o, err := l.bucket.NewRangeReader(ctx, key, 0, -1, nil)
		if err != nil {
			return nil, err
		}
		defer r.Close()
		b := make([]byte, o.Size)
		if n, err := io.ReadFull(r, b); err != nil {
			return nil, shortRead(err, n, len(b), 0)
		}
		return b, nil
	})
}

// WriteAll writes data to the object at key. Attempts that fail transiently
// are retried, so it is only for objects that every attempt writes alike:
// keys that are new and unique to the writer, or that name their content.
func (l *Location) WriteAll(ctx context.Context, key string, data []byte, opts WriterOptions) error {
	_, err := Do(ctx, l.Retry, "write", l.ObjectURI(key), func(ctx context.Context) (struct{}, error) {
		return struct{}{}, l.writeAll(ctx, key, data, opts)
	})
	return err
}

// writeAll is one attempt of WriteAll.
func (l *Location) writeAll(ctx context.Context, key string, data []byte, opts WriterOptions) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := l.bucket.NewWriter(wctx, key, opts)
	if err != nil {
		return err
	}
	if _, err := w.Write(data); err != nil {
		cancel() // discards what was written
		w.Close()
		return err
	}
	return w.Close()
}

// NewWriter returns a writer of the object at key, for data too large to
// hold whole: a new data file, streamed as it is encoded. It is not retried
// as a whole, as WriteAll is; the driver retries its parts under the
// location's policy. The object is written when Close returns nil; when ctx
// is canceled first, nothing is.
func (l *Location) NewWriter(ctx context.Context, key string, opts WriterOptions) (io.WriteCloser, error) {
	w, err := l.bucket.NewWriter(ctx, key, opts)
	if err != nil {
		return nil, wrap(err, "write", l.ObjectURI(key))
	}
	return w, nil
}

// Delete removes the object at key; an object already gone is no error.
func (l *Location) Delete(ctx context.Context, key string) error {
	_, err := Do(ctx, l.Retry, "delete", l.ObjectURI(key), func(ctx context.Context) (struct{}, error) {
		return struct{}{}, l.bucket.Delete(ctx, key)
	})
	if errcode.Of(err) == errcode.NotFound {
		return nil
	}
	return err
}

// listPageSize is the most keys one listing request asks for (S3's limit).
const listPageSize = 1000

// List returns the objects under prefix in key order, at most limit of them
// (0: all), one retried request per page.
func (l *Location) List(ctx context.Context, prefix string, limit int) ([]Object, error) {
	type page struct {
		objs []Object
		next string
	}
	var out []Object
	token := ""
	for {
		size := listPageSize
		if limit > 0 {
			size = min(size, limit-len(out))
		}
		p, err := Do(ctx, l.Retry, "list", l.ObjectURI(prefix), func(ctx context.Context) (page, error) {
			objs, next, err := l.bucket.List(ctx, prefix, token, size)
			return page{objs, next}, err
		})
		if err != nil {
			return nil, err
		}
		out = append(out, p.objs...)
		if p.next == "" || (limit > 0 && len(out) >= limit) {
			return out, nil
		}
		token = p.next
	}
}

// shortRead describes a body that ended after n of want bytes, read at off.
// It wraps io.ErrUnexpectedEOF, a transient failure, even when the body
// ended before its first byte.
func shortRead(err error, n, want int, off int64) error {
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("short read: %d of %d bytes at offset %d: %w", n, want, off, err)
}

// hasGlob reports whether s holds a path.Match metacharacter.
func hasGlob(s string) bool { return strings.ContainsAny(s, "*?[") }

// hidden reports whether a key names a file that tools write beside data and
// readers skip (_SUCCESS, .crc files, _delta_log/…).
func hidden(key string) bool {
	for _, part := range strings.Split(key, "/") {
		if strings.HasPrefix(part, "_") || strings.HasPrefix(part, ".") {
			return true
		}
	}
	return false
}

// Match returns, sorted by key, the objects that l.Key names: the object
// itself, every object under it taken as a folder, or the objects matching it
// as a glob. Hidden objects (a path element starting with "_" or ".") are
// skipped unless named exactly. An object named exactly comes with its whole
// identity (Stat's); listed ones with their key and size only, as a listing's
// modification times need not be those a read reports.
func (l *Location) Match(ctx context.Context) ([]Object, error) {
	prefix, pattern := l.scope()
	// Whether the key is an object and what it holds as a folder are asked at
	// once: on a distant store each is a round trip.
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var listed []Object
	var g errgroup.Group
	g.Go(func() (err error) {
		defer errcode.Recover(&err, errcode.Internal, "list", l.ObjectURI(prefix))
		listed, err = l.List(lctx, prefix, 0)
		return err
	})
	if l.Key != "" && !hasGlob(l.Key) {
		obj, err := l.Stat(ctx, l.Key)
		if errcode.Of(err) != errcode.NotFound {
			cancel()
			g.Wait() // its error, a cancellation, no longer matters
			if err != nil {
				return nil, err
			}
			return []Object{obj}, nil
		}
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	var objs []Object
	for _, obj := range listed {
		if hidden(strings.TrimPrefix(obj.Key, prefix)) {
			continue
		}
		if pattern != "" {
			ok, err := path.Match(pattern, obj.Key)
			if err != nil {
				return nil, errcode.Wrap(err, errcode.InvalidArgument, "match", l.ObjectURI(l.Key))
			}
			if !ok {
				continue
			}
		}
		objs = append(objs, Object{Key: obj.Key, Size: obj.Size})
	}
	slices.SortFunc(objs, func(a, b Object) int { return strings.Compare(a.Key, b.Key) })
	return objs, nil
}

// ReaderAt reads one pinned object at random offsets. Each read is
// conditional on the object still being the pinned version (see Matches and
// pinned.go) and fails with errcode.Changed naming the object otherwise. It
// implements io.ReaderAt, io.Reader and io.Seeker for decoders that need all
// three. On a remote store whose Location has a Cache, it reads through the
// cache (see cacheObject).
type ReaderAt struct {
	ctx    context.Context
	loc    *Location
	obj    Object
	pos    int64
	reads  atomic.Int64
	hedges atomic.Int64           // reads sent again because the first answer was late
	seen   atomic.Pointer[Object] // the version the last read found
	counts *ReadCounts
}

// ReadCounts count what reads of pinned objects cost: the requests that went
// to the store and the bytes they received, and what the disk cache served
// instead. It is safe for concurrent use.
type ReadCounts struct {
	Requests atomic.Int64 // range requests made to the store
	Bytes    atomic.Int64 // bytes received from the store
	// CacheHits are the blocks the disk cache served, CacheHitBytes the
	// bytes of reads they held.
	CacheHits, CacheHitBytes atomic.Int64
	// CacheUnstored are the blocks fetched that the disk cache could not
	// keep (its disk full or unwritable).
	CacheUnstored atomic.Int64
	// Hedged are the range requests sent again because the first answer
	// was late (hedge.go); they are not in Requests.
	Hedged atomic.Int64
}

// NewReaderAt returns a reader of obj that uses ctx for its requests.
func (l *Location) NewReaderAt(ctx context.Context, obj Object) *ReaderAt {
	return &ReaderAt{ctx: ctx, loc: l, obj: obj}
}

// CountInto makes r add the cost of its reads to c, and returns r. Call it
// before the first read.
func (r *ReaderAt) CountInto(c *ReadCounts) *ReaderAt {
	r.counts = c
	return r
}

// Seen returns the identity of the version the reader's last read found (the
// zero Object before one), as far as the store reports it with the data:
// with an obj that records only a size, reads check only the size, and this
// tells which version they read.
func (r *ReaderAt) Seen() Object {
	if o := r.seen.Load(); o != nil {
		return *o
	}
	return Object{}
}

// Size returns the pinned size of the object.
func (r *ReaderAt) Size() int64 { return r.obj.Size }

// Requests returns how many range requests the reader made, retries
// included.
func (r *ReaderAt) Requests() int64 { return r.reads.Load() }

// Hedges returns how many of its range reads were sent again because their
// first answer was late (see hedge.go); they are not in Requests.
func (r *ReaderAt) Hedges() int64 { return r.hedges.Load() }

// ReadAt reads len(p) bytes at off with one range request, retried under the
// location's policy when it fails transiently, or through the location's
// cache.
func (r *ReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off >= r.obj.Size {
		return 0, io.EOF
	}
	n := int64(len(p))
	short := off+n > r.obj.Size
	if short {
		n = r.obj.Size - off
	}
	var got int
	var err error
	if obj, ok := r.loc.cacheObject(r.obj); ok {
		var st blockcache.Stats
		start := time.Now()
		st, err = r.loc.Cache.ReadAt(r.ctx, obj, p[:n], off, r.fetch)
		if err == nil && st.Requests == 0 {
			r.loc.served.observe(time.Since(start)) // from disk: a request's latency is its fetch's
		}
		if err == nil {
			got = int(n)
			// Blocks are found by the whole identity r.obj records: what
			// they held is that version. A fetch reports more of it.
			seen := r.obj
			r.seen.CompareAndSwap(nil, &seen)
		}
		r.count(st.Requests, st.MissBytes, st)
	} else {
		got, err = r.read(r.ctx, off, [][]byte{p[:n]})
		r.count(1, int64(got), blockcache.Stats{})
	}
	if err != nil {
		return 0, err
	}
	if short {
		return got, io.EOF
	}
	return got, nil
}

// Warm fetches into the location's disk cache the blocks that hold [off,
// off+n) and are not there yet; without a cache for the object it does
// nothing.
func (r *ReaderAt) Warm(off, n int64) error {
	obj, ok := r.loc.cacheObject(r.obj)
	if !ok {
		return nil
	}
	st, err := r.loc.Cache.Warm(r.ctx, obj, off, n, r.fetch)
	r.count(st.Requests, st.MissBytes, st)
	return err
}

// hedged counts a read sent again because its first answer was late.
func (r *ReaderAt) hedged() {
	r.hedges.Add(1)
	if r.counts != nil {
		r.counts.Hedged.Add(1)
	}
}

// count adds requests to the store, the bytes they received and what the
// disk cache did to r's counts.
func (r *ReaderAt) count(requests, bytes int64, st blockcache.Stats) {
	if c := r.counts; c != nil {
		c.Requests.Add(requests)
		c.Bytes.Add(bytes)
		c.CacheHits.Add(st.Hits)
		c.CacheHitBytes.Add(st.HitBytes)
		c.CacheUnstored.Add(st.Unstored)
	}
}

// fetch is the cache's Fetch: one read of the store.
func (r *ReaderAt) fetch(ctx context.Context, off int64, bufs [][]byte) error {
	_, err := r.read(ctx, off, bufs)
	return err
}

// readLocal fills bufs, one after the other, with the bytes at off of the
// local file at path.
func (r *ReaderAt) readLocal(path string, off int64, bufs [][]byte) (int, error) {
	got := 0
	for _, b := range bufs {
		k, seen, err := r.loc.readLocal(path, r.obj, b, off+int64(got))
		got += k
		if err != nil {
			return got, err
		}
		r.seen.Store(&seen)
	}
	return got, nil
}

// read fills bufs, one after the other, with the bytes at off, with one
// range request retried under the location's policy, and returns how many
// bytes it read.
func (r *ReaderAt) read(ctx context.Context, off int64, bufs [][]byte) (int, error) {
	var n int64
	for _, b := range bufs {
		n += int64(len(b))
	}
	path, local := r.loc.localPath(r.obj.Key)
	if local {
		// A read of a local file that succeeds needs no retry policy: its
		// context and timer cost more than the pread. One that fails is
		// read again under the policy, which classifies and names its
		// error.
		if got, err := r.readLocal(path, off, bufs); err == nil {
			r.reads.Add(1)
			return got, nil
		}
	}
	return Do(ctx, r.loc.Retry, "read", r.loc.ObjectURI(r.obj.Key), func(ctx context.Context) (int, error) {
		if local {
			r.reads.Add(1)
			return r.readLocal(path, off, bufs)
		}
		rr, seen, err := r.open(ctx, off, n)
		if err != nil {
			return 0, err
		}
		defer rr.Close()
		got, err := readBody(rr, off, n, bufs)
		if err == nil {
			r.seen.Store(&seen)
		}
		return got, err
	})
}

// open sends one range request for n bytes at off to the remote store and
// returns its answer once the store has begun it (its body to be read), if
// the answer is the pinned version.
func (r *ReaderAt) open(ctx context.Context, off, n int64) (io.ReadCloser, Object, error) {
	r.reads.Add(1)
	where := r.loc.ObjectURI(r.obj.Key)
	rr, seen, err := r.loc.hedgedRange(ctx, &r.obj, off, n, r.hedged)
	var changed *changedError
	switch {
	case errors.As(err, &changed):
		return nil, seen, errcode.Wrap(changed, errcode.Changed, "read", where)
	case Code(err) == errcode.NotFound:
		return nil, seen, errcode.New(errcode.Changed, "read", where, "pinned file vanished")
	case Code(err) == errcode.Changed:
		return nil, seen, errcode.Wrap(fmt.Errorf("pinned file changed: the store no longer holds the pinned version (%s): %w",
			r.obj, err), errcode.Changed, "read", where)
	case err != nil:
		return nil, seen, err
	}
	seen.Key = r.obj.Key
	if !r.obj.Matches(seen) {
		rr.Close()
		return nil, seen, errcode.Wrap(&changedError{pinned: r.obj, found: seen}, errcode.Changed, "read", where)
	}
	return rr, seen, nil
}

// readBody fills bufs, one after the other, from the body of a range
// request for their n bytes at off.
func readBody(rr io.Reader, off, n int64, bufs [][]byte) (int, error) {
	got := 0
	for _, b := range bufs {
		k, err := io.ReadFull(rr, b)
		got += k
		if err != nil {
			return got, shortRead(err, got, int(n), off)
		}
	}
	return got, nil
}

// Direct reports whether r's reads are range requests to a remote store:
// not reads of local files, nor of the disk cache.
func (r *ReaderAt) Direct() bool {
	if !r.loc.remote {
		return false
	}
	_, cached := r.loc.cacheObject(r.obj)
	return !cached
}

// Answer is a range request that the store has begun to answer: its body
// waits to be read. A reader that must hold memory for the bytes it reads
// can send its requests first and take the memory once they are answered,
// so that the wait for a distant store's first byte holds none.
type Answer struct {
	r      *ReaderAt
	off, n int64
	body   io.ReadCloser // nil: ReadInto reads with ReadAt
	seen   Object
	cancel context.CancelFunc
}

// Request sends one range request for n bytes at off and returns once the
// store has begun to answer it; the bytes are read with the answer's
// ReadInto, within the location's attempt timeout of the request. It is
// one attempt, not retried: a request that fails, and a read that a local
// file or the disk cache serves, leave ReadInto to read the bytes with
// ReadAt, under the location's retry policy, which meets any error again.
func (r *ReaderAt) Request(off, n int64) *Answer {
	a := &Answer{r: r, off: off, n: n}
	if !r.Direct() || off >= r.obj.Size {
		return a
	}
	n = min(n, r.obj.Size-off)
	ctx, cancel := context.WithTimeout(r.ctx, r.loc.Retry.AttemptTimeout)
	body, seen, err := r.open(ctx, off, n)
	if err != nil {
		cancel()
		return a
	}
	a.n, a.body, a.seen, a.cancel = n, body, seen, cancel
	return a
}

// ReadInto reads the answer's bytes into p, as ReadAt(p, off) would, and
// closes it. An answer whose body fails is read again with ReadAt.
func (a *Answer) ReadInto(p []byte) (int, error) {
	body := a.body
	if body == nil || int64(len(p)) != a.n {
		a.Close()
		return a.r.ReadAt(p, a.off)
	}
	got, err := readBody(body, a.off, a.n, [][]byte{p})
	a.Close()
	a.r.count(1, int64(got), blockcache.Stats{})
	if err != nil {
		return a.r.ReadAt(p, a.off)
	}
	a.r.seen.Store(&a.seen)
	return got, nil
}

// Close lets go of an answer not read.
func (a *Answer) Close() {
	if a.body != nil {
		a.body.Close()
		a.cancel()
		a.body = nil
	}
}

// cacheObject returns how the location's cache knows obj, and whether it may
// keep obj's bytes: only on a remote store (local files are local already,
// mem:// objects in memory), and only for a version the store names with an
// ETag or a generation. A listed object, known by its size alone, could be
// any version. The identity is the object's URI (without the location's
// query) and everything obj records of its version, so that a changed
// object is never served the blocks of the version before.
func (l *Location) cacheObject(obj Object) (blockcache.Object, bool) {
	if l.Cache == nil || !l.remote || (obj.ETag == "" && obj.Generation == 0) {
		return blockcache.Object{}, false
	}
	var mod int64
	if !obj.ModTime.IsZero() {
		mod = obj.ModTime.UnixNano()
	}
	id := fmt.Sprintf("%s\x00size %d\x00etag %s\x00generation %d\x00modified %d",
		l.ObjectURI(obj.Key), obj.Size, obj.ETag, obj.Generation, mod)
	return blockcache.Object{ID: id, Size: obj.Size}, true
}

// Cached says whether the location's disk cache holds the block of obj
// that holds byte off (blockcache.Cache.Holds); false where it keeps none of
// obj.
func (l *Location) Cached(obj Object, off int64) bool {
	c, ok := l.cacheObject(obj)
	return ok && l.Cache.Holds(c, off)
}

// Read reads from the current offset.
func (r *ReaderAt) Read(p []byte) (int, error) {
	n, err := r.ReadAt(p, r.pos)
	r.pos += int64(n)
	return n, err
}

// Seek sets the offset for the next Read.
func (r *ReaderAt) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += r.pos
	case io.SeekEnd:
		offset += r.obj.Size
	default:
		return 0, fmt.Errorf("seek: invalid whence %d", whence)
	}
	if offset < 0 {
		return 0, fmt.Errorf("seek: negative offset %d", offset)
	}
	r.pos = offset
	return offset, nil
}
