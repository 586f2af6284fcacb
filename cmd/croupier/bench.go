package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// benchRun is one benchmark the harness ran (or would run).
type benchRun struct {
	Command  []string `json:"command"`
	ExitCode int      `json:"exit_code"`
	Skipped  string   `json:"skipped,omitempty"`
}

func benchCmd(ctx context.Context, e *env, args []string) error {
	fs, asJSON := newFlags(e, "bench", "bench [--dir REPO] [--dry-run]")
	dir := fs.String("dir", ".", "repository root holding bench/ and .venv/")
	dry := fs.Bool("dry-run", false, "print what would run, run nothing")
	if _, err := parse(fs, args, 0, 0); err != nil {
		return err
	}
	benches := []struct {
		need []string // paths that must exist under dir
		cmd  []string
	}{
		{[]string{".venv/bin/python", "bench/loader_throughput.py"}, []string{".venv/bin/python", "bench/loader_throughput.py"}},
		{[]string{"bench/commits"}, []string{"go", "run", "./bench/commits"}},
	}
	var runs []benchRun
	var failed []string
	for _, b := range benches {
		r := benchRun{Command: b.cmd}
		for _, p := range b.need {
			if _, err := os.Stat(filepath.Join(*dir, p)); err != nil {
				r.Skipped = p + " not found"
				break
			}
		}
		line := strings.Join(b.cmd, " ")
		switch {
		case r.Skipped != "":
			fmt.Fprintf(e.stderr, "skip: %s (%s)\n", line, r.Skipped)
		case *dry:
			fmt.Fprintf(e.stderr, "would run: %s\n", line)
		default:
			fmt.Fprintf(e.stderr, "run: %s\n", line)
			c := exec.CommandContext(ctx, b.cmd[0], b.cmd[1:]...)
			if b.cmd[0] != "go" {
				c.Path = filepath.Join(*dir, b.cmd[0])
			}
			c.Dir = *dir
			c.Stderr = e.stderr
			c.Stdout = e.stdout
			if *asJSON {
				c.Stdout = e.stderr // keep stdout for the JSON
			}
			if err := c.Run(); err != nil {
				r.ExitCode = -1
				if c.ProcessState != nil {
					r.ExitCode = c.ProcessState.ExitCode()
				}
				failed = append(failed, fmt.Sprintf("%s: %v", line, err))
			}
		}
		runs = append(runs, r)
	}
	if *asJSON {
		if err := writeJSON(e.stdout, runs); err != nil {
			return err
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("bench: %s", strings.Join(failed, "; "))
	}
	return nil
}
