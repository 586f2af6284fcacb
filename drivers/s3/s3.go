// Package s3 is croupier's driver of s3:// URIs, Amazon S3 and the stores
// that speak its protocol (MinIO, R2, Ceph, …): a blank import links it in.
//
//	import _ "github.com/croupier-data/croupier/drivers/s3"
//
// Buckets are opened by gocloud.dev's s3blob URL opener, which parses and
// checks every query parameter (region, endpoint, use_path_style,
// anonymous, profile, …; see docs/storage.md). The driver then rebuilds the
// bucket on a copy of its client: the requests core/store retries itself
// are tried once by the SDK, so that one RetryPolicy with one per-attempt
// deadline governs them, and uploads, which only the SDK can replay part by
// part, are retried by the SDK under that same policy and classification.
// Reads of a pinned object carry If-Match with the pinned ETag.
package s3

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	awsretry "github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"gocloud.dev/blob"
	"gocloud.dev/blob/s3blob"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/store"
	"github.com/croupier-data/croupier/drivers/internal/gocloud"
)

func init() { store.Register(s3blob.Scheme, driver{}) }

// driver is the store.Driver of s3:// URIs.
type driver struct{}

// selfRetried are the S3 operations that core/store retries itself, under
// a RetryPolicy; the SDK tries them once. Uploads are not among them: the SDK
// retries each part of a streamed upload, which only it can replay, under
// uploadRetryer.
var selfRetried = map[string]bool{
	"GetObject": true, "HeadObject": true, "ListObjectsV2": true, "ListObjects": true, "DeleteObject": true,
	"ListMultipartUploads": true,
}

// withoutSDKRetries replaces the SDK's retry middleware of a selfRetried
// operation by one that tries once.
func withoutSDKRetries(stack *middleware.Stack) error {
	if !selfRetried[stack.ID()] {
		return nil
	}
	_, err := stack.Finalize.Swap((&awsretry.Attempt{}).ID(), awsretry.NewAttemptMiddleware(aws.NopRetryer{}, smithyhttp.RequestCloner))
	return err
}

// uploadRetryer is the SDK's retryer of the operations it retries for
// croupier (uploads): the attempts and waits of p, and core/store's verdicts, so
// that an upload retries what every other request does, throttling (429, 503
// SlowDown) included, and nothing else. The SDK's client-side retry quota is
// off: it would fail uploads during a long burst of throttling that the
// policy is there to ride out.
func uploadRetryer(p store.RetryPolicy) aws.Retryer {
	return awsretry.NewStandard(func(o *awsretry.StandardOptions) {
		o.MaxAttempts = p.Attempts
		o.Backoff = awsretry.BackoffDelayerFunc(func(attempt int, _ error) (time.Duration, error) {
			return p.Delay(attempt), nil
		})
		o.RateLimiter = ratelimit.None
		o.Retryables = []awsretry.IsErrorRetryable{awsretry.IsErrorRetryableFunc(func(err error) aws.Ternary {
			if store.Transient(err) {
				return aws.TrueTernary
			}
			return aws.FalseTernary
		})}
	})
}

// OpenBucket opens an s3:// bucket with gocloud's s3blob URL opener, which
// parses and checks every query parameter, then rebuilds the bucket on a copy
// of its client whose selfRetried operations the SDK does not retry (see the
// package doc) and whose uploads it retries under p. The bucket options that
// the opener keeps to itself are taken from the query again. The client has
// an HTTP transport of its own, with the SDK's settings; the function
// returned closes its idle connections.
func (driver) OpenBucket(ctx context.Context, u *url.URL, p store.RetryPolicy) (store.Bucket, error) {
	b, err := blob.OpenBucket(ctx, u.String())
	if err != nil {
		return nil, err
	}
	defer b.Close()
	var client *s3.Client
	if !b.As(&client) {
		return nil, errors.New("s3blob bucket without an *s3.Client")
	}
	opts := client.Options()
	transport := awshttp.NewBuildableClient().GetTransport()
	opts.HTTPClient = &http.Client{Transport: transport}
	opts.APIOptions = append(opts.APIOptions, withoutSDKRetries)
	opts.Retryer = uploadRetryer(p)
	if _, anonymous := opts.Credentials.(aws.AnonymousCredentials); opts.Credentials != nil && !anonymous {
		opts.Credentials = credentialChain{opts.Credentials}
	}
	q := u.Query()
	bopts := &s3blob.Options{KMSEncryptionID: q.Get("kmskeyid"), RequestChecksumCalculation: opts.RequestChecksumCalculation}
	if v := q.Get("ssetype"); v != "" {
		for _, t := range types.ServerSideEncryption("").Values() {
			if strings.EqualFold(string(t), v) {
				bopts.EncryptionType = t
			}
		}
	}
	c := s3.New(opts)
	sb, err := s3blob.OpenBucket(ctx, c, u.Host, bopts)
	if err != nil {
		return nil, err
	}
	return &bucket{gocloud.NewBucket(sb, gocloud.Hooks{Condition: condition, Observe: observe, CloseIdle: transport.CloseIdleConnections}), c, u.Host}, nil
}

