package gcs_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/store"
	_ "github.com/croupier-data/croupier/drivers/gcs"
)

// TestMissingCredentials: on a machine with no Google credentials, opening a
// gs:// URI fails at once with PermissionDenied naming the URI and every way
// to provide credentials, the anonymous option included; with NO_GCE_CHECK
// set, nothing asks the network for a metadata server. The context's
// deadline only guards against a hang.
func TestMissingCredentials(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	t.Setenv("CLOUDSDK_CONFIG", "")
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", "")
	t.Setenv("STORAGE_EMULATOR_HOST", "")
	t.Setenv("GCE_METADATA_HOST", "")
	t.Setenv("NO_GCE_CHECK", "True")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	loc, err := store.Open(ctx, "gs://bucket/t")
	if err == nil {
		loc.Close()
		t.Fatal("gs:// opened without credentials")
	}
	if errcode.Of(err) != errcode.PermissionDenied {
		t.Errorf("code %s, want PermissionDenied: %v", errcode.Of(err), err)
	}
	for _, want := range []string{"gs://bucket/t", "GOOGLE_APPLICATION_CREDENTIALS", "gcloud auth application-default login",
		"application_default_credentials.json", "metadata server", "anonymous=true"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %q: %v", want, err)
		}
	}
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestUnreachableMetadataServer: with GCE_METADATA_HOST naming a metadata
// server that does not answer (a closed loopback port) and no credentials
// file, opening a gs:// URI fails with PermissionDenied naming the address
// and the other ways to provide credentials, instead of every request
// retrying its token request as Unavailable. The context's deadline only
// guards against a hang: the retries it replaces ran until it passed.
func TestUnreachableMetadataServer(t *testing.T) {
	addr := closedPort(t)
	t.Setenv("HOME", t.TempDir())
	t.Setenv("CLOUDSDK_CONFIG", "")
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", "")
	t.Setenv("STORAGE_EMULATOR_HOST", "")
	t.Setenv("NO_GCE_CHECK", "")
	t.Setenv("GCE_METADATA_HOST", addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	loc, err := store.Open(ctx, "gs://bucket/t")
	if err == nil {
		_, err = loc.Stat(ctx, "t/obj")
		loc.Close()
	}
	if errcode.Of(err) != errcode.PermissionDenied {
		t.Fatalf("code %s, want PermissionDenied: %v", errcode.Of(err), err)
	}
	for _, want := range []string{"gs://bucket/t", "GCE_METADATA_HOST", addr, "GOOGLE_APPLICATION_CREDENTIALS",
		"gcloud auth application-default login", "anonymous=true"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %q: %v", want, err)
		}
	}
}

// TestAnonymousNeedsNoCredentials: anonymous=true, for a public bucket,
// opens without looking for credentials.
func TestAnonymousNeedsNoCredentials(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", "")
	t.Setenv("NO_GCE_CHECK", "True")
	loc, err := store.Open(context.Background(), "gs://bucket/t?anonymous=true")
	if err != nil {
		t.Fatal(err)
	}
	loc.Close()
	_, err = store.Open(context.Background(), "gs://bucket/t?anonymous=maybe")
	if errcode.Of(err) != errcode.InvalidArgument || !strings.Contains(err.Error(), "anonymous") {
		t.Errorf("anonymous=maybe: %v, want InvalidArgument naming the parameter", err)
	}
}

// TestBadCredentialsFile: GOOGLE_APPLICATION_CREDENTIALS naming a file that
// does not exist is PermissionDenied with the Google library's reason.
func TestBadCredentialsFile(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	t.Setenv("NO_GCE_CHECK", "True")
	missing := t.TempDir() + "/key.json"
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", missing)
	_, err := store.Open(context.Background(), "gs://bucket/t")
	if errcode.Of(err) != errcode.PermissionDenied || !strings.Contains(err.Error(), missing) {
		t.Errorf("%v, want PermissionDenied naming %s", err, missing)
	}
}
