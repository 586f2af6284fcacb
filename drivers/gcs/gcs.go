// Package gcs is croupier's driver of gs:// URIs, Google Cloud Storage: a
// blank import links it in.
//
//	import _ "github.com/croupier-data/croupier/drivers/gcs"
//
// Buckets are opened by gocloud.dev's gcsblob URL opener, which parses and
// checks the query parameters, with an HTTP client authenticated by
// Application Default Credentials that the driver finds itself (see
// credentials), or an anonymous one for anonymous=true (see
// docs/storage.md). An object's version is its generation; reads of a pinned
// object carry a generation-match precondition.
package gcs

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"time"

	"cloud.google.com/go/compute/metadata"
	"cloud.google.com/go/storage"
	"gocloud.dev/blob/gcsblob"
	"gocloud.dev/gcp"
	"golang.org/x/oauth2/google"
	"google.golang.org/api/option"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/store"
	"github.com/croupier-data/croupier/drivers/internal/gocloud"
)

func init() { store.Register(gcsblob.Scheme, driver{}) }

// driver is the store.Driver of gs:// URIs.
type driver struct{}

// OpenBucket opens the bucket with gcsblob's URL opener, on a client
// authenticated by the credentials found for u (none for anonymous=true or
// an emulator at STORAGE_EMULATOR_HOST); the SDK keeps its own retries
// inside each of core/store's attempts.
func (driver) OpenBucket(ctx context.Context, u *url.URL, _ store.RetryPolicy) (store.Bucket, error) {
	q := u.Query()
	opener := &gcsblob.URLOpener{}
	anonymous, err := isAnonymous(q)
	if err != nil {
		return nil, err
	}
	switch {
	case anonymous: // gcsblob makes the client
	case os.Getenv("STORAGE_EMULATOR_HOST") != "": // a local emulator takes no credentials
		opener.Client = gcp.NewAnonymousHTTPClient(gcp.DefaultTransport())
	default:
		creds, err := credentials(ctx, q.Get("universe_domain"))
		if err != nil {
			return nil, err
		}
		ts := gcp.CredentialsTokenSource(creds)
		if opener.Client, err = gcp.NewHTTPClient(gcp.DefaultTransport(), ts); err != nil {
			return nil, err
		}
		opener.TokenSource = ts
		if ud, err := creds.GetUniverseDomain(); err == nil && ud != "" {
			opener.Options.ClientOptions = []option.ClientOption{option.WithUniverseDomain(ud)}
		}
	}
	b, err := opener.OpenBucketURL(ctx, u)
	if err != nil {
		return nil, err
	}
	return gocloud.NewBucket(b, gocloud.Hooks{Identify: identify, Condition: condition, Observe: observe}), nil
}

// isAnonymous reports whether the query asks for an unauthenticated client,
// as gcsblob reads it: anonymous=true, or access_id=-.
func isAnonymous(q url.Values) (bool, error) {
	if q.Get("access_id") == "-" {
		return true, nil
	}
	v := q.Get("anonymous")
	if v == "" {
		return false, nil
	}
	anonymous, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("query parameter anonymous=%q: want true or false", v)
	}
	return anonymous, nil
}

// metadataWait bounds asking the metadata server that GCE_METADATA_HOST
// names whether it answers: the metadata library's own retries of a refused
// connection back off for up to about 3 s, and a token request would retry for
// as long as the storage client does.
const metadataWait = 3 * time.Second

