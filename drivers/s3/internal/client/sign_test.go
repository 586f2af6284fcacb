package client

import (
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// roundTripFunc is an http.RoundTripper that hands requests to a function
// instead of a network.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestSignExamples reproduces the signatures of the examples of AWS's
// documentation of Signature Version 4 for S3 ("Signature Calculations for
// the Authorization Header"), through the client's own requests.
func TestSignExamples(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIAIOSFODNN7EXAMPLE")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
	t.Setenv("AWS_SESSION_TOKEN", "")
	var got *http.Request
	hc := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		got = r
		return &http.Response{StatusCode: http.StatusOK, Header: http.Header{},
			Body: io.NopCloser(strings.NewReader(`<ListBucketResult></ListBucketResult>`)), Request: r}, nil
	})}
	c, err := New(context.Background(), Config{Region: "us-east-1", Endpoint: "https://s3.amazonaws.com", HTTPClient: hc})
	if err != nil {
		t.Fatal(err)
	}
	c.now = func() time.Time { return time.Date(2013, 5, 24, 0, 0, 0, 0, time.UTC) }
	const prefix = "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "

	body, _, err := c.Get(context.Background(), "examplebucket", "test.txt", 0, 10, "")
	if err != nil {
		t.Fatal(err)
	}
	body.Close()
	want := prefix + "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, " +
		"Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
	if got.Host != "examplebucket.s3.amazonaws.com" || got.URL.RequestURI() != "/test.txt" {
		t.Errorf("GET object: sent to %s%s", got.Host, got.URL.RequestURI())
	}
	if a := got.Header.Get("Authorization"); a != want {
		t.Errorf("GET object: Authorization\n%s\nwant\n%s", a, want)
	}

	// The list example: GET /?max-keys=2&prefix=J. List adds list-type=2,
	// which the example lacks: sign its request by hand.
	req, _ := http.NewRequest(http.MethodGet, "https://examplebucket.s3.amazonaws.com/?max-keys=2&prefix=J", nil)
	sign(req, credentials{AccessKeyID: "AKIAIOSFODNN7EXAMPLE", SecretAccessKey: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"},
		"s3", "us-east-1", emptyHash, c.now())
	want = prefix + "SignedHeaders=host;x-amz-content-sha256;x-amz-date, " +
		"Signature=34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"
	if a := req.Header.Get("Authorization"); a != want {
		t.Errorf("GET bucket: Authorization\n%s\nwant\n%s", a, want)
	}
}

// TestSignMatchesSDK signs random requests (keys of odd characters, query
// parameters, headers, bodies, session tokens) with sign and with the AWS
// SDK's signer, and compares their Authorization headers.
func TestSignMatchesSDK(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const odd = "abcXYZ019 -._~!*'()+%/?#&=;:@$,[]{}|\\^`\"<>\x01\x7féü中🙂"
	oddRunes := []rune(odd)
	text := func(alphabet []rune, n int) string {
		var b strings.Builder
		for range rng.IntN(n + 1) {
			b.WriteRune(alphabet[rng.IntN(len(alphabet))])
		}
		return b.String()
	}
	// Query keys are of unreserved characters and only they have several
	// values: the SDK sorts keys and values before encoding them, the
	// specification after, which only orders other characters otherwise.
	safe := []rune("abcdefXYZ0123456789-._~")
	headerNames := []string{"Range", "If-Match", "If-None-Match", "Content-Type", "Content-Md5",
		"X-Amz-Server-Side-Encryption", "X-Amz-Meta-Odd", "X-Amz-Storage-Class"}
	printable := []rune(" abcXYZ09-_=+/\"*,;:  \t" + "é")
	sdk := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })
	for i := range 2000 {
		method := []string{"GET", "PUT", "POST", "DELETE", "HEAD"}[rng.IntN(5)]
		host := []string{"bkt.s3.eu-west-3.amazonaws.com", "127.0.0.1:9000", "s3.amazonaws.com"}[rng.IntN(3)]
		path := "/" + text(oddRunes, 30)
		q := url.Values{}
		for range rng.IntN(4) {
			k := text(safe, 8)
			if q.Has(k) {
				continue
			}
			if rng.IntN(2) == 0 {
				q.Add(k, text(oddRunes, 10))
			} else {
				for range 1 + rng.IntN(3) {
					q.Add(k, text(safe, 5))
				}
			}
		}
		h := http.Header{}
		for range rng.IntN(4) {
			h.Add(headerNames[rng.IntN(len(headerNames))], strings.TrimLeft(text(printable, 20), " \t")+"x")
		}
		body := []byte(text(oddRunes, 50))
		cr := credentials{AccessKeyID: "AKID" + text(safe, 10), SecretAccessKey: text(oddRunes, 40)}
		if rng.IntN(2) == 0 {
			cr.SessionToken = "token" + text(safe, 30)
		}
		region := []string{"us-east-1", "eu-west-3", "ap-southeast-2"}[rng.IntN(3)]
		when := time.Unix(rng.Int64N(4e9), 0)
		hash := payloadHash(body)

		newReq := func() *http.Request {
			u := &url.URL{Scheme: "https", Host: host, Path: path, RawPath: uriEncode(path, false), RawQuery: canonicalQuery(q)}
			req, err := http.NewRequest(method, u.String(), nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header = h.Clone()
			return req
		}
		mine := newReq()
		sign(mine, cr, "s3", region, hash, when)
		theirs := newReq()
		theirs.Header.Set("X-Amz-Content-Sha256", hash)
		err := sdk.SignHTTP(context.Background(), aws.Credentials{AccessKeyID: cr.AccessKeyID,
			SecretAccessKey: cr.SecretAccessKey, SessionToken: cr.SessionToken}, theirs, hash, "s3", region, when)
		if err != nil {
			t.Fatal(err)
		}
		if a, b := mine.Header.Get("Authorization"), theirs.Header.Get("Authorization"); a != b {
			t.Fatalf("request %d: %s %s?%s %v:\nsign: %s\nSDK:  %s", i, method, path, q.Encode(), h, a, b)
		}
	}
}
