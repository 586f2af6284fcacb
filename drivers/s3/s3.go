// Package s3 is croupier's driver of s3:// URIs, Amazon S3 and the stores
// that speak its protocol (MinIO, R2, Ceph, …): a blank import links it in.
//
//	import _ "github.com/croupier-data/croupier/drivers/s3"
//
// It talks to the store through a small S3 client of its own
// (internal/client), written over net/http, rather than the AWS SDK: a
// program that reads s3:// then links a few packages more than the standard
// library's, not the SDK's hundred and more. The URI's query says which
// store and how:
//
//	region=us-east-1         the buckets' region (else AWS_REGION, AWS_DEFAULT_REGION, the profile's, us-east-1)
//	endpoint=http://host:port an S3-compatible store's endpoint
//	use_path_style=true      the bucket in the path, not the host name (most S3-compatible stores)
//	disable_https=true       http:// to the default endpoint
//	profile=name             the profile of ~/.aws/config and ~/.aws/credentials
//	anonymous=true           unsigned requests, for a public bucket
//	ssetype=aws:kms|AES256   server-side encryption of the objects written
//	kmskeyid=…               the KMS key of aws:kms encryption
//
// Any other parameter is an error. core/store retries every request under
// its RetryPolicy; the client retries nothing itself, except that a
// streamed upload's parts, which only the writer holds, are retried by the
// writer under the same policy. Reads of a pinned object carry If-Match with
// the pinned ETag.
package s3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/store"
	"github.com/croupier-data/croupier/drivers/s3/internal/client"
)

func init() { store.Register("s3", driver{}) }

// driver is the store.Driver of s3:// URIs.
type driver struct{}

