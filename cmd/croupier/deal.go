package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/croupier-data/croupier/core/blockcache"
	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/loader"
	"github.com/croupier-data/croupier/permutation"
)

// dealRank is one rank's batch, with --columns its rows, and for token-budget
// steps its rows' lengths and their tokens (each at most the budget).
type dealRank struct {
	Rank    int64            `json:"rank"`
	RowIDs  []uint64         `json:"row_ids"`
	Lengths []uint64         `json:"lengths,omitempty"`
	Tokens  *int64           `json:"tokens,omitempty"`
	Rows    []map[string]any `json:"rows,omitempty"`
	// Versions are the version of the croupier table that added each row
	// (when following, or where the table's manifest records them).
	Versions []int64 `json:"versions,omitempty"`
}

// trained is one step that trained on a row.
type trained struct {
	RowID uint64 `json:"row_id"`
	Epoch int64  `json:"epoch"`
	Step  int64  `json:"step"`
	Rank  int64  `json:"rank"`
}

type dealOutput struct {
	OrderID         string     `json:"permutation_id"`
	TableURI        string     `json:"table_uri"`
	TableVersion    string     `json:"table_version"`
	NumRows         int64      `json:"num_rows"`
	GlobalBatchSize int64      `json:"global_batch_size"`
	NumSplits       int64      `json:"num_splits"`
	TokensPerStep   int64      `json:"tokens_per_step,omitempty"`
	Oversize        string     `json:"oversize,omitempty"`
	WorldSize       int64      `json:"world_size"`
	ShuffleSeed     uint64     `json:"shuffle_seed"`
	DropLast        bool       `json:"drop_last"`
	Epoch           int64      `json:"epoch"`
	Step            int64      `json:"step"`
	StepsPerEpoch   int64      `json:"steps_per_epoch"`
	Ranks           []dealRank `json:"ranks"`
}

// dealStep is one step of --steps: each rank's batch.
type dealStep struct {
	Epoch int64      `json:"epoch"`
	Step  int64      `json:"step"`
	Ranks []dealRank `json:"ranks"`
}

// stepsOutput answers --steps: the steps of one epoch, in order.
type stepsOutput struct {
	dealOutput
	Step  *int64     `json:"step,omitempty"`  // nil, hiding dealOutput's: each step has its own
	Ranks []dealRank `json:"ranks,omitempty"` // nil, hiding dealOutput's
	Steps []dealStep `json:"steps"`
}

// stepRange is --steps A:B: global steps from to to−1. An A left out is 0;
// a B left out (toSet false) is the checkpoint's steps consumed, or the
// epoch's end.
type stepRange struct {
	from, to int64
	toSet    bool
}

// parseSteps parses --steps A:B.
func parseSteps(s string) (stepRange, error) {
	a, b, ok := strings.Cut(s, ":")
	bad := usagef("deal: --steps %q: want A:B, global steps A to B-1 (A defaults to 0, B to the checkpoint's steps or the epoch's end)", s)
	if !ok {
		return stepRange{}, bad
	}
	var r stepRange
	var err error
	if a != "" {
		if r.from, err = strconv.ParseInt(a, 10, 64); err != nil || r.from < 0 {
			return stepRange{}, bad
		}
	}
	if b != "" {
		if r.to, err = strconv.ParseInt(b, 10, 64); err != nil || r.to < r.from {
			return stepRange{}, bad
		}
		r.toSet = true
	}
	return r, nil
}

// end returns the step the range ends before: B, or else def.
func (r stepRange) end(def int64) int64 {
	if r.toSet {
		return r.to
	}
	return max(def, r.from)
}

// whichOutput answers --which-steps and --row: the rows asked about, and
// every step up to the checkpoint (Epoch, Step: its position) that trained
// on one of them.
type whichOutput struct {
	dealOutput
	Ranks   []dealRank `json:"ranks,omitempty"` // nil, hiding dealOutput's: the steps are in Trained
	Rows    []uint64   `json:"which_rows"`
	Trained []trained  `json:"trained"`
}

