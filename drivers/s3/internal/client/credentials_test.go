package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// isolate clears the environment the credential chain reads, points HOME
// at an empty directory and turns the instance metadata service off.
func isolate(t *testing.T) {
	t.Helper()
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
		"AWS_REGION", "AWS_DEFAULT_REGION", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE",
		"AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN", "AWS_ROLE_SESSION_NAME", "AWS_ENDPOINT_URL_STS",
		"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
		"AWS_CONTAINER_AUTHORIZATION_TOKEN", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
		"AWS_EC2_METADATA_SERVICE_ENDPOINT"} {
		t.Setenv(k, "")
	}
	t.Setenv("HOME", t.TempDir())
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
}

// resolve walks the credential chain of a client of cfg.
func resolve(t *testing.T, cfg Config) (credentials, error) {
	t.Helper()
	c, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c.creds.get(context.Background())
}

// write writes text to a file of dir and returns its path.
func write(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestEnvCredentials(t *testing.T) {
	isolate(t)
	t.Setenv("AWS_ACCESS_KEY_ID", "AKID")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "SECRET")
	t.Setenv("AWS_SESSION_TOKEN", "TOKEN")
	cr, err := resolve(t, Config{})
	if err != nil || cr != (credentials{AccessKeyID: "AKID", SecretAccessKey: "SECRET", SessionToken: "TOKEN"}) {
		t.Errorf("%+v, %v", cr, err)
	}
}

