package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// benchRun is the benchmark harness run (or the one that would run).
type benchRun struct {
	Command  []string `json:"command"`
	Dir      string   `json:"dir"`
	ExitCode int      `json:"exit_code"`
	Skipped  string   `json:"skipped,omitempty"`
}

// benchCmd runs `make bench` in the repository: the one entry point of the
// harness, which installs its Python dependencies before bench/run.py runs.
func benchCmd(ctx context.Context, e *env, args []string) error {
	fs, asJSON := newFlags(e, "bench", "bench [--dir REPO] [--quick] [--dry-run]")
	dir := fs.String("dir", ".", "repository root holding the Makefile and bench/")
	quick := fs.Bool("quick", false, "a smoke run of about a minute at tiny sizes (results under build/bench/quick)")
	dry := fs.Bool("dry-run", false, "print what would run, run nothing")
	if _, err := parse(fs, args, 0, 0); err != nil {
		return err
	}
	r := benchRun{Command: []string{"make", "bench"}, Dir: *dir}
	if *quick {
		r.Command = append(r.Command, "BENCH_FLAGS=--quick")
	}
	line := strings.Join(r.Command, " ")
	for _, p := range []string{"Makefile", filepath.Join("bench", "run.py")} {
		if _, err := os.Stat(filepath.Join(*dir, p)); err != nil {
			r.Skipped = p + " not found: --dir must name the croupier repository"
			break
		}
	}
	var runErr error
	switch {
	case r.Skipped != "":
		runErr = fmt.Errorf("bench: %s", r.Skipped)
	case *dry:
		fmt.Fprintf(e.stderr, "would run in %s: %s\n", *dir, line)
	default:
		fmt.Fprintf(e.stderr, "run in %s: %s\n", *dir, line)
		c := exec.CommandContext(ctx, r.Command[0], r.Command[1:]...)
		c.Dir = *dir
		c.Stdout, c.Stderr = e.stdout, e.stderr
		if *asJSON {
			c.Stdout = e.stderr // keep stdout for the JSON
		}
		if runErr = c.Run(); runErr != nil {
			r.ExitCode = -1
			if c.ProcessState != nil {
				r.ExitCode = c.ProcessState.ExitCode()
			}
			runErr = fmt.Errorf("bench: %s: %w", line, runErr)
		}
	}
	if *asJSON {
		if err := writeJSON(e.stdout, r); err != nil {
			return err
		}
	}
	return runErr
}