func dealCmd(ctx context.Context, e *env, args []string) error {
	a, err := parseDeal(e, args)
	if err != nil {
		return err
	}
	if a.ckptPath != "" {
		data, err := os.ReadFile(a.ckptPath)
		if err != nil {
			return errcode.Wrap(err, errcode.NotFound, "read checkpoint", a.ckptPath)
		}
		switch {
		case loader.IsFollowCheckpoint(data):
			return a.dealFollow(ctx, e, data)
		case loader.IsMixtureCheckpoint(data):
			return dealMixture(ctx, e, data, a.ckptPath, mixtureFlags{step: a.step, stepSet: a.set["step"], steps: a.steps, w: a.w, rank: a.rank,
				dropLast: a.dropLast, dropLastSet: a.set["drop-last"], columns: a.columns, asJSON: a.asJSON, cache: a.cache})
		}
		if err := a.fromCheckpoint(data); err != nil {
			return err
		}
	} else if err := a.checkWithoutCheckpoint(); err != nil {
		return err
	}
	if err := a.check(); err != nil {
		return err
	}
	t, order, closeOrder, err := openDealt(ctx, a.permURI, a.splitName, a.tableURI, a.version, a.cache)
	if err != nil {
		return err
	}
	defer closeOrder()
	l0, err := loader.New(t, order, loader.Options{GlobalBatchSize: a.g, NumSplits: a.s, TokensPerStep: a.tokens, Oversize: a.oversize,
		WorldSize: a.w, ShuffleSeed: a.seed, DropLast: a.dropLast})
	if err != nil {
		return err
	}
	defer l0.Close()
	if a.ckpt != nil {
		// The next step after the checkpoint, once it is known to come from
		// a run dealing what l0 deals.
		if a.epoch, a.step, err = l0.Resume(ctx, *a.ckpt); err != nil {
			return errcode.Wrap(err, errcode.InvalidArgument, "deal", a.ckptPath)
		}
		if a.steps != nil {
			a.epoch = a.ckpt.Epoch // --steps looks back over the checkpoint's epoch
		}
	}
	epochSteps, err := l0.EpochSteps(ctx, a.epoch)
	if err != nil {
		return err
	}
	out := dealOutput{OrderID: order.ID(), TableURI: t.URI(), TableVersion: t.Version(), NumRows: order.Len(),
		GlobalBatchSize: l0.Options().GlobalBatchSize, NumSplits: l0.Options().NumSplits,
		TokensPerStep: l0.Options().TokensPerStep, Oversize: l0.Options().Oversize, WorldSize: l0.Options().WorldSize, ShuffleSeed: a.seed, DropLast: a.dropLast,
		Epoch: a.epoch, Step: a.step, StepsPerEpoch: epochSteps, Ranks: []dealRank{}}
	switch {
	case a.set["which-steps"] || a.set["row"]:
		return a.dealWhich(ctx, e, t, l0, out)
	case a.steps != nil:
		return a.dealSteps(ctx, e, l0, out)
	}
	if out.Ranks, err = stepRanks(ctx, l0, a.epoch, a.step, a.rank, a.columns); err != nil {
		return err
	}
	if a.asJSON {
		return writeJSON(e.stdout, out)
	}
	out.printHead(e)
	fmt.Fprintf(e.stdout, "epoch %d, step %d:\n", out.Epoch, out.Step)
	printRanks(e, out.Ranks, a.columns, "")
	return nil
}

// dealArgs are the arguments of croupier deal, as given and as a
// checkpoint completes them; set holds the names of the flags given.
type dealArgs struct {
	permURI, splitName, tableURI string
	version, g, s, tokens        int64
	oversize                     string
	w, rank, epoch, step         int64
	seed                         uint64
	dropLast, asJSON             bool
	stepsFlag, which             string
	column, value                string // of --which-steps COLUMN=VALUE
	rowID                        int64
	columns                      []string
	ckptPath                     string
	ckpt                         *loader.Checkpoint // read from ckptPath, unless it is a mixture's or following's
	steps                        *stepRange         // of --steps, if given
	cache                        *blockcache.Cache
	set                          map[string]bool
}

