package loader

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/permutation"
)

// Following deals a croupier table that grows while it is read, in rounds
// (docs/concepts.md, "Following a growing table"). Which rows a round deals
// is a pure function of the committed versions (the rows each added) and the
// options, never of when they were seen: every rank and worker process, and a
// run resumed from a checkpoint, forms the same rounds. The rule is planRound;
// Follower and FollowStream deal each round's order with the loader's Deal.

// Defaults of FollowOptions fields left zero.
const (
	DefaultWaitTimeout  = time.Minute
	DefaultPollInterval = 200 * time.Millisecond
)

// FollowOptions choose the rounds of following a croupier table.
// JSON names match the Python keyword arguments of croupier.Follow.
type FollowOptions struct {
	// RowsPerRound, when positive, ends round r at the first committed
	// version v_r at which the rows carried into the round and the rows of
	// versions (v_{r−1}, v_r] reach it. 0: each round takes one version.
	RowsPerRound int64 `json:"rows_per_round"`
	// ReplayRows adds this many rows of earlier rounds to each round;
	// ReplayFraction, ⌊fraction × the round's new rows⌋. At most one is
	// set; the sample is drawn from the versions the staleness rule keeps.
	ReplayRows     int64   `json:"replay_rows"`
	ReplayFraction float64 `json:"replay_fraction"`
	// MaxVersionsBehind, when set to k, keeps only rows of versions at most k
	// behind the round's last version: v ≥ v_r − k. Older rows, new or
	// carried, are skipped and counted (FollowStats). nil: no limit.
	MaxVersionsBehind *int64 `json:"max_versions_behind"`
	// StartVersion is the first version whose rows are dealt; 0 means 1.
	StartVersion int64 `json:"start_version"`
	// WaitTimeout bounds the wait for a version that completes the next
	// round, counted from the last version that landed: when it passes, the
	// stream ends (io.EOF) and FollowStats.WaitedOut says so. 0 means
	// DefaultWaitTimeout; negative, no limit.
	WaitTimeout time.Duration `json:"wait_timeout_ns"`
	// PollInterval is the pause between listings of the table's versions
	// while waiting; 0 means DefaultPollInterval.
	PollInterval time.Duration `json:"poll_interval_ns"`
}

// check validates the options, filling in defaults.
func (fo *FollowOptions) check(uri string) error {
	bad := func(format string, args ...any) error {
		return errcode.New(errcode.InvalidArgument, "follow", uri, format, args...)
	}
	switch {
	case fo.RowsPerRound < 0:
		return bad("rows_per_round is %d; it must be positive (0: one version per round)", fo.RowsPerRound)
	case fo.ReplayRows < 0:
		return bad("replay rows %d is negative", fo.ReplayRows)
	case fo.ReplayFraction < 0 || math.IsNaN(fo.ReplayFraction) || math.IsInf(fo.ReplayFraction, 0):
		return bad("replay fraction %v must be a finite number ≥ 0", fo.ReplayFraction)
	case fo.ReplayRows > 0 && fo.ReplayFraction > 0:
		return bad("replay is a number of rows (%d) or a fraction (%v), not both", fo.ReplayRows, fo.ReplayFraction)
	case fo.MaxVersionsBehind != nil && *fo.MaxVersionsBehind < 0:
		return bad("max_versions_behind is %d; it must be ≥ 0 (None: no limit)", *fo.MaxVersionsBehind)
	case fo.StartVersion < 0:
		return bad("start_version %d: versions start at 1", fo.StartVersion)
	case fo.PollInterval < 0:
		return bad("poll interval %v is negative", fo.PollInterval)
	}
	fo.StartVersion = max(fo.StartVersion, 1)
	if fo.WaitTimeout == 0 {
		fo.WaitTimeout = DefaultWaitTimeout
	}
	if fo.PollInterval == 0 {
		fo.PollInterval = DefaultPollInterval
	}
	return nil
}

// FollowPosition is where following stands when a round starts: all a
// checkpoint needs to form that round and the ones after it again.
type FollowPosition struct {
	Round int64 `json:"round"` // the round's index, from 0
	Step  int64 `json:"step"`  // the global step of its first step
	// After is the last version the rounds before dealt the rows of
	// (StartVersion − 1 before the first), and Head identifies its files
	// (table.Appended), so that a resumed run refuses a rewritten table; ""
	// before the first round.
	After int64  `json:"after"`
	Head  string `json:"head"`
	// Carry are the row ids, ascending, that the round before left over past
	// its last full step.
	Carry []uint64 `json:"carry"`
}

// Round is one round of following: the rows it deals, in dealing order.
type Round struct {
	FollowPosition
	Version int64 `json:"version"` // v_r, the last version whose rows it deals
	Steps   int64 `json:"steps"`   // global steps: the first Steps·G rows of its order
	// NewRows are the rows of versions (After, Version] and the carried rows
	// it deals; ReplayedRows, rows of earlier rounds added; SkippedRows,
	// rows the staleness rule dropped, SkippedVersions the versions all of
	// whose rows it dropped.
	NewRows         int64 `json:"new_rows"`
	ReplayedRows    int64 `json:"replayed_rows"`
	SkippedRows     int64 `json:"skipped_rows"`
	SkippedVersions int64 `json:"skipped_versions"`

	order []uint64       // the round's rows shuffled; those past Steps·G carry
	next  FollowPosition // of the round after
}

// Next returns the position of the round after r.
func (r Round) Next() FollowPosition { return r.next }

// versionLog holds the rows of consecutive committed versions first,
// first+1, …: version first+i added row ids [ends[i−1], ends[i]) (start for
// i = 0), and heads[i] identifies its files.
type versionLog struct {
	first, start int64
	ends         []int64
	heads        []string
}

