// Package client is a small Amazon S3 client written over net/http and the
// standard library alone, so that a program reading s3:// URIs links few
// packages: the AWS SDK and gocloud.dev link some three hundred. It
// implements only the requests croupier makes (reads of objects and their
// ranges, puts, multipart uploads, listings, deletes), signs them with AWS
// Signature Version 4, and finds credentials where the AWS SDKs do: the
// environment, the shared config and credentials files, web identity,
// container credentials and the EC2 instance role.
package client

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
	"encoding/xml"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// Config says which S3, or S3-compatible store, to talk to, and how.
type Config struct {
	// Region is the region of the buckets; "" means that of AWS_REGION,
	// else AWS_DEFAULT_REGION, else the profile's region in the shared
	// config file, else us-east-1.
	Region string
	// Endpoint is the scheme://host[:port] of an S3-compatible store; ""
	// means AWS's endpoint of the region, https://s3.REGION.amazonaws.com.
	Endpoint string
	// PathStyle puts the bucket in the request's path rather than in its
	// host name. A bucket whose name has dots goes in the path over https
	// anyway: the store's certificate covers no such host name.
	PathStyle bool
	// DisableHTTPS makes the default endpoint http:// rather than https://.
	DisableHTTPS bool
	// Anonymous sends requests unsigned, as public buckets accept them.
	Anonymous bool
	// Profile is the profile of the shared config and credentials files;
	// "" means AWS_PROFILE, else "default".
	Profile string
	// HTTPClient sends the requests; nil means a client with a transport of
	// its own, so that CloseIdleConnections affects no other client, that
	// does not follow redirects.
	HTTPClient *http.Client
}

// maxIdleConns is how many idle connections a client keeps to its host.
const maxIdleConns = 100

// Client sends requests to S3. It is safe for concurrent use.
type Client struct {
	http      *http.Client
	scheme    string // of the endpoint
	host      string // of the endpoint, host[:port]
	pathStyle bool
	region    string
	anonymous bool
	creds     *credentialCache // nil when anonymous
	now       func() time.Time
}

