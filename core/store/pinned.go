package store

import (
	"fmt"
	"os"
	"time"

	"gocloud.dev/blob"
)

// A pinned object is read only while the store still holds the version that
// was pinned. Size and modification time alone cannot tell: S3's Last-Modified
// has a resolution of one second, so an object rewritten with as many bytes
// within the second looks unchanged. Every range read is therefore
// conditional, in the store, on the version's identity (the remote stores'
// part is their Driver's):
//
//   - s3://: If-Match with the pinned ETag (412 Precondition Failed otherwise);
//   - gs://: a generation-match precondition with the pinned generation;
//   - azblob://: If-Match with the pinned ETag;
//   - file://: the file opened is checked with fstat(2): size, modification
//     time to the nanosecond and inode must be the pinned ones. A file
//     rewritten in place keeps its inode; such a rewrite goes unseen only if
//     its modification time is set back to the pinned one, to the
//     nanosecond, and its size is kept (see docs/storage.md);
//   - mem://: size and modification time (process-local buckets only).

// Matches reports whether cur, a version of the object seen now, is the
// version o describes: same size, and the same modification time, ETag,
// generation and inode wherever both o and cur know them.
func (o Object) Matches(cur Object) bool {
	return o.Size == cur.Size &&
		(o.ModTime.IsZero() || cur.ModTime.IsZero() || o.ModTime.Equal(cur.ModTime)) &&
		(o.ETag == "" || cur.ETag == "" || o.ETag == cur.ETag) &&
		(o.Generation == 0 || cur.Generation == 0 || o.Generation == cur.Generation) &&
		(o.Inode == 0 || cur.Inode == 0 || o.Inode == cur.Inode)
}

// String describes the version o records, for messages.
func (o Object) String() string {
	s := fmt.Sprintf("size %d, modified %s", o.Size, o.ModTime.UTC().Format(time.RFC3339Nano))
	if o.ETag != "" {
		s += ", etag " + o.ETag
	}
	if o.Generation != 0 {
		s += fmt.Sprintf(", generation %d", o.Generation)
	}
	if o.Inode != 0 {
		s += fmt.Sprintf(", inode %d", o.Inode)
	}
	return s
}

// identify fills in the identity fields of o that a store reports beside
// gocloud's portable attributes: the generation on GCS, the inode on file://.
func (l *Location) identify(o *Object, as func(any) bool) {
	if l.driver != nil {
		l.driver.Identify(o, as)
		return
	}
	var fi os.FileInfo
	if as(&fi) {
		o.Inode = inode(fi)
	}
}

// conditional returns reader options under which a range read of o fails
// unless the store holds the version o describes, and a function that
// returns what the read found where the store tells more than gocloud's
// reader does (the file's identity on file://; the zero Object elsewhere).
// The store's refusal is classified FailedPrecondition (errcode.Changed); on
// file://, the refusal is a *changedError.
func (l *Location) conditional(o Object) (*blob.ReaderOptions, func() Object) {
	found := Object{Key: o.Key}
	before := func(as func(any) bool) error {
		if l.driver != nil {
			l.driver.Condition(o, as)
			return nil
		}
		var f *os.File
		if as(&f) {
			fi, err := f.Stat()
			if err != nil {
				return err
			}
			found = Object{Key: o.Key, Size: fi.Size(), ModTime: fi.ModTime(), Inode: inode(fi)}
			if !o.Matches(found) {
				return &changedError{pinned: o, found: found}
			}
		}
		return nil
	}
	return &blob.ReaderOptions{BeforeRead: before}, func() Object { return found }
}

// changedError says that the object read is not the pinned version.
type changedError struct{ pinned, found Object }

func (e *changedError) Error() string {
	return fmt.Sprintf("pinned file changed (%s; pinned %s)", e.found, e.pinned)
}

// observed returns the identity of the version rr reads: its size and
// modification time, the ETag or generation where the store reports one
// with the data, and the identity found by conditional's check (file://).
func (l *Location) observed(rr *blob.Reader, found Object) Object {
	found.Size, found.ModTime = rr.Size(), rr.ModTime()
	if l.driver != nil {
		l.driver.Observe(&found, rr.As)
	}
	return found
}
