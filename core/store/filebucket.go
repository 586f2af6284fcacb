package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/croupier-data/croupier/core/errcode"
)

// fileBucket is the bucket of a file:// location: the files under root, a
// key being a path relative to it with "/" between folders.
//
// A new version of a file is written to a temporary file in root's _tmp/
// folder (TempDir: on the same file system, so that the rename is atomic, and
// hidden from Match) and renamed over the file, so a reader never sees a
// partly written one. An exclusive create (WriterOptions.IfNotExist) syncs
// the temporary file and hard-links it to its name instead, since link(2),
// unlike a check followed by a rename, fails when the name exists, whichever
// process made it; the folder is synced after.
//
// Files named *.attrs are not listed: they are the attributes that earlier
// versions wrote beside each file (through gocloud.dev's fileblob), and they
// are deleted with the file they describe.
type fileBucket struct {
	root    string
	pending pendingList
}

// attrsSuffix ends the names of the attribute files fileblob wrote.
const attrsSuffix = ".attrs"

// filePath returns the path of key under root, or false when key cannot name
// a file there: empty, a folder ("/" at its end), with an empty or ".."
// element, a control character, or leading out of root.
func filePath(root, key string) (string, bool) {
	if os.PathSeparator != '/' || key == "" || strings.HasSuffix(key, "/") || strings.HasSuffix(key, attrsSuffix) ||
		strings.Contains(key, "//") || strings.Contains(key, "../") {
		return "", false
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 32 {
			return "", false
		}
	}
	p := filepath.Join(root, key)
	if !strings.HasPrefix(p, strings.TrimSuffix(root, "/")+"/") {
		return "", false
	}
	return p, true
}

// path is filePath, with an error for a key that names no file.
func (b *fileBucket) path(key string) (string, error) {
	p, ok := filePath(b.root, key)
	if !ok {
		return "", WithCode(errcode.InvalidArgument, fmt.Errorf("key %q names no file under %s", key, b.root))
	}
	return p, nil
}

// fileObject is the identity of the file at p that a stat of it reported
// (fi, err); a folder is no object. Its ETag is the one fileblob reported,
// so that versions pinned through it still match.
func fileObject(key, p string, fi fs.FileInfo, err error) (Object, error) {
	switch {
	case err != nil:
		return Object{}, err
	case fi.IsDir():
		return Object{}, fmt.Errorf("%s is a folder: %w", p, fs.ErrNotExist)
	}
	return Object{Key: key, Size: fi.Size(), ModTime: fi.ModTime(), Inode: inode(fi),
		ETag: fmt.Sprintf("\"%x-%x\"", fi.ModTime().UnixNano(), fi.Size())}, nil
}

func (b *fileBucket) Stat(_ context.Context, key string) (Object, error) {
	p, err := b.path(key)
	if err != nil {
		return Object{}, err
	}
	fi, err := os.Stat(p)
	return fileObject(key, p, fi, err)
}

func (b *fileBucket) NewRangeReader(_ context.Context, key string, off, length int64, pin *Object) (io.ReadCloser, Object, error) {
	p, err := b.path(key)
	if err != nil {
		return nil, Object{}, err
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, Object{}, err
	}
	fi, err := f.Stat()
	found, err := fileObject(key, p, fi, err)
	if err != nil {
		f.Close()
		return nil, Object{}, err
	}
	if pin != nil && !pin.Matches(found) {
		f.Close()
		return nil, found, &changedError{pinned: *pin, found: found}
	}
	if length < 0 {
		length = max(found.Size-off, 0)
	}
	return struct {
		io.Reader
		io.Closer
	}{io.NewSectionReader(f, off, length), f}, found, nil
}

func (b *fileBucket) NewWriter(ctx context.Context, key string, opts WriterOptions) (io.WriteCloser, error) {
	p, err := b.path(key)
	if err != nil {
		return nil, err
	}
	tmpDir := filepath.Join(b.root, TempDir)
	if err := os.MkdirAll(tmpDir, 0o755); err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp(tmpDir, filepath.Base(p)+"-*")
	if err != nil {
		return nil, err
	}
	return &fileWriter{ctx: ctx, tmp: tmp, path: p, exclusive: opts.IfNotExist}, nil
}

// putTries bounds how often a writer makes a folder again that a Delete
// removed as the writer put its file in.
const putTries = 8

// fileWriter writes a temporary file and, at Close, puts it in place.
type fileWriter struct {
	ctx       context.Context
	tmp       *os.File
	path      string
	exclusive bool
}

