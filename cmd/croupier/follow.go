package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/croupier-data/croupier/core/blockcache"
	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/loader"
)

// followFlags are the flags of deal that apply to following's checkpoint.
type followFlags struct {
	step    int64
	stepSet bool
	steps   *stepRange // --steps, nil without
	w, rank int64
	columns []string
	// column and value are --which-steps COLUMN=VALUE's, column "" without;
	// row is --row's, -1 without.
	column, value string
	row           int64
	asJSON        bool
	cache         *blockcache.Cache // may be nil
}

// followTrained is one step that trained on a row: a trained of the round
// it is in.
type followTrained struct {
	trained
	Round   int64 `json:"round"`
	Version int64 `json:"version"` // that added the row
}

type followOutput struct {
	TableURI        string     `json:"table_uri"`
	GlobalBatchSize int64      `json:"global_batch_size"`
	NumSplits       int64      `json:"num_splits"`
	WorldSize       int64      `json:"world_size"`
	ShuffleSeed     uint64     `json:"shuffle_seed"`
	StepsConsumed   int64      `json:"steps_consumed"` // the checkpoint's
	Step            int64      `json:"step"`
	Round           *roundInfo `json:"round,omitempty"`
	Ranks           []dealRank `json:"ranks,omitempty"`
	// Rows and Trained answer --which-steps and --row.
	Rows    []uint64        `json:"which_rows,omitempty"`
	Trained []followTrained `json:"trained,omitempty"`
	// Steps answers --steps.
	Steps []followStep `json:"steps,omitempty"`
}

// followStep is one step of --steps: the round holding it and each rank's
// batch, with the version that added each row.
type followStep struct {
	Step  int64      `json:"step"`
	Round roundInfo  `json:"round"`
	Ranks []dealRank `json:"ranks"`
}

// printHead prints the line that says what is followed, and how.
func (out followOutput) printHead(e *env) {
	fmt.Fprintf(e.stdout, "following %s: G=%d S=%d W=%d shuffle_seed=%d\n",
		out.TableURI, out.GlobalBatchSize, out.NumSplits, out.WorldSize, out.ShuffleSeed)
}

// roundInfo describes the round of a step.
type roundInfo struct {
	loader.Round
	Next loader.FollowPosition `json:"next"`
}

// dealFollow answers deal --checkpoint for following's state dict (Python's
// FollowingDataset.state_dict()): each rank's rows of global step --step
// (the step after the checkpoint by default) and the version that added
// each, or with --which-steps and --row the steps up to the checkpoint that
// trained on rows. Rounds are formed from the versions committed now, as
// the run formed them; a step of a round whose versions are not committed
// yet is an error.
func dealFollow(ctx context.Context, e *env, data []byte, path string, f followFlags) error {
	c, err := loader.ParseFollowCheckpoint(data, path)
	if err != nil {
		return err
	}
	if f.stepSet && f.step < 0 {
		return usagef("deal: --step is %d; it must be at least 0", f.step)
	}
	if f.w < 1 || f.rank >= f.w {
		return usagef("deal: --world-size %d and --rank %d: want at least one rank, and --rank below --world-size", f.w, f.rank)
	}
	tb, fl, err := openFollower(ctx, c, path, f.w, f.cache)
	if err != nil {
		return err
	}
	defer tb.Close()
	defer fl.Close()
	out := followOutput{TableURI: c.TableURI, GlobalBatchSize: c.GlobalBatchSize, NumSplits: fl.Options().NumSplits,
		WorldSize: f.w, ShuffleSeed: c.ShuffleSeed, StepsConsumed: c.StepsConsumed, Step: c.StepsConsumed}
	if f.column != "" || f.row >= 0 {
		return followTrainedOn(ctx, e, fl, tb, c, f, out)
	}
	from, to := c.StepsConsumed, c.StepsConsumed+1
	switch {
	case f.steps != nil:
		from, to = f.steps.from, f.steps.end(c.StepsConsumed)
	case f.stepSet:
		from, to = f.step, f.step+1
	}
	// The rounds: from the checkpoint's when the steps are not before it,
	// else from the first.
	dealt, err := fl.Steps(ctx, c.Position, from, to)
	if err != nil {
		return err
	}
	var reader *table.Reader
	if len(f.columns) > 0 && len(dealt) > 0 {
		// The latest version holds every row dealt: appends keep row ids.
		latest, err := tb.OpenVersion(ctx, 0)
		if err != nil {
			return err
		}
		defer latest.Close()
		if reader, err = latest.NewReader(table.ReaderOptions{Columns: f.columns}); err != nil {
			return err
		}
		defer reader.Close()
	}
	steps := make([]followStep, len(dealt))
	for i, d := range dealt {
		steps[i] = followStep{Step: d.Step, Round: roundInfo{d.Round, d.Round.Next()}, Ranks: []dealRank{}}
		for r, ids := range d.Ranks {
			if f.rank >= 0 && int64(r) != f.rank {
				continue
			}
			rb := dealRank{Rank: int64(r), RowIDs: ids, Versions: d.Versions[r]}
			if reader != nil {
				if rb.Rows, err = readRows(ctx, reader, ids); err != nil {
					return err
				}
			}
			steps[i].Ranks = append(steps[i].Ranks, rb)
		}
	}
	if f.steps != nil {
		out.Steps = steps
		if f.asJSON {
			return writeJSON(e.stdout, out)
		}
		out.printHead(e)
		for _, st := range steps {
			st.print(e, f.columns)
		}
		return nil
	}
	st := steps[0]
	out.Step, out.Round, out.Ranks = st.Step, &st.Round, st.Ranks
	if f.asJSON {
		return writeJSON(e.stdout, out)
	}
	out.printHead(e)
	st.print(e, f.columns)
	return nil
}