// parseDeal parses deal's flags.
func parseDeal(e *env, args []string) (*dealArgs, error) {
	fs, asJSON := newFlags(e, "deal",
		"deal (--perm PERM_URI [--split NAME] | --table TABLE_URI [--version N]) (--global-batch-size G | --tokens-per-step N) --step T [flags]\n"+
			"       croupier deal --checkpoint FILE.json [--perm PERM_URI [--split NAME] | --table TABLE_URI] [flags]\n"+
			"       croupier deal --checkpoint FILE.json (--which-steps COLUMN=VALUE | --row ID) [flags]\n"+
			"       croupier deal --checkpoint MIXTURE.json [--step T] [flags]\n"+
			"       croupier deal --checkpoint FOLLOW.json [--step T | --steps A:B | --which-steps COLUMN=VALUE | --row ID] [flags]\n"+
			"       (--steps A:B instead of --step: every step from A to B-1 of the epoch, of a mixture or of following)")
	permURI, splitName, tableURI, version, g, s := dealtFlags(fs, "deal")
	tokens := fs.Int64("tokens-per-step", 0, "token-budget steps of at most N tokens, instead of --global-batch-size (a permutation with lengths)")
	oversize := fs.String("oversize", "", "with --tokens-per-step: error or truncate, for a row longer than the budget (default error)")
	w := fs.Int64("world-size", 1, "number of ranks")
	rank := fs.Int64("rank", -1, "print only this rank's batch (default: every rank)")
	epoch := fs.Int64("epoch", 0, "epoch")
	seed := fs.Uint64("shuffle-seed", 0, "the run's shuffle seed")
	dropLast := fs.Bool("drop-last", true, "drop the final partial step of an epoch (as the Python dataset does by default)")
	step := fs.Int64("step", -1, "global step (with a mixture's or following's --checkpoint: by default the one after it)")
	stepsFlag := fs.String("steps", "", "A:B: global steps A to B-1 instead of --step (A defaults to 0; B to the checkpoint's steps consumed, or the epoch's end)")
	ckptPath := fs.String("checkpoint", "", "state dict JSON: show the step after it")
	columns := fs.String("columns", "", "also print these columns of each row: col1,col2")
	which := fs.String("which-steps", "", "with --checkpoint: the steps up to it that trained on the rows where COLUMN=VALUE")
	rowID := fs.Int64("row", -1, "with --checkpoint: the steps up to it that trained on row ID")
	cacheDir := cacheFlag(fs)
	if _, err := parse(fs, args, 0, 0); err != nil {
		return nil, err
	}
	cache, err := openCache(*cacheDir)
	if err != nil {
		return nil, err
	}
	a := &dealArgs{permURI: *permURI, splitName: *splitName, tableURI: *tableURI, version: *version, g: *g, s: *s,
		tokens: *tokens, oversize: *oversize, w: *w, rank: *rank, epoch: *epoch, step: *step, seed: *seed,
		dropLast: *dropLast, asJSON: *asJSON, stepsFlag: *stepsFlag, which: *which, rowID: *rowID,
		columns: splitList(*columns), ckptPath: *ckptPath, cache: cache, set: map[string]bool{}}
	fs.Visit(func(f *flag.Flag) { a.set[f.Name] = true })
	a.column, a.value, _ = strings.Cut(a.which, "=")
	if a.set["steps"] {
		r, err := parseSteps(a.stepsFlag)
		if err != nil {
			return nil, err
		}
		if a.set["step"] || a.set["which-steps"] || a.set["row"] {
			return nil, usagef("deal: --steps goes without --step, --which-steps and --row")
		}
		a.steps = &r
	}
	if a.ckptPath != "" {
		for _, n := range []string{"global-batch-size", "num-splits", "tokens-per-step", "oversize", "shuffle-seed", "epoch"} {
			if a.set[n] {
				return nil, usagef("deal: --%s comes from the checkpoint; do not give it with --checkpoint", n)
			}
		}
		if a.set["which-steps"] && a.set["row"] {
			return nil, usagef("deal: give one of --which-steps and --row")
		}
		if _, _, hasValue := strings.Cut(a.which, "="); a.set["which-steps"] && (!hasValue || a.column == "") {
			return nil, usagef("deal: --which-steps %q: want COLUMN=VALUE", a.which)
		}
		if a.set["row"] && a.rowID < 0 {
			return nil, usagef("deal: --row is %d; it must be at least 0", a.rowID)
		}
	}
	return a, nil
}

