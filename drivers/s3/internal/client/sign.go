package client

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"
)

// emptyHash is the hex SHA-256 of an empty payload.
const emptyHash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

const (
	amzDateFormat   = "20060102T150405Z"
	scopeDateFormat = "20060102"
)

// credentials are what a request is signed with.
type credentials struct {
	AccessKeyID     string
	SecretAccessKey string
	SessionToken    string
	// Expires is when the credentials stop working; zero for never.
	Expires time.Time
}

// payloadHash returns the hex SHA-256 of body, as x-amz-content-sha256
// carries it.
func payloadHash(body []byte) string {
	if len(body) == 0 {
		return emptyHash
	}
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:])
}

// sign signs req with AWS Signature Version 4 for service in region at
// time t: it sets the x-amz-date, x-amz-content-sha256 (to hash, the hex
// SHA-256 of the body) and x-amz-security-token headers, then the
// Authorization header. The canonical URI is req.URL's escaped path as it
// is sent, not escaped again, as S3 wants; the signed headers are host and
// those of req's headers that signedHeader selects.
func sign(req *http.Request, cr credentials, service, region, hash string, t time.Time) {
	t = t.UTC()
	amzDate := t.Format(amzDateFormat)
	req.Header.Set("X-Amz-Date", amzDate)
	req.Header.Set("X-Amz-Content-Sha256", hash)
	if cr.SessionToken != "" {
		req.Header.Set("X-Amz-Security-Token", cr.SessionToken)
	}
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	names, canonHeaders := canonicalHeaders(host, req.Header)
	path := req.URL.EscapedPath()
	if path == "" {
		path = "/"
	}
	canonReq := strings.Join([]string{
		req.Method, path, canonicalQuery(req.URL.Query()), canonHeaders, names, hash,
	}, "\n")
	scope := t.Format(scopeDateFormat) + "/" + region + "/" + service + "/aws4_request"
	reqHash := sha256.Sum256([]byte(canonReq))
	toSign := "AWS4-HMAC-SHA256\n" + amzDate + "\n" + scope + "\n" + hex.EncodeToString(reqHash[:])
	key := hmacSHA256([]byte("AWS4"+cr.SecretAccessKey), t.Format(scopeDateFormat))
	key = hmacSHA256(key, region)
	key = hmacSHA256(key, service)
	key = hmacSHA256(key, "aws4_request")
	sig := hex.EncodeToString(hmacSHA256(key, toSign))
	req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential="+cr.AccessKeyID+"/"+scope+
		", SignedHeaders="+names+", Signature="+sig)
}

func hmacSHA256(key []byte, data string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(data))
	return h.Sum(nil)
}

// signedHeader reports whether the header of the lowercase name is signed:
// the x-amz-* headers and those of the other headers the client sends whose
// tampering would change what a request does.
func signedHeader(name string) bool {
	switch name {
	case "content-md5", "content-type", "if-match", "if-none-match", "range":
		return true
	}
	return strings.HasPrefix(name, "x-amz-")
}

// canonicalHeaders returns the signed headers' names, sorted and joined by
// ';', and their canonical form: a "name:values\n" line for each, the
// values trimmed, their runs of spaces made one, and joined by ','.
func canonicalHeaders(host string, h http.Header) (names, canon string) {
	values := map[string][]string{"host": {host}}
	for k, v := range h {
		if k := strings.ToLower(k); signedHeader(k) {
			values[k] = append(values[k], v...)
		}
	}
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte(':')
		for i, v := range values[k] {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(trimAll(v))
		}
		b.WriteByte('\n')
	}
	return strings.Join(keys, ";"), b.String()
}

// trimAll returns v without leading and trailing white space and with each
// run of spaces made one space.
func trimAll(v string) string {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] != ' ' || i == 0 || v[i-1] != ' ' {
			b.WriteByte(v[i])
		}
	}
	return strings.TrimSpace(b.String())
}

// canonicalQuery returns q in canonical form: its keys and values
// URI-encoded, the pairs sorted by encoded key then encoded value and joined
// by '&', a key without a value written "key=". The client sends its
// queries in this form too.
func canonicalQuery(q url.Values) string {
	type pair struct{ k, v string }
	pairs := make([]pair, 0, len(q))
	for k, vs := range q {
		for _, v := range vs {
			pairs = append(pairs, pair{uriEncode(k, true), uriEncode(v, true)})
		}
	}
	sort.Slice(pairs, func(i, j int) bool {
		if pairs[i].k != pairs[j].k {
			return pairs[i].k < pairs[j].k
		}
		return pairs[i].v < pairs[j].v
	})
	var b strings.Builder
	for i, p := range pairs {
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(p.k + "=" + p.v)
	}
	return b.String()
}

// uriEncode escapes each byte of s outside A-Z, a-z, 0-9 and "-._~" as %XX
// (uppercase hex), and '/' too when slash is true.
func uriEncode(s string, slash bool) string {
	const hexDigits = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if unreserved(c) || (c == '/' && !slash) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&15])
	}
	return b.String()
}

func unreserved(c byte) bool {
	return 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}