// bucket is an S3 bucket: gocloud's, and its client for the requests
// gocloud does not make.
type bucket struct {
	store.Bucket
	client *s3.Client
	name   string
}

// credentialChain is the SDK's chain of credential providers, whose failure
// it makes a PermissionDenied error that says where credentials were looked
// for: the SDK reports it as an untyped error.
type credentialChain struct{ aws.CredentialsProvider }

func (c credentialChain) Retrieve(ctx context.Context) (aws.Credentials, error) {
	v, err := c.CredentialsProvider.Retrieve(ctx)
	if err != nil && ctx.Err() == nil {
		return v, errcode.Wrap(fmt.Errorf("no usable AWS credentials: looked for AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "+
			"AWS_PROFILE and the profiles of ~/.aws/config and ~/.aws/credentials, web identity (AWS_WEB_IDENTITY_TOKEN_FILE), "+
			"container credentials (AWS_CONTAINER_CREDENTIALS_*) and the EC2 instance role; "+
			"for a public bucket add anonymous=true to the URI: %w", err), errcode.PermissionDenied, "find credentials", "")
	}
	return v, err
}

// Condition makes a read carry If-Match with the pinned ETag.
func condition(o store.Object, as func(any) bool) {
	var in *s3.GetObjectInput
	if as(&in) && o.ETag != "" {
		in.IfMatch = aws.String(o.ETag)
	}
}

// Observe records the ETag of the version a read got.
func observe(found *store.Object, as func(any) bool) {
	var out s3.GetObjectOutput
	if as(&out) {
		found.ETag = aws.ToString(out.ETag)
	}
}

// AbortUploads lists the bucket's incomplete multipart uploads under prefix
// and aborts those started before cutoff (see store.Location.AbortUploads).
func (b *bucket) AbortUploads(ctx context.Context, prefix string, cutoff time.Time, p store.RetryPolicy) ([]string, error) {
	var aborted []string
	in := &s3.ListMultipartUploadsInput{Bucket: aws.String(b.name), Prefix: aws.String(prefix)}
	for {
		page, err := store.Do(ctx, p, "list uploads", "s3://"+b.name+"/"+prefix, func(ctx context.Context) (*s3.ListMultipartUploadsOutput, error) {
			return b.client.ListMultipartUploads(ctx, in)
		})
		if err != nil {
			return aborted, err
		}
		for _, u := range page.Uploads {
			if u.Initiated == nil || !u.Initiated.Before(cutoff) {
				continue
			}
			key := aws.ToString(u.Key)
			_, err := b.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: aws.String(b.name), Key: u.Key, UploadId: u.UploadId})
			var gone *types.NoSuchUpload
			if err != nil && !errors.As(err, &gone) {
				return aborted, &errcode.Error{Code: store.Code(err), Op: "abort upload", Path: "s3://" + b.name + "/" + key, Err: err}
			}
			aborted = append(aborted, key)
		}
		if !aws.ToBool(page.IsTruncated) {
			return aborted, nil
		}
		in.KeyMarker, in.UploadIdMarker = page.NextKeyMarker, page.NextUploadIdMarker
	}
}
