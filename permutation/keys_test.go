package permutation

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/store"
)

// TestGroupKeysObject numbers random keys as a scan does, in the order of
// their first rows, and writes a rank's keys as its keys object: read back,
// they are the same keys in the same order. An object cut short, or saying
// more or fewer keys than it holds, is Corrupt.
func TestGroupKeysObject(t *testing.T) {
	ctx := context.Background()
	loc, err := store.OpenCreate(ctx, "file://"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for iter := range 20 {
		keys := make([]string, 1+rng.IntN(2000))
		for i := range keys {
			keys[i] = fmt.Sprint(rng.IntN(1 + rng.IntN(300)))
		}
		g := &groups{}
		var first []string // the keys in the order of their first rows
		for i, k := range keys {
			n, err := g.number(k)
			if err != nil {
				t.Fatal(err)
			}
			if slices.Index(keys, k) == i {
				first = append(first, k)
			}
			if want := uint32(slices.Index(first, k)); n != want {
				t.Fatalf("iter %d: row %d of key %q is group %d, want %d", iter, i, k, n, want)
			}
		}
		sp := &spill{loc: loc, prefix: fmt.Sprint(iter)}
		if err := sp.writeKeys(ctx, 0, g.keys); err != nil {
			t.Fatal(err)
		}
		got, err := readKeys(ctx, loc, sp.keysKey(0))
		if err != nil || !slices.Equal(got, first) {
			t.Fatalf("iter %d: read %d keys back (%v), wrote %d", iter, len(got), err, len(first))
		}
	}
	sp := &spill{loc: loc, prefix: "bad"}
	if err := sp.writeKeys(ctx, 0, []string{"a", "bc", "d"}); err != nil {
		t.Fatal(err)
	}
	data, err := loc.ReadAll(ctx, sp.keysKey(0))
	if err != nil {
		t.Fatal(err)
	}
	for name, bad := range map[string][]byte{
		"cut short":   data[:len(data)-1],
		"a key more":  append(slices.Clone(data), 1, 'e'),
		"fewer keys":  append([]byte{4}, data[1:]...),
		"empty":       nil,
		"length past": append(slices.Clone(data), 9, 'e'),
	} {
		if err := loc.WriteAll(ctx, "bad/"+name, bad, store.WriterOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := readKeys(ctx, loc, "bad/"+name); errcode.Of(err) != errcode.Corrupt {
			t.Errorf("%s: %v, want Corrupt", name, err)
		}
	}
}
