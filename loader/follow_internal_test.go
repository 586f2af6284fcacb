package loader

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/croupier-data/croupier/internal/seedtest"
)

// plan forms every round log completes from pos. With
// MaxVersionsBehindNewest, round r is decided when version After+1+(3r mod 5)
// is committed, that one being the newest: as a learner slower than the
// writers, by turns, finds them.
func plan(t *testing.T, log *versionLog, fo *FollowOptions, opts *Options, pos FollowPosition) []Round {
	var out []Round
	for {
		if fo.MaxVersionsBehindNewest != nil && pos.Newest == 0 {
			if n := pos.After + 1 + 3*pos.Round%5; n <= log.latest() {
				pos.Newest = n
			}
		}
		r, ok, err := planRound(pos, log, fo, opts)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return out
		}
		out = append(out, r)
		pos = r.next
	}
}

// randomLog returns a log of 1 to 30 versions of 0 to 49 rows each, in
// groups of 1 to 5 adjacent rows when grouped; filtered, a fifth of the rows
// dropped (every row a group of its own when not grouped); with lengths of
// 0 to 9.
func randomLog(rng *rand.Rand, grouped, filtered, lengths bool) versionLog {
	first := 1 + rng.Int64N(3)
	log := versionLog{first: first, start: rng.Int64N(50), grouped: grouped || filtered}
	end := log.start
	var kept int64
	for range 1 + rng.IntN(30) {
		next := end + rng.Int64N(50)
		step := func() int64 { return 1 }
		if grouped {
			step = func() int64 { return 1 + rng.Int64N(5) }
		}
		for s := end; log.grouped && s < next; s += step() {
			log.groups = append(log.groups, s)
		}
		for id := end; id < next; id++ {
			if lengths {
				log.lengths = append(log.lengths, uint32(rng.IntN(10)))
			}
			if filtered {
				drop := rng.IntN(5) == 0
				log.dropped = append(log.dropped, drop)
				if !drop {
					kept++
				}
			}
		}
		if filtered {
			log.keptEnds = append(log.keptEnds, kept)
		}
		end = next
		log.ends = append(log.ends, end)
		log.heads = append(log.heads, "h")
	}
	if filtered {
		log.kept = []int{}
		for g, s := range log.groups {
			if log.size(s) > 0 {
				log.kept = append(log.kept, g)
			}
		}
	}
	return log
}

// prefix is log as it was when its first n versions had landed.
func prefix(log versionLog, n int) versionLog {
	part := log
	part.ends, part.heads = log.ends[:n], log.heads[:n]
	rows := log.ends[n-1] - log.start
	if log.grouped {
		k, _ := slices.BinarySearch(log.groups, log.ends[n-1])
		part.groups = log.groups[:k]
		if log.kept != nil {
			j, _ := slices.BinarySearch(log.kept, k)
			part.kept = log.kept[:j]
		}
	}
	if log.dropped != nil {
		part.dropped, part.keptEnds = log.dropped[:rows], log.keptEnds[:n]
	}
	if log.lengths != nil {
		part.lengths = log.lengths[:rows]
	}
	return part
}

