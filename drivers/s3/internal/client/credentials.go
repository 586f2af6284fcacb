package client

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

const (
	// refreshBefore is how long before they expire credentials are
	// fetched again.
	refreshBefore = 5 * time.Minute
	// fetchTimeout bounds a walk of the credential chain.
	fetchTimeout = 30 * time.Second
	// requestTimeout bounds each request for credentials.
	requestTimeout = 10 * time.Second
	// imdsProbeTimeout bounds the first request to the EC2 instance
	// metadata service, which is not there off EC2: missing credentials
	// are reported within it rather than after the long waits of a
	// connection to nowhere.
	imdsProbeTimeout = time.Second
)

// credentialCache holds the credentials of a chain: it walks the chain at
// the first request that needs them and again when they are about to
// expire. Concurrent requests share one walk.
type credentialCache struct {
	chain *chain
	now   func() time.Time

	mu       sync.Mutex
	cur      credentials
	have     bool
	fetching *fetch // the walk in progress, nil if none
}

// fetch is one walk of the chain; err is set before done is closed.
type fetch struct {
	done chan struct{}
	err  error
}

// get returns credentials to sign a request with, walking the chain if
// there are none yet or if they expire within refreshBefore. Credentials
// that a failed walk was to replace are used until they expire.
func (c *credentialCache) get(ctx context.Context) (credentials, error) {
	c.mu.Lock()
	if c.have && (c.cur.Expires.IsZero() || c.now().Before(c.cur.Expires.Add(-refreshBefore))) {
		defer c.mu.Unlock()
		return c.cur, nil
	}
	f := c.fetching
	if f == nil {
		f = &fetch{done: make(chan struct{})}
		c.fetching = f
		go c.walk(context.WithoutCancel(ctx), f)
	}
	c.mu.Unlock()
	select {
	case <-f.done:
	case <-ctx.Done():
		return credentials{}, fmt.Errorf("waiting for credentials: %w", ctx.Err())
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.have && (c.cur.Expires.IsZero() || c.now().Before(c.cur.Expires)) {
		return c.cur, nil
	}
	return credentials{}, f.err
}

// walk walks the chain for f, in a context of its own so that one waiting
// request going away does not fail the others.
func (c *credentialCache) walk(ctx context.Context, f *fetch) {
	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	cr, err := c.chain.resolve(ctx)
	c.mu.Lock()
	if err == nil {
		c.cur, c.have = cr, true
	}
	f.err = err
	c.fetching = nil
	c.mu.Unlock()
	close(f.done)
}

// chain finds credentials where the AWS SDKs do, in their order: the
// environment, the shared credentials and config files, web identity,
// container credentials, the EC2 instance role.
type chain struct {
	profile string
	region  string // of STS
	http    *http.Client
}

// resolve returns the credentials of the first source of the chain that
// has some. A source that is configured but fails ends the walk with its
// error; if no source is configured the error is a *CredentialsError.
func (ch *chain) resolve(ctx context.Context) (credentials, error) {
	var looked []string
	id, secret := os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
	switch {
	case id != "" && secret != "":
		return credentials{AccessKeyID: id, SecretAccessKey: secret, SessionToken: os.Getenv("AWS_SESSION_TOKEN")}, nil
	case id != "":
		looked = append(looked, "AWS_ACCESS_KEY_ID (set, but AWS_SECRET_ACCESS_KEY is not)")
	case secret != "":
		looked = append(looked, "AWS_SECRET_ACCESS_KEY (set, but AWS_ACCESS_KEY_ID is not)")
	default:
		looked = append(looked, "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (not set)")
	}

	s, found, err := loadProfile(ch.profile)
	if err != nil {
		return credentials{}, err
	}
	config, creds := sharedFiles()
	where := fmt.Sprintf("profile %q (AWS_PROFILE) of %s and %s", ch.profile, creds, config)
	switch {
	case !found:
		looked = append(looked, where+" (no such profile)")
	case s["aws_access_key_id"] != "" && s["aws_secret_access_key"] != "":
		return credentials{AccessKeyID: s["aws_access_key_id"], SecretAccessKey: s["aws_secret_access_key"],
			SessionToken: s["aws_session_token"]}, nil
	case s["role_arn"] != "" && s["web_identity_token_file"] != "":
		cr, err := ch.webIdentity(ctx, s["role_arn"], s["web_identity_token_file"], s["role_session_name"])
		if err != nil {
			return credentials{}, fmt.Errorf("credentials of %s: %w", where, err)
		}
		return cr, nil
	case s["role_arn"] != "" || s["credential_process"] != "" || s["sso_session"] != "" || s["sso_start_url"] != "":
		return credentials{}, fmt.Errorf("credentials of %s: only static keys (aws_access_key_id, "+
			"aws_secret_access_key) and web identity (role_arn with web_identity_token_file) are supported", where)
	default:
		looked = append(looked, where+" (no aws_access_key_id and aws_secret_access_key)")
	}

	if file, arn := os.Getenv("AWS_WEB_IDENTITY_TOKEN_FILE"), os.Getenv("AWS_ROLE_ARN"); file != "" && arn != "" {
		cr, err := ch.webIdentity(ctx, arn, file, os.Getenv("AWS_ROLE_SESSION_NAME"))
		if err != nil {
			return credentials{}, fmt.Errorf("credentials of web identity (AWS_WEB_IDENTITY_TOKEN_FILE, AWS_ROLE_ARN): %w", err)
		}
		return cr, nil
	}
	looked = append(looked, "web identity AWS_WEB_IDENTITY_TOKEN_FILE/AWS_ROLE_ARN (not set)")

	if rel, full := os.Getenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"), os.Getenv("AWS_CONTAINER_CREDENTIALS_FULL_URI"); rel != "" || full != "" {
		cr, err := ch.container(ctx, rel, full)
		if err != nil {
			return credentials{}, fmt.Errorf("container credentials (AWS_CONTAINER_CREDENTIALS_*): %w", err)
		}
		return cr, nil
	}
	looked = append(looked, "container credentials AWS_CONTAINER_CREDENTIALS_RELATIVE_URI/FULL_URI (not set)")

	cr, missing, err := ch.instanceRole(ctx)
	switch {
	case err != nil:
		return credentials{}, fmt.Errorf("credentials of the EC2 instance role: %w", err)
	case missing != "":
		return credentials{}, &CredentialsError{Looked: append(looked, "the EC2 instance role ("+missing+")")}
	}
	return cr, nil
}