// New returns a client of the store cfg describes. Credentials are looked
// for at the first signed request, not here.
func New(ctx context.Context, cfg Config) (*Client, error) {
	profile := cfg.Profile
	if profile == "" {
		profile = os.Getenv("AWS_PROFILE")
	}
	if profile == "" {
		profile = "default"
	}
	region := cfg.Region
	if region == "" {
		region = os.Getenv("AWS_REGION")
	}
	if region == "" {
		region = os.Getenv("AWS_DEFAULT_REGION")
	}
	if region == "" {
		settings, _, err := loadProfile(profile)
		if err != nil {
			return nil, err
		}
		region = settings["region"]
	}
	if region == "" {
		region = "us-east-1"
	}
	endpoint := cfg.Endpoint
	if endpoint == "" {
		scheme := "https"
		if cfg.DisableHTTPS {
			scheme = "http"
		}
		domain := "amazonaws.com"
		if strings.HasPrefix(region, "cn-") {
			domain = "amazonaws.com.cn"
		}
		endpoint = scheme + "://s3." + region + "." + domain
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		return nil, fmt.Errorf("s3 endpoint %q: %w", endpoint, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.Trim(u.Path, "/") != "" ||
		u.RawQuery != "" || u.User != nil {
		return nil, fmt.Errorf("s3 endpoint %q: not of the form http[s]://host[:port]", endpoint)
	}
	host := u.Host
	if p := u.Port(); (u.Scheme == "http" && p == "80") || (u.Scheme == "https" && p == "443") {
		host = strings.TrimSuffix(host, ":"+p) // as Go sends the Host header
	}
	c := &Client{http: cfg.HTTPClient, scheme: u.Scheme, host: host, pathStyle: cfg.PathStyle,
		region: region, anonymous: cfg.Anonymous, now: time.Now}
	if c.http == nil {
		t, ok := http.DefaultTransport.(*http.Transport)
		if ok {
			t = t.Clone()
		} else {
			t = &http.Transport{Proxy: http.ProxyFromEnvironment}
		}
		// A reader sends many range requests at once to one host; keep
		// their connections for the next ones rather than net/http's
		// default of 2 (a new TLS handshake, a round trip or two, for
		// each request past them).
		t.MaxIdleConns, t.MaxIdleConnsPerHost = maxIdleConns, maxIdleConns
		// S3's redirects name another region's endpoint, where the
		// request's signature is wrong: answer them as the errors they are.
		c.http = &http.Client{Transport: t, CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		}}
	}
	if !cfg.Anonymous {
		c.creds = &credentialCache{chain: &chain{profile: profile, region: region, http: c.http}, now: c.clock}
	}
	return c, nil
}

// clock returns the time by the client's clock.
func (c *Client) clock() time.Time { return c.now() }

// CloseIdleConnections closes the idle connections of the client's HTTP
// client.
func (c *Client) CloseIdleConnections() { c.http.CloseIdleConnections() }

// Info describes an object.
type Info struct {
	Key  string
	Size int64
	// ModTime is the object's Last-Modified time.
	ModTime time.Time
	// ETag is the object's entity tag exactly as S3 sends it, quotes
	// included.
	ETag string
}

// request is one request to S3.
type request struct {
	method string
	op     string // the S3 operation, for errors
	bucket string
	key    string // "" for a request about the bucket
	query  url.Values
	header http.Header
	body   []byte
}

// do sends r and returns the answer if its status is 2xx; otherwise it
// returns the answer's *Error. Transport errors are wrapped.
func (c *Client) do(ctx context.Context, r request) (*http.Response, error) {
	host, path := c.host, "/"+r.bucket
	// A bucket name with dots makes a host name that the store's wildcard
	// certificate does not cover: over https such a bucket goes in the path,
	// as the AWS SDKs do.
	virtual := !c.pathStyle && !(c.scheme == "https" && strings.Contains(r.bucket, "."))
	if virtual {
		host, path = r.bucket+"."+c.host, ""
	}
	if r.key != "" || virtual {
		path += "/" + r.key
	}
	u := &url.URL{Scheme: c.scheme, Host: host, Path: path, RawPath: uriEncode(path, false),
		RawQuery: canonicalQuery(r.query)}
	var body io.Reader
	if r.body != nil {
		body = bytes.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u.String(), body)
	if err != nil {
		return nil, fmt.Errorf("s3 %s %s: %w", r.op, r.target(), err)
	}
	maps.Copy(req.Header, r.header)
	if !c.anonymous {
		cr, err := c.creds.get(ctx)
		if err != nil {
			return nil, fmt.Errorf("s3 %s %s: %w", r.op, r.target(), err)
		}
		sign(req, cr, "s3", c.region, payloadHash(r.body), c.now())
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("s3 %s %s: %w", r.op, r.target(), err)
	}
	if resp.StatusCode/100 != 2 {
		return nil, responseError(resp, r.op, r.bucket, r.key)
	}
	return resp, nil
}

// target returns the bucket/key the request is about, for errors.
func (r request) target() string {
	if r.key == "" {
		return r.bucket
	}
	return r.bucket + "/" + r.key
}

// send sends r, which expects an answer without a body, and returns the
// answer, its body closed.
func (c *Client) send(ctx context.Context, r request) (*http.Response, error) {
	resp, err := c.do(ctx, r)
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	return resp, nil
}

// infoOf is the Info of bucket/key that an answer to a read of it reports.
func infoOf(key string, resp *http.Response) Info {
	return Info{Key: key, Size: resp.ContentLength, ETag: resp.Header.Get("ETag"), ModTime: lastModified(resp)}
}

// doXML sends r and decodes the XML body of its answer into v. An error
// document in a 200 answer is returned as the *Error it is.
func (c *Client) doXML(ctx context.Context, r request, v any) error {
	resp, err := c.do(ctx, r)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("s3 %s %s: reading the answer: %w", r.op, r.target(), err)
	}
	var doc errorDocument
	if xml.Unmarshal(b, &doc) == nil && doc.XMLName.Local == "Error" {
		return &Error{StatusCode: resp.StatusCode, Code: doc.Code, Message: doc.Message,
			RequestID: doc.RequestID, Op: r.op, Bucket: r.bucket, Key: r.key}
	}
	if err := xml.Unmarshal(b, v); err != nil {
		return fmt.Errorf("s3 %s %s: decoding the answer: %w", r.op, r.target(), err)
	}
	return nil
}

