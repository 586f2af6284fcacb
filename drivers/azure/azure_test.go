package azure_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/store"
	_ "github.com/croupier-data/croupier/drivers/azure"
)

// noCredentials empties the environment of Azure credentials. The
// credential chain is limited to the developer tools, which are not on
// PATH, so that nothing asks the network for a managed identity.
func noCredentials(t *testing.T) {
	for _, v := range []string{"AZURE_STORAGE_ACCOUNT", "AZURE_STORAGE_KEY", "AZURE_STORAGE_SAS_TOKEN",
		"AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGEBLOB_CONNECTIONSTRING", "AZURE_STORAGE_DOMAIN",
		"AZURE_TENANT_ID", "AZURE_CLIENT_ID", "AZURE_CLIENT_SECRET", "AZURE_FEDERATED_TOKEN_FILE"} {
		t.Setenv(v, "")
	}
	t.Setenv("HOME", t.TempDir())
	t.Setenv("PATH", t.TempDir())
	t.Setenv("AZURE_TOKEN_CREDENTIALS", "dev")
}

// wantHint checks that err is PermissionDenied and says how to provide
// credentials, naming uri.
func wantHint(t *testing.T, err error, uri string) {
	t.Helper()
	if errcode.Of(err) != errcode.PermissionDenied {
		t.Errorf("code %s, want PermissionDenied: %v", errcode.Of(err), err)
	}
	for _, want := range []string{uri, "AZURE_STORAGE_ACCOUNT", "AZURE_STORAGE_KEY", "AZURE_STORAGE_SAS_TOKEN",
		"AZURE_STORAGE_CONNECTION_STRING", "DefaultAzureCredential", "az login"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %q: %v", want, err)
		}
	}
}

// TestMissingAccount: an azblob:// URI with no account, in the URI or the
// environment, is refused at open with PermissionDenied naming the variables.
func TestMissingAccount(t *testing.T) {
	noCredentials(t)
	loc, err := store.Open(context.Background(), "azblob://container/t")
	if err == nil {
		loc.Close()
		t.Fatal("azblob:// opened without an account")
	}
	wantHint(t, err, "azblob://container/t")
}

// TestMissingCredentials: with an account but no key, SAS token, connection
// string, nor any credential of DefaultAzureCredential's chain, the first
// request fails with PermissionDenied saying how to provide credentials,
// not as the store being unavailable after retries. The context's deadline
// only guards against a hang.
func TestMissingCredentials(t *testing.T) {
	noCredentials(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The service is a closed local port: nothing leaves the host.
	loc, err := store.Open(ctx, "azblob://container/t?storage_account=acct&domain=127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	defer loc.Close()
	_, err = loc.Stat(ctx, "t/obj")
	wantHint(t, err, "azblob://container/t/obj")
}

// TestManagedIdentityOffAzure: off Azure, with the managed identity endpoint
// that azidentity reads from the environment at a closed loopback port
// (the instance metadata service, App Service's, Cloud Shell's), the first
// request fails with PermissionDenied naming the credentials looked for,
// not Unavailable: core/store's attempts are given less time than the SDK's
// retries of a refused connection took, so retrying it would end each
// attempt canceled. The context's deadline only guards against a hang.
func TestManagedIdentityOffAzure(t *testing.T) {
	defer store.SetRetryPolicy(store.SetRetryPolicy(store.RetryPolicy{Attempts: 2, BaseDelay: time.Millisecond,
		MaxDelay: time.Millisecond, AttemptTimeout: 3 * time.Second}))
	for _, c := range []struct{ name, env, url, header string }{
		{"instance metadata service", "AZURE_POD_IDENTITY_AUTHORITY_HOST", "http://%s", ""},
		{"App Service", "IDENTITY_ENDPOINT", "http://%s/token", "IDENTITY_HEADER"},
		{"Cloud Shell", "MSI_ENDPOINT", "http://%s/token", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			noCredentials(t)
			// Unset, not empty: azidentity takes an empty AZURE_CLIENT_ID
			// as a user-assigned identity with no id, and fails at once.
			for _, v := range []string{"AZURE_TOKEN_CREDENTIALS", "AZURE_TENANT_ID", "AZURE_CLIENT_ID", "AZURE_CLIENT_SECRET",
				"AZURE_FEDERATED_TOKEN_FILE", "AZURE_POD_IDENTITY_AUTHORITY_HOST", "IDENTITY_ENDPOINT", "IDENTITY_HEADER",
				"IDENTITY_SERVER_THUMBPRINT", "IMDS_ENDPOINT", "MSI_ENDPOINT"} {
				t.Setenv(v, "")
				os.Unsetenv(v)
			}
			addr := closedPort(t)
			os.Setenv(c.env, fmt.Sprintf(c.url, addr))
			if c.header != "" {
				os.Setenv(c.header, "secret")
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			loc, err := store.Open(ctx, "azblob://container/t?storage_account=acct&domain="+closedPort(t))
			if err != nil {
				t.Fatal(err)
			}
			defer loc.Close()
			_, err = loc.Stat(ctx, "t/obj")
			wantHint(t, err, "azblob://container/t/obj")
			if !strings.Contains(err.Error(), "ManagedIdentityCredential") {
				t.Errorf("error does not name the managed identity: %v", err)
			}
		})
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