func (w *fileWriter) Write(p []byte) (int, error) {
	if err := w.ctx.Err(); err != nil {
		return 0, err
	}
	return w.tmp.Write(p)
}

func (w *fileWriter) Close() error {
	defer os.Remove(w.tmp.Name())
	var err error
	if w.exclusive {
		err = w.tmp.Sync()
	}
	if cerr := w.tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = w.ctx.Err()
	}
	if err != nil {
		return err
	}
	dir := filepath.Dir(w.path)
	put := os.Rename
	if w.exclusive {
		put = os.Link
	}
	// A Delete of the folder's last other file may remove the folder
	// between making it and putting the file in: make it again.
	for try := 0; ; try++ {
		// MkdirAll too may find a folder it made removed before the next.
		if err = os.MkdirAll(dir, 0o755); err == nil {
			err = put(w.tmp.Name(), w.path)
		}
		if err == nil || !errors.Is(err, fs.ErrNotExist) || try == putTries {
			break
		}
	}
	if err != nil {
		if w.exclusive && errors.Is(err, fs.ErrExist) {
			return WithCode(errcode.AlreadyExists, errors.New("already exists"))
		}
		return err
	}
	if !w.exclusive {
		return nil
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

func (b *fileBucket) List(_ context.Context, prefix, token string, size int) ([]Object, string, error) {
	objs, ok := b.pending.take(prefix, token)
	if !ok {
		var err error
		if objs, err = b.walk(prefix, token); err != nil {
			return nil, "", err
		}
	}
	objs, rest, next := page(objs, size)
	if next != "" {
		b.pending.keep(prefix, next, rest)
	}
	return objs, next, nil
}

// walk returns the objects whose keys start with prefix and follow token,
// sorted by key: WalkDir goes folder by folder, which is not key order
// ("a-b" < "a/b").
func (b *fileBucket) walk(prefix, token string) ([]Object, error) {
	// Only the folder of prefix's last "/" can hold matching files.
	dir := b.root
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		dir = filepath.Join(b.root, filepath.FromSlash(prefix[:i]))
	}
	rootSlash := strings.TrimSuffix(b.root, "/") + "/"
	var objs []Object
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == b.root {
			// A file or folder gone since its folder was read (a
			// concurrent cleanup, a rename into place) is not listed.
			return nil
		}
		key := filepath.ToSlash(strings.TrimPrefix(p, rootSlash))
		if d.IsDir() {
			if k := key + "/"; !strings.HasPrefix(k, prefix) && !strings.HasPrefix(prefix, k) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasPrefix(key, prefix) || key <= token || strings.HasSuffix(key, attrsSuffix) {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		objs = append(objs, Object{Key: key, Size: fi.Size(), ModTime: fi.ModTime(), Inode: inode(fi)})
		return nil
	})
	slices.SortFunc(objs, func(a, b Object) int { return strings.Compare(a.Key, b.Key) })
	return objs, err
}

// pendingList holds what one walk found beyond the page it returned, so
// that the next page of that listing is served from it rather than by
// walking the folder again: listing n files takes one walk, not one per
// page of 1,000. Pages after the first therefore show the folder as the
// first found it, which is what a listing promises (no listing is atomic).
// One listing is held; another in between walks its own folder.
type pendingList struct {
	mu            sync.Mutex
	prefix, token string
	objs          []Object
}

// take returns the objects held for the page of prefix after token, if the
// walk of the page before left them.
func (p *pendingList) take(prefix, token string) ([]Object, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if token == "" || p.objs == nil || p.prefix != prefix || p.token != token {
		return nil, false
	}
	objs := p.objs
	p.objs = nil
	return objs, true
}

// keep holds objs, the objects of prefix after token.
func (p *pendingList) keep(prefix, token string, objs []Object) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.prefix, p.token, p.objs = prefix, token, objs
}

// Delete removes the file of key and then each folder above it that is left
// empty, up to the bucket's root: an object store has no folders, and a
// permutation's spill, written under many keys and deleted once the build
// commits, left a tree of empty ones behind. A writer putting a file into a
// folder removed meanwhile makes it again (fileWriter.Close).
func (b *fileBucket) Delete(_ context.Context, key string) error {
	p, err := b.path(key)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil {
		return err
	}
	if err := os.Remove(p + attrsSuffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	root := filepath.Clean(b.root)
	for dir := filepath.Dir(p); dir != root && strings.HasPrefix(dir, root+string(filepath.Separator)); dir = filepath.Dir(dir) {
		if os.Remove(dir) != nil { // not empty, or gone already
			break
		}
	}
	return nil
}

func (b *fileBucket) Close() error { return nil }
