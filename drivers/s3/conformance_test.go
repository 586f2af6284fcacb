package s3_test

import (
	"testing"

	_ "github.com/croupier-data/croupier/drivers/s3"
	"github.com/croupier-data/croupier/internal/s3test"
	"github.com/croupier-data/croupier/internal/storetest"
)

// TestConformance runs the stores' conformance suite on the S3 test server.
func TestConformance(t *testing.T) {
	s, err := s3test.Start("bkt")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	storetest.Run(t, s.URI("bkt", "t"))
}
