package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/croupier-data/croupier/core/table/libzstd"
	_ "github.com/croupier-data/croupier/core/table/parquetio" // writing tables; every column type
	_ "github.com/croupier-data/croupier/drivers/all"          // s3://, gs:// and azblob://
)

func main() {
	libzstd.Register() // faster zstd decompression where built with cgo
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

const usage = `usage: croupier <command> [arguments]

Commands:
  tables create URI FILE.parquet...      create a croupier table from Parquet files
  tables append URI FILE.parquet...      append Parquet files as a new version
  tables versions URI [--long]           list the committed versions (--long: when, rows)
  tables list [URI]                      the tables under URI, or the names in the catalog
  tables inspect URI [--version N]       schema, rows, files and row groups of a version
  tables cleanup URI --keep-last N       delete old versions and unreferenced files
  rewrite SRC DST [flags]                rewrite a table as a croupier table for shuffled reads
  permute TABLE_URI PERM_URI [flags]     build and persist a permutation
  permute show PERM_URI                  provenance and split sizes of a permutation
  deal (--perm URI | --table URI | --checkpoint FILE) [flags]
                                         row ids each rank gets at a global step
  read (--perm URI | --table URI) --global-batch-size G [flags]
                                         read a rank's steps and report what they cost:
                                         rate, range requests, bytes fetched and decoded
  bench [--quick]                        run the benchmark harness (make bench)

Every command takes --json for machine-readable output.
Run "croupier <command> -h" for a command's flags.
`

// env is what every command writes to.
type env struct {
	stdout, stderr io.Writer
}

// usageError is bad command-line input: exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Sprintf(format, args...)}
}

// run executes the command line args and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	e := &env{stdout: stdout, stderr: stderr}
	err := dispatch(ctx, e, args)
	var ue *usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "croupier: %s\n", ue.msg)
		fmt.Fprintf(stderr, "run \"croupier help\" for usage\n")
		return 2
	default:
		fmt.Fprintf(stderr, "croupier: %s\n", err)
		return 1
	}
}

func dispatch(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(e.stderr, usage)
		return usagef("no command given")
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(e.stdout, usage)
		return nil
	case "tables":
		return tablesCmd(ctx, e, rest)
	case "rewrite":
		return rewriteCmd(ctx, e, rest)
	case "permute":
		if len(rest) > 0 && rest[0] == "show" {
			return permuteShowCmd(ctx, e, rest[1:])
		}
		return permuteCmd(ctx, e, rest)
	case "deal":
		return dealCmd(ctx, e, rest)
	case "read":
		return readCmd(ctx, e, rest)
	case "bench":
		return benchCmd(ctx, e, rest)
	}
	return usagef("unknown command %q", cmd)
}

// newFlags returns a flag set for one command, with --json, that reports
// errors as usage errors instead of exiting.
func newFlags(e *env, name, synopsis string) (*flag.FlagSet, *bool) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprintf(e.stderr, "usage: croupier %s\n", synopsis)
		fs.PrintDefaults()
	}
	asJSON := fs.Bool("json", false, "print machine-readable JSON")
	return fs, asJSON
}

// parse parses args, allowing flags after positional arguments, and checks
// the number of positional arguments: at least min, at most max (max < 0:
// no limit).
func parse(fs *flag.FlagSet, args []string, min, max int) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, &usageError{fs.Name() + ": " + err.Error()}
		}
		rest := fs.Args()
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			pos = append(pos, rest...) // "--" ends the flags
			break
		}
		if len(rest) == 0 {
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	if len(pos) < min || (max >= 0 && len(pos) > max) {
		fs.Usage()
		switch {
		case len(pos) < min:
			return nil, usagef("%s: missing arguments", fs.Name())
		default:
			return nil, usagef("%s: unexpected arguments %q", fs.Name(), pos[max:])
		}
	}
	return pos, nil
}

// parseURI parses args that hold exactly one positional argument, a URI or a
// local path, and returns it as a URI.
func parseURI(fs *flag.FlagSet, args []string) (string, error) {
	pos, err := parse(fs, args, 1, 1)
	if err != nil {
		return "", err
	}
	return toURI(pos[0])
}

// toURI turns a local path into a file:// URI; URIs pass unchanged.
func toURI(s string) (string, error) {
	if strings.Contains(s, "://") {
		return s, nil
	}
	abs, err := filepath.Abs(s)
	if err != nil {
		return "", err
	}
	return "file://" + filepath.ToSlash(abs), nil
}

// writeJSON prints v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// parseInts parses a comma-separated list of integers.
func parseInts(s string) ([]int64, error) {
	var out []int64
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// parseFractions parses a comma-separated list of fractions, each a number
// (0.25) or a percentage (25%).
func parseFractions(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		pct, isPct := strings.CutSuffix(f, "%")
		v, err := strconv.ParseFloat(pct, 64)
		if err != nil {
			return nil, err
		}
		if isPct {
			v /= 100
		}
		out = append(out, v)
	}
	return out, nil
}

// splitList splits a comma-separated list, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// limitHeap sets the Go runtime's soft memory limit to n bytes, unless
// GOMEMLIMIT is set. The command owns its runtime, and between collections
// the Go heap grows to about twice what is live: with the limit the
// collector runs as the heap nears what the command's budget lets it hold.
func limitHeap(n int64) {
	if _, set := os.LookupEnv("GOMEMLIMIT"); !set {
		debug.SetMemoryLimit(n)
	}
}
