// Package azure is croupier's driver of azblob:// URIs, Azure Blob Storage:
// a blank import links it in.
//
//	import _ "github.com/croupier-data/croupier/drivers/azure"
//
// Containers are opened by gocloud.dev's azureblob URL opener, with the
// account and credentials of the environment (see docs/storage.md). Reads of
// a pinned object carry If-Match with the pinned ETag.
package azure

import (
	"context"
	"net/url"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	azblob "github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"gocloud.dev/blob"
	"gocloud.dev/blob/azureblob"

	"github.com/croupier-data/croupier/core/store"
)

func init() { store.Register(azureblob.Scheme, driver{}) }

// driver is the store.Driver of azblob:// URIs.
type driver struct{}

// OpenBucket opens the container with gocloud's URL opener; the SDK keeps
// its own retries inside each of core/store's attempts.
func (driver) OpenBucket(ctx context.Context, u *url.URL, _ store.RetryPolicy) (*blob.Bucket, func(), error) {
	b, err := blob.OpenBucket(ctx, u.String())
	return b, nil, err
}

// Identify adds nothing: the ETag is among gocloud's attributes.
func (driver) Identify(*store.Object, func(any) bool) {}

// Condition makes a read carry If-Match with the pinned ETag.
func (driver) Condition(o store.Object, as func(any) bool) {
	var opts *azblob.DownloadStreamOptions
	if as(&opts) && o.ETag != "" {
		etag := azcore.ETag(o.ETag)
		opts.AccessConditions = &azblob.AccessConditions{
			ModifiedAccessConditions: &azblob.ModifiedAccessConditions{IfMatch: &etag}}
	}
}

// Observe records the ETag of the version a read got.
func (driver) Observe(found *store.Object, as func(any) bool) {
	var resp azblob.DownloadStreamResponse
	if as(&resp) && resp.ETag != nil {
		found.ETag = string(*resp.ETag)
	}
}
