package table_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/fsouza/fake-gcs-server/fakestorage"

	"github.com/croupier-data/croupier/core/store"
	_ "github.com/croupier-data/croupier/drivers/azure" // azblob://
	_ "github.com/croupier-data/croupier/drivers/gcs"   // gs://
)

// readConditions records the conditions that reads (GET requests) carried,
// by path: a generation-match precondition on GCS (a header on XML API
// reads, a parameter on JSON API ones), If-Match elsewhere.
type readConditions struct {
	mu    sync.Mutex
	byKey map[string][]string
}

// wrap returns h, recording the conditions of the reads it serves.
func (rc *readConditions) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			for _, c := range []string{r.Header.Get("X-Goog-If-Generation-Match"), r.URL.Query().Get("ifGenerationMatch"),
				strings.Trim(r.Header.Get("If-Match"), `"`)} {
				if c != "" {
					rc.mu.Lock()
					rc.byKey[r.URL.Path] = append(rc.byKey[r.URL.Path], c)
					rc.mu.Unlock()
				}
			}
		}
		h.ServeHTTP(w, r)
	})
}

// conditioned reports whether a read of key carried a condition on the
// version obj describes: its generation, or its ETag.
func (rc *readConditions) conditioned(key string, obj store.Object) bool {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for path, conds := range rc.byKey {
		if !strings.HasSuffix(path, "/"+key) {
			continue
		}
		for _, c := range conds {
			if (obj.Generation != 0 && c == strconv.FormatInt(obj.Generation, 10)) ||
				(obj.ETag != "" && c == strings.Trim(obj.ETag, `"`)) {
				return true
			}
		}
	}
	return false
}

// proxy serves host through a proxy on a loopback port for the rest of t,
// recording the conditions of its reads, and returns the proxy's address.
func (rc *readConditions) proxy(t *testing.T, host string) string {
	t.Helper()
	srv := httptest.NewServer(rc.wrap(httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: host})))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

func newReadConditions() *readConditions { return &readConditions{byKey: map[string][]string{}} }

// startGCS serves fake-gcs-server, holding the empty bucket bkt, on a
// loopback port for the rest of t, points the gcs driver at it
// (STORAGE_EMULATOR_HOST), and records the conditions of its reads.
//
// fake-gcs-server checks generation preconditions on uploads only: a read
// whose generation-match precondition fails is served anyway. What stops
// croupier from using such a read is its second check, of the generation the
// answer reports (core/store's observed); against GCS itself the
// precondition fails first. conditioned shows that reads carry it.
func startGCS(t *testing.T) *readConditions {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	host := l.Addr().String()
	fake, err := fakestorage.NewServerWithOptions(fakestorage.Options{NoListener: true, Scheme: "http",
		ExternalURL: "http://" + host, PublicHost: host})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fake.Stop)
	fake.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: "bkt"})
	rc := newReadConditions()
	srv := &httptest.Server{Listener: l, Config: &http.Server{Handler: rc.wrap(fake.HTTPHandler())}}
	srv.Start()
	t.Cleanup(srv.Close)
	t.Setenv("STORAGE_EMULATOR_HOST", host)
	return rc
}
