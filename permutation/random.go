package permutation

import (
	"crypto/sha256"
	"encoding/binary"
	"math/bits"
)

// Randomness in croupier is specified, not borrowed: the same seed gives the
// same permutation on every platform, Go version and release. A change to
// anything in this file changes persisted permutations and must bump
// FormatVersion. Golden-value tests pin every function here.
//
// Key derivation. Every use of randomness draws from its own 64-bit key,
//
//	DeriveKey(seed, purpose) = first 8 bytes, little endian, of
//	    SHA-256("croupier/v1\x00" + purpose + "\x00" + seed as 8 bytes little endian)
//
// with purposes such as "split_random", "shuffle" and "epoch/3".
//
// Generator. A key seeds SplitMix64 (Steele, Lea and Flood, 2014):
//
//	state += 0x9E3779B97F4A7C15
//	z = state
//	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
//	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
//	return z ^ (z >> 31)
//
// Bounded integers in [0, n) use Lemire's multiply-and-reject method (2019):
// take the high word of x·n, rejecting x while the low word is below
// (2⁶⁴ − n) mod n, so every value is exactly equally likely.
//
// Shuffles are Fisher–Yates from the last element down: for i = n−1 … 1,
// swap element i with element Intn(i+1).
//
// Draws without replacement from an urn of categories holding L₀, L₁, …
// units (T in all): x = Uint64n(T), and the unit goes to the category i with
// L₀ + … + L_{i−1} ≤ x < L₀ + … + Lᵢ, whose count then drops by one.

// DeriveKey returns the key for one purpose of a user's seed.
func DeriveKey(seed uint64, purpose string) uint64 {
	h := sha256.New()
	h.Write([]byte("croupier/v1\x00"))
	h.Write([]byte(purpose))
	h.Write([]byte{0})
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], seed)
	h.Write(b[:])
	return binary.LittleEndian.Uint64(h.Sum(nil)[:8])
}

// Rand is SplitMix64. The zero value is a valid generator with key 0.
type Rand struct{ state uint64 }

// NewRand returns a generator seeded with key.
func NewRand(key uint64) *Rand { return &Rand{state: key} }

// Uint64 returns the next 64 random bits.
func (r *Rand) Uint64() uint64 {
	r.state += 0x9E3779B97F4A7C15
	return mix64(r.state)
}

// Uint64n returns a uniform integer in [0, n); n must be positive.
func (r *Rand) Uint64n(n uint64) uint64 {
	hi, lo := bits.Mul64(r.Uint64(), n)
	if lo < n {
		thresh := -n % n
		for lo < thresh {
			hi, lo = bits.Mul64(r.Uint64(), n)
		}
	}
	return hi
}

// Permute shuffles s in place (Fisher–Yates, from the end).
func Permute[T any](r *Rand, s []T) {
	for i := len(s) - 1; i > 0; i-- {
		j := r.Uint64n(uint64(i + 1))
		s[i], s[j] = s[j], s[i]
	}
}

// An urn deals units to categories without replacement: each draw takes
// one of the units left, every one equally likely, and returns its
// category. Dealing all the units gives a uniformly random assignment with
// exactly the counts the urn started with, one unit at a time and holding
// only the counts: a Fenwick tree of them, so that a draw costs O(log k) of
// k categories.
type urn struct {
	r     *Rand
	tree  []int64 // tree[i] sums the counts of categories (i − i&−i, i]
	total int64
	top   int // the largest power of two ≤ the number of categories
}

// newUrn returns an urn holding counts[i] units of category i, drawing
// from r. Counts must not be negative.
func newUrn(r *Rand, counts []int64) *urn {
	u := &urn{r: r, tree: make([]int64, len(counts)+1), top: 1}
	for i, c := range counts {
		u.add(i, c)
		u.total += c
	}
	for u.top*2 <= len(counts) {
		u.top *= 2
	}
	return u
}

// add adds d to the count of category i.
func (u *urn) add(i int, d int64) {
	for j := i + 1; j < len(u.tree); j += j & -j {
		u.tree[j] += d
	}
}

// take removes a unit of category i without a draw: one that goes to i
// whatever the draws give (it must hold one).
func (u *urn) take(i int) {
	u.add(i, -1)
	u.total--
}

// draw takes a unit at random and returns its category; the urn must not
// be empty.
func (u *urn) draw() int {
	x := int64(u.r.Uint64n(uint64(u.total)))
	// The most categories whose counts sum to at most x: the category
	// after them holds x.
	i := 0
	for step := u.top; step > 0; step /= 2 {
		if next := i + step; next < len(u.tree) && u.tree[next] <= x {
			i, x = next, x-u.tree[next]
		}
	}
	u.take(i)
	return i
}

// Bijection is a keyed permutation of [0, n): a balanced Feistel network over
// the smallest even number of bits 2h with 2^(2h) ≥ n, four rounds, made a
// permutation of [0, n) by cycle walking (re-encrypting until the value falls
// below n). Round r maps (L, R) to (R, L XOR F(r, R)), where F is the low h
// bits of SplitMix64's output function applied to key + (r+1)·φ + R, with
// φ = 0x9E3779B97F4A7C15. It costs O(1) per value and needs no table, so any
// position of a permuted order can be computed on its own.
type Bijection struct {
	n    uint64
	half uint   // h, bits in each half
	mask uint64 // 2^h − 1
	key  uint64
}

// NewBijection returns the permutation of [0, n) for key.
func NewBijection(n, key uint64) Bijection {
	half := uint(1)
	for n > 1<<(2*half) {
		half++
	}
	return Bijection{n: n, half: half, mask: 1<<half - 1, key: key}
}

// At returns the image of x, which must be below n.
func (b Bijection) At(x uint64) uint64 {
	for {
		l, r := x>>b.half, x&b.mask
		for round := range uint64(4) {
			l, r = r, l^(mix64(b.key+(round+1)*0x9E3779B97F4A7C15+r)&b.mask)
		}
		x = l<<b.half | r
		if x < b.n {
			return x
		}
	}
}

// mix64 is SplitMix64's output function.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}
