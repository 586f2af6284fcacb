package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"testing"

	"github.com/croupier-data/croupier/internal/s3test"
)

// randomBytes returns n bytes of a seeded generator.
func randomBytes(n int) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(uint64(n), 7))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// writeAll writes data to w in chunks of odd sizes.
func writeAll(t *testing.T, w interface{ Write([]byte) (int, error) }, data []byte) error {
	t.Helper()
	for i, step := 0, 1; i < len(data); i, step = i+step, step*3%997+1 {
		n, err := w.Write(data[i:min(i+step, len(data))])
		if err != nil {
			return err
		}
		if n != min(step, len(data)-i) {
			t.Fatalf("wrote %d of %d bytes", n, min(step, len(data)-i))
		}
	}
	return nil
}

// noUploads fails the test if bkt has multipart uploads in progress.
func noUploads(t *testing.T, c *Client) {
	t.Helper()
	ups, _, _, _, err := c.ListUploads(context.Background(), "bkt", "", "", "")
	if err != nil || len(ups) != 0 {
		t.Errorf("uploads in progress: %+v, %v", ups, err)
	}
}

func TestWriter(t *testing.T) {
	eachMode(t, func(t *testing.T, s *s3test.Server, c *Client) {
		ctx := context.Background()
		for _, n := range []int{0, 999, 1000, 1001, 3500, 4000} {
			s.ResetCounts()
			key := fmt.Sprintf("w%d é+%%", n)
			data := randomBytes(n)
			var mu sync.Mutex
			var ops []string
			retry := func(ctx context.Context, op string, f func(context.Context) error) error {
				mu.Lock()
				ops = append(ops, op)
				mu.Unlock()
				return f(ctx)
			}
			w := c.newWriter(ctx, "bkt", key, PutOptions{ContentType: "application/octet-stream", IfNoneMatch: true}, 1000, retry)
			if err := writeAll(t, w, data); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatalf("%d bytes: %v", n, err)
			}
			if b, info, err := get(t, c, key, 0, -1, ""); err != nil || !bytes.Equal(b, data) || info.Size != int64(n) {
				t.Errorf("%d bytes: read back %d, %+v, %v", n, len(b), info, err)
			}
			parts := (n + 999) / 1000
			want := []string{"PutObject"}
			if parts > 1 {
				want = append([]string{"CreateMultipartUpload"}, slices.Repeat([]string{"UploadPart"}, parts)...)
				want = append(want, "CompleteMultipartUpload")
			}
			slices.Sort(ops)
			slices.Sort(want)
			if !slices.Equal(ops, want) {
				t.Errorf("%d bytes: requests %v, want %v", n, ops, want)
			}
			if err := w.Close(); err != nil {
				t.Errorf("second Close: %v", err)
			}
			if _, err := w.Write([]byte("x")); err == nil {
				t.Error("Write after Close succeeded")
			}
		}
		noUploads(t, c)

		w := c.newWriter(ctx, "bkt", "w999 é+%", PutOptions{IfNoneMatch: true}, 1000, nil)
		w.Write([]byte("again"))
		if err := w.Close(); statusOf(t, err) != http.StatusPreconditionFailed {
			t.Errorf("a writer of an existing key with IfNoneMatch: %v, want 412", err)
		}

		if got := c.NewWriter(ctx, "bkt", "k", PutOptions{}, 1, nil).(*writer).partSize; got != MinPartSize {
			t.Errorf("part size %d, want MinPartSize", got)
		}
		if got := c.NewWriter(ctx, "bkt", "k", PutOptions{}, 0, nil).(*writer).partSize; got != DefaultPartSize {
			t.Errorf("part size %d, want DefaultPartSize", got)
		}
	})
}

// TestWriterCanceled checks that a writer whose context is canceled before
// Close stores nothing and leaves no upload.
func TestWriterCanceled(t *testing.T) {
	_, c := start(t, true)
	for _, n := range []int{500, 3500} {
		ctx, cancel := context.WithCancel(context.Background())
		w := c.newWriter(ctx, "bkt", "canceled", PutOptions{}, 1000, nil)
		if err := writeAll(t, w, randomBytes(n)); err != nil {
			t.Fatal(err)
		}
		cancel()
		if err := w.Close(); !errors.Is(err, context.Canceled) {
			t.Errorf("%d bytes: Close: %v, want context.Canceled", n, err)
		}
		if _, err := c.Head(context.Background(), "bkt", "canceled"); statusOf(t, err) != http.StatusNotFound {
			t.Errorf("%d bytes: Head: %v, want 404", n, err)
		}
		noUploads(t, c)
	}
}

// TestWriterFails checks that a writer whose parts fail aborts its upload,
// and that retry's attempts see it through faults.
func TestWriterFails(t *testing.T) {
	s, c := start(t, true)
	data := randomBytes(5500)
	s.SetFaults(s3test.Faults{Rate: 1, Kinds: []s3test.Kind{s3test.ServerError}, Match: func(r *http.Request) bool {
		return r.Method == http.MethodPut && r.URL.Query().Get("partNumber") == "3"
	}})
	w := c.newWriter(context.Background(), "bkt", "failed", PutOptions{}, 1000, nil)
	err := writeAll(t, w, data)
	if err == nil {
		err = w.Close()
	} else if cerr := w.Close(); cerr != err {
		t.Errorf("Close after a failed Write: %v, want %v", cerr, err)
	}
	if code := statusOf(t, err); code != 500 && code != 503 {
		t.Errorf("%v, want the part's 5xx", err)
	}
	if _, err := c.Head(context.Background(), "bkt", "failed"); statusOf(t, err) != http.StatusNotFound {
		t.Errorf("Head: %v, want 404", err)
	}
	noUploads(t, c)

	s.SetFaults(s3test.Faults{Rate: 0.5, Seed: 3, Kinds: []s3test.Kind{s3test.ServerError, s3test.Throttle}})
	retry := func(ctx context.Context, op string, f func(context.Context) error) error {
		var err error
		for range 20 {
			if err = f(ctx); err == nil {
				return nil
			}
		}
		return err
	}
	w = c.newWriter(context.Background(), "bkt", "retried", PutOptions{}, 1000, retry)
	if err := writeAll(t, w, data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	s.SetFaults(s3test.Faults{})
	if b, _, err := get(t, c, "retried", 0, -1, ""); err != nil || !bytes.Equal(b, data) {
		t.Errorf("read back %d bytes, %v", len(b), err)
	}
	if s.Injected()[s3test.ServerError]+s.Injected()[s3test.Throttle] == 0 {
		t.Error("no faults injected")
	}
}
