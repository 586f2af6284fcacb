package azure_test

import (
	"context"
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