// dealFollow deals from following's checkpoint data.
func (a *dealArgs) dealFollow(ctx context.Context, e *env, data []byte) error {
	for _, n := range []string{"perm", "split", "table", "version", "drop-last"} {
		if a.set[n] {
			return usagef("deal: --%s does not apply to following's checkpoint: it names its table, and deals whole steps", n)
		}
	}
	return dealFollow(ctx, e, data, a.ckptPath, followFlags{step: a.step, stepSet: a.set["step"], steps: a.steps, w: a.w, rank: a.rank,
		columns: a.columns, column: a.column, value: a.value, row: a.rowID, asJSON: a.asJSON, cache: a.cache})
}

// fromCheckpoint takes what the epoch checkpoint data says of the run: its
// batch or token budget, splits, seed and epoch, and what it dealt from
// where no --perm or --table says.
func (a *dealArgs) fromCheckpoint(data []byte) error {
	if a.set["step"] {
		return usagef("deal: --step comes from the checkpoint; do not give it with --checkpoint (but for a mixture's or following's)")
	}
	c, err := loader.ParseCheckpoint(data, a.ckptPath)
	if err != nil {
		return err
	}
	a.ckpt = &c
	a.g, a.s, a.seed, a.epoch = c.GlobalBatchSize, c.NumSplits, c.ShuffleSeed, c.Epoch
	a.tokens, a.oversize = c.TokensPerStep, c.Oversize
	if a.permURI == "" && a.tableURI == "" {
		var split string
		if a.permURI, split, a.tableURI, err = dealtBy(c, a.ckptPath); err != nil {
			return err
		}
		if a.splitName == "" {
			a.splitName = split
		}
	}
	return nil
}

// checkWithoutCheckpoint checks what a deal without --checkpoint needs.
func (a *dealArgs) checkWithoutCheckpoint() error {
	switch {
	case a.set["which-steps"] || a.set["row"]:
		return usagef("deal: --which-steps and --row look back from a --checkpoint")
	case a.set["global-batch-size"] == a.set["tokens-per-step"]:
		return usagef("deal: give one of --global-batch-size and --tokens-per-step")
	case a.step < 0 && a.steps == nil:
		return usagef("deal: --step or --steps is required (or --checkpoint)")
	}
	return nil
}

// check checks the arguments of a deal from a permutation or table, and
// has token-budget steps deal every row unless --drop-last says otherwise.
func (a *dealArgs) check() error {
	switch {
	case (a.permURI == "") == (a.tableURI == ""):
		return usagef("deal: give exactly one of --perm and --table")
	case a.splitName != "" && a.permURI == "":
		return usagef("deal: --split needs --perm")
	case a.version != 0 && a.tableURI == "":
		return usagef("deal: --version needs --table")
	}
	least := int64(1) // of the global batch size, or of the token budget
	if a.tokens != 0 {
		least = 0
		if !a.set["drop-last"] {
			a.dropLast = false // token-budget steps deal every row
		}
	}
	for _, f := range []struct {
		name     string
		v, least int64
	}{{"global-batch-size", a.g, least}, {"tokens-per-step", a.tokens, 1 - least}, {"num-splits", a.s, 0}, {"world-size", a.w, 1}, {"epoch", a.epoch, 0}} {
		if f.v < f.least {
			return usagef("deal: --%s is %d; it must be at least %d", f.name, f.v, f.least)
		}
	}
	if a.rank >= a.w {
		return usagef("deal: --rank %d is not in [0, %d): --world-size is %d", a.rank, a.w, a.w)
	}
	return nil
}