// Head returns the Info of bucket/key.
func (c *Client) Head(ctx context.Context, bucket, key string) (Info, error) {
	return c.headIfMatch(ctx, bucket, key, "")
}

// Get reads length bytes of bucket/key from offset off, or to the object's
// end if length < 0. When ifMatch is not "" it is sent as If-Match, and S3
// answers 412 Precondition Failed if the object's ETag is another. The Info
// describes the whole object: Size is its size, not that of the range.
// The caller must close the body.
func (c *Client) Get(ctx context.Context, bucket, key string, off, length int64, ifMatch string) (io.ReadCloser, Info, error) {
	if off < 0 {
		return nil, Info{}, fmt.Errorf("s3 GetObject %s/%s: negative offset %d", bucket, key, off)
	}
	if length == 0 {
		info, err := c.headIfMatch(ctx, bucket, key, ifMatch)
		return io.NopCloser(strings.NewReader("")), info, err
	}
	r := request{method: http.MethodGet, op: "GetObject", bucket: bucket, key: key, header: http.Header{}}
	ranged := off > 0 || length > 0
	if ranged {
		rng := "bytes=" + strconv.FormatInt(off, 10) + "-"
		if length > 0 {
			rng += strconv.FormatInt(off+length-1, 10)
		}
		r.header.Set("Range", rng)
	}
	if ifMatch != "" {
		r.header.Set("If-Match", ifMatch)
	}
	resp, err := c.do(ctx, r)
	if err != nil {
		return nil, Info{}, err
	}
	info := infoOf(key, resp)
	switch {
	case resp.StatusCode == http.StatusPartialContent:
		size, err := rangeSize(resp.Header.Get("Content-Range"))
		if err != nil {
			resp.Body.Close()
			return nil, Info{}, fmt.Errorf("s3 GetObject %s/%s: %w", bucket, key, err)
		}
		info.Size = size
	case ranged:
		// A store that ignores Range sends the whole object: cut the
		// range out of it.
		if _, err := io.CopyN(io.Discard, resp.Body, off); err != nil {
			resp.Body.Close()
			return nil, Info{}, fmt.Errorf("s3 GetObject %s/%s: skipping to offset %d: %w", bucket, key, off, err)
		}
		if length > 0 {
			resp.Body = struct {
				io.Reader
				io.Closer
			}{io.LimitReader(resp.Body, length), resp.Body}
		}
	}
	return resp.Body, info, nil
}

// headIfMatch is Head with an If-Match condition, when ifMatch is not "".
func (c *Client) headIfMatch(ctx context.Context, bucket, key, ifMatch string) (Info, error) {
	r := request{method: http.MethodHead, op: "HeadObject", bucket: bucket, key: key}
	if ifMatch != "" {
		r.header = http.Header{"If-Match": {ifMatch}}
	}
	resp, err := c.send(ctx, r)
	if err != nil {
		return Info{}, err
	}
	return infoOf(key, resp), nil
}

// rangeSize returns the total size a Content-Range header
// ("bytes first-last/size") gives.
func rangeSize(cr string) (int64, error) {
	_, total, ok := strings.Cut(cr, "/")
	n, err := strconv.ParseInt(total, 10, 64)
	if !ok || err != nil || n < 0 {
		return 0, fmt.Errorf("answer without the object's size in its Content-Range %q", cr)
	}
	return n, nil
}

