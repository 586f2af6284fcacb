// Package azure is croupier's driver of azblob:// URIs, Azure Blob Storage:
// a blank import links it in.
//
//	import _ "github.com/croupier-data/croupier/drivers/azure"
//
// Containers are opened by gocloud.dev's azureblob URL opener, with the
// account and credentials of the environment (see docs/storage.md). An
// account is required; without a key, SAS token or connection string the
// driver uses DefaultAzureCredential itself, so that its failure to get a
// token is PermissionDenied saying how to provide credentials. Reads of a
// pinned object carry If-Match with the pinned ETag.
package azure

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	azpolicy "github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	azblob "github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"gocloud.dev/blob"
	"gocloud.dev/blob/azureblob"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/store"
	"github.com/croupier-data/croupier/drivers/internal/gocloud"
)

func init() { store.Register(azureblob.Scheme, driver{}) }

// driver is the store.Driver of azblob:// URIs.
type driver struct{}

// howToAuthenticate says how to provide Azure credentials, in errors.
const howToAuthenticate = "set AZURE_STORAGE_ACCOUNT (or storage_account=name in the URI) and AZURE_STORAGE_KEY, " +
	"AZURE_STORAGE_SAS_TOKEN or AZURE_STORAGE_CONNECTION_STRING; with the account alone, DefaultAzureCredential " +
	"signs requests: AZURE_TENANT_ID, AZURE_CLIENT_ID and AZURE_CLIENT_SECRET (or a workload identity), " +
	"a managed identity, or `az login`"

// OpenBucket opens the container with gocloud's URL opener; the SDK keeps
// its own retries inside each of core/store's attempts. A URI without an
// account is refused with PermissionDenied at once; with an account but no
// key, SAS token or connection string, the container's client signs requests
// with DefaultAzureCredential, whose failures are PermissionDenied (see
// tokenCredential).
func (driver) OpenBucket(ctx context.Context, u *url.URL, _ store.RetryPolicy) (store.Bucket, error) {
	if u.Query().Get("storage_account") == "" && os.Getenv("AZURE_STORAGE_ACCOUNT") == "" {
		return nil, errcode.New(errcode.PermissionDenied, "find credentials", "", "no Azure storage account: %s", howToAuthenticate)
	}
	if os.Getenv("AZURE_STORAGE_KEY") != "" || os.Getenv("AZURE_STORAGE_SAS_TOKEN") != "" ||
		os.Getenv("AZURE_STORAGE_CONNECTION_STRING") != "" || os.Getenv("AZURE_STORAGEBLOB_CONNECTIONSTRING") != "" {
		return bucket(blob.OpenBucket(ctx, u.String()))
	}
	opener := &azureblob.URLOpener{MakeClient: defaultCredentialClient, ServiceURLOptions: *azureblob.NewDefaultServiceURLOptions()}
	return bucket(opener.OpenBucketURL(ctx, u))
}

// bucket serves b, with If-Match on pinned reads and whole uploads (see
// gocloud.Hooks.Upload).
func bucket(b *blob.Bucket, err error) (store.Bucket, error) {
	if err != nil {
		return nil, err
	}
	return gocloud.NewBucket(b, gocloud.Hooks{Identify: identify, Condition: condition, Observe: observe, Upload: true}), nil
}

// defaultCredentialClient is the client of a container whose requests
// DefaultAzureCredential signs, its token requests sent by refusalsFinal.
func defaultCredentialClient(svcURL azureblob.ServiceURL, name azureblob.ContainerName) (*container.Client, error) {
	cred, err := azidentity.NewDefaultAzureCredential(&azidentity.DefaultAzureCredentialOptions{
		ClientOptions: azcore.ClientOptions{Transport: refusalsFinal{&http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}}}})
	if err != nil {
		return nil, errcode.Wrap(fmt.Errorf("no Azure credentials: %s: %w", howToAuthenticate, err),
			errcode.PermissionDenied, "find credentials", "")
	}
	containerURL, err := url.JoinPath(string(svcURL), string(name))
	if err != nil {
		return nil, err
	}
	return container.NewClient(containerURL, tokenCredential{cred}, nil)
}

// refusalsFinal sends DefaultAzureCredential's token requests, and makes a
// refused connection or a host name that does not resolve final: the SDK
// retries neither. Off Azure, a managed identity endpoint named by the
// environment (IDENTITY_ENDPOINT, MSI_ENDPOINT) where nothing listens would
// otherwise be retried for about 8 s per token request, longer than a short
// core/store attempt, which would then retry the whole request as
// Unavailable; now the chain fails at once and tokenCredential reports
// PermissionDenied. (Its probe of the instance metadata service already
// gives up after one try of at most 1 s.) Every other failure keeps the SDK's
// retries, those of the metadata service among them.
type refusalsFinal struct{ client *http.Client }

func (t refusalsFinal) Do(r *http.Request) (*http.Response, error) {
	resp, err := t.client.Do(r)
	var dns *net.DNSError
	if errors.Is(err, syscall.ECONNREFUSED) || errors.As(err, &dns) && dns.IsNotFound {
		return nil, finalError{err}
	}
	return resp, err
}

// finalError is an error that azcore's retry policy does not retry.
type finalError struct{ error }

func (finalError) NonRetriable()   {}
func (e finalError) Unwrap() error { return e.error }

// tokenCredential is DefaultAzureCredential, whose failure to get a token it
// makes a PermissionDenied error that says how to provide credentials: the
// SDK reports it as an error of its own, which would read as the store
// being unavailable.
type tokenCredential struct{ azcore.TokenCredential }

func (c tokenCredential) GetToken(ctx context.Context, opts azpolicy.TokenRequestOptions) (azcore.AccessToken, error) {
	tk, err := c.TokenCredential.GetToken(ctx, opts)
	if err != nil && ctx.Err() == nil {
		return tk, errcode.Wrap(fmt.Errorf("no usable Azure credentials: %s: %w", howToAuthenticate, err),
			errcode.PermissionDenied, "find credentials", "")
	}
	return tk, err
}

// Identify records the ETag of a listed object, which gocloud's portable
// listing leaves out (a stat has it already), in the form a stat reports it:
// quoted, as the ETag header is, where a listing's XML may not quote it.
func identify(o *store.Object, as func(any) bool) {
	var item container.BlobItem
	if as(&item) && item.Properties != nil && item.Properties.ETag != nil {
		o.ETag = string(*item.Properties.ETag)
		if !strings.HasPrefix(o.ETag, `"`) {
			o.ETag = `"` + o.ETag + `"`
		}
	}
}

// Condition makes a read carry If-Match with the pinned ETag.
func condition(o store.Object, as func(any) bool) {
	var opts *azblob.DownloadStreamOptions
	if as(&opts) && o.ETag != "" {
		etag := azcore.ETag(o.ETag)
		opts.AccessConditions = &azblob.AccessConditions{
			ModifiedAccessConditions: &azblob.ModifiedAccessConditions{IfMatch: &etag}}
	}
}

// Observe records the ETag of the version a read got.
func observe(found *store.Object, as func(any) bool) {
	var resp azblob.DownloadStreamResponse
	if as(&resp) && resp.ETag != nil {
		found.ETag = string(*resp.ETag)
	}
}
