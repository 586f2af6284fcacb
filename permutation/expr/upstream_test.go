package expr

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Canaries of the upstream behaviour this package works around (listed in
// docs/upstream.md): each passes while arrow-go still behaves as the
// workaround assumes, and fails saying what to remove once it does not.

// slicedBools returns n seeded random booleans, a third of them null,
// sliced from a longer array at an offset, and the same values built
// without one.
func slicedBools(t *testing.T, mem memory.Allocator, seed uint64) (sliced, plain arrow.Array) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 1))
	n := 2 + r.IntN(40)
	b := array.NewBooleanBuilder(mem)
	defer b.Release()
	for range n {
		if r.IntN(3) == 0 {
			b.AppendNull()
		} else {
			b.Append(r.IntN(2) == 0)
		}
	}
	whole := b.NewArray().(*array.Boolean)
	defer whole.Release()
	off := 1 + r.IntN(n-1)
	sliced = array.NewSlice(whole, int64(off), int64(n))
	for i := off; i < n; i++ {
		if whole.IsNull(i) {
			b.AppendNull()
		} else {
			b.Append(whole.Value(i))
		}
	}
	return sliced, b.NewArray()
}

// wrongOnSlices reports whether fn gives another answer for a sliced array
// than for the same values without an offset, for any of 100 seeded ones.
func wrongOnSlices(t *testing.T, fn func(arrow.Array) (arrow.Array, error)) bool {
	t.Helper()
	mem := memory.NewGoAllocator()
	for seed := range uint64(100) {
		sliced, plain := slicedBools(t, mem, seed)
		a, err := fn(sliced)
		if err != nil {
			return true // failing on a slice is not handling it either
		}
		b, err := fn(plain)
		if err != nil {
			t.Fatal(err)
		}
		same := array.Equal(a, b)
		for _, x := range []arrow.Array{a, b, sliced, plain} {
			x.Release()
		}
		if !same {
			return true
		}
	}
	return false
}

func TestUpstreamBoolToIntIgnoresOffset(t *testing.T) {
	cast := func(a arrow.Array) (arrow.Array, error) {
		return compute.CastArray(context.Background(), a, compute.UnsafeCastOptions(arrow.PrimitiveTypes.Int64))
	}
	if !wrongOnSlices(t, cast) {
		t.Fatal("fixed upstream: arrow-go casts sliced booleans to int64 right; remove boolToInt's own kernel (nodes.go)")
	}
}

func TestUpstreamNotAndIsNotNullMisplaceValidity(t *testing.T) {
	for _, name := range []string{"not", "is_not_null"} {
		call := func(a arrow.Array) (arrow.Array, error) {
			d, err := compute.CallFunction(context.Background(), name, nil, compute.NewDatum(a))
			if err != nil {
				return nil, err
			}
			defer d.Release()
			return d.(*compute.ArrayDatum).MakeArray(), nil
		}
		if !wrongOnSlices(t, call) {
			t.Errorf("fixed upstream: arrow-go's %q handles sliced inputs; remove its own kernel in nodes.go (not, isNull)", name)
		}
	}
}

// isIn calls arrow-go's is_in on the values in with the value set set,
// through an allocator that counts, and returns its answers and the bytes
// left allocated once everything is released.
func isIn[T any](t *testing.T, set, in []T, build func(memory.Allocator, []T) arrow.Array) ([]bool, int) {
	t.Helper()
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	ctx := compute.WithAllocator(context.Background(), mem)
	s, v := build(mem, set), build(mem, in)
	d, err := compute.IsIn(ctx, compute.SetOptions{ValueSet: compute.NewDatum(s)}, compute.NewDatum(v))
	if err != nil {
		t.Fatal(err)
	}
	out := d.(*compute.ArrayDatum).MakeArray().(*array.Boolean)
	got := make([]bool, out.Len())
	for i := range got {
		got[i] = out.Value(i)
	}
	for _, r := range []interface{ Release() }{out, d, s, v} {
		r.Release()
	}
	return got, mem.CurrentAlloc()
}

func TestUpstreamIsInLeaksAndTellsZeros(t *testing.T) {
	floats := func(mem memory.Allocator, v []float64) arrow.Array {
		b := array.NewFloat64Builder(mem)
		defer b.Release()
		b.AppendValues(v, nil)
		return b.NewArray()
	}
	strs := func(mem memory.Allocator, v []string) arrow.Array {
		b := array.NewStringBuilder(mem)
		defer b.Release()
		b.AppendValues(v, nil)
		return b.NewArray()
	}
	zeros, leftF := isIn(t, []float64{0}, []float64{math.Copysign(0, -1)}, floats)
	_, leftS := isIn(t, []string{"a", "bb"}, []string{"bb", "c"}, strs)
	if zeros[0] && leftF == 0 && leftS == 0 {
		t.Fatal("fixed upstream: arrow-go's is_in finds -0.0 in a set holding 0.0 and frees what it allocates; remove in's own kernel (nodes.go)")
	}
	t.Logf("is_in: -0.0 in {0.0}: %v; bytes left allocated: %d (float64), %d (string)", zeros[0], leftF, leftS)
}
