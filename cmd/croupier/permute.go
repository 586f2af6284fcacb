package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/permutation"
)

func permuteCmd(ctx context.Context, e *env, args []string) error {
	fs, asJSON := newFlags(e, "permute", "permute TABLE_URI PERM_URI [flags]\n       croupier permute show PERM_URI")
	version := fs.Int64("version", 0, "table version to pin (0: the latest)")
	filter := fs.String("filter", "", "SQL boolean expression: only rows where it is true")
	splitRandom := fs.String("split-random", "", "random split: fractions (0.9,0.1 or 90%,10%) or row counts (9000,1000)")
	splitSeq := fs.String("split-sequential", "", "sequential split in row id order: fractions or row counts")
	splitHash := fs.String("split-hash", "", "split by a hash of column values: col1,col2:w1,w2[:discard]")
	splitCalc := fs.String("split-calculated", "", "split by a SQL integer expression giving the split index")
	fixed := fs.Int64("split-fixed", 0, "with --split-random or --split-sequential given as \"fixed\": splits of N rows")
	names := fs.String("split-names", "", "names of the splits, comma-separated")
	seed := fs.Uint64("seed", 0, "seed of a random split")
	shuffleSeed := fs.Uint64("shuffle-seed", 0, "shuffle every split with this seed")
	clump := fs.String("clump", "", "shuffle clumps of N consecutive rows, or auto: the rows of each page of the widest column")
	window := fs.Int64("window", 0, "shuffle within windows of N clumps")
	groupBy := fs.String("group-by", "", "deal rows sharing these columns' values as one group: col1,col2")
	lengths := fs.String("lengths", "", "record each row's length from this column (a list: its length; an integer: its value), for token-budget steps")
	quiet := fs.Bool("quiet", false, "no progress on stderr")
	buildMemory := fs.Int64("build-memory", 0, "bytes the build may hold, whatever the table's size (0: 1 GiB; at least 256 MiB)")
	cacheDir := cacheFlag(fs)
	pos, err := parse(fs, args, 2, 2)
	if err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	spec := permutation.Spec{Filter: *filter, GroupBy: splitList(*groupBy), Lengths: *lengths}
	if spec.Split, err = splitSpec(e.stderr, set, *splitRandom, *splitSeq, *splitHash, *splitCalc, *fixed, *names, *seed); err != nil {
		return err
	}
	if set["shuffle-seed"] || set["clump"] || set["window"] {
		c, err := clumpSize(*clump)
		if err != nil {
			return err
		}
		spec.Shuffle = &permutation.ShuffleSpec{Seed: *shuffleSeed, ClumpSize: c, Window: *window}
	}
	tableURI, err := toURI(pos[0])
	if err != nil {
		return err
	}
	permURI, err := toURI(pos[1])
	if err != nil {
		return err
	}
	cache, err := openCache(*cacheDir)
	if err != nil {
		return err
	}
	t, err := table.OpenWith(ctx, tableURI, table.OpenOptions{Version: *version, BlockCache: cache})
	if err != nil {
		return err
	}
	defer t.Close()
	opts := permutation.BuildOptions{Memory: *buildMemory}
	// A build's memory is all Go heap; 64 MiB for the rest: footers, the
	// table's pin.
	limitHeap(64<<20 + cmp.Or(*buildMemory, permutation.DefaultBuildMemory))
	var pr *progress
	if !*quiet {
		pr = newProgress(e.stderr)
		pr.eta = true
		opts.Progress = func(p permutation.Progress) { pr.update(p.Phase, p.Done, p.Total, buildNote(p)) }
	}
	p, err := permutation.Build(ctx, t, spec, permURI, opts)
	if pr != nil {
		pr.done()
	}
	if err != nil {
		return err
	}
	defer p.Close()
	return printPermutation(e, p, *asJSON)
}

// buildNote says what a build's scan kept and read so far.
func buildNote(p permutation.Progress) string {
	if p.Phase != "scan" {
		return ""
	}
	return fmt.Sprintf("%d kept, %.1f MiB read", p.Kept, float64(p.Bytes)/(1<<20))
}

// clumpSize parses --clump: a count of rows, or auto.
func clumpSize(s string) (int64, error) {
	switch s {
	case "":
		return 0, nil
	case "auto":
		return permutation.AutoClump, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, usagef("permute: --clump %q: want a count of rows (0 or more) or auto", s)
	}
	return n, nil
}

