package client

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/croupier-data/croupier/internal/s3test"
)

// start starts an s3test server with bucket bkt and returns it and a
// path-style client of it, anonymous or signing (the server ignores
// signatures, so both work).
func start(t *testing.T, anonymous bool) (*s3test.Server, *Client) {
	t.Helper()
	s, err := s3test.Start("bkt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	u, err := url.Parse(s.URI("bkt", ""))
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(context.Background(), Config{Endpoint: u.Query().Get("endpoint"), PathStyle: true,
		Region: "us-east-1", Anonymous: anonymous})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.CloseIdleConnections)
	return s, c
}

// staticCredentials sets static credentials in the environment.
func staticCredentials(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	t.Setenv("AWS_SESSION_TOKEN", "token")
}

// eachMode runs f as a subtest with an anonymous client and with one
// signing with static credentials from the environment.
func eachMode(t *testing.T, f func(t *testing.T, s *s3test.Server, c *Client)) {
	for _, anonymous := range []bool{true, false} {
		t.Run(map[bool]string{true: "anonymous", false: "signed"}[anonymous], func(t *testing.T) {
			if !anonymous {
				staticCredentials(t)
			}
			s, c := start(t, anonymous)
			f(t, s, c)
		})
	}
}

// get reads bucket/key's range with Get.
func get(t *testing.T, c *Client, key string, off, length int64, ifMatch string) ([]byte, Info, error) {
	t.Helper()
	body, info, err := c.Get(context.Background(), "bkt", key, off, length, ifMatch)
	if err != nil {
		return nil, info, err
	}
	defer body.Close()
	b, err := io.ReadAll(body)
	return b, info, err
}

// statusOf returns the HTTP status of err, an *Error, or fails the test.
func statusOf(t *testing.T, err error) int {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("%v (%T) is not an *Error", err, err)
	}
	return e.HTTPStatusCode()
}

func TestObjects(t *testing.T) {
	eachMode(t, func(t *testing.T, s *s3test.Server, c *Client) {
		ctx := context.Background()
		data := []byte("0123456789abcdef")
		if err := c.Put(ctx, "bkt", "obj", data, PutOptions{ContentType: "text/plain"}); err != nil {
			t.Fatal(err)
		}
		head, err := c.Head(ctx, "bkt", "obj")
		if err != nil {
			t.Fatal(err)
		}
		if head.Key != "obj" || head.Size != 16 || !strings.HasPrefix(head.ETag, `"`) || head.ModTime.IsZero() {
			t.Errorf("Head: %+v", head)
		}
		for _, r := range []struct {
			off, length int64
			want        string
		}{{0, -1, "0123456789abcdef"}, {3, 4, "3456"}, {10, -1, "abcdef"}, {0, 1, "0"}, {5, 0, ""}, {12, 100, "cdef"}} {
			b, info, err := get(t, c, "obj", r.off, r.length, "")
			if err != nil {
				t.Fatalf("Get(%d, %d): %v", r.off, r.length, err)
			}
			if string(b) != r.want || info != head {
				t.Errorf("Get(%d, %d) = %q, %+v; want %q, %+v", r.off, r.length, b, info, r.want, head)
			}
		}

		if b, _, err := get(t, c, "obj", 2, 3, head.ETag); err != nil || string(b) != "234" {
			t.Errorf("Get with the object's ETag: %q, %v", b, err)
		}
		_, _, err = get(t, c, "obj", 2, 3, `"0123"`)
		if statusOf(t, err) != http.StatusPreconditionFailed {
			t.Errorf("Get with another ETag: %v, want 412", err)
		}
		const want = "s3 GetObject bkt/obj: 412 PreconditionFailed: At least one of the pre-conditions you specified did not hold"
		if !strings.HasPrefix(err.Error(), want) {
			t.Errorf("error %q, want it to start %q", err, want)
		}

		err = c.Put(ctx, "bkt", "obj", []byte("other"), PutOptions{IfNoneMatch: true})
		if statusOf(t, err) != http.StatusPreconditionFailed {
			t.Errorf("Put If-None-Match of an existing key: %v, want 412", err)
		}
		if err := c.Put(ctx, "bkt", "new", nil, PutOptions{IfNoneMatch: true}); err != nil {
			t.Errorf("Put If-None-Match of a new key: %v", err)
		}
		if b, info, err := get(t, c, "new", 0, -1, ""); err != nil || len(b) != 0 || info.Size != 0 {
			t.Errorf("Get of an empty object: %q, %+v, %v", b, info, err)
		}

		if err := c.Delete(ctx, "bkt", "obj"); err != nil {
			t.Fatal(err)
		}
		if err := c.Delete(ctx, "bkt", "obj"); err != nil {
			t.Errorf("Delete of a missing key: %v", err)
		}
		_, err = c.Head(ctx, "bkt", "obj")
		if statusOf(t, err) != http.StatusNotFound || err.(*Error).Code != "NotFound" {
			t.Errorf("Head of a deleted key: %v", err)
		}
		_, _, err = get(t, c, "obj", 0, -1, "")
		if statusOf(t, err) != http.StatusNotFound || err.(*Error).Code != "NoSuchKey" {
			t.Errorf("Get of a deleted key: %v", err)
		}
	})
}