// dealWhich prints the steps up to the checkpoint that trained on the rows
// --which-steps or --row asks about.
func (a *dealArgs) dealWhich(ctx context.Context, e *env, t *table.Table, l0 *loader.Loader, out dealOutput) error {
	ids, err := askedRows(ctx, t, a.column, a.value, a.rowID)
	if err != nil {
		return err
	}
	out.Epoch, out.Step = a.ckpt.Epoch, a.ckpt.StepsConsumed
	found, err := trainedOn(ctx, l0, ids, a.ckpt.Epoch, a.ckpt.StepsConsumed)
	if err != nil {
		return err
	}
	if a.asJSON {
		return writeJSON(e.stdout, whichOutput{dealOutput: out, Rows: ids, Trained: found})
	}
	fmt.Fprintf(e.stdout, "%s of %s version %s: %d rows\n", out.OrderID, out.TableURI, out.TableVersion, out.NumRows)
	fmt.Fprintf(e.stdout, "%d rows asked about; steps that trained on them up to epoch %d, step %d (W=%d):\n",
		len(ids), a.ckpt.Epoch, a.ckpt.StepsConsumed, out.WorldSize)
	for _, tr := range found {
		fmt.Fprintf(e.stdout, "row %d: epoch %d step %d rank %d\n", tr.RowID, tr.Epoch, tr.Step, tr.Rank)
	}
	return nil
}

// dealSteps prints the steps of --steps: to the checkpoint's steps consumed
// by default, or to the epoch's end.
func (a *dealArgs) dealSteps(ctx context.Context, e *env, l0 *loader.Loader, out dealOutput) error {
	def := out.StepsPerEpoch
	if a.ckpt != nil {
		def = a.ckpt.StepsConsumed
	}
	to := a.steps.end(def)
	if to > out.StepsPerEpoch {
		return usagef("deal: --steps %s: epoch %d has %d steps", a.stepsFlag, a.epoch, out.StepsPerEpoch)
	}
	so := stepsOutput{dealOutput: out, Steps: []dealStep{}}
	for at := a.steps.from; at < to; at++ {
		ranks, err := stepRanks(ctx, l0, a.epoch, at, a.rank, a.columns)
		if err != nil {
			return err
		}
		so.Steps = append(so.Steps, dealStep{Epoch: a.epoch, Step: at, Ranks: ranks})
	}
	if a.asJSON {
		return writeJSON(e.stdout, so)
	}
	out.printHead(e)
	for _, st := range so.Steps {
		fmt.Fprintf(e.stdout, "epoch %d, step %d:\n", st.Epoch, st.Step)
		printRanks(e, st.Ranks, a.columns, "")
	}
	return nil
}

// printHead prints the lines that say what is dealt, and how.
func (out dealOutput) printHead(e *env) {
	fmt.Fprintf(e.stdout, "%s of %s version %s: %d rows\n", out.OrderID, out.TableURI, out.TableVersion, out.NumRows)
	if out.TokensPerStep != 0 {
		fmt.Fprintf(e.stdout, "tokens_per_step=%d oversize=%s W=%d shuffle_seed=%d: %d steps in epoch %d\n",
			out.TokensPerStep, out.Oversize, out.WorldSize, out.ShuffleSeed, out.StepsPerEpoch, out.Epoch)
	} else {
		fmt.Fprintf(e.stdout, "G=%d S=%d W=%d shuffle_seed=%d drop_last=%t: %d steps per epoch\n",
			out.GlobalBatchSize, out.NumSplits, out.WorldSize, out.ShuffleSeed, out.DropLast, out.StepsPerEpoch)
	}
}

// dealtBy returns where the order a checkpoint deals lives: a permutation's
// URI and split, or a table's URI. where names the checkpoint in errors.
func dealtBy(c loader.Checkpoint, where string) (permURI, split, tableURI string, err error) {
	switch {
	case c.PermutationID == (permutation.Identity{}).ID():
		return "", "", c.TableURI, nil
	case c.PermutationURI != nil && *c.PermutationURI != "":
		_, split, _ = strings.Cut(c.PermutationID, "/")
		return *c.PermutationURI, split, "", nil
	}
	return "", "", "", usagef("deal: checkpoint %s deals permutation %s and does not record where it lives (format 1): give its --perm URI",
		where, c.PermutationID)
}

// dealtFlags adds the flags that say what verb deals and in steps of how
// many rows: a permutation's split or a table's version, the global batch
// size and the streams.
func dealtFlags(fs *flag.FlagSet, verb string) (permURI, splitName, tableURI *string, version, g, s *int64) {
	permURI = fs.String("perm", "", "permutation to "+verb)
	splitName = fs.String("split", "", "split of the permutation (default: its first)")
	tableURI = fs.String("table", "", "table to "+verb+" in row id order")
	version = fs.Int64("version", 0, "with --table: the table version (0: the latest)")
	g = fs.Int64("global-batch-size", 0, "samples per global step, all ranks together")
	s = fs.Int64("num-splits", 0, "streams the epoch is dealt from (0: the global batch size)")
	return permURI, splitName, tableURI, version, g, s
}