// TestRoundRuleProperty checks the round rule on random version sizes,
// groups and options: the rounds formed while versions land one by one are
// those formed from all of them at once (a pure function of the committed
// versions); no row is dealt twice within a round; every group is dealt
// whole, in one step, or carried whole; rows are accounted for: every row of
// a version is dealt, carried or skipped by the staleness rule; replayed
// groups are groups of earlier rounds within the staleness rule, as many as
// asked when there are enough; carries are shorter than a step and, without
// groups, the newest rows, dealt first in the round after.
func TestRoundRuleProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(seedtest.Seed(t), 1))
	for iter := range 600 {
		grouped, tokens := rng.IntN(2) == 0, rng.IntN(2) == 0
		log := randomLog(rng, grouped, rng.IntN(2) == 0, tokens)
		first := log.first
		fo := FollowOptions{StartVersion: first}
		if grouped {
			fo.GroupBy = []string{"key"}
		}
		if rng.IntN(2) == 0 {
			fo.RowsPerRound = 1 + rng.Int64N(120)
		}
		switch rng.IntN(3) {
		case 1:
			fo.ReplayCount = rng.Int64N(20)
		case 2:
			fo.ReplayFraction = rng.Float64() * 1.5
		}
		if rng.IntN(2) == 0 {
			k := rng.Int64N(6)
			fo.MaxVersionsBehind = &k
		}
		if rng.IntN(2) == 0 {
			k := rng.Int64N(4)
			fo.MaxVersionsBehindNewest = &k
		}
		opts := Options{GlobalBatchSize: 1 + rng.Int64N(16), ShuffleSeed: rng.Uint64()}
		if tokens {
			fo.Lengths = "n"
			opts = Options{TokensPerStep: 10 + rng.Int64N(60), Oversize: OversizeTruncate, ShuffleSeed: opts.ShuffleSeed}
		}
		all := plan(t, &log, &fo, &opts, FollowPosition{After: first - 1})
		// Versions landing one at a time form the same rounds.
		var got []Round
		pos := FollowPosition{After: first - 1}
		for n := range log.ends {
			part := prefix(log, n+1)
			more := plan(t, &part, &fo, &opts, pos)
			got = append(got, more...)
			if len(more) > 0 {
				pos = more[len(more)-1].next
			}
		}
		if len(got) != len(all) {
			t.Fatalf("iter %d: %d rounds formed as versions landed, %d from all of them", iter, len(got), len(all))
		}
		for i := range all {
			a, b := all[i], got[i]
			if a.Version != b.Version || a.Steps != b.Steps || !slices.Equal(a.laid.order, b.laid.order) || !slices.Equal(a.next.Carry, b.next.Carry) {
				t.Fatalf("iter %d round %d: differs when versions land one by one: version %d/%d, steps %d/%d", iter, i, a.Version, b.Version, a.Steps, b.Steps)
			}
		}
		step := int64(0)
		for i, r := range all {
			if r.Round != int64(i) || r.Step != step {
				t.Fatalf("iter %d: round %d at index %d starts at step %d, want %d", iter, r.Round, i, r.Step, step)
			}
			step += r.Steps
			checkRound(t, iter, &log, &fo, &opts, r)
		}
	}
}

