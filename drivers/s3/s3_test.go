package s3

import (
	"net/url"
	"strings"
	"testing"

	"github.com/croupier-data/croupier/drivers/s3/internal/client"
)

// TestParseQuery: the parameters of an s3:// URI set the client's
// configuration and the encryption of writes; an unknown parameter, a
// flag that is not a boolean and an unknown encryption are refused, naming
// the parameter.
func TestParseQuery(t *testing.T) {
	for _, tc := range []struct {
		query string
		cfg   client.Config
		put   client.PutOptions
		err   string
	}{
		{query: "", cfg: client.Config{}},
		{query: "region=eu-west-1&endpoint=http://127.0.0.1:9000&use_path_style=true&disable_https=1&profile=p&anonymous=false",
			cfg: client.Config{Region: "eu-west-1", Endpoint: "http://127.0.0.1:9000", PathStyle: true, DisableHTTPS: true, Profile: "p"}},
		{query: "anonymous=true", cfg: client.Config{Anonymous: true}},
		{query: "kmskeyid=alias/x", put: client.PutOptions{SSE: "aws:kms", KMSKeyID: "alias/x"}},
		{query: "ssetype=AES256", put: client.PutOptions{SSE: "AES256"}},
		{query: "ssetype=aws:KMS&kmskeyid=k", put: client.PutOptions{SSE: "aws:kms", KMSKeyID: "k"}},
		{query: "ssetype=rot13", err: "ssetype"},
		{query: "use_path_style=yes", err: "use_path_style"},
		{query: "s3ForcePathStyle=true", err: `unknown query parameter "s3ForcePathStyle"`},
	} {
		q, err := url.ParseQuery(tc.query)
		if err != nil {
			t.Fatal(err)
		}
		cfg, put, err := parseQuery(q)
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want one naming %s", tc.query, err, tc.err)
			}
		case err != nil:
			t.Errorf("%q: %v", tc.query, err)
		case cfg != tc.cfg || put != tc.put:
			t.Errorf("%q: %+v %+v, want %+v %+v", tc.query, cfg, put, tc.cfg, tc.put)
		}
	}
}