// print prints the step, its round and each rank's batch.
func (st followStep) print(e *env, columns []string) {
	r := st.Round
	fmt.Fprintf(e.stdout, "step %d: round %d (steps %d to %d), versions %d to %d\n",
		st.Step, r.Round.Round, r.Step, r.Step+r.Steps-1, r.After+1, r.Version)
	printRanks(e, st.Ranks, columns, "")
}

// roundOf forms the rounds from pos on until the one holding global step
// step, and returns it with a loader of its steps.
// openFollower opens the table of following's checkpoint c (read from
// path) and a follower of it at world size w that observes the run's
// decisions and forms rounds of the versions there are, waiting for none;
// the caller closes both.
func openFollower(ctx context.Context, c loader.FollowCheckpoint, path string, w int64, cache *blockcache.Cache) (*table.Table, *loader.Follower, error) {
	tb, err := table.OpenWith(ctx, c.TableURI, table.OpenOptions{BlockCache: cache})
	if err != nil {
		return nil, nil, err
	}
	rule := c.Follow
	rule.WaitTimeout = time.Nanosecond // form rounds of the versions there are, and wait for none
	fl, err := loader.NewFollower(tb, loader.Options{GlobalBatchSize: c.GlobalBatchSize, NumSplits: c.NumSplits,
		TokensPerStep: c.TokensPerStep, Oversize: c.Oversize, ShuffleSeed: c.ShuffleSeed, WorldSize: w}, rule)
	if err != nil {
		tb.Close()
		return nil, nil, errcode.Wrap(err, errcode.InvalidArgument, "deal", path)
	}
	fl.Observe() // the rounds the learner decided, never a decision of its own
	if _, _, err := fl.Resume(c); err != nil {
		fl.Close()
		tb.Close()
		return nil, nil, errcode.Wrap(err, errcode.InvalidArgument, "deal", path)
	}
	return tb, fl, nil
}

func roundOf(ctx context.Context, fl *loader.Follower, uri string, pos loader.FollowPosition, step int64) (loader.Round, *loader.Loader, error) {
	for {
		r, _, err := fl.Round(ctx, pos)
		if err == io.EOF {
			return r, nil, errcode.New(errcode.NotFound, "deal", uri,
				"step %d is in a round whose versions are not committed yet: the rounds formed end before step %d, after version %d",
				step, pos.Step, pos.After)
		}
		if err != nil {
			return r, nil, err
		}
		if step < r.Step+r.Steps {
			l, err := fl.Loader(ctx, &r)
			return r, l, err
		}
		pos = r.Next()
	}
}

// followTrainedOn answers --which-steps and --row for following's
// checkpoint c: the steps before c.StepsConsumed that trained on the rows,
// round by round from the first (a replayed row is in several).
func followTrainedOn(ctx context.Context, e *env, fl *loader.Follower, tb *table.Table, c loader.FollowCheckpoint, f followFlags, out followOutput) error {
	ids, err := askedRows(ctx, tb, f.column, f.value, f.row)
	if err != nil {
		return err
	}
	out.Rows, out.Trained = ids, []followTrained{}
	for pos := fl.Start(); pos.Step < c.StepsConsumed; {
		r, l, err := roundOf(ctx, fl, tb.URI(), pos, pos.Step)
		if err != nil {
			return err
		}
		found, err := trainedOn(ctx, l, ids, 0, min(r.Steps, c.StepsConsumed-r.Step))
		l.Close()
		if err != nil {
			return err
		}
		for _, tr := range found {
			tr.Step += r.Step
			v, _ := fl.VersionOf(tr.RowID)
			out.Trained = append(out.Trained, followTrained{trained: tr, Round: r.Round, Version: v})
		}
		pos = r.Next()
	}
	if f.asJSON {
		return writeJSON(e.stdout, out)
	}
	out.printHead(e)
	fmt.Fprintf(e.stdout, "%d rows asked about; steps that trained on them before step %d:\n", len(ids), c.StepsConsumed)
	for _, tr := range out.Trained {
		fmt.Fprintf(e.stdout, "row %d (version %d): round %d step %d rank %d\n", tr.RowID, tr.Version, tr.Round, tr.Step, tr.Rank)
	}
	return nil
}
