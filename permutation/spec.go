package permutation

import (
	"fmt"
	"math"
	"slices"

	"github.com/croupier-data/croupier/core/errcode"
)

// Spec says how to build a permutation: which rows (Filter), into which
// splits (Split), in what order (Shuffle), dealt in which units (GroupBy),
// and what to record of each row beside its id (Lengths). It is recorded
// verbatim in the permutation's provenance. JSON names match the Python
// builder's arguments.
type Spec struct {
	Filter  string       `json:"filter,omitempty"`  // SQL boolean expression; "" keeps every row
	Split   *SplitSpec   `json:"split,omitempty"`   // nil puts every kept row in one split, "all"
	Shuffle *ShuffleSpec `json:"shuffle,omitempty"` // nil keeps row id order
	// GroupBy names the columns whose values make a row's group key. Rows
	// sharing a key are stored together and dealt as a unit: in one global
	// step, on one rank, in one worker (docs/concepts.md, "Groups"). A
	// shuffle permutes whole groups; rows keep row id order inside their
	// group. Nil deals rows one by one.
	GroupBy []string `json:"group_by,omitempty"`

	// Lengths names a column whose value gives each row's length, recorded
	// beside its row id so that steps can be planned by length without
	// reading the rows (see LengthOrder): a list column gives the number of
	// its elements, an integer column its value. "" records none. A kept row
	// whose length is null, negative or above MaxLength fails the build,
	// naming the row.
	Lengths string `json:"lengths,omitempty"`
}

// MaxLength is the largest row length a permutation records.
const MaxLength = 1<<32 - 1

// Split kinds.
const (
	SplitRandom     = "random"     // a seeded random assignment by ratios, counts or a fixed size
	SplitSequential = "sequential" // consecutive rows in row id order, by ratios, counts or a fixed size
	SplitHash       = "hash"       // by a hash of column values, weighted
	SplitCalculated = "calculated" // by a SQL integer expression giving the split index
)

// SplitSpec assigns kept rows to named splits.
//
// Sizes for random and sequential splits come from exactly one of Ratios,
// Counts or Fixed. Ratios (each in [0, 1], summing to at most 1) become counts
// by cumulative rounding: with M kept rows, split i ends at
// round(M·(r₀+…+rᵢ)), rounding halves up, and starts where split i−1 ended; so
// the counts always sum to round(M·Σr), which is M when the ratios sum to 1.
// Counts are taken as they are (their sum must not exceed M). Fixed = n makes
// ⌊M/n⌋ splits of n rows each. Rows beyond the splits' total are in no split.
//
// With ClumpSize c > 1 a random split assigns clumps instead of rows: the kept
// rows, in row id order, form clumps of c consecutive rows (the last may be
// shorter, and is dealt after the others), and Ratios, Counts and Fixed count
// clumps. Rows of one clump are always in the same split.
//
// Hash splits give each row the split whose cumulative weight range holds
// Hash(columns) mod (Σweights + DiscardWeight); rows landing in the discard
// range are in no split. The hash depends only on the values, so a row keeps
// its split in every later version of the table.
//
// Calculated splits evaluate Expr per row: a value i in [0, len(Names)) puts
// the row in split i; null, negative or larger values put it in no split.
type SplitSpec struct {
	Kind          string    `json:"kind"`
	Ratios        []float64 `json:"ratios,omitempty"`
	Counts        []int64   `json:"counts,omitempty"`
	Fixed         int64     `json:"fixed,omitempty"`
	Seed          uint64    `json:"seed,omitempty"`
	ClumpSize     int64     `json:"clump_size,omitempty"`
	Columns       []string  `json:"columns,omitempty"`
	Weights       []int64   `json:"weights,omitempty"`
	DiscardWeight int64     `json:"discard_weight,omitempty"`
	Expr          string    `json:"expr,omitempty"`
	Names         []string  `json:"names,omitempty"`
}

