package catalog_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/croupier-data/croupier/core/catalog"
	"github.com/croupier-data/croupier/core/errcode"
)

func TestRegisterLookup(t *testing.T) {
	c := catalog.Open(catalog.Options{Path: filepath.Join(t.TempDir(), "sub", "catalog.db")})
	_, err := c.Lookup("rollouts")
	if errcode.Of(err) != errcode.NotFound || !strings.Contains(err.Error(), `"rollouts"`) {
		t.Fatalf("lookup in a catalog that does not exist yet: %v", err)
	}
	if err := c.Register("rollouts", "s3://b/rollouts?region=x"); err != nil {
		t.Fatal(err)
	}
	if err := c.Register("rollouts", "file:///data/rollouts"); err != nil {
		t.Fatal(err)
	}
	uri, err := c.Lookup("rollouts")
	if err != nil || uri != "file:///data/rollouts" {
		t.Fatalf("lookup = %q, %v", uri, err)
	}
	names, err := c.Names()
	if err != nil || len(names) != 1 {
		t.Fatalf("names = %v, %v", names, err)
	}
	if err := c.Register("", "x"); errcode.Of(err) != errcode.InvalidArgument {
		t.Errorf("empty name: %v", err)
	}
	c.Put([]string{"a", "b"}, [][]byte{[]byte("footer"), []byte("manifest")})
	if got := c.Get([]string{"a", "ax", "b"}); string(got[0]) != "footer" || got[1] != nil || string(got[2]) != "manifest" {
		t.Fatalf("get = %q", got)
	}
}

// TestConcurrentUse runs 8 "ranks" that each open the catalog per operation, as
// separate processes would (bbolt's flock conflicts between open files of one
// process too), mixing writes and read-only lookups: none may deadlock or fail.
func TestConcurrentUse(t *testing.T) {
	path := filepath.Join(t.TempDir(), "catalog.db")
	done := make(chan struct{})
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		for r := range 8 {
			wg.Go(func() {
				c := catalog.Open(catalog.Options{Path: path, Timeout: 5 * time.Second})
				for i := range 20 {
					name := fmt.Sprintf("t%d-%d", r, i)
					if err := c.Register(name, "mem://b/"+name); err != nil {
						t.Error(err)
						return
					}
					if uri, err := c.Lookup(name); err != nil || uri != "mem://b/"+name {
						t.Errorf("lookup %s = %q, %v", name, uri, err)
						return
					}
					c.Put([]string{name}, [][]byte{[]byte(name)})
					c.Get([]string{name})
				}
			})
		}
		wg.Wait()
	}()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("catalog users deadlocked")
	}
	names, err := catalog.Open(catalog.Options{Path: path}).Names()
	if err != nil || len(names) != 160 {
		t.Fatalf("%d names, %v", len(names), err)
	}
}

// TestGarbageCatalogIsSetAside: a file that is no bbolt file is a miss,
// set aside as catalog.db.damaged-<time>, and the catalog starts anew.
func TestGarbageCatalogIsSetAside(t *testing.T) {
	path := filepath.Join(t.TempDir(), "catalog.db")
	os.WriteFile(path, []byte(strings.Repeat("not a bolt file ", 1000)), 0o644)
	c := catalog.Open(catalog.Options{Path: path, Timeout: 100 * time.Millisecond})
	if got := c.Get([]string{"k"}); got[0] != nil {
		t.Fatal("hit in a garbage catalog")
	}
	if aside := setAside(t, path); len(aside) != 1 {
		t.Fatalf("set aside: %v", aside)
	}
	c.Put([]string{"k"}, [][]byte{[]byte("v")})
	if got := c.Get([]string{"k"}); string(got[0]) != "v" {
		t.Fatalf("the catalog started anew holds %q", got[0])
	}
	os.WriteFile(path, []byte(strings.Repeat("not a bolt file ", 1000)), 0o644)
	_, err := c.Lookup("x")
	if errcode.Of(err) != errcode.NotFound || !strings.Contains(err.Error(), "damaged, set aside as "+path+".damaged-") {
		t.Fatalf("lookup in a garbage catalog: %v", err)
	}
	if aside := setAside(t, path); len(aside) != 1 {
		t.Fatalf("set aside twice: %v, want the latest only", aside)
	}
}

// setAside returns the damaged files set aside from path.
func setAside(t *testing.T, path string) []string {
	t.Helper()
	aside, err := filepath.Glob(path + ".damaged-*")
	if err != nil {
		t.Fatal(err)
	}
	return aside
}

func TestDefaultPath(t *testing.T) {
	if p := catalog.DefaultPath(); !strings.HasSuffix(p, filepath.Join("croupier", "catalog.db")) {
		t.Errorf("default path %s", p)
	}
}
