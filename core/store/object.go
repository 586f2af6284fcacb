package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"gocloud.dev/blob"

	"github.com/croupier-data/croupier/core/errcode"
)

// Object identifies one version of one object: what a pin records about a file.
type Object struct {
	Key     string    `json:"key"`
	Size    int64     `json:"size"`
	ModTime time.Time `json:"mod_time"`
	ETag    string    `json:"etag,omitempty"`
}

// Stat returns the current identity of the object at key.
func (l *Location) Stat(ctx context.Context, key string) (Object, error) {
	a, err := l.Bucket.Attributes(ctx, key)
	if err != nil {
		return Object{}, wrap(err, "stat", l.ObjectURI(key))
	}
	return Object{Key: key, Size: a.Size, ModTime: a.ModTime, ETag: a.ETag}, nil
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

// Match returns, sorted, the keys that l.Key names: the object itself, every
// object under it taken as a folder, or the objects matching it as a glob.
// Hidden objects (a path element starting with "_" or ".") are skipped unless
// named exactly.
func (l *Location) Match(ctx context.Context) ([]string, error) {
	if l.Key != "" && !hasGlob(l.Key) {
		ok, err := l.Bucket.Exists(ctx, l.Key)
		if err != nil {
			return nil, wrap(err, "list", l.URI)
		}
		if ok {
			return []string{l.Key}, nil
		}
	}
	prefix, pattern := l.scope()
	var keys []string
	it := l.Bucket.List(&blob.ListOptions{Prefix: prefix})
	for {
		obj, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, wrap(err, "list", l.URI)
		}
		if obj.IsDir || hidden(strings.TrimPrefix(obj.Key, prefix)) {
			continue
		}
		if pattern != "" {
			ok, err := path.Match(pattern, obj.Key)
			if err != nil {
				return nil, errcode.Wrap(err, errcode.InvalidArgument, "match", l.URI)
			}
			if !ok {
				continue
			}
		}
		keys = append(keys, obj.Key)
	}
	sort.Strings(keys)
	return keys, nil
}

// ReaderAt reads one pinned object at random offsets. Each read checks that the
// object is still the pinned one (same size and modification time) and fails
// with errcode.Changed naming the object otherwise. It implements
// io.ReaderAt, io.Reader and io.Seeker for decoders that need all three.
type ReaderAt struct {
	ctx   context.Context
	loc   *Location
	obj   Object
	pos   int64
	reads atomic.Int64
}

// NewReaderAt returns a reader of obj that uses ctx for its requests.
func (l *Location) NewReaderAt(ctx context.Context, obj Object) *ReaderAt {
	return &ReaderAt{ctx: ctx, loc: l, obj: obj}
}

// Size returns the pinned size of the object.
func (r *ReaderAt) Size() int64 { return r.obj.Size }

// Requests returns how many range requests the reader made.
func (r *ReaderAt) Requests() int64 { return r.reads.Load() }

// ReadAt reads len(p) bytes at off with one range request.
func (r *ReaderAt) ReadAt(p []byte, off int64) (int, error) {
	where := r.loc.ObjectURI(r.obj.Key)
	if off >= r.obj.Size {
		return 0, io.EOF
	}
	n := int64(len(p))
	short := off+n > r.obj.Size
	if short {
		n = r.obj.Size - off
	}
	r.reads.Add(1)
	rr, err := r.loc.Bucket.NewRangeReader(r.ctx, r.obj.Key, off, n, nil)
	if err != nil {
		if Code(err) == errcode.NotFound {
			return 0, errcode.New(errcode.Changed, "read", where, "pinned file vanished")
		}
		return 0, wrap(err, "read", where)
	}
	defer rr.Close()
	if rr.Size() != r.obj.Size || (!r.obj.ModTime.IsZero() && !rr.ModTime().Equal(r.obj.ModTime)) {
		return 0, errcode.New(errcode.Changed, "read", where,
			"pinned file changed (size %d, modified %s; pinned size %d, modified %s)",
			rr.Size(), rr.ModTime().UTC().Format(time.RFC3339Nano), r.obj.Size, r.obj.ModTime.UTC().Format(time.RFC3339Nano))
	}
	got, err := io.ReadFull(rr, p[:n])
	if err != nil {
		return got, errcode.Wrap(fmt.Errorf("short read at offset %d: %w", off, err), errcode.Unavailable, "read", where)
	}
	if short {
		return got, io.EOF
	}
	return got, nil
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
