package store

import (
	"container/list"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync"

	"github.com/croupier-data/croupier/core/errcode"
)

// Reads of local files.
//
// A read through the bucket stats, opens and closes the file: a handful of
// system calls and allocations a read. A shuffle that reads pages of a
// few KiB spends more on that than on the bytes. A file:// Location keeps the
// files it reads open instead, at most maxOpenFiles of them (the least
// recently used is closed first), and reads them with pread(2). Each read is
// followed by fstat(2): the bytes are returned only if the file is still the
// pinned version (size, modification time to the nanosecond, inode), so that
// a file rewritten in place while it is read is refused as before. A file
// replaced by another (a rename over it) is no longer the one a fresh open
// would find, but the descriptor still reads the pinned bytes, which is what
// a pinned read asks for.

// maxOpenFiles bounds the descriptors one Location holds open for reads.
const maxOpenFiles = 64

// openFiles are the files a file:// Location holds open, by path.
type openFiles struct {
	mu     sync.Mutex
	byPath map[string]*list.Element // of *os.File, most recently used first
	lru    list.List
	closed bool
}

// get returns the open file at path, opening it if it is not.
func (o *openFiles) get(path string) (*os.File, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return nil, os.ErrClosed
	}
	if e, ok := o.byPath[path]; ok {
		o.lru.MoveToFront(e)
		return e.Value.(*os.File), nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	if o.byPath == nil {
		o.byPath = make(map[string]*list.Element)
	}
	o.byPath[path] = o.lru.PushFront(f)
	if o.lru.Len() > maxOpenFiles {
		last := o.lru.Back()
		o.lru.Remove(last)
		f := last.Value.(*os.File)
		delete(o.byPath, f.Name())
		// A read still in flight on it completes first (os.File counts its
		// users); a read that starts after sees os.ErrClosed and reopens.
		f.Close()
	}
	return f, nil
}

// forget closes the file at path if it is open, so that the next read opens
// it anew.
func (o *openFiles) forget(f *os.File) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if e, ok := o.byPath[f.Name()]; ok && e.Value.(*os.File) == f {
		o.lru.Remove(e)
		delete(o.byPath, f.Name())
		f.Close()
	}
}

// close closes every open file; later reads fail.
func (o *openFiles) close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.closed = true
	for e := o.lru.Front(); e != nil; e = e.Next() {
		e.Value.(*os.File).Close()
	}
	o.byPath = nil
	o.lru.Init()
}

// localPath returns the file that holds key in a file:// Location, and
// whether key names one (see filePath). Each key's path is worked out once:
// a full shuffle reads each file hundreds of thousands of times.
func (l *Location) localPath(key string) (string, bool) {
	if l.root == "" {
		return "", false
	}
	if p, ok := l.paths.Load(key); ok {
		return p.(string), p.(string) != ""
	}
	p, ok := filePath(l.root, key)
	l.paths.Store(key, p)
	return p, ok
}

// readLocal reads len(p) bytes of obj at off from the file at path: pread,
// then fstat to check that what was read is the pinned version. The error
// is classified as ReaderAt's are.
func (l *Location) readLocal(path string, obj Object, p []byte, off int64) (int, Object, error) {
	for {
		f, err := l.files.get(path)
		if err != nil {
			return 0, Object{}, localError(err, l.ObjectURI(obj.Key))
		}
		n, err := f.ReadAt(p, off)
		if errors.Is(err, os.ErrClosed) && !l.closed.Load() {
			continue // closed by another read that made room; reopen
		}
		if err != nil && err != io.EOF {
			l.files.forget(f)
			return n, Object{}, localError(err, l.ObjectURI(obj.Key))
		}
		found, err := fileVersion(f)
		if errors.Is(err, os.ErrClosed) && !l.closed.Load() {
			continue
		}
		if err != nil {
			l.files.forget(f)
			return n, Object{}, localError(err, l.ObjectURI(obj.Key))
		}
		found.Key = obj.Key
		if !obj.Matches(found) {
			// The next read opens the file anew: it may have been replaced.
			l.files.forget(f)
			return 0, found, errcode.Wrap(&changedError{pinned: obj, found: found}, errcode.Changed, "read", l.ObjectURI(obj.Key))
		}
		if n < len(p) {
			return n, found, shortRead(io.ErrUnexpectedEOF, n, len(p), off)
		}
		return n, found, nil
	}
}

// localError classifies an error of opening or reading a local file.
func localError(err error, where string) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return errcode.New(errcode.Changed, "read", where, "pinned file vanished")
	case errors.Is(err, fs.ErrPermission):
		return errcode.Wrap(err, errcode.PermissionDenied, "read", where)
	case errors.Is(err, os.ErrClosed):
		return errcode.Wrap(fmt.Errorf("location closed: %w", err), errcode.Canceled, "read", where)
	}
	return err // classified, and retried where transient, by Do
}
