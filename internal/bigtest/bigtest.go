// Package bigtest gates the tests of cells and pages of hundreds of
// megabytes. Each takes a second or a few, but ten times that under the race
// detector, and they test sizes, not concurrency: they run in test runs
// without it (make test-go runs core/table's tests a second time without),
// and those past 128 MB not with -short. Only tests import it.
package bigtest

import "testing"

// Skip skips t, which handles values of size bytes, under the race detector,
// and with -short when size passes 128 MB.
func Skip(t testing.TB, size int64) {
	t.Helper()
	switch {
	case race:
		t.Skipf("a %d MB value: run without -race", size/1e6)
	case size > 128e6 && testing.Short():
		t.Skipf("a %d MB value: run without -short", size/1e6)
	}
}
