package loader

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/croupier-data/croupier/internal/seedtest"
)

// plan forms every round log completes from pos.
func plan(log *versionLog, fo *FollowOptions, g int64, seed uint64, pos FollowPosition) []Round {
	var out []Round
	for {
		r, ok := planRound(pos, log, fo, g, seed)
		if !ok {
			return out
		}
		out = append(out, r)
		pos = r.next
	}
}

// TestRoundRuleProperty checks the round rule on random version sizes and
// options: the rounds formed while versions land one by one are those formed
// from all of them at once (a pure function of the committed versions); no
// row is dealt twice within a round; rows are accounted for: every row of a
// version is dealt, carried or skipped by the staleness rule; replayed rows
// are rows of earlier rounds within the staleness rule; carries are shorter
// than a step.
func TestRoundRuleProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(seedtest.Seed(t), 1))
	for iter := range 300 {
		first := 1 + rng.Int64N(3)
		log := versionLog{first: first, start: rng.Int64N(50)}
		end := log.start
		for range 1 + rng.IntN(30) {
			end += rng.Int64N(50)
			log.ends = append(log.ends, end)
			log.heads = append(log.heads, "h")
		}
		fo := FollowOptions{StartVersion: first}
		if rng.IntN(2) == 0 {
			fo.RowsPerRound = 1 + rng.Int64N(120)
		}
		switch rng.IntN(3) {
		case 1:
			fo.ReplayRows = rng.Int64N(20)
		case 2:
			fo.ReplayFraction = rng.Float64() * 1.5
		}
		if rng.IntN(2) == 0 {
			k := rng.Int64N(6)
			fo.MaxVersionsBehind = &k
		}
		g, seed := 1+rng.Int64N(16), rng.Uint64()
		all := plan(&log, &fo, g, seed, FollowPosition{After: first - 1})
		// Versions landing one at a time form the same rounds.
		var got []Round
		pos := FollowPosition{After: first - 1}
		for n := range log.ends {
			part := versionLog{first: first, start: log.start, ends: log.ends[:n+1], heads: log.heads[:n+1]}
			more := plan(&part, &fo, g, seed, pos)
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
			if a.Version != b.Version || a.Steps != b.Steps || !slices.Equal(a.order, b.order) || !slices.Equal(a.next.Carry, b.next.Carry) {
				t.Fatalf("iter %d round %d: differs when versions land one by one: version %d/%d, steps %d/%d", iter, i, a.Version, b.Version, a.Steps, b.Steps)
			}
		}
		step := int64(0)
		for i, r := range all {
			if r.Round != int64(i) || r.Step != step {
				t.Fatalf("iter %d: round %d at index %d starts at step %d, want %d", iter, r.Round, i, r.Step, step)
			}
			step += r.Steps
			dealt := append(slices.Clone(r.order), r.next.Carry...)
			if int64(len(r.order)) != r.Steps*g || int64(len(r.next.Carry)) >= g {
				t.Fatalf("iter %d round %d: %d rows in %d steps of %d, %d carried", iter, i, len(r.order), r.Steps, g, len(r.next.Carry))
			}
			slices.Sort(dealt)
			if len(slices.Compact(slices.Clone(dealt))) != len(dealt) {
				t.Fatalf("iter %d round %d: a row is dealt twice", iter, i)
			}
			if int64(len(dealt)) != r.NewRows+r.ReplayedRows {
				t.Fatalf("iter %d round %d: %d rows, %d new and %d replayed", iter, i, len(dealt), r.NewRows, r.ReplayedRows)
			}
			arrived := int64(len(r.Carry)) + log.rowsStart(r.Version+1) - log.rowsStart(r.After+1)
			if r.NewRows+r.SkippedRows != arrived {
				t.Fatalf("iter %d round %d: %d new and %d skipped of %d rows carried or added", iter, i, r.NewRows, r.SkippedRows, arrived)
			}
			lo := first
			if fo.MaxVersionsBehind != nil {
				lo = max(lo, r.Version-*fo.MaxVersionsBehind)
			}
			replayed := int64(0)
			for _, id := range dealt {
				if v := log.versionOf(id); v < lo || v > r.Version {
					t.Fatalf("iter %d round %d: row %d of version %d outside [%d, %d]", iter, i, id, v, lo, r.Version)
				}
				if v := log.versionOf(id); v <= r.After && !slices.Contains(r.Carry, id) {
					replayed++
				}
			}
			if replayed != r.ReplayedRows {
				t.Fatalf("iter %d round %d: %d rows of earlier rounds, %d replayed", iter, i, replayed, r.ReplayedRows)
			}
			freshCarried := int64(0)
			for _, id := range r.Carry {
				if log.versionOf(id) >= lo {
					freshCarried++
				}
			}
			older := max(log.rowsStart(max(r.After+1, first))-log.rowsStart(lo)-freshCarried, 0)
			if fo.ReplayRows > 0 && replayed != min(fo.ReplayRows, older) {
				t.Fatalf("iter %d round %d: %d replayed, %d asked of %d", iter, i, replayed, fo.ReplayRows, older)
			}
		}
	}
}