// webIdentity exchanges the web identity token in tokenFile for credentials
// of role arn (STS AssumeRoleWithWebIdentity). The STS endpoint is that of
// the region, or AWS_ENDPOINT_URL_STS.
func (ch *chain) webIdentity(ctx context.Context, arn, tokenFile, session string) (credentials, error) {
	token, err := os.ReadFile(tokenFile)
	if err != nil {
		return credentials{}, fmt.Errorf("reading the web identity token: %w", err)
	}
	if session == "" {
		session = "croupier-" + strconv.FormatInt(time.Now().UnixNano(), 10)
	}
	endpoint := os.Getenv("AWS_ENDPOINT_URL_STS")
	if endpoint == "" {
		endpoint = "https://sts." + ch.region + ".amazonaws.com"
		if strings.HasPrefix(ch.region, "cn-") {
			endpoint += ".cn"
		}
	}
	form := url.Values{"Action": {"AssumeRoleWithWebIdentity"}, "Version": {"2011-06-15"}, "RoleArn": {arn},
		"RoleSessionName": {session}, "WebIdentityToken": {strings.TrimSpace(string(token))}}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(endpoint, "/")+"/",
		strings.NewReader(form.Encode()))
	if err != nil {
		return credentials{}, fmt.Errorf("STS endpoint: %w", err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	body, err := ch.send(req)
	if err != nil {
		return credentials{}, fmt.Errorf("STS AssumeRoleWithWebIdentity: %w", err)
	}
	var res struct {
		Credentials struct {
			AccessKeyID     string `xml:"AccessKeyId"`
			SecretAccessKey string
			SessionToken    string
			Expiration      time.Time
		} `xml:"AssumeRoleWithWebIdentityResult>Credentials"`
	}
	if err := xml.Unmarshal(body, &res); err != nil {
		return credentials{}, fmt.Errorf("STS AssumeRoleWithWebIdentity: decoding the answer: %w", err)
	}
	r := res.Credentials
	return checked(credentials{AccessKeyID: r.AccessKeyID, SecretAccessKey: r.SecretAccessKey,
		SessionToken: r.SessionToken, Expires: r.Expiration}, "STS AssumeRoleWithWebIdentity")
}

// container fetches the credentials of the container's role from the
// endpoint AWS_CONTAINER_CREDENTIALS_RELATIVE_URI (rel) or
// AWS_CONTAINER_CREDENTIALS_FULL_URI (full) names, with the authorization
// token of AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE or
// AWS_CONTAINER_AUTHORIZATION_TOKEN. As with the AWS SDKs, a full URI must
// be https or name a loopback or container credentials host, the token not
// being for other hosts to see.
func (ch *chain) container(ctx context.Context, rel, full string) (credentials, error) {
	uri := full
	if rel != "" {
		uri = "http://169.254.170.2" + rel
	} else if err := checkContainerURI(full); err != nil {
		return credentials{}, err
	}
	token := os.Getenv("AWS_CONTAINER_AUTHORIZATION_TOKEN")
	if file := os.Getenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"); file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return credentials{}, fmt.Errorf("reading the authorization token: %w", err)
		}
		token = strings.TrimSpace(string(b))
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, uri, nil)
	if err != nil {
		return credentials{}, err
	}
	if token != "" {
		req.Header.Set("Authorization", token)
	}
	body, err := ch.send(req)
	if err != nil {
		return credentials{}, err
	}
	return decodeRoleCredentials(body, uri)
}

