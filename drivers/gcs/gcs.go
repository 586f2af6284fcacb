// Package gcs is croupier's driver of gs:// URIs, Google Cloud Storage: a
// blank import links it in.
//
//	import _ "github.com/croupier-data/croupier/drivers/gcs"
//
// Buckets are opened by gocloud.dev's gcsblob URL opener with Application
// Default Credentials (see docs/storage.md). An object's version is its
// generation; reads of a pinned object carry a generation-match
// precondition.
package gcs

import (
	"context"
	"net/url"

	"cloud.google.com/go/storage"
	"gocloud.dev/blob"
	"gocloud.dev/blob/gcsblob"

	"github.com/croupier-data/croupier/core/store"
)

func init() { store.Register(gcsblob.Scheme, driver{}) }

// driver is the store.Driver of gs:// URIs.
type driver struct{}

// OpenBucket opens the bucket with gocloud's URL opener; the SDK keeps its
// own retries inside each of core/store's attempts.
func (driver) OpenBucket(ctx context.Context, u *url.URL, _ store.RetryPolicy) (*blob.Bucket, func(), error) {
	b, err := blob.OpenBucket(ctx, u.String())
	return b, nil, err
}

// Identify records the object's generation.
func (driver) Identify(o *store.Object, as func(any) bool) {
	var attrs storage.ObjectAttrs
	if as(&attrs) {
		o.Generation = attrs.Generation
	}
}

// Condition makes a read match the pinned generation.
func (driver) Condition(o store.Object, as func(any) bool) {
	var h **storage.ObjectHandle
	if as(&h) && o.Generation != 0 {
		*h = (*h).If(storage.Conditions{GenerationMatch: o.Generation})
	}
}

// Observe records the generation of the version a read got.
func (driver) Observe(found *store.Object, as func(any) bool) {
	var r *storage.Reader
	if as(&r) {
		found.Generation = r.Attrs.Generation
	}
}