// openDealt opens the order to deal and its table, read through cache (may
// be nil): split splitName (its first if "") of the permutation at permURI,
// or the rows of version version of the table at tableURI (its latest if 0).
// close closes what it opened.
func openDealt(ctx context.Context, permURI, splitName, tableURI string, version int64, cache *blockcache.Cache) (t *table.Table, order permutation.Order, close func(), err error) {
	if permURI != "" {
		uri, err := toURI(permURI)
		if err != nil {
			return nil, nil, nil, err
		}
		p, err := permutation.OpenWith(ctx, uri, table.OpenOptions{BlockCache: cache})
		if err != nil {
			return nil, nil, nil, err
		}
		var sp *permutation.Split
		if splitName != "" {
			sp, err = p.Split(splitName)
		} else {
			sp, err = p.SplitAt(0)
		}
		if err != nil {
			p.Close()
			return nil, nil, nil, err
		}
		return p.Table(), sp, func() { p.Close() }, nil
	}
	uri, err := toURI(tableURI)
	if err != nil {
		return nil, nil, nil, err
	}
	tb, err := table.OpenWith(ctx, uri, table.OpenOptions{Version: version, BlockCache: cache})
	if err != nil {
		return nil, nil, nil, err
	}
	return tb, permutation.Identity{N: tb.NumRows()}, func() { tb.Close() }, nil
}

// stepRanks returns each rank's batch of step of epoch as l deals it (only
// rank's when rank >= 0), with the rows' columns when there are any, and for
// token-budget steps the rows' lengths and tokens.
func stepRanks(ctx context.Context, l *loader.Loader, epoch, step, rank int64, columns []string) ([]dealRank, error) {
	var (
		ranks  [][]uint64
		shares []loader.Share // of a token-budget step
		err    error
	)
	if l.Options().TokensPerStep != 0 {
		d, err := l.TokenDeal(ctx, epoch)
		if err != nil {
			return nil, err
		}
		if shares, err = d.Shares(ctx, l.EpochOrder(epoch).(permutation.LengthOrder), step); err != nil {
			return nil, err
		}
		for _, sh := range shares {
			ranks = append(ranks, sh.RowIDs)
		}
	} else if ranks, err = l.Step(ctx, epoch, step); err != nil {
		return nil, err
	}
	var reader *table.Reader
	if len(columns) > 0 {
		if reader, err = l.Table().NewReader(table.ReaderOptions{Columns: columns}); err != nil {
			return nil, err
		}
		defer reader.Close()
	}
	out := []dealRank{}
	for r, ids := range ranks {
		if rank >= 0 && int64(r) != rank {
			continue
		}
		rb := dealRank{Rank: int64(r), RowIDs: ids, Versions: rowVersions(l.Table(), ids)}
		if shares != nil {
			rb.Lengths, rb.Tokens = shares[r].Lengths, &shares[r].Tokens
		}
		if reader != nil {
			if rb.Rows, err = readRows(ctx, reader, ids); err != nil {
				return nil, err
			}
		}
		out = append(out, rb)
	}
	return out, nil
}

// rowVersions returns the version of t's croupier table that added each of
// ids, or nil where its manifest does not record them (see
// table.Table.VersionOf).
func rowVersions(t *table.Table, ids []uint64) []int64 {
	vs := make([]int64, len(ids))
	for i, id := range ids {
		if vs[i] = t.VersionOf(int64(id)); vs[i] == 0 {
			return nil
		}
	}
	return vs
}

