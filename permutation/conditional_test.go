package permutation_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/croupier-data/croupier/core/errcode"
	_ "github.com/croupier-data/croupier/drivers/s3" // s3://
	"github.com/croupier-data/croupier/internal/s3test"
	"github.com/croupier-data/croupier/internal/seedtest"
	"github.com/croupier-data/croupier/permutation"
)

// manifestGate serves uri's S3 endpoint through a proxy that holds the PUTs
// of permutation manifests until n have arrived, forwards them one after
// another in the order they arrived, and answers them only when all are
// stored. So n builds at one URI all pass their check that no manifest is
// there, and each reads its manifest back after every other one is written:
// the race of concurrent builds, made deterministic. It returns uri with the
// proxy as its endpoint.
func manifestGate(t *testing.T, uri string, n int) string {
	t.Helper()
	u, err := url.Parse(uri)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	target, err := url.Parse(q.Get("endpoint"))
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	var (
		mu      sync.Mutex
		cond    = sync.NewCond(&mu)
		arrived int
		stored  int
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPut || !strings.HasSuffix(r.URL.Path, "/permutation.json") {
			proxy.ServeHTTP(w, r)
			return
		}
		mu.Lock()
		turn := arrived
		arrived++
		cond.Broadcast()
		for arrived < n || stored < turn {
			cond.Wait()
		}
		mu.Unlock()
		rec := httptest.NewRecorder()
		proxy.ServeHTTP(rec, r)
		mu.Lock()
		stored++
		cond.Broadcast()
		for stored < n {
			cond.Wait()
		}
		mu.Unlock()
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		w.Write(rec.Body.Bytes())
	}))
	t.Cleanup(srv.Close)
	q.Set("endpoint", srv.URL)
	u.RawQuery = q.Encode()
	return u.String()
}

// rowIDs reads every split of the permutation at uri, each chunk checked
// against the SHA-256 its manifest records.
func rowIDs(t *testing.T, uri string) (string, [][]uint64) {
	t.Helper()
	p, err := permutation.Open(context.Background(), uri)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if b := p.Build(); b.ID != p.ID() {
		t.Errorf("build record of %s names %q", p.ID(), b.ID)
	}
	var out [][]uint64
	for _, s := range p.Splits() {
		out = append(out, allIDs(t, s))
	}
	return p.ID(), out
}

// TestConcurrentBuildsOfOnePermutation: builds of the same permutation at
// one S3 URI, racing past the check that none is there, all succeed and leave
// one whole permutation that opens and verifies, equal to a build elsewhere;
// on a store that honours conditional writes and on one that ignores them
// (which is why a build, unlike a table commit, does not probe the store).
func TestConcurrentBuildsOfOnePermutation(t *testing.T) {
	const builders = 3
	seed := seedtest.Seed(t)
	tb := openTable(t, t.TempDir(), 70_000, 9_000) // two chunks in the first split
	spec := permutation.Spec{Split: &permutation.SplitSpec{Kind: "random", Ratios: []float64{0.9, 0.1}, Seed: seed},
		Shuffle: &permutation.ShuffleSpec{Seed: seed + 1}}
	want := build(t, tb, spec)
	wantIDs := [][]uint64{allIDs(t, want.Splits()[0]), allIDs(t, want.Splits()[1])}
	for _, ignore := range []bool{false, true} {
		t.Run(map[bool]string{false: "honoured", true: "ignored"}[ignore], func(t *testing.T) {
			s, err := s3test.Start("bkt")
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			s.IgnoreConditionalWrites(ignore)
			uri := s.URI("bkt", "perm")
			gated := manifestGate(t, uri, builders)
			var wg sync.WaitGroup
			errs := make([]error, builders)
			for i := range builders {
				wg.Go(func() {
					p, err := permutation.Build(context.Background(), tb, spec, gated, permutation.BuildOptions{})
					if err == nil {
						if p.ID() != want.ID() {
							t.Errorf("builder %d built %s, want %s", i, p.ID(), want.ID())
						}
						p.Close()
					}
					errs[i] = err
				})
			}
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Errorf("builder %d: %v", i, err)
				}
			}
			if n := s.Count(http.MethodPut, "/permutation.json"); n != builders {
				t.Errorf("%d PUTs of the manifest, want one from each of %d builders", n, builders)
			}
			id, got := rowIDs(t, uri)
			if id != want.ID() || !slices.EqualFunc(got, wantIDs, slices.Equal) {
				t.Errorf("the permutation at %s is %s, its row ids equal the reference's: %v; want %s",
					uri, id, slices.EqualFunc(got, wantIDs, slices.Equal), want.ID())
			}
		})
	}
}

// TestConcurrentBuildsOfTwoPermutations: two builds of different
// permutations at one S3 URI, racing. Where the store honours conditional
// writes, the second manifest's create fails with AlreadyExists. Where it
// ignores them, both creates succeed and the first build, reading its
// manifest back, finds the second and fails with Changed instead of
// returning a permutation that is not the one at its URI. Either way the URI
// holds one whole permutation, which opens and verifies.
func TestConcurrentBuildsOfTwoPermutations(t *testing.T) {
	seed := seedtest.Seed(t)
	tb := openTable(t, t.TempDir(), 3_000)
	specs := []permutation.Spec{{Shuffle: &permutation.ShuffleSpec{Seed: seed}}, {Shuffle: &permutation.ShuffleSpec{Seed: seed + 1}}}
	for _, ignore := range []bool{false, true} {
		t.Run(map[bool]string{false: "honoured", true: "ignored"}[ignore], func(t *testing.T) {
			s, err := s3test.Start("bkt")
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			s.IgnoreConditionalWrites(ignore)
			uri := s.URI("bkt", "perm")
			gated := manifestGate(t, uri, len(specs))
			var wg sync.WaitGroup
			ids := make([]string, len(specs))
			errs := make([]error, len(specs))
			for i, spec := range specs {
				wg.Go(func() {
					p, err := permutation.Build(context.Background(), tb, spec, gated, permutation.BuildOptions{})
					if err == nil {
						ids[i] = p.ID()
						p.Close()
					}
					errs[i] = err
				})
			}
			wg.Wait()
			// The loser is the build whose manifest was stored first
			// (honoured: the other's create failed) or overwritten
			// (ignored).
			var won, lost int
			switch {
			case errs[0] == nil && errs[1] != nil:
				won, lost = 0, 1
			case errs[1] == nil && errs[0] != nil:
				won, lost = 1, 0
			default:
				t.Fatalf("want one build to succeed and one to fail: %v, %v", errs[0], errs[1])
			}
			wantCode := map[bool]errcode.Code{false: errcode.AlreadyExists, true: errcode.Changed}[ignore]
			if errcode.Of(errs[lost]) != wantCode || !strings.Contains(errs[lost].Error(), "s3://bkt/perm") {
				t.Errorf("the losing build: %v, want %s naming the URI", errs[lost], wantCode)
			}
			if id, _ := rowIDs(t, uri); id != ids[won] {
				t.Errorf("the permutation at the URI is %s, want the winner's %s", id, ids[won])
			}
		})
	}
}