// splitSpec builds the split of permute's flags; nil when none is given.
// Sizes written as integers are row counts: 95,5 makes splits of 95 and 5
// rows, and a note on stderr says so, since it may have been meant as
// percentages (written 95%,5% or 0.95,0.05).
func splitSpec(stderr io.Writer, set map[string]bool, random, seq, hash, calc string, fixed int64, names string, seed uint64) (*permutation.SplitSpec, error) {
	var given []string
	for _, n := range []string{"split-random", "split-sequential", "split-hash", "split-calculated"} {
		if set[n] {
			given = append(given, "--"+n)
		}
	}
	if len(given) > 1 {
		return nil, usagef("permute: %s are exclusive", strings.Join(given, " and "))
	}
	if len(given) == 0 {
		if set["split-names"] || set["seed"] || set["split-fixed"] {
			return nil, usagef("permute: --split-names, --seed and --split-fixed need a --split-* flag")
		}
		return nil, nil
	}
	s := &permutation.SplitSpec{Names: splitList(names), Seed: seed}
	sizes := func(flagName, v string) error {
		if v == "fixed" {
			if fixed <= 0 {
				return usagef("permute: --%s fixed needs --split-fixed N", flagName)
			}
			s.Fixed = fixed
			return nil
		}
		if counts, err := parseInts(v); err == nil {
			s.Counts = counts
			fmt.Fprintf(stderr, "croupier: permute: --%s %s is read as row counts: splits of %s rows "+
				"(for fractions of the kept rows write 0.95,0.05 or 95%%,5%%)\n",
				flagName, v, strings.Trim(strings.Join(strings.Fields(fmt.Sprint(counts)), ", "), "[]"))
			return nil
		}
		ratios, err := parseFractions(v)
		if err != nil {
			return usagef("permute: --%s %q: want fractions (0.9,0.1 or 90%%,10%%), row counts (900,100) or \"fixed\"", flagName, v)
		}
		s.Ratios = ratios
		return nil
	}
	switch {
	case set["split-random"]:
		s.Kind = permutation.SplitRandom
		return s, sizes("split-random", random)
	case set["split-sequential"]:
		s.Kind = permutation.SplitSequential
		return s, sizes("split-sequential", seq)
	case set["split-calculated"]:
		s.Kind, s.Expr = permutation.SplitCalculated, calc
		return s, nil
	}
	s.Kind = permutation.SplitHash
	parts := strings.Split(hash, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return nil, usagef("permute: --split-hash %q: want col1,col2:w1,w2[:discard]", hash)
	}
	s.Columns = splitList(parts[0])
	w, err := parseInts(parts[1])
	if err != nil || len(s.Columns) == 0 {
		return nil, usagef("permute: --split-hash %q: want col1,col2:w1,w2[:discard]", hash)
	}
	s.Weights = w
	if len(parts) == 3 {
		d, err := parseInts(parts[2])
		if err != nil || len(d) != 1 {
			return nil, usagef("permute: --split-hash %q: the discard weight must be one integer", hash)
		}
		s.DiscardWeight = d[0]
	}
	return s, nil
}

func permuteShowCmd(ctx context.Context, e *env, args []string) error {
	fs, asJSON := newFlags(e, "permute show", "permute show PERM_URI")
	uri, err := parseURI(fs, args)
	if err != nil {
		return err
	}
	p, err := permutation.Open(ctx, uri)
	if err != nil {
		return err
	}
	defer p.Close()
	return printPermutation(e, p, *asJSON)
}

// permOutput is the provenance and statistics of a permutation.
type permOutput struct {
	ID               string                  `json:"id"`
	URI              string                  `json:"uri"`
	Format           int                     `json:"format"`
	TableURI         string                  `json:"table_uri"`
	TableVersion     string                  `json:"table_version"`
	Spec             permutation.Spec        `json:"spec"`
	Splits           []permutation.SplitInfo `json:"splits"`
	RowsScanned      int64                   `json:"rows_scanned"`
	RowsKept         int64                   `json:"rows_kept"`
	RowGroups        int64                   `json:"row_groups"`
	RowGroupsSkipped int64                   `json:"row_groups_skipped"`
	BuiltAt          *time.Time              `json:"built_at,omitempty"`
	BuildSeconds     float64                 `json:"build_seconds,omitempty"`
}

func printPermutation(e *env, p *permutation.Permutations, asJSON bool) error {
	m := p.Manifest()
	out := permOutput{ID: m.ID, URI: p.URI(), Format: m.Format, TableURI: m.Table.URI, TableVersion: m.Table.Version,
		Spec: m.Spec, Splits: m.Splits, RowsScanned: m.RowsScanned, RowsKept: m.RowsKept,
		RowGroups: m.RowGroups, RowGroupsSkipped: m.RowGroupsSkipped}
	if b := p.Build(); !b.BuiltAt.IsZero() {
		out.BuiltAt, out.BuildSeconds = &b.BuiltAt, b.Seconds
	}
	if asJSON {
		return writeJSON(e.stdout, out)
	}
	var spec strings.Builder
	enc := json.NewEncoder(&spec)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m.Spec); err != nil {
		return err
	}
	w := e.stdout
	fmt.Fprintf(w, "permutation  %s\nuri          %s\ntable        %s version %s\nspec         %s\nformat       %d\n",
		out.ID, out.URI, out.TableURI, out.TableVersion, strings.TrimSpace(spec.String()), out.Format)
	fmt.Fprintf(w, "rows         %d kept of %d scanned\nrow groups   %d, %d skipped by statistics\n",
		out.RowsKept, out.RowsScanned, out.RowGroups, out.RowGroupsSkipped)
	if out.BuiltAt != nil {
		fmt.Fprintf(w, "built        %s in %.3fs\n", out.BuiltAt.Format(time.RFC3339), out.BuildSeconds)
	}
	fmt.Fprintln(w, "splits:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	for _, s := range out.Splits {
		fmt.Fprintf(tw, "  %s\t%d\t\n", s.Name, s.NumRows)
	}
	return tw.Flush()
}
