// Package seedtest gives croupier's property tests one way to seed their
// random inputs: from the clock by default, printed by each test that uses
// it, and fixed with the test binary's -seed flag to replay a failure.
// Only tests import it: it registers -seed on the global flag set.
package seedtest

import (
	"flag"
	"testing"
	"time"
)

var seed = flag.Uint64("seed", 0, "seed of the property tests (0: from the clock)")

// Seed returns the seed for t and logs how to replay it.
func Seed(t testing.TB) uint64 {
	s := *seed
	if s == 0 {
		s = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -seed %d)", s, s)
	return s
}
