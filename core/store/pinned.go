package store

import (
	"fmt"
	"time"
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

// changedError says that the object read is not the pinned version.
type changedError struct{ pinned, found Object }

func (e *changedError) Error() string {
	return fmt.Sprintf("pinned file changed (%s; pinned %s)", e.found, e.pinned)
}
