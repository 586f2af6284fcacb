package permutation_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/croupier-data/croupier/core/store"
	"github.com/croupier-data/croupier/core/table"
	_ "github.com/croupier-data/croupier/drivers/s3" // s3://
	"github.com/croupier-data/croupier/internal/s3test"
	"github.com/croupier-data/croupier/internal/tabletest"
	"github.com/croupier-data/croupier/permutation"
)

// TestCredentialsNeverRecorded signs every request with credentials from the
// environment, then checks that neither the access key id nor the secret
// appears in anything croupier records (a pin, a table manifest, a
// permutation's manifest and provenance) or says (the errors of every kind a
// user meets, a URI with the secret in its query among them).
func TestCredentialsNeverRecorded(t *testing.T) {
	const keyID, secret = "AKIACROUPIERLEAKTEST", "croupier/leak+test/s3cr3t/0123456789abcdef"
	t.Setenv("AWS_ACCESS_KEY_ID", keyID)
	t.Setenv("AWS_SECRET_ACCESS_KEY", secret)
	t.Setenv("AWS_SESSION_TOKEN", "")
	defer store.SetRetryPolicy(store.SetRetryPolicy(store.RetryPolicy{Attempts: 2, BaseDelay: time.Millisecond,
		MaxDelay: time.Millisecond, AttemptTimeout: 5 * time.Second}))
	ctx := context.Background()
	s, err := s3test.Start("bkt")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Signed requests: the server's URI without anonymous=true.
	signed := func(prefix string) string {
		u, err := url.Parse(s.URI("bkt", prefix))
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		q.Del("anonymous")
		u.RawQuery = q.Encode()
		return u.String()
	}
	// Watch the requests to prove they carried the key id (no fault is
	// injected: Match selects none).
	var signedWithKey atomic.Int64
	s.SetFaults(s3test.Faults{Rate: 1, Match: func(r *http.Request) bool {
		if strings.Contains(r.Header.Get("Authorization"), keyID) {
			signedWithKey.Add(1)
		}
		return false
	}})

	var texts []string // everything recorded or said
	record := func(what string, v any) {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		texts = append(texts, what+": "+string(b))
	}
	fail := func(what string, err error) {
		if err == nil {
			t.Errorf("%s: no error", what)
			return
		}
		texts = append(texts, what+": "+err.Error())
	}

	uri := signed("tbl")
	tb, err := table.Create(ctx, uri, tabletest.Reader(0, 100), table.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	if _, err := tb.Append(ctx, tabletest.Reader(100, 50), table.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	record("pin", tb.Pin())
	perms, err := permutation.Build(ctx, tb, permutation.Spec{Shuffle: &permutation.ShuffleSpec{Seed: 1}},
		signed("perm"), permutation.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer perms.Close()
	record("permutation manifest", perms.Manifest())
	record("build record", perms.Build())
	loc, err := store.Open(ctx, signed(""))
	if err != nil {
		t.Fatal(err)
	}
	defer loc.Close()
	for _, key := range []string{"tbl/_versions/00000000000000000001.json", "tbl/_versions/00000000000000000002.json",
		"perm/permutation.json", "perm/build.json"} {
		b, err := loc.ReadAll(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		texts = append(texts, key+": "+string(b))
	}
	if signedWithKey.Load() == 0 {
		t.Fatal("no request was signed with the key id from the environment")
	}

	// Errors of every kind.
	_, err = table.Open(ctx, signed("nothing-here"))
	fail("open missing", err)
	_, err = table.Create(ctx, uri, tabletest.Reader(0, 1), table.WriteOptions{})
	fail("create existing", err)
	_, err = table.Open(ctx, signed("tbl")+"&aws_secret_access_key="+url.QueryEscape(secret))
	fail("secret in URI", err)
	_, err = table.Open(ctx, strings.Replace(signed("tbl"), "s3://", "s3://"+keyID+":"+url.QueryEscape(secret)+"@", 1))
	fail("user info in URI", err)
	bad, err := array.NewRecordReader(arrow.NewSchema([]arrow.Field{{Name: "x", Type: arrow.PrimitiveTypes.Int8}}, nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = tb.Append(ctx, bad, table.WriteOptions{})
	fail("schema mismatch", err)
	_, err = permutation.Build(ctx, tb, permutation.Spec{}, signed("perm"), permutation.BuildOptions{})
	fail("permutation exists", err)
	_, err = permutation.Open(ctx, signed("no-perm"))
	fail("permutation missing", err)
	// A data file overwritten behind the pin.
	data := tb.Pin().Files[0].Key
	if err := s.Put("bkt", data, []byte("not the pinned file")); err != nil {
		t.Fatal(err)
	}
	r, err := tb.NewReader(table.ReaderOptions{Columns: []string{"id"}})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := r.Read(ctx, []uint64{0})
	if rec != nil {
		rec.Release()
	}
	r.Close()
	fail("pinned file changed", err)
	// The store unavailable past the retry bound.
	s.SetFaults(s3test.Faults{Rate: 1, Kinds: []s3test.Kind{s3test.ServerError}})
	_, err = table.Open(ctx, uri)
	fail("store unavailable", err)

	for _, text := range texts {
		if strings.Contains(text, keyID) || strings.Contains(text, secret) || strings.Contains(text, url.QueryEscape(secret)) {
			t.Errorf("credentials leaked: %s", text)
		}
	}
}
