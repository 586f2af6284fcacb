package all_test

import (
	"context"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/store"
	_ "github.com/croupier-data/croupier/drivers/all"
)

// TestSchemes: importing all links in the drivers of s3://, gs:// and
// azblob://; a scheme nobody registered is still refused, naming the
// schemes there are.
func TestSchemes(t *testing.T) {
	if got, want := store.Schemes(), []string{"azblob", "file", "gs", "mem", "s3"}; !slices.Equal(got, want) {
		t.Errorf("schemes %v, want %v", got, want)
	}
	_, err := store.Open(context.Background(), "ftp://host/t")
	if errcode.Of(err) != errcode.InvalidArgument || !strings.Contains(err.Error(), "the schemes are azblob, file, gs, mem, s3") {
		t.Errorf("ftp://: %v", err)
	}
}

// TestRegisterTwice: a second driver for a scheme is a mistake in the
// program's imports, caught when it starts.
func TestRegisterTwice(t *testing.T) {
	for _, scheme := range []string{"s3", "file", "mem"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("registering %s:// again did not panic", scheme)
				}
			}()
			store.Register(scheme, otherDriver{})
		}()
	}
}

// otherDriver is a second driver claiming a scheme; it is never called.
type otherDriver struct{}

func (otherDriver) OpenBucket(context.Context, *url.URL, store.RetryPolicy) (store.Bucket, error) {
	return nil, nil
}
