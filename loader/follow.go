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
	// GroupBy, when set, deals groups whole: adjacent rows of one version
	// with equal values in these columns (as permutation.Spec.GroupBy
	// compares them) go to one step and one rank, are carried and replayed
	// together. Without it every row is a group of its own.
	GroupBy []string `json:"group_by"`
	// ReplayCount adds this many groups (rows, without GroupBy) of earlier
	// rounds to each round; ReplayFraction, ⌊fraction × the round's new
	// groups⌋. At most one is set; the sample is drawn from the versions the
	// staleness rule keeps.
	ReplayCount    int64   `json:"replay_count"`
	ReplayFraction float64 `json:"replay_fraction"`
	// MaxVersionsBehind, when set to k, keeps only rows of versions at most k
	// behind the round's last version: v ≥ v_r − k. Older rows, new or
	// carried, are skipped and counted (FollowStats). nil: no limit.
	MaxVersionsBehind *int64 `json:"max_versions_behind"`
	// MaxVersionsBehindNewest, when set to k, bounds the lag against what
	// was written: round r keeps only rows of versions v ≥ N_r − k, N_r
	// being the newest committed version when the round was decided
	// (FollowPosition.Newest), or v_r when later, and a round starts no
	// earlier than version N_r − k, skipping the versions before. Older
	// rows, new or carried, are skipped and counted (FollowStats). The
	// first process to need a round decides N_r and records it in the table
	// (table.Table.Decide), so that every rank, worker and resumed run
	// deals the same round. A round is decided when a stream first needs
	// its first step: reading ahead does not decide it, so the stream of
	// the next round opens then. nil: no such limit.
	MaxVersionsBehindNewest *int64 `json:"max_versions_behind_newest,omitempty"`
	// Run names the run whose decisions (MaxVersionsBehindNewest) the table
	// records: runs of equal options and Run share them, and so deal the
	// same rounds; another Run decides afresh.
	Run string `json:"run,omitempty"`
	// Filter, a SQL boolean expression (as permutation.Spec.Filter), drops
	// the rows of each version where it is false or null before anything
	// else: they are neither dealt, carried, replayed nor skipped, only
	// counted (FollowStats.FilteredRows), and never read but for the
	// filter's columns. A group keeps its other rows. "": no filter.
	Filter string `json:"filter,omitempty"`
	// Lengths names the column giving each row's length (as
	// permutation.Spec.Lengths reads it), which token-budget steps
	// (Options.TokensPerStep) need.
	Lengths string `json:"lengths,omitempty"`
	// StartVersion is the first version whose rows are dealt; 0 means 1.
	StartVersion int64 `json:"start_version"`
	// WaitTimeout bounds the wait for a version that completes the next
	// round, counted from the last version that landed: when it passes, the
	// stream ends (io.EOF) and FollowStats.WaitedOut says so. 0 means
	// DefaultWaitTimeout; negative, no limit.
	WaitTimeout time.Duration `json:"wait_timeout_ns,omitempty"`
	// PollInterval is the pause between listings of the table's versions
	// while waiting; 0 means DefaultPollInterval.
	PollInterval time.Duration `json:"poll_interval_ns,omitempty"`
}