// TestOddKeys stores, reads and lists keys whose URLs need escaping.
func TestOddKeys(t *testing.T) {
	keys := []string{"a b", "a+b", "100%", "100%25", "q?x=1&y#z", "ünïcødé/中文/🙂", "dir/sub dir/f;g,h:i@j$k",
		"~tilde*star(paren)'quote'!", "tab\there", "semi;colon=eq"}
	eachMode(t, func(t *testing.T, s *s3test.Server, c *Client) {
		ctx := context.Background()
		for _, k := range keys {
			if err := c.Put(ctx, "bkt", k, []byte(k), PutOptions{}); err != nil {
				t.Fatalf("Put %q: %v", k, err)
			}
		}
		for _, k := range keys {
			if b, info, err := get(t, c, k, 0, -1, ""); err != nil || string(b) != k || info.Size != int64(len(k)) {
				t.Errorf("Get %q: %q, %+v, %v", k, b, info, err)
			}
			if _, err := c.Head(ctx, "bkt", k); err != nil {
				t.Errorf("Head %q: %v", k, err)
			}
		}
		objs, next, err := c.List(ctx, "bkt", "", "", 0)
		if err != nil || next != "" {
			t.Fatalf("List: %v, next %q", err, next)
		}
		var got []string
		for _, o := range objs {
			got = append(got, o.Key)
		}
		want := slices.Sorted(slices.Values(keys))
		if !slices.Equal(got, want) {
			t.Errorf("List: %q, want %q", got, want)
		}
		objs, _, err = c.List(ctx, "bkt", "ünï", "", 0)
		if err != nil || len(objs) != 1 || objs[0].Key != "ünïcødé/中文/🙂" {
			t.Errorf("List with a prefix: %+v, %v", objs, err)
		}
	})
}

func TestListPages(t *testing.T) {
	s, c := start(t, true)
	for _, k := range []string{"p/1", "p/2", "p/3", "p/4", "p/5", "q/1"} {
		if err := s.Put("bkt", k, []byte(k)); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	var sizes []int
	token := ""
	for {
		objs, next, err := c.List(context.Background(), "bkt", "p/", token, 2)
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, len(objs))
		for _, o := range objs {
			if o.Size != 3 || o.ETag == "" || o.ModTime.IsZero() {
				t.Errorf("listed %+v", o)
			}
			got = append(got, o.Key)
		}
		if next == "" {
			break
		}
		token = next
	}
	if !slices.Equal(got, []string{"p/1", "p/2", "p/3", "p/4", "p/5"}) || !slices.Equal(sizes, []int{2, 2, 1}) {
		t.Errorf("pages of %v: %q", sizes, got)
	}
}