// checkRound checks one round formed from log.
func checkRound(t *testing.T, iter int, log *versionLog, fo *FollowOptions, opts *Options, r Round) {
	t.Helper()
	order, carry, g, keyed := r.laid.order, r.next.Carry, opts.GlobalBatchSize, len(fo.GroupBy) > 0
	if opts.TokensPerStep == 0 && (int64(len(carry)) >= g || int64(len(order))/g != r.Steps || (!keyed && int64(len(order)) != r.Steps*g)) {
		t.Fatalf("iter %d round %d: %d rows in %d steps of %d, %d carried", iter, r.Round, len(order), r.Steps, g, len(carry))
	}
	if opts.TokensPerStep > 0 {
		checkTokenRound(t, iter, log, opts, r)
	}
	dealt := append(slices.Clone(order), carry...)
	slices.Sort(dealt)
	if len(slices.Compact(slices.Clone(dealt))) != len(dealt) {
		t.Fatalf("iter %d round %d: a row is dealt twice", iter, r.Round)
	}
	if int64(len(dealt)) != r.NewRows+r.ReplayedRows {
		t.Fatalf("iter %d round %d: %d rows, %d new and %d replayed", iter, r.Round, len(dealt), r.NewRows, r.ReplayedRows)
	}
	for _, id := range dealt {
		if log.dropped != nil && log.dropped[int64(id)-log.start] {
			t.Fatalf("iter %d round %d: row %d, which the filter drops, is dealt or carried", iter, r.Round, id)
		}
	}
	arrived := int64(len(r.Carry)) + log.rowsStart(r.Version+1) - log.rowsStart(r.After+1)
	if k := fo.MaxVersionsBehindNewest; k != nil && (r.Newest <= r.After || r.Version < r.Newest-*k || (r.Version > max(r.After+1, r.Newest-*k) && fo.RowsPerRound == 0)) {
		t.Fatalf("iter %d round %d: after version %d, decided at newest %d, it ends at version %d", iter, r.Round, r.After, r.Newest, r.Version)
	}
	if r.NewRows+r.SkippedRows+r.FilteredRows != arrived {
		t.Fatalf("iter %d round %d: %d new, %d skipped and %d filtered of %d rows carried or added", iter, r.Round, r.NewRows, r.SkippedRows, r.FilteredRows, arrived)
	}
	// Groups whole: a group's kept rows follow one another in order,
	// starting where a group of the laid order starts, or are all carried.
	for p := 0; p < len(order); {
		rows := log.rowsOf(log.groupStart(int64(order[p])), nil)
		if len(order)-p < len(rows) || !slices.Equal(order[p:p+len(rows)], rows) {
			t.Fatalf("iter %d round %d: the group at position %d is not whole", iter, r.Round, p)
		}
		if !slices.Contains(r.laid.starts, int64(p)) {
			t.Fatalf("iter %d round %d: no group starts at position %d", iter, r.Round, p)
		}
		p += len(rows)
	}
	if keyed && opts.TokensPerStep == 0 {
		d := Deal{M: int64(len(order)), S: 1, G: g, W: 1, DropLast: true, Grouped: true}
		if d.Steps() != r.Steps {
			t.Fatalf("iter %d round %d: a grouped deal of %d rows has %d steps, the round %d", iter, r.Round, len(order), d.Steps(), r.Steps)
		}
	}
	for _, id := range carry {
		for _, row := range log.rowsOf(log.groupStart(int64(id)), nil) {
			if !slices.Contains(carry, row) {
				t.Fatalf("iter %d round %d: the group of row %d is carried in part", iter, r.Round, id)
			}
		}
	}
	// Without groups the rows carried are the newest of those not replayed,
	// and the rows carried in are dealt right after the replayed ones: they
	// wait one round at most unless the replay fills the round.
	if !keyed && len(carry) > 0 {
		for _, id := range order {
			if replayed := log.versionOf(id) <= r.After && !slices.Contains(r.Carry, id); !replayed && id > carry[0] {
				t.Fatalf("iter %d round %d: row %d is carried, row %d newer is dealt", iter, r.Round, carry[0], id)
			}
		}
		if opts.TokensPerStep == 0 && r.ReplayedRows+int64(len(r.Carry)) <= r.Steps*g {
			for _, id := range r.Carry {
				if slices.Contains(carry, id) {
					t.Fatalf("iter %d round %d: row %d is carried again", iter, r.Round, id)
				}
			}
		}
	}
	lo := log.first
	if fo.MaxVersionsBehind != nil {
		lo = max(lo, r.Version-*fo.MaxVersionsBehind)
	}
	if k := fo.MaxVersionsBehindNewest; k != nil {
		lo = max(lo, max(r.Newest, r.Version)-*k)
	}
	var replayed []int64
	for _, id := range dealt {
		v := log.versionOf(id)
		if v < lo || v > r.Version {
			t.Fatalf("iter %d round %d: row %d of version %d outside [%d, %d]", iter, r.Round, id, v, lo, r.Version)
		}
		if s := log.groupStart(int64(id)); v <= r.After && !slices.Contains(r.Carry, log.rowsOf(s, nil)[0]) && !slices.Contains(replayed, s) {
			replayed = append(replayed, s)
		}
	}
	var freshCarried []int64
	for _, id := range r.Carry {
		if s := log.groupStart(int64(id)); log.versionOf(id) >= lo && !slices.Contains(freshCarried, s) {
			freshCarried = append(freshCarried, s)
		}
	}
	older, _ := log.groupsIn(log.rowsStart(lo), log.rowsStart(max(r.After+1, log.first)))
	older = max(older-int64(len(freshCarried)), 0)
	if fo.ReplayCount > 0 && int64(len(replayed)) != min(fo.ReplayCount, older) {
		t.Fatalf("iter %d round %d: %d groups replayed, %d asked of %d", iter, r.Round, len(replayed), fo.ReplayCount, older)
	}
}

// checkTokenRound checks the token-budget steps of a round: the loader
// cuts the round's order into its steps, each within the budget or a lone
// group longer than it, and what it carries holds at most one step's tokens
// (or one group).
func checkTokenRound(t *testing.T, iter int, log *versionLog, opts *Options, r Round) {
	t.Helper()
	d, err := PlanTokens(context.Background(), r.dealt(), opts.TokensPerStep, 1, OversizeTruncate)
	if err != nil {
		t.Fatal(err)
	}
	if d.Steps() != r.Steps {
		t.Fatalf("iter %d round %d: %d token steps, the round says %d", iter, r.Round, d.Steps(), r.Steps)
	}
	tokens := func(ids []uint64) (n int64) {
		for _, id := range ids {
			n += int64(log.lengths[int64(id)-log.start])
		}
		return n
	}
	for step := range d.Steps() {
		p0, p1 := d.Positions(step)
		i, _ := slices.BinarySearch(r.laid.starts, p0)
		if n := tokens(r.laid.order[p0:p1]); n > opts.TokensPerStep && (i+1 < len(r.laid.starts) && r.laid.starts[i+1] < p1) {
			t.Fatalf("iter %d round %d step %d: %d tokens of several groups, over %d", iter, r.Round, step, n, opts.TokensPerStep)
		}
	}
	carry := r.next.Carry
	if n := tokens(carry); n > opts.TokensPerStep && len(log.rowsOf(log.groupStart(int64(carry[0])), nil)) != len(carry) {
		t.Fatalf("iter %d round %d: %d tokens carried, over %d", iter, r.Round, n, opts.TokensPerStep)
	}
}
