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
		return err
	}
	cache, err := openCache(*cacheDir)
	if err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var steps *stepRange
	if set["steps"] {
		r, err := parseSteps(*stepsFlag)
		if err != nil {
			return err
		}
		if set["step"] || set["which-steps"] || set["row"] {
			return usagef("deal: --steps goes without --step, --which-steps and --row")
		}
		steps = &r
	}

	var ckpt *loader.Checkpoint
	column, value, hasValue := strings.Cut(*which, "=")
	if *ckptPath != "" {
		for _, n := range []string{"global-batch-size", "num-splits", "tokens-per-step", "oversize", "shuffle-seed", "epoch"} {
			if set[n] {
				return usagef("deal: --%s comes from the checkpoint; do not give it with --checkpoint", n)
			}
		}
		if set["which-steps"] && set["row"] {
			return usagef("deal: give one of --which-steps and --row")
		}
		if set["which-steps"] && (!hasValue || column == "") {
			return usagef("deal: --which-steps %q: want COLUMN=VALUE", *which)
		}
		if set["row"] && *rowID < 0 {
			return usagef("deal: --row is %d; it must be at least 0", *rowID)
		}
		data, err := os.ReadFile(*ckptPath)
		if err != nil {
			return errcode.Wrap(err, errcode.NotFound, "read checkpoint", *ckptPath)
		}
		if isFollow(data) {
			for _, n := range []string{"perm", "split", "table", "version", "drop-last"} {
				if set[n] {
					return usagef("deal: --%s does not apply to following's checkpoint: it names its table, and deals whole steps", n)
				}
			}
			return dealFollow(ctx, e, data, *ckptPath, followFlags{step: *step, stepSet: set["step"], steps: steps, w: *w, rank: *rank,
				columns: splitList(*columns), column: column, value: value, row: *rowID, asJSON: *asJSON, cache: cache})
		}
		if isMixture(data) {
			return dealMixture(ctx, e, data, *ckptPath, mixtureFlags{step: *step, stepSet: set["step"], steps: steps, w: *w, rank: *rank,
				dropLast: *dropLast, dropLastSet: set["drop-last"], columns: splitList(*columns), asJSON: *asJSON, cache: cache})
		}
		if set["step"] {
			return usagef("deal: --step comes from the checkpoint; do not give it with --checkpoint (but for a mixture's or following's)")
		}
		c, err := loader.ParseCheckpoint(data, *ckptPath)
		if err != nil {
			return err
		}
		ckpt = &c
		*g, *s, *seed, *epoch = c.GlobalBatchSize, c.NumSplits, c.ShuffleSeed, c.Epoch
		*tokens, *oversize = c.TokensPerStep, c.Oversize
		if *permURI == "" && *tableURI == "" {
			var split string
			if *permURI, split, *tableURI, err = dealtBy(c, *ckptPath); err != nil {
				return err
			}
			if *splitName == "" {
				*splitName = split
			}
		}
	} else {
		if set["which-steps"] || set["row"] {
			return usagef("deal: --which-steps and --row look back from a --checkpoint")
		}
		if set["global-batch-size"] == set["tokens-per-step"] {
			return usagef("deal: give one of --global-batch-size and --tokens-per-step")
		}
		if *step < 0 && steps == nil {
			return usagef("deal: --step or --steps is required (or --checkpoint)")
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

	least := int64(1) // of the global batch size, or of the token budget
	if *tokens != 0 {
		least = 0
		if !set["drop-last"] {
			*dropLast = false // token-budget steps deal every row
		}
	}
	for _, f := range []struct {
		name     string
		v, least int64
	}{{"global-batch-size", *g, least}, {"tokens-per-step", *tokens, 1 - least}, {"num-splits", *s, 0}, {"world-size", *w, 1}, {"epoch", *epoch, 0}} {
		if f.v < f.least {
			return usagef("deal: --%s is %d; it must be at least %d", f.name, f.v, f.least)
		}
	}
	if *rank >= *w {
		return usagef("deal: --rank %d is not in [0, %d): --world-size is %d", *rank, *w, *w)
	}

	t, order, closeOrder, err := openDealt(ctx, *permURI, *splitName, *tableURI, *version, cache)
	if err != nil {
		return err
	}
	defer closeOrder()
	opts := loader.Options{GlobalBatchSize: *g, NumSplits: *s, TokensPerStep: *tokens, Oversize: *oversize,
		WorldSize: *w, ShuffleSeed: *seed, DropLast: *dropLast}
	l0, err := loader.New(t, order, opts)
	if err != nil {
		return err
	}
	defer l0.Close()
	if ckpt != nil {
		// The next step after the checkpoint, once it is known to come from
		// a run dealing what l0 deals.
		if *epoch, *step, err = l0.Resume(ctx, *ckpt); err != nil {
			return errcode.Wrap(err, errcode.InvalidArgument, "deal", *ckptPath)
		}
	}
	if steps != nil && ckpt != nil {
		*epoch = ckpt.Epoch // --steps looks back over the checkpoint's epoch
	}
	epochSteps, err := l0.EpochSteps(ctx, *epoch)
	if err != nil {
		return err
	}
	out := dealOutput{OrderID: order.ID(), TableURI: t.URI(), TableVersion: t.Version(), NumRows: order.Len(),
		GlobalBatchSize: l0.Options().GlobalBatchSize, NumSplits: l0.Options().NumSplits,
		TokensPerStep: l0.Options().TokensPerStep, Oversize: l0.Options().Oversize, WorldSize: l0.Options().WorldSize, ShuffleSeed: *seed, DropLast: *dropLast,
		Epoch: *epoch, Step: *step, StepsPerEpoch: epochSteps, Ranks: []dealRank{}}
	if set["which-steps"] || set["row"] {
		ids, err := askedRows(ctx, t, column, value, *rowID)
		if err != nil {
			return err
		}
		out.Epoch, out.Step = ckpt.Epoch, ckpt.StepsConsumed
		found, err := trainedOn(ctx, l0, ids, ckpt.Epoch, ckpt.StepsConsumed)
		if err != nil {
			return err
		}
		if *asJSON {
			return writeJSON(e.stdout, whichOutput{dealOutput: out, Rows: ids, Trained: found})
		}
		fmt.Fprintf(e.stdout, "%s of %s version %s: %d rows\n", out.OrderID, out.TableURI, out.TableVersion, out.NumRows)
		fmt.Fprintf(e.stdout, "%d rows asked about; steps that trained on them up to epoch %d, step %d (W=%d):\n",
			len(ids), ckpt.Epoch, ckpt.StepsConsumed, out.WorldSize)
		for _, tr := range found {
			fmt.Fprintf(e.stdout, "row %d: epoch %d step %d rank %d\n", tr.RowID, tr.Epoch, tr.Step, tr.Rank)
		}
		return nil
	}
	if steps != nil {
		def := epochSteps
		if ckpt != nil {
			def = ckpt.StepsConsumed
		}
		to := steps.end(def)
		if to > epochSteps {
			return usagef("deal: --steps %s: epoch %d has %d steps", *stepsFlag, *epoch, epochSteps)
		}
		so := stepsOutput{dealOutput: out, Steps: []dealStep{}}
		for at := steps.from; at < to; at++ {
			ranks, err := stepRanks(ctx, l0, *epoch, at, *rank, splitList(*columns))
			if err != nil {
				return err
			}
			so.Steps = append(so.Steps, dealStep{Epoch: *epoch, Step: at, Ranks: ranks})
		}
		if *asJSON {
			return writeJSON(e.stdout, so)
		}
		out.printHead(e)
		for _, st := range so.Steps {
			fmt.Fprintf(e.stdout, "epoch %d, step %d:\n", st.Epoch, st.Step)
			printRanks(e, st.Ranks, splitList(*columns), "")
		}
		return nil
	}
	if out.Ranks, err = stepRanks(ctx, l0, *epoch, *step, *rank, splitList(*columns)); err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(e.stdout, out)
	}
	out.printHead(e)
	fmt.Fprintf(e.stdout, "epoch %d, step %d:\n", out.Epoch, out.Step)
	printRanks(e, out.Ranks, splitList(*columns), "")
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
