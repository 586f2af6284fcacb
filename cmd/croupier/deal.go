package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/loader"
	"github.com/croupier-data/croupier/permutation"
)

func readCheckpoint(path string) (loader.Checkpoint, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return loader.Checkpoint{}, errcode.Wrap(err, errcode.NotFound, "read checkpoint", path)
	}
	return loader.ParseCheckpoint(data, path)
}

// dealRank is one rank's batch.
type dealRank struct {
	Rank   int64    `json:"rank"`
	RowIDs []uint64 `json:"row_ids"`
}

type dealOutput struct {
	OrderID         string     `json:"permutation_id"`
	TableURI        string     `json:"table_uri"`
	TableVersion    string     `json:"table_version"`
	NumRows         int64      `json:"num_rows"`
	GlobalBatchSize int64      `json:"global_batch_size"`
	NumSplits       int64      `json:"num_splits"`
	WorldSize       int64      `json:"world_size"`
	ShuffleSeed     uint64     `json:"shuffle_seed"`
	DropLast        bool       `json:"drop_last"`
	Epoch           int64      `json:"epoch"`
	Step            int64      `json:"step"`
	StepsPerEpoch   int64      `json:"steps_per_epoch"`
	Ranks           []dealRank `json:"ranks"`
}

func dealCmd(ctx context.Context, e *env, args []string) error {
	fs, asJSON := newFlags(e, "deal",
		"deal (--perm PERM_URI [--split NAME] | --table TABLE_URI [--version N]) --global-batch-size G --step T [flags]\n"+
			"       croupier deal --checkpoint FILE.json [--perm PERM_URI [--split NAME] | --table TABLE_URI] [flags]")
	permURI := fs.String("perm", "", "permutation to deal")
	splitName := fs.String("split", "", "split of the permutation (default: its first)")
	tableURI := fs.String("table", "", "table to deal in row id order")
	version := fs.Int64("version", 0, "with --table: the table version (0: the latest)")
	g := fs.Int64("global-batch-size", 0, "samples per global step, all ranks together")
	s := fs.Int64("num-splits", 0, "streams the epoch is dealt from (0: the global batch size)")
	w := fs.Int64("world-size", 1, "number of ranks")
	rank := fs.Int64("rank", -1, "print only this rank's batch (default: every rank)")
	epoch := fs.Int64("epoch", 0, "epoch")
	seed := fs.Uint64("shuffle-seed", 0, "the run's shuffle seed")
	dropLast := fs.Bool("drop-last", true, "drop the final partial step of an epoch (as the Python dataset does by default)")
	step := fs.Int64("step", -1, "global step")
	ckptPath := fs.String("checkpoint", "", "state dict JSON: show the step after it")
	if _, err := parse(fs, args, 0, 0); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	var ckpt *loader.Checkpoint
	if *ckptPath != "" {
		for _, n := range []string{"global-batch-size", "num-splits", "shuffle-seed", "epoch", "step"} {
			if set[n] {
				return usagef("deal: --%s comes from the checkpoint; do not give it with --checkpoint", n)
			}
		}
		c, err := readCheckpoint(*ckptPath)
		if err != nil {
			return err
		}
		ckpt = &c
		*g, *s, *seed, *epoch = c.GlobalBatchSize, c.NumSplits, c.ShuffleSeed, c.Epoch
		if *permURI == "" && *tableURI == "" {
			switch {
			case c.PermutationID == (permutation.Identity{}).ID():
				*tableURI = c.TableURI
			case c.PermutationURI != nil && *c.PermutationURI != "":
				*permURI = *c.PermutationURI
				if *splitName == "" {
					_, *splitName, _ = strings.Cut(c.PermutationID, "/")
				}
			default:
				return usagef("deal: checkpoint %s deals permutation %s and does not record where it lives (format 1): give its --perm URI",
					*ckptPath, c.PermutationID)
			}
		}
	} else {
		if !set["global-batch-size"] {
			return usagef("deal: --global-batch-size is required")
		}
		if *step < 0 {
			return usagef("deal: --step is required (or --checkpoint)")
		}
	}
	if (*permURI == "") == (*tableURI == "") {
		return usagef("deal: give exactly one of --perm and --table")
	}
	if *splitName != "" && *permURI == "" {
		return usagef("deal: --split needs --perm")
	}
	if *version != 0 && *tableURI == "" {
		return usagef("deal: --version needs --table")
	}

	for _, f := range []struct {
		name     string
		v, least int64
	}{{"global-batch-size", *g, 1}, {"num-splits", *s, 0}, {"world-size", *w, 1}, {"epoch", *epoch, 0}} {
		if f.v < f.least {
			return usagef("deal: --%s is %d; it must be at least %d", f.name, f.v, f.least)
		}
	}
	if *rank >= *w {
		return usagef("deal: --rank %d is not in [0, %d): --world-size is %d", *rank, *w, *w)
	}

	// Open the order and its table.
	var (
		t     *table.Table
		order permutation.Order
	)
	if *permURI != "" {
		uri, err := toURI(*permURI)
		if err != nil {
			return err
		}
		p, err := permutation.Open(ctx, uri)
		if err != nil {
			return err
		}
		defer p.Close()
		var sp *permutation.Split
		if *splitName != "" {
			sp, err = p.Split(*splitName)
		} else {
			sp, err = p.SplitAt(0)
		}
		if err != nil {
			return err
		}
		t, order = p.Table(), sp
	} else {
		uri, err := toURI(*tableURI)
		if err != nil {
			return err
		}
		tb, err := table.OpenVersion(ctx, uri, *version)
		if err != nil {
			return err
		}
		defer tb.Close()
		t, order = tb, permutation.Identity{N: tb.NumRows()}
	}
	opts := loader.Options{GlobalBatchSize: *g, NumSplits: *s, WorldSize: *w, ShuffleSeed: *seed, DropLast: *dropLast}
	l0, err := loader.New(t, order, opts)
	if err != nil {
		return err
	}
	defer l0.Close()
	steps := l0.StepsPerEpoch()
	if ckpt != nil {
		if *epoch, *step, err = l0.Resume(*ckpt); err != nil {
			return errcode.Wrap(err, errcode.InvalidArgument, "deal", *ckptPath)
		}
	}
	out := dealOutput{OrderID: order.ID(), TableURI: t.URI(), TableVersion: t.Version(), NumRows: order.Len(),
		GlobalBatchSize: l0.Options().GlobalBatchSize, NumSplits: l0.Options().NumSplits,
		WorldSize: l0.Options().WorldSize, ShuffleSeed: *seed, DropLast: *dropLast,
		Epoch: *epoch, Step: *step, StepsPerEpoch: steps, Ranks: []dealRank{}}
	r0, r1 := int64(0), out.WorldSize
	if *rank >= 0 {
		r0, r1 = *rank, *rank+1
	}
	for r := r0; r < r1; r++ {
		o := opts
		o.Rank = r
		l, err := loader.New(t, order, o)
		if err != nil {
			return err
		}
		ids, err := l.RowIDs(ctx, *epoch, *step)
		l.Close()
		if err != nil {
			return err
		}
		out.Ranks = append(out.Ranks, dealRank{Rank: r, RowIDs: ids})
	}
	if *asJSON {
		return writeJSON(e.stdout, out)
	}
	fmt.Fprintf(e.stdout, "%s of %s version %s: %d rows\n", out.OrderID, out.TableURI, out.TableVersion, out.NumRows)
	fmt.Fprintf(e.stdout, "G=%d S=%d W=%d shuffle_seed=%d drop_last=%t: %d steps per epoch\n",
		out.GlobalBatchSize, out.NumSplits, out.WorldSize, out.ShuffleSeed, out.DropLast, out.StepsPerEpoch)
	fmt.Fprintf(e.stdout, "epoch %d, step %d:\n", out.Epoch, out.Step)
	for _, rb := range out.Ranks {
		ids := make([]string, len(rb.RowIDs))
		for i, id := range rb.RowIDs {
			ids[i] = fmt.Sprint(id)
		}
		fmt.Fprintf(e.stdout, "rank %d: %s\n", rb.Rank, strings.Join(ids, " "))
	}
	return nil
}
