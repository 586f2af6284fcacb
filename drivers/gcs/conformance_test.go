package gcs_test

import (
	"testing"

	"github.com/croupier-data/croupier/internal/gcsfake"
	"github.com/croupier-data/croupier/internal/storetest"
)

// TestConformance runs the stores' conformance suite on fake-gcs-server.
func TestConformance(t *testing.T) {
	gcsfake.Start(t, "bkt", nil)
	storetest.Run(t, "gs://bkt/t")
}
