// Command rankcpu measures how a distributed permutation build scales with
// its ranks on a machine with fewer cores than ranks: it runs the W ranks of
// a build in one process, one rank at a time at each step and on one core
// (GOMAXPROCS 1), and takes the CPU time of each rank's steps. With a core
// per rank, a build lasts as long as its busiest rank: the critical path.
//
//	go run ./bench/rankcpu -table URI [-ranks 1,2,4,8] [-spec JSON]
//
// The table is any table croupier opens (bench/permutation_build.py --keep
// leaves its table of two int64 columns in a folder). The spec is a
// permutation spec as JSON (permutation.Spec); the default is the one
// bench/permutation_build.py builds on several processes: a hash split 9:1
// on problem_id, shuffled with seed 1234. Every W builds to a location of
// its own, and the command fails unless every W built the same permutation
// (the same UUID). The ranks exchange their reports in memory, as Python's
// torch.distributed group would: what the process start-up, the group and
// the reports' journey cost is not in these figures (bench/RESULTS.md,
// "Permutation builds on several processes", measures the processes whole).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/permutation"
)

// defaultSpec is bench/permutation_build.py's build on several processes.
const defaultSpec = `{"split": {"kind": "hash", "columns": ["problem_id"], "weights": [9, 1], "names": ["train", "val"]}, "shuffle": {"seed": 1234}}`

// result is one W's figures.
type result struct {
	Ranks           int
	CPU             []float64 // seconds, of each rank
	Critical, Total float64   // the busiest rank's seconds, and all ranks'
	UUID            string
}

func main() {
	uri := flag.String("table", "", "table URI")
	ranksFlag := flag.String("ranks", "1,2,4,8", "numbers of ranks")
	specFlag := flag.String("spec", defaultSpec, "permutation spec, JSON")
	flag.Parse()
	if err := run(*uri, *ranksFlag, *specFlag); err != nil {
		fmt.Fprintln(os.Stderr, "rankcpu:", err)
		os.Exit(1)
	}
}

func run(uri, ranksFlag, specText string) error {
	if uri == "" {
		return fmt.Errorf("-table is required")
	}
	var spec permutation.Spec
	if err := json.Unmarshal([]byte(specText), &spec); err != nil {
		return fmt.Errorf("-spec: %w", err)
	}
	runtime.GOMAXPROCS(1)
	ctx := context.Background()
	t, err := table.Open(ctx, uri)
	if err != nil {
		return err
	}
	defer t.Close()
	out, err := os.MkdirTemp("", "rankcpu-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(out)
	var results []result
	for _, s := range strings.Split(ranksFlag, ",") {
		w, err := strconv.Atoi(s)
		if err != nil || w < 1 {
			return fmt.Errorf("-ranks: %q is not a number of ranks", s)
		}
		r, err := build(ctx, t, spec, fmt.Sprintf("file://%s/w%d", out, w), w)
		if err != nil {
			return fmt.Errorf("%d ranks: %w", w, err)
		}
		if len(results) > 0 && r.UUID != results[0].UUID {
			return fmt.Errorf("%d ranks built permutation %s, %d ranks %s", w, r.UUID, results[0].Ranks, results[0].UUID)
		}
		results = append(results, r)
	}
	fmt.Printf("%d rows, spec %s, one core\n\n", t.NumRows(), specText)
	fmt.Println("| ranks | CPU s of each rank | busiest rank (s) | all ranks (s) | speed-up: one rank ÷ the busiest |")
	fmt.Println("|---:|---|---:|---:|---:|")
	base := results[0] // the speed-ups are over one rank, or the first W given
	for _, r := range results {
		if r.Ranks == 1 {
			base = r
		}
	}
	for _, r := range results {
		each := make([]string, len(r.CPU))
		for i, c := range r.CPU {
			each[i] = fmt.Sprintf("%.2f", c)
		}
		fmt.Printf("| %d | %s | %.2f | %.2f | %.2f |\n", r.Ranks, strings.Join(each, " / "), r.Critical, r.Total, base.Critical/r.Critical)
	}
	return nil
}

// build runs the w ranks of a build of spec over t to uri, a rank at a time
// at each step, and returns each rank's CPU time.
func build(ctx context.Context, t *table.Table, spec permutation.Spec, uri string, w int) (result, error) {
	res := result{Ranks: w, CPU: make([]float64, w)}
	ranks := make([]*permutation.Rank, w)
	for i := range ranks {
		r, err := permutation.NewRank(ctx, t, spec, uri, permutation.BuildOptions{}, permutation.RankOptions{Rank: i, World: w})
		if err != nil {
			return res, err
		}
		defer r.Close()
		ranks[i] = r
	}
	var gathered [][]byte
	for {
		reports := make([][]byte, w)
		for i, r := range ranks {
			before := cpu()
			var err error
			if reports[i], err = r.Next(ctx, gathered); err != nil {
				return res, err
			}
			res.CPU[i] += (cpu() - before).Seconds()
		}
		if reports[0] == nil {
			break
		}
		gathered = reports
	}
	for _, c := range res.CPU {
		res.Critical, res.Total = max(res.Critical, c), res.Total+c
	}
	p := ranks[0].Permutations()
	if p == nil {
		return res, fmt.Errorf("rank 0 has no permutation")
	}
	res.UUID = p.ID()
	return res, nil
}

// cpu returns the process's CPU time, user and system.
func cpu() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
