package azure_test

import (
	"testing"

	"github.com/croupier-data/croupier/internal/azurite"
	"github.com/croupier-data/croupier/internal/storetest"
)

// TestConformance runs the stores' conformance suite on Azurite.
func TestConformance(t *testing.T) {
	az := azurite.Start(t)
	az.CreateContainer(t, "ctr")
	azurite.Env(t)
	storetest.Run(t, az.URI("ctr", "t"))
}