// OpenBucket opens the bucket u names with a client of the store its query
// describes, with an HTTP transport of its own (closed with the bucket).
func (driver) OpenBucket(ctx context.Context, u *url.URL, p store.RetryPolicy) (store.Bucket, error) {
	cfg, put, err := parseQuery(u.Query())
	if err != nil {
		return nil, err
	}
	c, err := client.New(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &bucket{c: c, name: u.Host, put: put, retry: p}, nil
}

// sseTypes are the values of ssetype, by their lower case, as S3 spells
// them.
var sseTypes = map[string]string{"aws:kms": "aws:kms", "aws:kms:dsse": "aws:kms:dsse", "aes256": "AES256"}

// parseQuery reads the client's configuration and the options of writes
// from the query of an s3:// URI.
func parseQuery(q url.Values) (client.Config, client.PutOptions, error) {
	var cfg client.Config
	var put client.PutOptions
	for name := range q {
		switch name {
		case "region", "endpoint", "profile", "kmskeyid", "ssetype", "use_path_style", "disable_https", "anonymous":
		default:
			return cfg, put, fmt.Errorf("unknown query parameter %q of an s3:// URI; the parameters are "+
				"region, endpoint, use_path_style, disable_https, profile, anonymous, ssetype and kmskeyid", name)
		}
	}
	cfg.Region, cfg.Endpoint, cfg.Profile = q.Get("region"), q.Get("endpoint"), q.Get("profile")
	for _, f := range []struct {
		name string
		v    *bool
	}{{"use_path_style", &cfg.PathStyle}, {"disable_https", &cfg.DisableHTTPS}, {"anonymous", &cfg.Anonymous}} {
		if s := q.Get(f.name); s != "" {
			b, err := strconv.ParseBool(s)
			if err != nil {
				return cfg, put, fmt.Errorf("query parameter %s=%q: want true or false", f.name, s)
			}
			*f.v = b
		}
	}
	put.KMSKeyID = q.Get("kmskeyid")
	switch t := q.Get("ssetype"); {
	case t != "":
		var ok bool
		if put.SSE, ok = sseTypes[strings.ToLower(t)]; !ok {
			return cfg, put, fmt.Errorf("query parameter ssetype=%q: want aws:kms, aws:kms:dsse or AES256", t)
		}
	case put.KMSKeyID != "":
		put.SSE = "aws:kms"
	}
	return cfg, put, nil
}

// bucket is one S3 bucket.
type bucket struct {
	c     *client.Client
	name  string
	put   client.PutOptions // encryption of the objects written
	retry store.RetryPolicy // of a streamed upload's parts
}

func (b *bucket) Stat(ctx context.Context, key string) (store.Object, error) {
	info, err := b.c.Head(ctx, b.name, key)
	if err != nil {
		return store.Object{}, classified(err)
	}
	return object(info), nil
}

// object is the identity of the version info describes.
func object(info client.Info) store.Object {
	return store.Object{Key: info.Key, Size: info.Size, ModTime: info.ModTime, ETag: info.ETag}
}

func (b *bucket) NewRangeReader(ctx context.Context, key string, off, length int64, pin *store.Object) (io.ReadCloser, store.Object, error) {
	var ifMatch string
	if pin != nil {
		ifMatch = pin.ETag
	}
	body, info, err := b.c.Get(ctx, b.name, key, off, length, ifMatch)
	if err != nil {
		return nil, store.Object{}, classified(err)
	}
	return body, object(info), nil
}

func (b *bucket) NewWriter(ctx context.Context, key string, opts store.WriterOptions) (io.WriteCloser, error) {
	put := b.put
	put.ContentType, put.IfNoneMatch = opts.ContentType, opts.IfNotExist
	where := "s3://" + b.name + "/" + key
	retry := func(ctx context.Context, op string, f func(context.Context) error) error {
		_, err := store.Do(ctx, b.retry, op, where, func(ctx context.Context) (struct{}, error) {
			return struct{}{}, classified(f(ctx))
		})
		return err
	}
	return b.c.NewWriter(ctx, b.name, key, put, client.DefaultPartSize, retry), nil
}

func (b *bucket) List(ctx context.Context, prefix, token string, size int) ([]store.Object, string, error) {
	infos, next, err := b.c.List(ctx, b.name, prefix, token, size)
	if err != nil {
		return nil, "", classified(err)
	}
	objs := make([]store.Object, len(infos))
	for i, info := range infos {
		objs[i] = object(info)
	}
	return objs, next, nil
}

func (b *bucket) Delete(ctx context.Context, key string) error {
	return classified(b.c.Delete(ctx, b.name, key))
}

// Close closes the idle connections of the bucket's HTTP transport.
func (b *bucket) Close() error {
	b.c.CloseIdleConnections()
	return nil
}

// AbortUploads lists the bucket's incomplete multipart uploads under prefix
// and aborts those started before cutoff (see store.Location.AbortUploads).
func (b *bucket) AbortUploads(ctx context.Context, prefix string, cutoff time.Time, p store.RetryPolicy) ([]string, error) {
	type page struct {
		ups                   []client.Upload
		nextKey, nextUploadID string
		truncated             bool
	}
	var aborted []string
	var keyMarker, uploadIDMarker string
	for {
		pg, err := store.Do(ctx, p, "list uploads", "s3://"+b.name+"/"+prefix, func(ctx context.Context) (page, error) {
			ups, nk, nu, more, err := b.c.ListUploads(ctx, b.name, prefix, keyMarker, uploadIDMarker)
			return page{ups, nk, nu, more}, classified(err)
		})
		if err != nil {
			return aborted, err
		}
		for _, u := range pg.ups {
			if !u.Initiated.Before(cutoff) {
				continue
			}
			_, err := store.Do(ctx, p, "abort upload", "s3://"+b.name+"/"+u.Key, func(ctx context.Context) (struct{}, error) {
				err := b.c.AbortMultipartUpload(ctx, b.name, u.Key, u.UploadID)
				var e *client.Error
				if errors.As(err, &e) && e.Code == "NoSuchUpload" { // aborted or completed meanwhile
					err = nil
				}
				return struct{}{}, classified(err)
			})
			if err != nil {
				return aborted, err
			}
			aborted = append(aborted, u.Key)
		}
		if !pg.truncated {
			return aborted, nil
		}
		keyMarker, uploadIDMarker = pg.nextKey, pg.nextUploadID
	}
}

// classified returns err in a form store.Code reads: finding no credentials
// is PermissionDenied, never retried; the client's other errors carry their
// HTTP status or are network errors, which store.Code reads as they are.
func classified(err error) error {
	var ce *client.CredentialsError
	if errors.As(err, &ce) {
		return store.WithCode(errcode.PermissionDenied, err)
	}
	return err
}