// printRanks prints each rank's row ids on a line, then the version that
// added each row where they are known, and under them the columns of each
// row, every line after indent.
func printRanks(e *env, ranks []dealRank, columns []string, indent string) {
	words := func(xs []string) string { return strings.Join(xs, " ") }
	for _, rb := range ranks {
		ids := make([]string, len(rb.RowIDs))
		for i, id := range rb.RowIDs {
			ids[i] = fmt.Sprint(id)
		}
		tokens := ""
		if rb.Tokens != nil {
			tokens = fmt.Sprintf(" (%d tokens)", *rb.Tokens)
		}
		fmt.Fprintf(e.stdout, "%srank %d%s: %s\n", indent, rb.Rank, tokens, words(ids))
		if rb.Versions != nil {
			vs := make([]string, len(rb.Versions))
			for i, v := range rb.Versions {
				vs[i] = fmt.Sprint(v)
			}
			fmt.Fprintf(e.stdout, "%s  versions: %s\n", indent, words(vs))
		}
		for i, row := range rb.Rows {
			fields := []string{fmt.Sprintf("%s  row %d:", indent, rb.RowIDs[i])}
			for _, c := range columns {
				v, _ := json.Marshal(row[c])
				fields = append(fields, fmt.Sprintf("%s=%s", c, v))
			}
			fmt.Fprintln(e.stdout, strings.Join(fields, " "))
		}
	}
}

// readRows returns the rows ids of r's columns, each as column name → value.
func readRows(ctx context.Context, r *table.Reader, ids []uint64) ([]map[string]any, error) {
	rec, err := r.Read(ctx, ids)
	if err != nil {
		return nil, err
	}
	defer rec.Release()
	rows := make([]map[string]any, rec.NumRows())
	for i := range rows {
		rows[i] = map[string]any{}
		for c, f := range rec.Schema().Fields() {
			rows[i][f.Name] = rec.Column(c).GetOneForMarshal(i)
		}
	}
	return rows, nil
}

// askedRows returns the rows of t that --which-steps COLUMN=VALUE names
// (column not ""), else row, the --row asked about.
func askedRows(ctx context.Context, t *table.Table, column, value string, row int64) ([]uint64, error) {
	if column != "" {
		return rowsWhere(ctx, t, column, value)
	}
	if row >= t.NumRows() {
		return nil, usagef("deal: --row %d is not in [0, %d): %s has %d rows", row, t.NumRows(), t.URI(), t.NumRows())
	}
	return []uint64{uint64(row)}, nil
}

// rowsWhere returns the ids of t's rows whose value in column, as text
// (array.Array.ValueStr), is value.
func rowsWhere(ctx context.Context, t *table.Table, column, value string) ([]uint64, error) {
	r, err := t.NewReader(table.ReaderOptions{Columns: []string{column}})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var ids []uint64
	var first uint64
	for f, file := range t.Files() {
		for g, n := range file.RowGroups {
			rec, err := r.ReadGroup(ctx, f, g)
			if err != nil {
				return nil, err
			}
			col := rec.Column(0)
			for i := range col.Len() {
				if col.IsValid(i) && col.ValueStr(i) == value {
					ids = append(ids, first+uint64(i))
				}
			}
			rec.Release()
			first += uint64(n)
		}
	}
	if len(ids) == 0 {
		return nil, errcode.New(errcode.NotFound, "deal", t.URI(), "no row has %s = %q", column, value)
	}
	return ids, nil
}

// trainedOn returns the steps that trained on the rows ids, of every epoch
// before epoch and of the first steps steps of epoch: where each epoch's
// order puts them (loader.Deal.Place), by epoch, step and rank.
func trainedOn(ctx context.Context, l *loader.Loader, ids []uint64, epoch, steps int64) ([]trained, error) {
	want := map[uint64]bool{}
	for _, id := range ids {
		want[id] = true
	}
	out := []trained{}
	for e := range epoch + 1 {
		order := l.EpochOrder(e)
		for start := int64(0); start < order.Len(); start += permutation.ChunkIDs {
			chunk, err := order.RowIDs(ctx, start, min(start+permutation.ChunkIDs, order.Len()))
			if err != nil {
				return nil, err
			}
			for i, id := range chunk {
				if !want[id] {
					continue
				}
				step, rank, ok, err := l.Place(ctx, e, start+int64(i))
				if err != nil {
					return nil, err
				}
				if ok && (e < epoch || step < steps) {
					out = append(out, trained{RowID: id, Epoch: e, Step: step, Rank: rank})
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b trained) int {
		return cmp.Or(cmp.Compare(a.Epoch, b.Epoch), cmp.Compare(a.Step, b.Step), cmp.Compare(a.RowID, b.RowID))
	})
	return out, nil
}