// credentials finds Application Default Credentials: the key file that
// GOOGLE_APPLICATION_CREDENTIALS names, else the file `gcloud auth
// application-default login` writes, else the metadata server of a Google
// Cloud machine. Asking whether there is a metadata server probes the
// network; with NO_GCE_CHECK=true (as Google's Python libraries read it) and
// neither file, it is not asked. With GCE_METADATA_HOST set, the Google
// library takes the metadata server there on trust, and every request would
// then retry its token request until the storage client gives up; so that
// server is asked first, for at most metadataWait. The search ends with ctx.
// When none are found, or the metadata server does not answer, the error is
// PermissionDenied and says how to provide them.
func credentials(ctx context.Context, universeDomain string) (*google.Credentials, error) {
	adcFile := wellKnownFile()
	_, statErr := os.Stat(adcFile)
	noGCECheck, _ := strconv.ParseBool(os.Getenv("NO_GCE_CHECK"))
	if os.Getenv("GOOGLE_APPLICATION_CREDENTIALS") == "" && statErr != nil {
		if noGCECheck {
			return nil, noCredentials(adcFile, "not asked: NO_GCE_CHECK is set", nil)
		}
		if host := os.Getenv("GCE_METADATA_HOST"); host != "" {
			if err := askMetadataServer(ctx); err != nil {
				if ctx.Err() != nil {
					return nil, errcode.Wrap(ctx.Err(), errcode.Canceled, "find credentials", "")
				}
				return nil, noCredentials(adcFile,
					fmt.Sprintf("the one GCE_METADATA_HOST names, %s, did not answer; asked for up to %s", host, metadataWait), err)
			}
		}
	}
	type found struct {
		creds *google.Credentials
		err   error
	}
	done := make(chan found, 1)
	go func() {
		creds, err := gcp.DefaultCredentialsWithParams(ctx, google.CredentialsParams{UniverseDomain: universeDomain})
		done <- found{creds, err}
	}()
	select {
	case f := <-done:
		if f.err != nil {
			return nil, noCredentials(adcFile, "none found", f.err)
		}
		return f.creds, nil
	case <-ctx.Done():
		return nil, errcode.Wrap(ctx.Err(), errcode.Canceled, "find credentials", "")
	}
}

// askMetadataServer asks the metadata server for the project id, as the
// Google library does when it takes its credentials from there, within
// metadataWait; an answer that the id is not defined is an answer.
func askMetadataServer(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, metadataWait)
	defer cancel()
	_, err := metadata.ProjectIDWithContext(ctx)
	var undefined metadata.NotDefinedError
	if errors.As(err, &undefined) {
		return nil
	}
	return err
}

// noCredentials is the PermissionDenied error of credentials: where they
// were looked for, how to provide them, and the Google library's reason
// (cause) when there is one.
func noCredentials(adcFile, metadataServer string, cause error) error {
	err := fmt.Errorf("no Google credentials: set GOOGLE_APPLICATION_CREDENTIALS to the path of a service account key file, "+
		"or run `gcloud auth application-default login` (it writes %s), "+
		"or run on Google Cloud, where the metadata server provides them (%s); "+
		"for a public bucket add anonymous=true to the URI (gs://bucket/prefix?anonymous=true)", adcFile, metadataServer)
	if cause != nil {
		err = fmt.Errorf("%w: %w", err, cause)
	}
	return errcode.Wrap(err, errcode.PermissionDenied, "find credentials", "")
}

// wellKnownFile is where gcloud writes Application Default Credentials, as
// the Google library looks for it.
func wellKnownFile() string {
	const name = "application_default_credentials.json"
	if dir := os.Getenv("CLOUDSDK_CONFIG"); dir != "" {
		return filepath.Join(dir, name)
	}
	if runtime.GOOS == "windows" {
		return filepath.Join(os.Getenv("APPDATA"), "gcloud", name)
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".config", "gcloud", name)
}

// Identify records the object's generation, which attributes and listed
// objects both expose as storage.ObjectAttrs.
func identify(o *store.Object, as func(any) bool) {
	var attrs storage.ObjectAttrs
	if as(&attrs) {
		o.Generation = attrs.Generation
	}
}

// Condition makes a read match the pinned generation.
func condition(o store.Object, as func(any) bool) {
	var h **storage.ObjectHandle
	if as(&h) && o.Generation != 0 {
		*h = (*h).If(storage.Conditions{GenerationMatch: o.Generation})
	}
}

// Observe records the generation of the version a read got, which names it
// exactly, in place of its modification time: a read reports the
// Last-Modified header, to the second, where a listing or an attribute
// request reports the update time to the microsecond, so the two differ for
// one version.
func observe(found *store.Object, as func(any) bool) {
	var r *storage.Reader
	if as(&r) && r.Attrs.Generation != 0 {
		found.Generation = r.Attrs.Generation
		found.ModTime = time.Time{}
	}
}
