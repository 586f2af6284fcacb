package seal_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/croupier-data/croupier/internal/seal"
)

// TestSeal seals a compact and an indented object: each stays valid JSON
// holding its digest, checks as sealed, and fails the check with every bit
// of every byte flipped, or else is no longer a sealed object.
func TestSeal(t *testing.T) {
	for _, obj := range []string{`{"a":1,"b":[2,3]}`, "{\n  \"a\": 1\n}\n"} {
		b := seal.JSON([]byte(obj))
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil || m["a"] != 1.0 || len(m[seal.Field].(string)) != 64 {
			t.Fatalf("sealed %q = %q: %v", obj, b, err)
		}
		if sealed, err := seal.Check(b); !sealed || err != nil {
			t.Fatalf("check %q = %t, %v", b, sealed, err)
		}
		if sealed, err := seal.Check([]byte(obj)); sealed || err != nil {
			t.Fatalf("check of the unsealed %q = %t, %v", obj, sealed, err)
		}
		for p := range b[:len(b)-1] { // the final newline is optional
			for bit := range 8 {
				f := slices.Clone(b)
				f[p] ^= 1 << bit
				if sealed, err := seal.Check(f); sealed && err == nil {
					t.Fatalf("bit %d of byte %d of %q flipped: still checks", bit, p, b)
				}
			}
		}
	}
}
