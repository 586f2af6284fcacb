package store

import (
	"context"
	"errors"
	"net/url"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsretry "github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"gocloud.dev/blob"
	"gocloud.dev/blob/s3blob"
)

// selfRetried are the S3 operations that this package retries itself, under
// a RetryPolicy; the SDK tries them once. Uploads are not among them: the SDK
// retries each part of a streamed upload, which only it can replay.
var selfRetried = map[string]bool{
	"GetObject": true, "HeadObject": true, "ListObjectsV2": true, "ListObjects": true, "DeleteObject": true,
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

// openS3 opens an s3:// bucket with gocloud's s3blob URL opener, which parses
// and checks every query parameter, then rebuilds the bucket on a copy of its
// client whose selfRetried operations the SDK does not retry (see the package
// doc). The bucket options that the opener keeps to itself are taken from the
// query again.
func openS3(ctx context.Context, u *url.URL) (*blob.Bucket, error) {
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
	opts.APIOptions = append(opts.APIOptions, withoutSDKRetries)
	q := u.Query()
	bopts := &s3blob.Options{KMSEncryptionID: q.Get("kmskeyid"), RequestChecksumCalculation: opts.RequestChecksumCalculation}
	if v := q.Get("ssetype"); v != "" {
		for _, t := range types.ServerSideEncryption("").Values() {
			if strings.EqualFold(string(t), v) {
				bopts.EncryptionType = t
			}
		}
	}
	return s3blob.OpenBucket(ctx, s3.New(opts), u.Host, bopts)
}
