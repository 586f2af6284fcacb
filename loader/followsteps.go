package loader

import (
	"context"

	"github.com/croupier-data/croupier/core/errcode"
)

// DealtStep is one global step of following as a run deals it: the round
// that holds it, and each rank's row ids, rank 0's first, with the version
// that added each row.
type DealtStep struct {
	Step     int64      `json:"step"`
	Round    Round      `json:"round"`
	Ranks    [][]uint64 `json:"ranks"`
	Versions [][]int64  `json:"versions"`
}

// Steps returns global steps from to to−1 of following, as a run of this
// follower deals them at every world size: the question "which rows trained
// this checkpoint" answered for a range of steps at once. The rounds are
// formed from pos on, pos being where a round starts at or before step from
// (Start, or a checkpoint's Position); a pos after from is replaced by
// Start. Rounds are formed of the versions committed now, without waiting
// for more: a step of a round whose versions are not committed yet is
// errcode.NotFound. Rounds do not depend on when versions landed, only on
// which did, so the steps are those the run dealt.
func (f *Follower) Steps(ctx context.Context, pos FollowPosition, from, to int64) ([]DealtStep, error) {
	const op = "deal"
	if from < 0 || to < from {
		return nil, errcode.New(errcode.InvalidArgument, op, f.table.URI(), "steps %d to %d: want 0 <= from <= to", from, to)
	}
	if pos.Step > from {
		pos = f.Start()
	}
	out := make([]DealtStep, 0, to-from)
	for step := from; step < to; {
		r, ok, _, err := f.round(ctx, pos, false)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, errcode.New(errcode.NotFound, op, f.table.URI(),
				"step %d is in a round whose versions are not committed yet: the rounds formed end before step %d, after version %d",
				step, pos.Step, pos.After)
		}
		pos = r.Next()
		if step >= r.Step+r.Steps {
			continue
		}
		l, err := f.Loader(ctx, &r)
		if err != nil {
			return nil, err
		}
		for ; step < min(to, r.Step+r.Steps); step++ {
			ranks, err := l.Step(ctx, 0, step-r.Step)
			if err != nil {
				l.Close()
				return nil, err
			}
			d := DealtStep{Step: step, Round: r, Ranks: ranks, Versions: make([][]int64, len(ranks))}
			for i, ids := range ranks {
				d.Versions[i] = make([]int64, len(ids))
				for j, id := range ids {
					d.Versions[i][j], _ = f.VersionOf(id)
				}
			}
			out = append(out, d)
		}
		l.Close()
	}
	return out, nil
}
