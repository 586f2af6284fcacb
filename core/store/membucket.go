package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/croupier-data/croupier/core/errcode"
)

// memBucket is the bucket of a mem:// location: objects in a map, for tests
// and examples. An object's ETag is a number the bucket never gives twice,
// so that every version, even one written within the clock's resolution,
// is told apart.
type memBucket struct {
	mu   sync.RWMutex
	objs map[string]memObject
	seq  uint64
}

// memObject is one version of an object; its bytes are never changed.
type memObject struct {
	data []byte
	id   Object
}

func (b *memBucket) get(key string) (memObject, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	o, ok := b.objs[key]
	if !ok {
		return memObject{}, fmt.Errorf("no object %q: %w", key, fs.ErrNotExist)
	}
	return o, nil
}

func (b *memBucket) Stat(_ context.Context, key string) (Object, error) {
	o, err := b.get(key)
	return o.id, err
}

func (b *memBucket) NewRangeReader(_ context.Context, key string, off, length int64, pin *Object) (io.ReadCloser, Object, error) {
	o, err := b.get(key)
	switch {
	case err != nil:
		return nil, Object{}, err
	case pin != nil && !pin.Matches(o.id):
		return nil, o.id, &changedError{pinned: *pin, found: o.id}
	}
	size := int64(len(o.data))
	off = min(max(off, 0), size)
	end := size
	if length >= 0 {
		end = min(off+length, size)
	}
	return io.NopCloser(bytes.NewReader(o.data[off:end])), o.id, nil
}

func (b *memBucket) NewWriter(ctx context.Context, key string, opts WriterOptions) (io.WriteCloser, error) {
	if key == "" || strings.HasSuffix(key, "/") {
		return nil, WithCode(errcode.InvalidArgument, fmt.Errorf("key %q names no object", key))
	}
	return &memWriter{ctx: ctx, b: b, key: key, exclusive: opts.IfNotExist}, nil
}

// memWriter buffers an object and puts it in the bucket at Close.
type memWriter struct {
	ctx       context.Context
	b         *memBucket
	key       string
	exclusive bool
	buf       bytes.Buffer
}

func (w *memWriter) Write(p []byte) (int, error) {
	if err := w.ctx.Err(); err != nil {
		return 0, err
	}
	return w.buf.Write(p)
}

func (w *memWriter) Close() error {
	if err := w.ctx.Err(); err != nil {
		return err
	}
	b := w.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.objs[w.key]; ok && w.exclusive {
		return WithCode(errcode.AlreadyExists, errors.New("already exists"))
	}
	b.seq++
	data := bytes.Clone(w.buf.Bytes())
	b.objs[w.key] = memObject{data: data, id: Object{Key: w.key, Size: int64(len(data)), ModTime: time.Now(),
		ETag: fmt.Sprintf("\"%d\"", b.seq)}}
	return nil
}

func (b *memBucket) List(_ context.Context, prefix, token string, size int) ([]Object, string, error) {
	b.mu.RLock()
	var objs []Object
	for k, o := range b.objs {
		if strings.HasPrefix(k, prefix) && k > token {
			objs = append(objs, o.id)
		}
	}
	b.mu.RUnlock()
	slices.SortFunc(objs, func(a, b Object) int { return strings.Compare(a.Key, b.Key) })
	objs, _, next := page(objs, size)
	return objs, next, nil
}

func (b *memBucket) Delete(_ context.Context, key string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.objs[key]; !ok {
		return fmt.Errorf("no object %q: %w", key, fs.ErrNotExist)
	}
	delete(b.objs, key)
	return nil
}

// Close keeps the objects: a mem:// bucket lives as long as the process.
func (b *memBucket) Close() error { return nil }

// page splits objs, sorted by key, into its first size objects (all of them
// when size ≤ 0) and the rest, and returns the token of the page after the
// first, "" when nothing is left.
func page(objs []Object, size int) (first, rest []Object, next string) {
	if size > 0 && len(objs) > size {
		return objs[:size], objs[size:], objs[size-1].Key
	}
	return objs, nil, ""
}