func TestUploads(t *testing.T) {
	eachMode(t, func(t *testing.T, s *s3test.Server, c *Client) {
		ctx := context.Background()
		ids := map[string]string{}
		for _, k := range []string{"up/a", "up/b", "other"} {
			id, err := c.CreateMultipartUpload(ctx, "bkt", k, PutOptions{})
			if err != nil {
				t.Fatal(err)
			}
			ids[k] = id
		}
		ups, _, _, truncated, err := c.ListUploads(ctx, "bkt", "up/", "", "")
		if err != nil || truncated || len(ups) != 2 || ups[0].Key != "up/a" || ups[0].UploadID != ids["up/a"] ||
			ups[1].Key != "up/b" || ups[0].Initiated.IsZero() {
			t.Fatalf("ListUploads: %+v, truncated %t, %v", ups, truncated, err)
		}
		if err := c.AbortMultipartUpload(ctx, "bkt", "up/a", ids["up/a"]); err != nil {
			t.Fatal(err)
		}
		ups, _, _, _, err = c.ListUploads(ctx, "bkt", "up/", "", "")
		if err != nil || len(ups) != 1 || ups[0].Key != "up/b" {
			t.Errorf("ListUploads after an abort: %+v, %v", ups, err)
		}

		// A whole upload by hand, parts out of order.
		id := ids["other"]
		var parts []Part
		for i, p := range []string{"second", "first"} {
			etag, err := c.UploadPart(ctx, "bkt", "other", id, 2-i, []byte(p))
			if err != nil {
				t.Fatal(err)
			}
			parts = append(parts, Part{2 - i, etag})
		}
		if err := c.CompleteMultipartUpload(ctx, "bkt", "other", id, parts, false); err != nil {
			t.Fatal(err)
		}
		if b, _, err := get(t, c, "other", 0, -1, ""); err != nil || string(b) != "firstsecond" {
			t.Errorf("completed upload: %q, %v", b, err)
		}
	})
}

// TestServerErrors checks that S3's error answers become *Error with their
// status and code, and transport failures errors that say so.
func TestServerErrors(t *testing.T) {
	staticCredentials(t)
	s, c := start(t, false)
	if err := s.Put("bkt", "obj", bytes.Repeat([]byte("x"), 1000)); err != nil {
		t.Fatal(err)
	}
	s.SetFaults(s3test.Faults{Rate: 1, Kinds: []s3test.Kind{s3test.ServerError, s3test.Throttle}})
	seen := map[int]bool{}
	for range 20 {
		_, _, err := get(t, c, "obj", 0, -1, "")
		var e *Error
		if !errors.As(err, &e) {
			t.Fatalf("%v is not an *Error", err)
		}
		seen[e.HTTPStatusCode()] = true
		switch {
		case e.StatusCode == 500 && e.Code == "InternalError", e.StatusCode == 503 && e.Code == "SlowDown",
			e.StatusCode == 429 && e.Code == "TooManyRequests":
		default:
			t.Errorf("%+v", e)
		}
		if e.RequestID != "s3test" || e.Op != "GetObject" || e.Bucket != "bkt" || e.Key != "obj" || e.Message == "" {
			t.Errorf("%+v", e)
		}
	}
	if !seen[500] || !seen[503] || !seen[429] {
		t.Errorf("statuses %v, want 500, 503 and 429 among them", seen)
	}
	_, err := c.Head(context.Background(), "bkt", "obj")
	if code := statusOf(t, err); code != 500 && code != 503 && code != 429 {
		t.Errorf("Head: %v", err)
	}

	s.SetFaults(s3test.Faults{Rate: 1, Kinds: []s3test.Kind{s3test.Truncate}})
	if _, _, err := get(t, c, "obj", 0, -1, ""); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("truncated body: %v, want io.ErrUnexpectedEOF", err)
	}
	s.SetFaults(s3test.Faults{Rate: 1, Kinds: []s3test.Kind{s3test.Reset}})
	_, err = c.Head(context.Background(), "bkt", "obj")
	var e *Error
	if err == nil || errors.As(err, &e) || !strings.HasPrefix(err.Error(), "s3 HeadObject bkt/obj: ") {
		t.Errorf("reset connection: %v", err)
	}
}