// ShuffleSpec orders each split randomly. Split i is shuffled with the key
// DeriveKey(Seed, "shuffle/<i>"); a random split assignment draws from
// DeriveKey(SplitSpec.Seed, "split_random").
//
// A full shuffle permutes clumps of ClumpSize consecutive rows (1 when zero)
// uniformly; when the split's size is not a multiple of ClumpSize, the last,
// partial clump stays at the end. A window shuffle (Window > 0) cuts the split, in row id order, into
// windows of Window clumps, permutes the windows, and permutes the clumps inside
// each window: a reader going through it touches each row group about once per
// window instead of once per row, at the price of a local randomness (rows far
// apart in the table never meet within a window's span).
//
// ClumpSize AutoClump clumps rows by the pages they lie in, not by a
// count: the table's row ids are cut at the first row of every row group and
// of every data page of the row group's widest column (the leaf column with
// the most bytes before compression; table.Table.PageStarts), and a clump is
// the kept rows of the split between two cuts, however many (see
// docs/spec.md, "Page-aligned clumps"). The clumps then start and end on
// page boundaries: a page of the widest column is dealt by one stream, so
// read by one rank of several, and no clump straddles a row group. The cuts
// depend on the table version only, so the persisted spec records
// AutoClump and a reader recomputes them from the pinned table. Every clump
// is whole: a full shuffle permutes them all, a window shuffle cuts windows
// of Window of them. Permutations persisted before (format 3 and earlier)
// recorded a power of two instead, and keep dealing fixed clumps of it.
type ShuffleSpec struct {
	Seed      uint64 `json:"seed"`
	ClumpSize int64  `json:"clump_size,omitempty"`
	Window    int64  `json:"window,omitempty"`
}

// AutoClump is the ClumpSize of page-aligned clumps, cut at the table's
// page boundaries (see ShuffleSpec).
const AutoClump = -1

// MaxSplits bounds the number of splits a permutation has: each is named
// and listed in the manifest.
const MaxSplits = 1 << 16

func badSpec(format string, args ...any) error {
	return errcode.New(errcode.InvalidArgument, "permutation spec", "", format, args...)
}

// names returns the split names, defaulting to "all" or split_<i>.
func (s *SplitSpec) names(n int) []string {
	if len(s.Names) > 0 {
		return s.Names
	}
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("split_%d", i)
	}
	return out
}

// numSplits returns how many splits s makes of m kept rows.
func (s *SplitSpec) numSplits(m int64) int {
	switch {
	case len(s.Ratios) > 0:
		return len(s.Ratios)
	case len(s.Counts) > 0:
		return len(s.Counts)
	case s.Fixed > 0:
		return int(m / s.Fixed)
	case len(s.Weights) > 0:
		return len(s.Weights)
	}
	return len(s.Names)
}

// validate checks what can be checked before the rows are known.
func (s *SplitSpec) validate() error {
	switch s.Kind {
	case SplitRandom, SplitSequential:
		given := 0
		for _, b := range []bool{len(s.Ratios) > 0, len(s.Counts) > 0, s.Fixed != 0} {
			if b {
				given++
			}
		}
		if given != 1 {
			return badSpec("split_%s needs exactly one of ratios, counts or fixed", s.Kind)
		}
		var sum float64
		for i, r := range s.Ratios {
			if r < 0 || r > 1 || math.IsNaN(r) {
				return badSpec("ratio %d is %v, not in [0, 1]", i, r)
			}
			sum += r
		}
		if sum > 1+1e-9 {
			return badSpec("ratios sum to %v, more than 1", sum)
		}
		var total int64
		for i, c := range s.Counts {
			if c < 0 {
				return badSpec("count %d is negative (%d)", i, c)
			}
			if total > math.MaxInt64-c {
				return badSpec("counts %v sum beyond %d", s.Counts, int64(math.MaxInt64))
			}
			total += c
		}
		if s.Fixed < 0 {
			return badSpec("fixed is negative (%d)", s.Fixed)
		}
		if s.ClumpSize < 0 || (s.ClumpSize > 1 && s.Kind != SplitRandom) {
			return badSpec("clump_size %d: only split_random takes a positive clump size", s.ClumpSize)
		}
	case SplitHash:
		if len(s.Columns) == 0 {
			return badSpec("split_hash needs at least one column")
		}
		if len(s.Weights) == 0 {
			return badSpec("split_hash needs weights")
		}
		var total int64
		for i, w := range append(slices.Clone(s.Weights), s.DiscardWeight) {
			switch {
			case w < 0 && i == len(s.Weights):
				return badSpec("discard_weight is negative (%d)", w)
			case w < 0:
				return badSpec("weight %d is negative (%d)", i, w)
			case total > math.MaxInt64-w:
				return badSpec("weights %v and discard_weight %d sum beyond %d", s.Weights, s.DiscardWeight, int64(math.MaxInt64))
			case i == len(s.Weights) && total == 0:
				return badSpec("split_hash weights %v sum to 0: they are integer shares, e.g. [95, 5] for 95 %% and 5 %%", s.Weights)
			}
			total += w
		}
	case SplitCalculated:
		if s.Expr == "" {
			return badSpec("split_calculated needs an expression")
		}
		if len(s.Names) == 0 {
			return badSpec("split_calculated needs split_names: the number of splits")
		}
	default:
		return badSpec("unknown split kind %q (want random, sequential, hash or calculated)", s.Kind)
	}
	if n := max(len(s.Ratios), len(s.Counts), len(s.Weights), len(s.Names)); n > MaxSplits {
		return badSpec("%d splits, more than the %d allowed", n, MaxSplits)
	}
	if len(s.Names) > 0 && s.Fixed == 0 {
		if n := s.numSplits(0); s.Kind != SplitCalculated && n != len(s.Names) {
			return badSpec("%d split names for %d splits", len(s.Names), n)
		}
	}
	seen := map[string]bool{}
	for _, n := range s.Names {
		if n == "" || seen[n] {
			return badSpec("split names must be distinct and non-empty: %q", s.Names)
		}
		seen[n] = true
	}
	return nil
}

