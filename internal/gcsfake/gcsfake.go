// Package gcsfake serves fake-gcs-server, the maintained Google Cloud Storage
// emulator with a Go API, in process on a loopback port, for tests that need
// a GCS protocol peer: the JSON and XML APIs, generations, and generation
// preconditions on uploads. It checks no precondition on reads: a read whose
// generation-match precondition fails is served anyway, and what stops
// croupier from using it is its own check of the generation the answer
// reports (core/store). Only tests import this package.
package gcsfake

import (
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/fsouza/fake-gcs-server/fakestorage"
)

// Start serves fake-gcs-server, holding the empty bucket named bucket, on a
// loopback port for the rest of t, its handler wrapped by wrap (nil: none),
// points the gcs driver at it (STORAGE_EMULATOR_HOST), and returns its
// address.
func Start(t testing.TB, bucket string, wrap func(http.Handler) http.Handler) string {
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
	fake.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: bucket})
	h := fake.HTTPHandler()
	if wrap != nil {
		h = wrap(h)
	}
	srv := &httptest.Server{Listener: l, Config: &http.Server{Handler: h}}
	srv.Start()
	t.Cleanup(srv.Close)
	t.Setenv("STORAGE_EMULATOR_HOST", host)
	return host
}
