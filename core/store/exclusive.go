package store

import (
	"bytes"
	"context"
	"fmt"

	"github.com/croupier-data/croupier/core/errcode"
)

// TempDir is the folder, under a file:// bucket's root, of the temporary
// files that writes put in place when done.
const TempDir = "_tmp"

// CreateExclusive writes data to the object key only if no object of that key
// exists, atomically: of several writers racing for one key, across processes
// and hosts, exactly one succeeds and the others get errcode.AlreadyExists. A
// reader never sees a partly written object. This is what commits rely on.
//
// It is the store's conditional create (WriterOptions.IfNotExist): a
// conditional PUT on S3 and Azure (If-None-Match: *), a does-not-exist
// precondition on GCS, a check and insert under one lock on mem://. On
// file:// the object is written and synced to a temporary file in the
// bucket root's _tmp/ folder (same file system, hidden from Match) and
// hard-linked to its name, and link(2) fails when the name exists. The
// temporary file is removed either way; one left by a crash stays in _tmp/
// and is never seen as the object.
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
	_, err := Do(ctx, l.Retry, op, where, func(ctx context.Context) (struct{}, error) {
		err := l.writeAll(ctx, key, data, WriterOptions{IfNotExist: true})
		if c := Code(err); c == errcode.Changed || c == errcode.AlreadyExists {
			return struct{}{}, &errcode.Error{Code: errcode.AlreadyExists, Op: op, Path: where, Err: err}
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
