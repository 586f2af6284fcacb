package s3test_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestIgnoreConditionalWrites puts one key twice with If-None-Match: *: the
// second put fails with 412 while the server honours the condition, and
// replaces the object while it ignores it.
func TestIgnoreConditionalWrites(t *testing.T) {
	s, _ := start(t)
	put := func(key, body string) int {
		req, err := http.NewRequest(http.MethodPut, objectURL(t, s, key), strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("If-None-Match", "*")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	get := func(key string) string {
		resp, err := http.Get(objectURL(t, s, key))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	for _, ignore := range []bool{false, true} {
		s.IgnoreConditionalWrites(ignore)
		key := "conditional-" + map[bool]string{false: "honoured", true: "ignored"}[ignore]
		if code := put(key, "first"); code != http.StatusOK {
			t.Fatalf("ignore=%t: first put: status %d", ignore, code)
		}
		code, want, wantBody := put(key, "second"), http.StatusPreconditionFailed, "first"
		if ignore {
			want, wantBody = http.StatusOK, "second"
		}
		if code != want || get(key) != wantBody {
			t.Errorf("ignore=%t: second put: status %d, object %q; want %d, %q", ignore, code, get(key), want, wantBody)
		}
	}
}