// lastModified returns the Last-Modified time of resp, zero if it has none.
func lastModified(resp *http.Response) time.Time {
	t, _ := http.ParseTime(resp.Header.Get("Last-Modified"))
	return t
}

// PutOptions are the options of an object's upload.
type PutOptions struct {
	// ContentType is the object's Content-Type; "" lets the store choose.
	ContentType string
	// IfNoneMatch makes the upload fail with 412 Precondition Failed if the
	// key exists (If-None-Match: *).
	IfNoneMatch bool
	// SSE is the server-side encryption to ask for, as
	// x-amz-server-side-encryption takes it ("AES256", "aws:kms"); "" for
	// the bucket's default.
	SSE string
	// KMSKeyID is the KMS key of "aws:kms" encryption; "" for the default
	// key.
	KMSKeyID string
}

// header returns the headers of o that an upload's first request carries.
func (o PutOptions) header() http.Header {
	h := http.Header{}
	if o.ContentType != "" {
		h.Set("Content-Type", o.ContentType)
	}
	if o.SSE != "" {
		h.Set("X-Amz-Server-Side-Encryption", o.SSE)
	}
	if o.KMSKeyID != "" {
		h.Set("X-Amz-Server-Side-Encryption-Aws-Kms-Key-Id", o.KMSKeyID)
	}
	return h
}

// contentMD5 returns the base64 MD5 of body, as Content-MD5 carries it: S3
// checks what it received against it, signed or not.
func contentMD5(body []byte) string {
	sum := md5.Sum(body)
	return base64.StdEncoding.EncodeToString(sum[:])
}

// Put stores body as bucket/key.
func (c *Client) Put(ctx context.Context, bucket, key string, body []byte, opts PutOptions) error {
	h := opts.header()
	if opts.IfNoneMatch {
		h.Set("If-None-Match", "*")
	}
	h.Set("Content-MD5", contentMD5(body))
	_, err := c.send(ctx, request{method: http.MethodPut, op: "PutObject", bucket: bucket, key: key, header: h, body: body})
	return err
}

// Delete deletes bucket/key. S3 answers success for a missing key too.
func (c *Client) Delete(ctx context.Context, bucket, key string) error {
	_, err := c.send(ctx, request{method: http.MethodDelete, op: "DeleteObject", bucket: bucket, key: key})
	return err
}

// List returns up to max objects of bucket whose keys start with prefix
// (ListObjectsV2), in key order, from the page that token, a next of an
// earlier call, starts ("" for the first), and the token of the next page,
// "" after the last. max <= 0 leaves the page's size to S3 (1000).
func (c *Client) List(ctx context.Context, bucket, prefix, token string, max int) (objs []Info, next string, err error) {
	q := url.Values{"list-type": {"2"}}
	if prefix != "" {
		q.Set("prefix", prefix)
	}
	if token != "" {
		q.Set("continuation-token", token)
	}
	if max > 0 {
		q.Set("max-keys", strconv.Itoa(max))
	}
	var res struct {
		Contents []struct {
			Key          string
			Size         int64
			ETag         string
			LastModified time.Time
		}
		IsTruncated           bool
		NextContinuationToken string
	}
	r := request{method: http.MethodGet, op: "ListObjectsV2", bucket: bucket, query: q}
	if err := c.doXML(ctx, r, &res); err != nil {
		return nil, "", err
	}
	for _, o := range res.Contents {
		objs = append(objs, Info{Key: o.Key, Size: o.Size, ETag: o.ETag, ModTime: o.LastModified})
	}
	if res.IsTruncated {
		if res.NextContinuationToken == "" {
			return nil, "", fmt.Errorf("s3 ListObjectsV2 %s: a truncated listing without a continuation token", bucket)
		}
		next = res.NextContinuationToken
	}
	return objs, next, nil
}
