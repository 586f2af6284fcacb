package table_test

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/croupier-data/croupier/core/store"
	_ "github.com/croupier-data/croupier/drivers/azure" // azblob://
	_ "github.com/croupier-data/croupier/drivers/gcs"   // gs://
	"github.com/croupier-data/croupier/internal/gcsfake"
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

// startGCS serves fake-gcs-server (internal/gcsfake), holding the empty
// bucket bkt, for the rest of t, points the gcs driver at it, and records
// the conditions of its reads: fake-gcs-server checks none, and conditioned
// shows that reads carry them (against GCS itself a failed precondition
// fails the read first).
func startGCS(t *testing.T) *readConditions {
	t.Helper()
	rc := newReadConditions()
	gcsfake.Start(t, "bkt", rc.wrap)
	return rc
}