// sizes turns ratios, counts or a fixed size into split sizes for m rows.
func (s *SplitSpec) sizes(m int64) ([]int64, error) {
	switch {
	case len(s.Counts) > 0:
		var sum int64
		for _, c := range s.Counts {
			sum += c
		}
		if sum > m {
			return nil, badSpec("counts %v sum to %d, more than the %d rows kept", s.Counts, sum, m)
		}
		return s.Counts, nil
	case s.Fixed > 0:
		n := m / s.Fixed
		if n == 0 {
			return nil, badSpec("fixed split size %d exceeds the %d rows kept", s.Fixed, m)
		}
		if n > MaxSplits {
			return nil, badSpec("fixed split size %d makes %d splits of the %d rows kept, more than the %d allowed", s.Fixed, n, m, MaxSplits)
		}
		out := make([]int64, n)
		for i := range out {
			out[i] = s.Fixed
		}
		return out, nil
	}
	out := make([]int64, len(s.Ratios))
	var cum float64
	var prev int64
	for i, r := range s.Ratios {
		cum += r
		end := min(int64(math.Floor(float64(m)*cum+0.5)), m)
		out[i] = end - prev
		prev = end
	}
	return out, nil
}

// validateGroups checks that the split and the shuffle keep every group whole:
// a group is assigned to one split only by a hash of columns of its key, and
// is shuffled as one unit, never cut into clumps or windows.
func (s *Spec) validateGroups() error {
	if len(s.GroupBy) == 0 {
		return nil
	}
	if slices.Contains(s.GroupBy, "") || len(slices.Compact(slices.Sorted(slices.Values(s.GroupBy)))) != len(s.GroupBy) {
		return badSpec("group_by columns must be distinct and non-empty: %q", s.GroupBy)
	}
	if sp := s.Split; sp != nil {
		if sp.Kind != SplitHash {
			return badSpec("group_by %q with split_%s could cut a group between splits: split groups with split_hash on columns of the group key", s.GroupBy, sp.Kind)
		}
		for _, c := range sp.Columns {
			if !slices.Contains(s.GroupBy, c) {
				return badSpec("group_by %q with split_hash on %q could cut a group between splits: hash only columns of the group key", s.GroupBy, sp.Columns)
			}
		}
	}
	if sh := s.Shuffle; sh != nil && (sh.ClumpSize > 1 || sh.ClumpSize == AutoClump || sh.Window > 0) {
		return badSpec("group_by %q shuffles whole groups: clump_size and window do not apply", s.GroupBy)
	}
	return nil
}

func (sh *ShuffleSpec) validate() error {
	if sh.ClumpSize < 0 && sh.ClumpSize != AutoClump {
		return badSpec("clump_size is negative (%d)", sh.ClumpSize)
	}
	if sh.Window < 0 {
		return badSpec("window is negative (%d)", sh.Window)
	}
	return nil
}
