package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"

	"github.com/croupier-data/croupier/core/errcode"
)

// TempDir is the folder, under a file:// bucket's root, of CreateExclusive's
// temporary files.
const TempDir = "_tmp"

// CreateExclusive writes data to the object key only if no object of that key
// exists, atomically: of several writers racing for one key, across processes
// and hosts, exactly one succeeds and the others get errcode.AlreadyExists. A
// reader never sees a partly written object. This is what commits rely on.
//
// On S3, GCS, Azure and mem:// it is gocloud's IfNotExist (a conditional PUT:
// If-None-Match: * on S3 and Azure, a does-not-exist precondition on GCS). On
// file:// gocloud's IfNotExist is only a check followed by a rename, which two
// processes can both pass; there the object is written and synced to a
// temporary file in the bucket root's _tmp/ folder (same file system, outside
// every listed prefix, so listings never race with it) and hard-linked to its
// name, and link(2) fails when the name exists. The temporary file is removed
// either way; one left by a crash stays in _tmp/ and is never seen as the object.
//
// A conditional create is not blindly retried: when an attempt's response is
// lost after the store created the object, the next attempt (ours, or the
// SDK's) finds the object there. So whenever the object exists,
// CreateExclusive reads it back: if it holds exactly data, the create was
// this call's and it succeeds; otherwise another writer won. Callers must
// therefore write data that no other writer could (a manifest names its new,
// uniquely named data files and carries a timestamp; a permutation's
// manifest names its content). When CreateExclusive fails with any other
// error (the store unavailable past the retry bound, ctx canceled), the
// object may or may not have been created: a commit must then leave in place
// everything the object refers to.
func (l *Location) CreateExclusive(ctx context.Context, key string, data []byte) error {
	const op = "create"
	where := l.ObjectURI(key)
	if l.root != "" {
		return createLinked(filepath.Join(l.root, filepath.FromSlash(key)), filepath.Join(l.root, TempDir), data, where)
	}
	_, err := Do(ctx, l.Retry, op, where, func(ctx context.Context) (struct{}, error) {
		err := l.writeAll(ctx, key, data, &blob.WriterOptions{IfNotExist: true})
		if c := gcerrors.Code(err); c == gcerrors.FailedPrecondition || c == gcerrors.AlreadyExists {
			return struct{}{}, errcode.Wrap(err, errcode.AlreadyExists, op, where)
		}
		return struct{}{}, err
	})
	if errcode.Of(err) != errcode.AlreadyExists {
		return err
	}
	got, rerr := l.ReadAll(ctx, key)
	switch {
	case rerr == nil && bytes.Equal(got, data):
		return nil // our own create, whose answer was lost
	case rerr == nil || errcode.Of(rerr) == errcode.NotFound:
		return err
	}
	return errcode.Wrap(fmt.Errorf("the object exists, and reading it back to learn whether this create made it failed: %w", rerr),
		errcode.Of(rerr), op, where)
}

// createLinked creates path with data unless it exists, with link(2).
func createLinked(path, tmpDir string, data []byte, where string) error {
	const op = "create"
	dir := filepath.Dir(path)
	for _, d := range []string{dir, tmpDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return errcode.Wrap(err, errcode.Unavailable, op, where)
		}
	}
	tmp, err := os.CreateTemp(tmpDir, filepath.Base(path)+"-*")
	if err != nil {
		return errcode.Wrap(err, errcode.Unavailable, op, where)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return errcode.Wrap(err, errcode.Unavailable, op, where)
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, os.ErrExist) {
			return errcode.New(errcode.AlreadyExists, op, where, "already exists")
		}
		return errcode.Wrap(err, errcode.Unavailable, op, where)
	}
	// Make the new name durable before the commit is reported.
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}