func TestSharedFiles(t *testing.T) {
	isolate(t)
	dir := t.TempDir()
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", write(t, dir, "credentials", `
# comment
[default]
aws_access_key_id = DEFAULTKEY
aws_secret_access_key = defaultsecret

[work]
aws_access_key_id=WORKKEY
aws_secret_access_key = work/secret#not a comment
aws_session_token = worktoken
`))
	t.Setenv("AWS_CONFIG_FILE", write(t, dir, "config", "[default]\r\nregion = us-west-2\r\n"+`
[ profile   work ]
region = eu-west-3
s3 =
  addressing_style = path
; the credentials file wins over this
aws_access_key_id = CONFIGKEY

[profile web]
role_arn = arn:aws:iam::123456789012:role/web
web_identity_token_file = /nonexistent/token

[profile sso]
sso_session = corp
`))
	t.Setenv("AWS_PROFILE", "work")
	c, err := New(context.Background(), Config{})
	if err != nil {
		t.Fatal(err)
	}
	if c.region != "eu-west-3" {
		t.Errorf("region %q, want the profile's", c.region)
	}
	cr, err := c.creds.get(context.Background())
	if err != nil || cr != (credentials{AccessKeyID: "WORKKEY", SecretAccessKey: "work/secret#not a comment", SessionToken: "worktoken"}) {
		t.Errorf("profile work: %+v, %v", cr, err)
	}

	c, err = New(context.Background(), Config{Profile: "default"})
	if err != nil {
		t.Fatal(err)
	}
	cr, err = c.creds.get(context.Background())
	if c.region != "us-west-2" || err != nil || cr.AccessKeyID != "DEFAULTKEY" {
		t.Errorf("profile default: region %q, %+v, %v", c.region, cr, err)
	}
	t.Setenv("AWS_REGION", "ap-south-1")
	if c, _ := New(context.Background(), Config{}); c.region != "ap-south-1" {
		t.Errorf("region %q, want AWS_REGION's", c.region)
	}

	if _, err := resolve(t, Config{Profile: "web"}); err == nil || !strings.Contains(err.Error(), "web identity token") {
		t.Errorf("profile web: %v, want the token file's error", err)
	}
	if _, err := resolve(t, Config{Profile: "sso"}); err == nil || !strings.Contains(err.Error(), "supported") {
		t.Errorf("profile sso: %v, want it unsupported", err)
	}
	var ce *CredentialsError
	if _, err := resolve(t, Config{Profile: "missing"}); !errors.As(err, &ce) || !strings.Contains(err.Error(), `profile "missing"`) {
		t.Errorf("profile missing: %v", err)
	}
}

// roleCredentials is the JSON of credentials the container endpoints and
// the instance metadata service answer.
func roleCredentials(key string, expires time.Time) []byte {
	b, _ := json.Marshal(map[string]string{"Code": "Success", "AccessKeyId": key, "SecretAccessKey": "secret-" + key,
		"Token": "token-" + key, "Expiration": expires.UTC().Format(time.RFC3339)})
	return b
}

func TestContainerCredentials(t *testing.T) {
	isolate(t)
	expires := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/creds" || r.Header.Get("Authorization") != "Bearer file-token" {
			http.Error(w, "no", http.StatusForbidden)
			return
		}
		w.Write(roleCredentials("CONTAINER", expires))
	}))
	defer srv.Close()
	t.Setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", srv.URL+"/creds")
	t.Setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", "Bearer env-token")
	t.Setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", write(t, t.TempDir(), "token", "Bearer file-token\n"))
	cr, err := resolve(t, Config{})
	want := credentials{AccessKeyID: "CONTAINER", SecretAccessKey: "secret-CONTAINER", SessionToken: "token-CONTAINER", Expires: expires}
	if err != nil || !cr.Expires.Equal(want.Expires) || cr.AccessKeyID != want.AccessKeyID ||
		cr.SecretAccessKey != want.SecretAccessKey || cr.SessionToken != want.SessionToken {
		t.Errorf("%+v, %v", cr, err)
	}

	t.Setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", "")
	if _, err := resolve(t, Config{}); err == nil || !strings.Contains(err.Error(), "403") {
		t.Errorf("with the wrong token: %v", err)
	}
	t.Setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://example.com/creds")
	if _, err := resolve(t, Config{}); err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Errorf("with a remote http URI: %v", err)
	}
}

func TestInstanceRole(t *testing.T) {
	isolate(t)
	expires := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	var steps []string
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		steps = append(steps, r.Method+" "+r.URL.Path)
		mu.Unlock()
		switch {
		case r.Method == http.MethodPut && r.URL.Path == "/latest/api/token":
			if r.Header.Get("X-Aws-Ec2-Metadata-Token-Ttl-Seconds") != "21600" {
				http.Error(w, "no ttl", http.StatusBadRequest)
				return
			}
			w.Write([]byte("imds-token"))
		case r.Header.Get("X-Aws-Ec2-Metadata-Token") != "imds-token":
			http.Error(w, "no token", http.StatusUnauthorized)
		case r.URL.Path == "/latest/meta-data/iam/security-credentials/":
			w.Write([]byte("the-role\n"))
		case r.URL.Path == "/latest/meta-data/iam/security-credentials/the-role":
			w.Write(roleCredentials("INSTANCE", expires))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	t.Setenv("AWS_EC2_METADATA_DISABLED", "")
	t.Setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", srv.URL)
	cr, err := resolve(t, Config{})
	if err != nil || cr.AccessKeyID != "INSTANCE" || cr.SessionToken != "token-INSTANCE" || !cr.Expires.Equal(expires) {
		t.Errorf("%+v, %v", cr, err)
	}
	want := "PUT /latest/api/token,GET /latest/meta-data/iam/security-credentials/," +
		"GET /latest/meta-data/iam/security-credentials/the-role"
	if got := strings.Join(steps, ","); got != want {
		t.Errorf("requests %s, want %s", got, want)
	}
}

func TestWebIdentity(t *testing.T) {
	isolate(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil || r.Method != http.MethodPost || r.Form.Get("Action") != "AssumeRoleWithWebIdentity" ||
			r.Form.Get("Version") != "2011-06-15" || r.Form.Get("RoleArn") != "arn:aws:iam::123456789012:role/r" ||
			r.Form.Get("RoleSessionName") != "sess" || r.Form.Get("WebIdentityToken") != "jwt.token.here" {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `<ErrorResponse><Error><Code>InvalidParameter</Code><Message>%v</Message></Error></ErrorResponse>`, r.Form)
			return
		}
		fmt.Fprint(w, `<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <AssumeRoleWithWebIdentityResult>
    <Credentials>
      <SessionToken>web-token</SessionToken>
      <SecretAccessKey>web-secret</SecretAccessKey>
      <Expiration>2030-01-02T03:04:05Z</Expiration>
      <AccessKeyId>ASIAWEB</AccessKeyId>
    </Credentials>
  </AssumeRoleWithWebIdentityResult>
</AssumeRoleWithWebIdentityResponse>`)
	}))
	defer srv.Close()
	t.Setenv("AWS_ENDPOINT_URL_STS", srv.URL)
	t.Setenv("AWS_WEB_IDENTITY_TOKEN_FILE", write(t, t.TempDir(), "token", "jwt.token.here\n"))
	t.Setenv("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/r")
	t.Setenv("AWS_ROLE_SESSION_NAME", "sess")
	cr, err := resolve(t, Config{})
	if err != nil || cr.AccessKeyID != "ASIAWEB" || cr.SecretAccessKey != "web-secret" || cr.SessionToken != "web-token" ||
		!cr.Expires.Equal(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Errorf("%+v, %v", cr, err)
	}
	t.Setenv("AWS_ROLE_SESSION_NAME", "other")
	if _, err := resolve(t, Config{}); err == nil || !strings.Contains(err.Error(), "InvalidParameter") {
		t.Errorf("refused by STS: %v", err)
	}
}

// TestRefresh checks that credentials are fetched once for concurrent
// requests, kept until refreshBefore their expiry, then fetched again, and
// that ones about to expire are used while a refresh fails.
func TestRefresh(t *testing.T) {
	isolate(t)
	var now atomic.Int64 // the test's clock, in Unix seconds
	now.Store(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).Unix())
	clock := func() time.Time { return time.Unix(now.Load(), 0) }
	var fetches atomic.Int64
	var failing atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if failing.Load() {
			http.Error(w, "down", http.StatusInternalServerError)
			return
		}
		n := fetches.Add(1)
		w.Write(roleCredentials(fmt.Sprint("KEY", n), clock().Add(time.Hour)))
	}))
	defer srv.Close()
	t.Setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", srv.URL)
	c, err := New(context.Background(), Config{})
	if err != nil {
		t.Fatal(err)
	}
	c.now = clock
	key := func() string {
		cr, err := c.creds.get(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return cr.AccessKeyID
	}
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() { key() })
	}
	wg.Wait()
	if n := fetches.Load(); n != 1 {
		t.Errorf("%d fetches for 20 concurrent requests, want 1", n)
	}
	now.Add(54 * 60)
	if k := key(); k != "KEY1" {
		t.Errorf("6 minutes before expiry: %s, want KEY1", k)
	}
	now.Add(2 * 60)
	if k := key(); k != "KEY2" {
		t.Errorf("4 minutes before expiry: %s, want KEY2", k)
	}
	failing.Store(true)
	now.Add(56 * 60)
	if k := key(); k != "KEY2" {
		t.Errorf("refresh failing 4 minutes before expiry: %s, want KEY2", k)
	}
	now.Add(5 * 60)
	if _, err := c.creds.get(context.Background()); err == nil || !strings.Contains(err.Error(), "500") {
		t.Errorf("refresh failing after expiry: %v", err)
	}
}

// TestNoCredentials checks the error of a chain that finds nothing: at
// once with the metadata service turned off, and when it does not answer.
func TestNoCredentials(t *testing.T) {
	isolate(t)
	_, err := resolve(t, Config{})
	var ce *CredentialsError
	if !errors.As(err, &ce) {
		t.Fatalf("%v (%T), want a *CredentialsError", err, err)
	}
	for _, s := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", `profile "default" (AWS_PROFILE)`,
		filepath.Join(".aws", "credentials"), filepath.Join(".aws", "config"), "AWS_WEB_IDENTITY_TOKEN_FILE",
		"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "EC2 instance role (AWS_EC2_METADATA_DISABLED=true)", "anonymous=true"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%q does not mention %s", err, s)
		}
	}

	// A request fails with it.
	_, c := start(t, false)
	if _, err := c.Head(context.Background(), "bkt", "k"); !errors.As(err, &ce) || !strings.HasPrefix(err.Error(), "s3 HeadObject bkt/k: ") {
		t.Errorf("Head: %v", err)
	}

	// A metadata endpoint that refuses connections.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	t.Setenv("AWS_EC2_METADATA_DISABLED", "")
	t.Setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://"+addr)
	if _, err := resolve(t, Config{}); !errors.As(err, &ce) || !strings.Contains(err.Error(), "no instance metadata service at http://"+addr) {
		t.Errorf("without a metadata service: %v", err)
	}
}