// checkContainerURI returns an error unless uri is https or names a
// loopback address or a container credentials host of ECS or EKS.
func checkContainerURI(uri string) error {
	u, err := url.Parse(uri)
	if err != nil {
		return err
	}
	if u.Scheme == "https" {
		return nil
	}
	host := u.Hostname()
	if ip := net.ParseIP(host); u.Scheme == "http" &&
		(host == "localhost" || ip != nil && (ip.IsLoopback() || ip.Equal(net.ParseIP("169.254.170.2")) ||
			ip.Equal(net.ParseIP("169.254.170.23")) || ip.Equal(net.ParseIP("fd00:ec2::23")))) {
		return nil
	}
	return fmt.Errorf("%s: an http URI must name a loopback or container credentials host", uri)
}

// instanceRole fetches the credentials of the EC2 instance's role from the
// instance metadata service (IMDSv2) at AWS_EC2_METADATA_SERVICE_ENDPOINT,
// else http://169.254.169.254, unless AWS_EC2_METADATA_DISABLED is true.
// missing says why there are none where that is no failure: the service is
// disabled, does not answer (off EC2), or the instance has no role.
func (ch *chain) instanceRole(ctx context.Context) (cr credentials, missing string, err error) {
	if strings.EqualFold(os.Getenv("AWS_EC2_METADATA_DISABLED"), "true") {
		return credentials{}, "AWS_EC2_METADATA_DISABLED=true", nil
	}
	endpoint := strings.TrimSuffix(os.Getenv("AWS_EC2_METADATA_SERVICE_ENDPOINT"), "/")
	if endpoint == "" {
		endpoint = "http://169.254.169.254"
	}
	pctx, cancel := context.WithTimeout(ctx, imdsProbeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(pctx, http.MethodPut, endpoint+"/latest/api/token", nil)
	if err != nil {
		return credentials{}, "", fmt.Errorf("instance metadata endpoint: %w", err)
	}
	req.Header.Set("X-Aws-Ec2-Metadata-Token-Ttl-Seconds", "21600")
	token, err := ch.send(req)
	if err != nil {
		return credentials{}, fmt.Sprintf("no instance metadata service at %s: %v", endpoint, err), nil
	}
	get := func(path string) ([]byte, int, error) {
		ctx, cancel := context.WithTimeout(ctx, requestTimeout)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint+path, nil)
		if err != nil {
			return nil, 0, err
		}
		req.Header.Set("X-Aws-Ec2-Metadata-Token", string(token))
		resp, err := ch.http.Do(req)
		if err != nil {
			return nil, 0, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("%s answered %s: %s", endpoint+path, resp.Status, b)
		}
		return b, resp.StatusCode, err
	}
	const rolesPath = "/latest/meta-data/iam/security-credentials/"
	roles, status, err := get(rolesPath)
	if status == http.StatusNotFound {
		return credentials{}, "the instance has no role", nil
	}
	if err != nil {
		return credentials{}, "", err
	}
	role, _, _ := strings.Cut(strings.TrimSpace(string(roles)), "\n")
	if role == "" {
		return credentials{}, "the instance has no role", nil
	}
	body, _, err := get(rolesPath + role)
	if err != nil {
		return credentials{}, "", err
	}
	cr, err = decodeRoleCredentials(body, endpoint+rolesPath+role)
	return cr, "", err
}

// decodeRoleCredentials decodes the JSON credentials that the container
// credentials endpoints and the instance metadata service answer.
func decodeRoleCredentials(body []byte, from string) (credentials, error) {
	var r struct {
		Code            string
		Message         string
		AccessKeyID     string `json:"AccessKeyId"`
		SecretAccessKey string
		Token           string
		Expiration      time.Time
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return credentials{}, fmt.Errorf("decoding the credentials of %s: %w", from, err)
	}
	if r.Code != "" && r.Code != "Success" {
		return credentials{}, fmt.Errorf("%s: %s: %s", from, r.Code, r.Message)
	}
	return checked(credentials{AccessKeyID: r.AccessKeyID, SecretAccessKey: r.SecretAccessKey,
		SessionToken: r.Token, Expires: r.Expiration}, from)
}

// checked returns cr, or an error if it lacks its keys.
func checked(cr credentials, from string) (credentials, error) {
	if cr.AccessKeyID == "" || cr.SecretAccessKey == "" {
		return credentials{}, fmt.Errorf("%s: an answer without an access key id and secret", from)
	}
	return cr, nil
}

// send sends req and returns the body of its answer, or an error saying
// what the answer was if its status is not 200.
func (ch *chain) send(req *http.Request) ([]byte, error) {
	resp, err := ch.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("reading the answer of %s: %w", req.URL.Redacted(), err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s answered %s: %s", req.URL.Redacted(), resp.Status, bytes.TrimSpace(b))
	}
	return b, nil
}
