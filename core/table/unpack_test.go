package table

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// packBits packs vals of width bits each, least significant bit first, as
// the Parquet hybrid encoding's bit-packed runs do.
func packBits(vals []uint32, width int) []byte {
	out := make([]byte, (len(vals)*width+7)/8)
	for k, v := range vals {
		for b := range width {
			if v>>b&1 != 0 {
				bit := k*width + b
				out[bit/8] |= 1 << (bit % 8)
			}
		}
	}
	return out
}

func TestUnpackEveryWidth(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	for width := 1; width <= 32; width++ {
		for _, n := range []int{0, 1, 7, 8, 9, 63, 64, 65, 1000} {
			vals := make([]uint32, n)
			for i := range vals {
				vals[i] = uint32(rng.Uint64() & (1<<width - 1))
			}
			packed := packBits(vals, width)
			got := make([]uint32, n)
			unpack(got, packed, width)
			for i := range vals {
				if got[i] != vals[i] {
					t.Fatalf("width %d, %d values: value %d is %d, want %d", width, n, i, got[i], vals[i])
				}
			}
			if width <= 8 {
				got8 := make([]uint8, n)
				unpack(got8, packed, width)
				for i := range vals {
					if uint32(got8[i]) != vals[i] {
						t.Fatalf("width %d, %d values as bytes: value %d is %d, want %d", width, n, i, got8[i], vals[i])
					}
				}
			}
		}
	}
}

// BenchmarkUnpack unpacks dictionary indices of common widths:
//
//	go test ./core/table -run '^$' -bench Unpack
func BenchmarkUnpack(b *testing.B) {
	rng := rand.New(rand.NewPCG(6, 6))
	for _, width := range []int{1, 7, 16, 18} {
		vals := make([]uint32, 1<<16)
		for i := range vals {
			vals[i] = uint32(rng.Uint64() & (1<<width - 1))
		}
		packed := packBits(vals, width)
		dst := make([]uint32, len(vals))
		b.Run(fmt.Sprintf("width=%d", width), func(b *testing.B) {
			for b.Loop() {
				unpack(dst, packed, width)
			}
			b.ReportMetric(float64(len(vals)*b.N)/b.Elapsed().Seconds()/1e6, "Mvalues/s")
		})
	}
}