// TestErrorIn200 checks that an error document in a 200 answer to
// CompleteMultipartUpload is the error it says.
func TestErrorIn200(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?>` + "\n   " +
			`<Error><Code>InternalError</Code><Message>We encountered an internal error. Please try again.</Message>` +
			`<RequestId>656c76696e6727732072657175657374</RequestId></Error>`))
	}))
	defer srv.Close()
	c, err := New(context.Background(), Config{Endpoint: srv.URL, PathStyle: true, Anonymous: true, Region: "us-east-1"})
	if err != nil {
		t.Fatal(err)
	}
	err = c.CompleteMultipartUpload(context.Background(), "bkt", "k", "id", []Part{{1, `"e"`}}, false)
	var e *Error
	if !errors.As(err, &e) || e.StatusCode != 200 || e.HTTPStatusCode() != 500 || e.Code != "InternalError" {
		t.Fatalf("%v", err)
	}
	const want = "s3 CompleteMultipartUpload bkt/k: InternalError in a 200 answer: We encountered an internal error. " +
		"Please try again. (request id 656c76696e6727732072657175657374)"
	if err.Error() != want {
		t.Errorf("%q\nwant %q", err, want)
	}
}

// TestVirtualHosted checks the URLs of virtual-hosted-style requests, the
// default (but for a bucket with dots over https), and of the default
// endpoint.
func TestVirtualHosted(t *testing.T) {
	isolate(t)
	var got []string
	hc := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		got = append(got, r.URL.Scheme+"://"+r.Host+r.URL.RequestURI())
		return &http.Response{StatusCode: http.StatusNoContent, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
	})}
	for _, cfg := range []Config{
		{Region: "eu-west-3"},
		{Region: "cn-north-1", DisableHTTPS: true},
		{Endpoint: "https://minio.example:443"},
		{Endpoint: "http://127.0.0.1:9000", PathStyle: true},
	} {
		cfg.Anonymous, cfg.HTTPClient = true, hc
		c, err := New(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, bucket := range []string{"bkt", "my.bkt"} {
			if err := c.Delete(context.Background(), bucket, "a b/c+d%é"); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A bucket name with dots is not a name the store's TLS certificate
	// covers as a subdomain: over https it goes in the path.
	want := []string{
		"https://bkt.s3.eu-west-3.amazonaws.com/a%20b/c%2Bd%25%C3%A9",
		"https://s3.eu-west-3.amazonaws.com/my.bkt/a%20b/c%2Bd%25%C3%A9",
		"http://bkt.s3.cn-north-1.amazonaws.com.cn/a%20b/c%2Bd%25%C3%A9",
		"http://my.bkt.s3.cn-north-1.amazonaws.com.cn/a%20b/c%2Bd%25%C3%A9",
		"https://bkt.minio.example/a%20b/c%2Bd%25%C3%A9",
		"https://minio.example/my.bkt/a%20b/c%2Bd%25%C3%A9",
		"http://127.0.0.1:9000/bkt/a%20b/c%2Bd%25%C3%A9",
		"http://127.0.0.1:9000/my.bkt/a%20b/c%2Bd%25%C3%A9",
	}
	if !slices.Equal(got, want) {
		t.Errorf("requests to\n%q\nwant\n%q", got, want)
	}
	for _, bad := range []string{"s3.example", "ftp://host", "https://host/path", "https://user@host"} {
		if _, err := New(context.Background(), Config{Endpoint: bad, Anonymous: true}); err == nil {
			t.Errorf("endpoint %q accepted", bad)
		}
	}
}

// TestRedirect checks that S3's redirect to another region's endpoint is
// answered as an error naming the bucket's region, not followed.
func TestRedirect(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Amz-Bucket-Region", "eu-west-3")
		w.Header().Set("Location", "http://elsewhere.invalid/")
		w.WriteHeader(http.StatusMovedPermanently)
	}))
	defer srv.Close()
	c, err := New(context.Background(), Config{Endpoint: srv.URL, PathStyle: true, Anonymous: true, Region: "us-east-1"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Head(context.Background(), "bkt", "k")
	const want = "s3 HeadObject bkt/k: 301 MovedPermanently: the bucket is in region eu-west-3"
	if statusOf(t, err) != http.StatusMovedPermanently || err.Error() != want {
		t.Errorf("%v\nwant %s", err, want)
	}
}