// latest is the last version in the log (first − 1 when empty).
func (l *versionLog) latest() int64 { return l.first + int64(len(l.ends)) - 1 }

// rowsStart is the first row id of version v, for v in [first, latest+1].
func (l *versionLog) rowsStart(v int64) int64 {
	if v == l.first {
		return l.start
	}
	return l.ends[v-l.first-1]
}

// head identifies version v's files, "" for a version before the log.
func (l *versionLog) head(v int64) string {
	if v < l.first {
		return ""
	}
	return l.heads[v-l.first]
}

// versionOf returns the version that added row id.
func (l *versionLog) versionOf(id uint64) int64 {
	return l.first + int64(sort.Search(len(l.ends), func(i int) bool { return uint64(l.ends[i]) > id }))
}

// planRound forms the round at pos from the versions of log, or returns ok
// false while log lacks the versions that complete it. g is the global
// batch size, seed the run's shuffle seed. The rule (docs/concepts.md):
//
//  1. v_r is After+1 without RowsPerRound, else the first version at which
//     len(Carry) plus the rows of versions (After, v_r] reach RowsPerRound.
//  2. With MaxVersionsBehind k, rows of versions below lo = v_r − k, carried
//     or new, are skipped (lo is StartVersion without a limit).
//  3. The replay sample is ReplayRows, or ⌊ReplayFraction × the rows of 2⌋,
//     rows drawn uniformly without replacement (Floyd's algorithm, key
//     DeriveKey(seed, "follow/replay/<r>")) from the rows of versions
//     [lo, After] not carried, or all of them when fewer.
//  4. The rows of 2 and 3, ascending, are shuffled (Fisher–Yates, key
//     DeriveKey(seed, "follow/round/<r>")); the first ⌊n/G⌋·G are the
//     round's steps, the rest carry into round r+1.
func planRound(pos FollowPosition, log *versionLog, fo *FollowOptions, g int64, seed uint64) (Round, bool) {
	if log.latest() <= pos.After {
		return Round{}, false
	}
	vr := pos.After + 1
	if fo.RowsPerRound > 0 {
		have := int64(len(pos.Carry))
		for ; ; vr++ {
			if vr > log.latest() {
				return Round{}, false
			}
			have += log.rowsStart(vr+1) - log.rowsStart(vr)
			if have >= fo.RowsPerRound {
				break
			}
		}
	}
	lo := log.first
	if fo.MaxVersionsBehind != nil {
		lo = max(lo, vr-*fo.MaxVersionsBehind)
	}
	fresh := uint64(log.rowsStart(lo)) // rows below it are stale
	r := Round{FollowPosition: pos, Version: vr}
	var rows, carried []uint64
	for _, id := range pos.Carry {
		if id >= fresh {
			carried = append(carried, id)
		} else {
			r.SkippedRows++
		}
	}
	rows = append(rows, carried...)
	for v := pos.After + 1; v <= vr; v++ {
		from, to := log.rowsStart(v), log.rowsStart(v+1)
		if v < lo {
			r.SkippedRows += to - from
			r.SkippedVersions++
			continue
		}
		for id := from; id < to; id++ {
			rows = append(rows, uint64(id))
		}
	}
	r.NewRows = int64(len(rows))
	// Replay: rows of [fresh, start of After+1) not carried.
	want := fo.ReplayRows
	if fo.ReplayFraction > 0 {
		want = int64(math.Floor(fo.ReplayFraction * float64(r.NewRows)))
	}
	if older := log.rowsStart(max(pos.After+1, log.first)) - int64(fresh) - int64(len(carried)); want > 0 && older > 0 {
		rng := permutation.NewRand(permutation.DeriveKey(seed, fmt.Sprintf("follow/replay/%d", pos.Round)))
		picked := sampleIndices(rng, older, min(want, older))
		c := 0
		for _, i := range picked { // the i-th id of [fresh, …) that is not carried
			id := fresh + i + uint64(c)
			for c < len(carried) && carried[c] <= id {
				c++
				id++
			}
			rows = append(rows, id)
		}
		r.ReplayedRows = int64(len(picked))
	}
	slices.Sort(rows)
	permutation.Permute(permutation.NewRand(permutation.DeriveKey(seed, fmt.Sprintf("follow/round/%d", pos.Round))), rows)
	r.Steps = int64(len(rows)) / g
	r.order = rows[:r.Steps*g]
	carry := slices.Clone(rows[r.Steps*g:])
	slices.Sort(carry)
	r.next = FollowPosition{Round: pos.Round + 1, Step: pos.Step + r.Steps, After: vr, Head: log.head(vr), Carry: carry}
	return r, true
}

// sampleIndices draws k distinct integers of [0, n) uniformly (Floyd's
// algorithm) and returns them ascending.
func sampleIndices(rng *permutation.Rand, n, k int64) []uint64 {
	chosen := make(map[uint64]struct{}, k)
	out := make([]uint64, 0, k)
	for j := n - k; j < n; j++ {
		t := rng.Uint64n(uint64(j + 1))
		if _, dup := chosen[t]; dup {
			t = uint64(j)
		}
		chosen[t] = struct{}{}
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

// rowOrder is an Order of explicit row ids: one round's.
type rowOrder struct {
	id  string
	ids []uint64
}

func (o rowOrder) ID() string { return o.id }
func (o rowOrder) Len() int64 { return int64(len(o.ids)) }

func (o rowOrder) RowIDs(_ context.Context, start, stop int64) ([]uint64, error) {
	if start < 0 || stop > o.Len() || start > stop {
		return nil, fmt.Errorf("positions [%d, %d) out of range [0, %d)", start, stop, o.Len())
	}
	return slices.Clone(o.ids[start:stop]), nil
}
