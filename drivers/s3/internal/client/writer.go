package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

const (
	// MinPartSize is the smallest part S3 accepts of a multipart upload,
	// but for the last.
	MinPartSize = 5 << 20
	// DefaultPartSize is the part size of NewWriter's uploads when it is
	// given none.
	DefaultPartSize = 16 << 20
	// abortTimeout bounds the abort of a failed upload.
	abortTimeout = time.Minute
)

// NewWriter returns a writer of bucket/key. The bytes written are buffered
// up to partSize (DefaultPartSize if 0; at least MinPartSize): if Close
// comes before the buffer fills, they are stored with one Put; otherwise
// they go up as the parts of a multipart upload, one part uploading while
// the next fills, so that the writer holds at most two parts, and Close
// completes the upload.
//
// retry, if not nil, runs each request (op is PutObject,
// CreateMultipartUpload, UploadPart, CompleteMultipartUpload or
// AbortMultipartUpload) and may call f again if it fails.
//
// If ctx ends before Close, or a request fails for good, the multipart
// upload is aborted, in a context ctx's end does not cancel, and Write or
// Close returns the error: nothing is stored.
func (c *Client) NewWriter(ctx context.Context, bucket, key string, opts PutOptions, partSize int,
	retry func(ctx context.Context, op string, f func(context.Context) error) error) io.WriteCloser {
	if partSize == 0 {
		partSize = DefaultPartSize
	}
	return c.newWriter(ctx, bucket, key, opts, max(partSize, MinPartSize), retry)
}

// newWriter is NewWriter without the bound on the part size, which tests
// lower.
func (c *Client) newWriter(ctx context.Context, bucket, key string, opts PutOptions, partSize int,
	retry func(ctx context.Context, op string, f func(context.Context) error) error) *writer {
	if retry == nil {
		retry = func(ctx context.Context, _ string, f func(context.Context) error) error { return f(ctx) }
	}
	return &writer{c: c, ctx: ctx, bucket: bucket, key: key, opts: opts, partSize: partSize, retry: retry}
}

// writer is the io.WriteCloser of NewWriter.
type writer struct {
	c           *Client
	ctx         context.Context
	bucket, key string
	opts        PutOptions
	partSize    int
	retry       func(ctx context.Context, op string, f func(context.Context) error) error

	buf      []byte // the part being filled
	spare    []byte // the buffer of the part in flight, once it is done
	uploadID string // "" until the multipart upload starts
	parts    []Part
	inFlight chan partResult // the part uploading, nil if none
	err      error           // the error that ended the upload
	closed   bool
}

// partResult is the outcome of a part's upload.
type partResult struct {
	part Part
	buf  []byte
	err  error
}

// Write buffers p, uploading each part that fills.
func (w *writer) Write(p []byte) (int, error) {
	if w.closed {
		return 0, fmt.Errorf("s3 writer %s/%s: write after close", w.bucket, w.key)
	}
	if w.err != nil {
		return 0, w.err
	}
	n := 0
	for len(p) > 0 {
		if len(w.buf) == w.partSize {
			if err := w.startPart(); err != nil {
				return n, w.fail(err)
			}
		}
		// The buffer grows as it fills: a small object (a manifest) costs
		// its size, not a part's.
		m := min(len(p), w.partSize-len(w.buf))
		w.buf = append(w.buf, p[:m]...)
		p = p[m:]
		n += m
	}
	return n, nil
}

// startPart starts the upload of the full buffer as the next part, starting
// the multipart upload first if it is the first part, once the part in
// flight is done.
func (w *writer) startPart() error {
	if err := w.ctx.Err(); err != nil {
		return fmt.Errorf("s3 writer %s/%s: %w", w.bucket, w.key, err)
	}
	if w.uploadID == "" {
		err := w.retry(w.ctx, "CreateMultipartUpload", func(ctx context.Context) error {
			id, err := w.c.CreateMultipartUpload(ctx, w.bucket, w.key, w.opts)
			w.uploadID = id
			return err
		})
		if err != nil {
			return err
		}
	}
	if err := w.wait(); err != nil {
		return err
	}
	buf, number := w.buf, len(w.parts)+1
	w.buf, w.spare = w.spare[:0], nil
	done := make(chan partResult, 1)
	w.inFlight = done
	go func() {
		var etag string
		err := w.retry(w.ctx, "UploadPart", func(ctx context.Context) error {
			var err error
			etag, err = w.c.UploadPart(ctx, w.bucket, w.key, w.uploadID, number, buf)
			return err
		})
		done <- partResult{Part{number, etag}, buf, err}
	}()
	return nil
}

// wait waits for the part in flight, if any, and records it.
func (w *writer) wait() error {
	if w.inFlight == nil {
		return nil
	}
	r := <-w.inFlight
	w.inFlight = nil
	w.spare = r.buf
	if r.err != nil {
		return r.err
	}
	w.parts = append(w.parts, r.part)
	return nil
}

// Close stores what was written: with one Put if it fits a part, else by
// uploading the last part and completing the multipart upload.
func (w *writer) Close() error {
	if w.closed {
		return w.err
	}
	w.closed = true
	if w.err != nil {
		return w.err
	}
	if err := w.ctx.Err(); err != nil {
		return w.fail(fmt.Errorf("s3 writer %s/%s: %w", w.bucket, w.key, err))
	}
	if w.uploadID == "" {
		body := w.buf
		err := w.retry(w.ctx, "PutObject", func(ctx context.Context) error {
			return w.c.Put(ctx, w.bucket, w.key, body, w.opts)
		})
		w.buf = nil
		if err != nil {
			w.err = err
		}
		return w.err
	}
	if len(w.buf) > 0 {
		if err := w.startPart(); err != nil {
			return w.fail(err)
		}
	}
	if err := w.wait(); err != nil {
		return w.fail(err)
	}
	err := w.retry(w.ctx, "CompleteMultipartUpload", func(ctx context.Context) error {
		return w.c.CompleteMultipartUpload(ctx, w.bucket, w.key, w.uploadID, w.parts, w.opts.IfNoneMatch)
	})
	w.buf, w.spare = nil, nil
	if err != nil {
		return w.fail(err)
	}
	return nil
}

// fail ends the upload with err: it waits for the part in flight, aborts
// the multipart upload if one was started, and returns err, joined by the
// abort's error if that failed too.
func (w *writer) fail(err error) error {
	w.wait()
	w.buf, w.spare = nil, nil
	if w.uploadID != "" {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(w.ctx), abortTimeout)
		defer cancel()
		aerr := w.retry(ctx, "AbortMultipartUpload", func(ctx context.Context) error {
			return w.c.AbortMultipartUpload(ctx, w.bucket, w.key, w.uploadID)
		})
		if aerr != nil {
			err = errors.Join(err, fmt.Errorf("aborting the upload: %w", aerr))
		}
	}
	w.err = err
	return err
}
