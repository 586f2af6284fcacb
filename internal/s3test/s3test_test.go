package s3test_test

import (
	"bytes"
	"io"
	"net/http"
	"testing"
)

// TestConditionalReads checks that GET and HEAD honour If-Match, also after
// Overwrite replaced the object without changing its Last-Modified, which
// it keeps.
func TestConditionalReads(t *testing.T) {
	s, _ := start(t)
	body := bytes.Repeat([]byte("0123456789"), 100)
	do := func(method, ifMatch string) (*http.Response, []byte) {
		t.Helper()
		var data io.Reader
		if method == http.MethodPut {
			data = bytes.NewReader(body)
		}
		req, _ := http.NewRequest(method, objectURL(t, s, "cond"), data)
		if ifMatch != "" {
			req.Header.Set("If-Match", ifMatch)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, b
	}
	if resp, _ := do(http.MethodPut, ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT: %s", resp.Status)
	}
	first, _ := do(http.MethodHead, "")
	if first.Header.Get("Last-Modified") == "" {
		t.Fatal("no Last-Modified")
	}
	etag := first.Header.Get("ETag")
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		if resp, b := do(method, etag); resp.StatusCode != http.StatusOK || (method == http.MethodGet && !bytes.Equal(b, body)) {
			t.Fatalf("%s If-Match the current ETag: %s, %d bytes", method, resp.Status, len(b))
		}
		if resp, _ := do(method, `"0123"`); resp.StatusCode != http.StatusPreconditionFailed {
			t.Fatalf("%s If-Match another ETag: %s, want 412", method, resp.Status)
		}
	}

	replacement := bytes.ToUpper(bytes.Repeat([]byte("abcdefghij"), 100))
	if err := s.Overwrite("bkt", "cond", replacement); err != nil {
		t.Fatal(err)
	}
	now, b := do(http.MethodGet, "")
	if !bytes.Equal(b, replacement) || now.Header.Get("Last-Modified") != first.Header.Get("Last-Modified") {
		t.Fatalf("after Overwrite: %d bytes, Last-Modified %q; want the replacement and %q",
			len(b), now.Header.Get("Last-Modified"), first.Header.Get("Last-Modified"))
	}
	if resp, _ := do(http.MethodGet, etag); resp.StatusCode != http.StatusPreconditionFailed {
		t.Fatalf("GET If-Match the overwritten object's ETag: %s, want 412", resp.Status)
	}
}