// check validates the options, filling in defaults.
func (fo *FollowOptions) check(uri string) error {
	bad := func(format string, args ...any) error {
		return errcode.New(errcode.InvalidArgument, "follow", uri, format, args...)
	}
	switch {
	case fo.RowsPerRound < 0:
		return bad("rows_per_round is %d; it must be positive (0: one version per round)", fo.RowsPerRound)
	case fo.ReplayCount < 0:
		return bad("replay count %d is negative", fo.ReplayCount)
	case fo.ReplayFraction < 0 || math.IsNaN(fo.ReplayFraction) || math.IsInf(fo.ReplayFraction, 0):
		return bad("replay fraction %v must be a finite number ≥ 0", fo.ReplayFraction)
	case fo.ReplayCount > 0 && fo.ReplayFraction > 0:
		return bad("replay is a count (%d) or a fraction (%v), not both", fo.ReplayCount, fo.ReplayFraction)
	case fo.MaxVersionsBehind != nil && *fo.MaxVersionsBehind < 0:
		return bad("max_versions_behind is %d; it must be ≥ 0 (None: no limit)", *fo.MaxVersionsBehind)
	case fo.MaxVersionsBehindNewest != nil && *fo.MaxVersionsBehindNewest < 0:
		return bad("max_versions_behind_newest is %d; it must be ≥ 0 (None: no limit)", *fo.MaxVersionsBehindNewest)
	case fo.Run != "" && fo.MaxVersionsBehindNewest == nil:
		return bad("run %q names the decisions of max_versions_behind_newest, which is not set", fo.Run)
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
	// Carry are the row ids, ascending, that the round before carried: its
	// newest rows past its last full step (see planRound).
	Carry []uint64 `json:"carry"`
	// Newest is N_r, the newest committed version when the round was
	// decided, with MaxVersionsBehindNewest; 0 until it is decided (the
	// position of a round not formed yet).
	Newest int64 `json:"newest,omitempty"`
}

// equal reports whether p and q are the same position.
func (p *FollowPosition) equal(q *FollowPosition) bool {
	return p.Round == q.Round && p.Step == q.Step && p.After == q.After && p.Head == q.Head && slices.Equal(p.Carry, q.Carry) &&
		p.Newest == q.Newest
}

// Round is one round of following: the rows it deals, in dealing order.
type Round struct {
	FollowPosition
	Version int64 `json:"version"` // v_r, the last version whose rows it deals
	Steps   int64 `json:"steps"`   // global steps: the groups of its order starting before Steps·G
	// NewRows are the rows of versions (After, Version] and the carried rows
	// it deals; ReplayedRows, rows of earlier rounds added; SkippedRows,
	// rows the staleness rule dropped, SkippedVersions the versions all of
	// whose rows it dropped.
	NewRows         int64 `json:"new_rows"`
	ReplayedRows    int64 `json:"replayed_rows"`
	SkippedRows     int64 `json:"skipped_rows"`
	SkippedVersions int64 `json:"skipped_versions"`
	FilteredRows    int64 `json:"filtered_rows"` // of versions (After, Version], dropped by Filter

	laid laidOut        // the groups dealt, in dealing order
	next FollowPosition // of the round after
}

// laidOut is groups laid end to end: their rows the filter keeps, in order,
// where each group starts, and with Lengths each row's length.
type laidOut struct {
	order   []uint64
	starts  []int64
	lengths []uint64
	column  string // Lengths
	grouped bool   // a group is a unit (else every row is)
}

// layOut lays groups end to end while each starts before position limit.
func layOut(log *versionLog, fo *FollowOptions, groups []int64, limit int64) laidOut {
	out := laidOut{column: fo.Lengths, grouped: len(fo.GroupBy) > 0}
	for _, s := range groups {
		p := int64(len(out.order))
		if p >= limit {
			break
		}
		out.starts = append(out.starts, p)
		out.order = log.rowsOf(s, out.order)
		if log.lengths != nil {
			for _, id := range out.order[p:] {
				out.lengths = append(out.lengths, uint64(log.lengths[int64(id)-log.start]))
			}
		}
	}
	return out
}

// tokenSteps cuts o into token-budget steps as opts say.
func tokenSteps(o laidOut, opts *Options) (*TokenDeal, error) {
	return PlanTokens(context.Background(), o.dealt("follow"), opts.TokensPerStep, 1, opts.Oversize)
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
	// With GroupBy or Filter, groups are the first row ids of the groups,
	// ascending (every version's first row among them; each row's own with
	// Filter alone); grouped is false without either, and every row is a
	// group of its own.
	grouped bool
	groups  []int64
	// With Filter, dropped says which rows from start on it drops, kept
	// lists the indexes in groups of the groups holding a row it keeps, and
	// keptEnds counts the rows it keeps up to the end of each version.
	dropped  []bool
	kept     []int
	keptEnds []int64
	// With Lengths, lengths holds each row's length, from start on.
	lengths []uint32
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

// group returns the index in groups of the group holding row id.
func (l *versionLog) group(id int64) int {
	i, found := slices.BinarySearch(l.groups, id)
	if !found {
		i--
	}
	return i
}

// groupStart returns the first row of the group holding row id.
func (l *versionLog) groupStart(id int64) int64 {
	if !l.grouped {
		return id
	}
	return l.groups[l.group(id)]
}

// groupEnd returns the end of the group starting at row s.
func (l *versionLog) groupEnd(s int64) int64 {
	if !l.grouped {
		return s + 1
	}
	if i := l.group(s) + 1; i < len(l.groups) {
		return l.groups[i]
	}
	return l.rowsStart(l.latest() + 1)
}

// groupsIn returns the number of groups starting in rows [from, to) that
// hold a row the filter keeps, and a function giving the first row of the
// i-th of them.
func (l *versionLog) groupsIn(from, to int64) (int64, func(i int64) int64) {
	if !l.grouped {
		return max(to-from, 0), func(i int64) int64 { return from + i }
	}
	a, _ := slices.BinarySearch(l.groups, from)
	b, _ := slices.BinarySearch(l.groups, to)
	if l.kept != nil {
		a, _ = slices.BinarySearch(l.kept, a)
		b, _ = slices.BinarySearch(l.kept, b)
		return int64(max(b-a, 0)), func(i int64) int64 { return l.groups[l.kept[a+int(i)]] }
	}
	return int64(max(b-a, 0)), func(i int64) int64 { return l.groups[a+int(i)] }
}

// rowsOf appends to ids the rows of the group starting at row s that the
// filter keeps.
func (l *versionLog) rowsOf(s int64, ids []uint64) []uint64 {
	for id := s; id < l.groupEnd(s); id++ {
		if l.dropped == nil || !l.dropped[id-l.start] {
			ids = append(ids, uint64(id))
		}
	}
	return ids
}

// size is the number of rows the filter keeps of the group starting at s.
func (l *versionLog) size(s int64) int64 {
	if l.dropped == nil {
		return l.groupEnd(s) - s
	}
	var n int64
	for id := s; id < l.groupEnd(s); id++ {
		if !l.dropped[id-l.start] {
			n++
		}
	}
	return n
}

// keptOf is the number of rows of version v the filter keeps.
func (l *versionLog) keptOf(v int64) int64 {
	if l.keptEnds == nil {
		return l.rowsStart(v+1) - l.rowsStart(v)
	}
	i := v - l.first
	if i == 0 {
		return l.keptEnds[0]
	}
	return l.keptEnds[i] - l.keptEnds[i-1]
}

// versionOf returns the version that added row id.
func (l *versionLog) versionOf(id uint64) int64 {
	return l.first + int64(sort.Search(len(l.ends), func(i int) bool { return uint64(l.ends[i]) > id }))
}

// planRound forms the round at pos from the versions of log, or returns ok
// false while log lacks the versions that complete it (or, with
// MaxVersionsBehindNewest, pos lacks its decision). g is the global batch
// size, seed the run's shuffle seed. The rule (docs/concepts.md), in groups
// (rows, without GroupBy):
//
//  1. The round's first version is f = After+1, or with
//     MaxVersionsBehindNewest k′, max(After+1, Newest − k′). v_r is f
//     without RowsPerRound, else the first version at which len(Carry)
//     plus the rows of versions [f, v_r] reach RowsPerRound.
//  2. Groups of versions below lo, carried or new, are skipped: lo is the
//     largest of StartVersion, v_r − k with MaxVersionsBehind k, and
//     max(Newest, v_r) − k′ with MaxVersionsBehindNewest k′.
//  3. The replay sample is ReplayCount, or ⌊ReplayFraction × the groups of
//     2⌋, groups drawn uniformly without replacement (Floyd's algorithm, key
//     DeriveKey(seed, "follow/replay/<r>")) from the groups of versions
//     [lo, After] not carried, or all of them when fewer.
//  4. The groups of 3 in ascending order (of their first rows), then those
//     of 2, n rows laid end to end: those starting at or past ⌊n/G⌋·G, the
//     newest, carry into round r+1. The others are shuffled (Fisher–Yates,
//     key DeriveKey(seed, "follow/round/<r>")) and laid end to end: the
//     groups starting before ⌊n/G⌋·G make the round's ⌊n/G⌋ steps, any
//     other (only when groups differ in size) carries too.
//     With TokensPerStep T, the groups laid end to end are cut into token
//     steps (TokenDeal, over groups when grouped): the groups of the last
//     step, the newest, carry into round r+1; the others are shuffled as
//     above, laid end to end and cut into token steps again, all of which
//     are the round's.
//
// Rows the filter drops are in no group's rows: counted, and otherwise
// passed over. The error is that of a row or group longer than T.
func planRound(pos FollowPosition, log *versionLog, fo *FollowOptions, opts *Options) (Round, bool, error) {
	vr, lo, ok := roundVersions(pos, log, fo)
	if !ok {
		return Round{}, false, nil
	}
	r := Round{FollowPosition: pos, Version: vr}
	groups, carried := r.freshGroups(log, lo)
	fresher := len(groups)
	groups = append(groups, replayGroups(pos, log, fo, opts.ShuffleSeed, lo, fresher, carried)...)
	for i, s := range groups {
		if i < fresher {
			r.NewRows += log.size(s)
		} else {
			r.ReplayedRows += log.size(s)
		}
	}
	// The replayed groups, then the others in ascending order, laid end to
	// end: the newest, past the round's last step, wait for the next round,
	// which deals them first.
	slices.Sort(groups[:fresher])
	slices.Sort(groups[fresher:])
	groups = slices.Concat(groups[fresher:], groups[:fresher])
	dealt, err := r.dealtGroups(log, fo, opts, groups)
	if err != nil {
		return Round{}, false, err
	}
	var carry []uint64
	for _, s := range groups[dealt:] {
		carry = log.rowsOf(s, carry)
	}
	// The others are shuffled and laid end to end again; with sample-count
	// steps, a group that then starts past the last step (with groups of
	// several sizes only) waits too.
	groups = groups[:dealt]
	permutation.Permute(permutation.NewRand(permutation.DeriveKey(opts.ShuffleSeed, fmt.Sprintf("follow/round/%d", pos.Round))), groups)
	limit := int64(math.MaxInt64)
	if opts.TokensPerStep == 0 {
		limit = r.Steps * opts.GlobalBatchSize
	}
	r.laid = layOut(log, fo, groups, limit)
	for _, s := range groups[len(r.laid.starts):] {
		carry = log.rowsOf(s, carry)
	}
	if opts.TokensPerStep > 0 {
		d, err := tokenSteps(r.laid, opts)
		if err != nil {
			return Round{}, false, err
		}
		r.Steps = d.Steps()
	}
	slices.Sort(carry)
	if carry == nil {
		carry = []uint64{}
	}
	r.next = FollowPosition{Round: pos.Round + 1, Step: pos.Step + r.Steps, After: vr, Head: log.head(vr), Carry: carry}
	return r, true, nil
}

// roundVersions returns the newest version vr a round after pos takes, and
// the oldest lo whose rows are fresh (steps 1 and 2 above); ok is false
// when no round can be made yet.
func roundVersions(pos FollowPosition, log *versionLog, fo *FollowOptions) (vr, lo int64, ok bool) {
	if log.latest() <= pos.After {
		return 0, 0, false
	}
	lo = log.first
	vr = pos.After + 1
	if k := fo.MaxVersionsBehindNewest; k != nil {
		if pos.Newest <= pos.After || log.latest() < pos.Newest {
			return 0, 0, false
		}
		vr = max(vr, pos.Newest-*k)
	}
	if fo.RowsPerRound > 0 {
		have := int64(len(pos.Carry))
		for ; ; vr++ {
			if vr > log.latest() {
				return 0, 0, false
			}
			have += log.keptOf(vr)
			if have >= fo.RowsPerRound {
				break
			}
		}
	}
	if k := fo.MaxVersionsBehind; k != nil {
		lo = max(lo, vr-*k)
	}
	if k := fo.MaxVersionsBehindNewest; k != nil {
		lo = max(lo, max(pos.Newest, vr)-*k)
	}
	return vr, lo, true
}

// freshGroups returns the first rows of the groups the round deals as new:
// those carried from the round before that are still fresh (carried, in
// order), then those of the versions after the round before's to r.Version,
// but for versions older than lo. It counts the rows skipped as stale and
// those the filter dropped.
func (r *Round) freshGroups(log *versionLog, lo int64) (groups, carried []int64) {
	fresh := log.rowsStart(lo) // rows below it are stale
	for _, id := range r.Carry {
		switch s := log.groupStart(int64(id)); {
		case s < fresh:
			r.SkippedRows++
		case len(carried) == 0 || carried[len(carried)-1] != s:
			carried = append(carried, s)
		}
	}
	groups = append(groups, carried...)
	for v := r.After + 1; v <= r.Version; v++ {
		from, to := log.rowsStart(v), log.rowsStart(v+1)
		r.FilteredRows += to - from - log.keptOf(v)
		if v < lo {
			r.SkippedRows += log.keptOf(v)
			r.SkippedVersions++
			continue
		}
		n, at := log.groupsIn(from, to)
		for i := range n {
			groups = append(groups, at(i))
		}
	}
	return groups, carried
}

// replayGroups draws the first rows of the groups a round after pos
// replays (step 3 above): of those of [lo, After] not carried, the replay
// count, or the replay fraction of the fresher new groups.
func replayGroups(pos FollowPosition, log *versionLog, fo *FollowOptions, seed uint64, lo int64, fresher int, carried []int64) []int64 {
	want := fo.ReplayCount
	if fo.ReplayFraction > 0 {
		want = int64(math.Floor(fo.ReplayFraction * float64(fresher)))
	}
	n, at := log.groupsIn(log.rowsStart(lo), log.rowsStart(max(pos.After+1, log.first)))
	older := n - int64(len(carried))
	if want <= 0 || older <= 0 {
		return nil
	}
	var groups []int64
	rng := permutation.NewRand(permutation.DeriveKey(seed, fmt.Sprintf("follow/replay/%d", pos.Round)))
	c := int64(0)
	for _, i := range sampleIndices(rng, older, min(want, older)) { // the i-th group not carried
		s := at(int64(i) + c)
		for c < int64(len(carried)) && carried[c] <= s {
			c++
			s = at(int64(i) + c)
		}
		groups = append(groups, s)
	}
	return groups
}

// dealtGroups returns how many of groups, laid end to end, the round deals:
// those starting before its last step's end, whose number of steps it sets
// (sample-count steps), or those before the last token step's (token
// steps); the others carry into the next round.
func (r *Round) dealtGroups(log *versionLog, fo *FollowOptions, opts *Options, groups []int64) (int, error) {
	dealt := len(groups)
	if opts.TokensPerStep > 0 {
		ascending := layOut(log, fo, groups, math.MaxInt64)
		d, err := tokenSteps(ascending, opts)
		if err != nil {
			return 0, err
		}
		if d.Steps() > 0 {
			p, _ := d.Positions(d.Steps() - 1)
			dealt, _ = slices.BinarySearch(ascending.starts, p)
		}
		return dealt, nil
	}
	g := opts.GlobalBatchSize
	r.Steps = (r.NewRows + r.ReplayedRows) / g
	var p int64
	for i, s := range groups {
		if p >= r.Steps*g {
			return i, nil
		}
		p += log.size(s)
	}
	return dealt, nil
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

// rowOrder is an Order of explicit row ids, and their lengths when column
// names the column they come from: one round's.
type rowOrder struct {
	id      string
	ids     []uint64
	lengths []uint64
	column  string
}

func (o rowOrder) ID() string            { return o.id }
func (o rowOrder) Len() int64            { return int64(len(o.ids)) }
func (o rowOrder) LengthsColumn() string { return o.column }

func (o rowOrder) Lengths(_ context.Context, start, stop int64) ([]uint64, error) {
	if o.column == "" {
		return nil, fmt.Errorf("%s records no lengths", o.id)
	}
	if start < 0 || stop > o.Len() || start > stop {
		return nil, fmt.Errorf("positions [%d, %d) out of range [0, %d)", start, stop, o.Len())
	}
	return slices.Clone(o.lengths[start:stop]), nil
}

func (o rowOrder) RowIDs(_ context.Context, start, stop int64) ([]uint64, error) {
	if start < 0 || stop > o.Len() || start > stop {
		return nil, fmt.Errorf("positions [%d, %d) out of range [0, %d)", start, stop, o.Len())
	}
	return slices.Clone(o.ids[start:stop]), nil
}

// groupedOrder is a rowOrder whose groups start at positions starts: a
// permutation.GroupedOrder, which the loader deals a group at a time.
type groupedOrder struct {
	rowOrder
	starts []int64
}

// Groups returns the positions where the groups starting in [start, stop)
// start, then the end of the last; nothing when none starts there.
func (o groupedOrder) Groups(_ context.Context, start, stop int64) ([]int64, error) {
	if start < 0 || stop > o.Len() || start > stop {
		return nil, fmt.Errorf("positions [%d, %d) out of range [0, %d)", start, stop, o.Len())
	}
	i, _ := slices.BinarySearch(o.starts, start)
	j, _ := slices.BinarySearch(o.starts, stop)
	if i == j {
		return nil, nil
	}
	end := o.Len()
	if j < len(o.starts) {
		end = o.starts[j]
	}
	return append(slices.Clone(o.starts[i:j]), end), nil
}

// dealt returns the Order of r's steps.
func (r *Round) dealt() permutation.LengthOrder {
	return r.laid.dealt(fmt.Sprintf("follow/round/%d", r.Round))
}

// dealt returns the Order of o, named id: grouped when its groups are units.
func (o laidOut) dealt(id string) permutation.LengthOrder {
	rows := rowOrder{id: id, ids: o.order, lengths: o.lengths, column: o.column}
	if !o.grouped {
		return rows
	}
	return groupedOrder{rowOrder: rows, starts: o.starts}
}
