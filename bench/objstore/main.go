// Command objstore measures GET throughput and latency through croupier's
// store layer: random ranged reads of one object with store.ReaderAt, the
// reader the loader decodes Parquet from, at several concurrencies and range
// sizes.
//
//	go run ./bench/objstore [-object 64MiB] [-concurrency 1,4,16,64]
//	    [-ranges 64KiB,1MiB,8MiB] [-latency 20ms,50ms,100ms] [-duration 1s]
//	    [-json FILE]
//
// Stores:
//
//   - file: a temporary folder (the page cache holds the object: this is the
//     cost of the store layer and the system calls, not of a disk);
//   - mem: a process-wide in-memory bucket;
//   - s3: the local S3-compatible server (internal/s3test) on a loopback port;
//   - s3+Nms: the same server waiting N ms before it serves each request
//     (s3test's first-byte latency), as a distant store delays the first
//     byte;
//   - real buckets named by CROUPIER_BENCH_S3_URI and CROUPIER_BENCH_GCS_URI
//     (any URI croupier opens, e.g. s3://bucket/prefix?region=us-east-1, with
//     credentials from the environment as for any croupier URI): the object
//     croupier-bench-object is written under the prefix, read and deleted.
//     Without these variables those stores are skipped, and the output says so.
//
// Each cell runs its readers for -duration: every reader picks a random
// range-aligned offset, reads the range with one ReadAt (one ranged GET) and
// records its latency. Each reader makes one untimed read before the clock
// starts, so that connections are set up. Throughput is the bytes read over
// the wall time of the cell. A table goes to stdout; -json writes every figure
// for bench/run.py.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/croupier-data/croupier/core/store"
	_ "github.com/croupier-data/croupier/drivers/s3" // s3://
	"github.com/croupier-data/croupier/internal/s3test"
)

// objectKey is the name of the object every store reads, under its prefix.
const objectKey = "croupier-bench-object"

// Store is one store the benchmark ran on, or skipped.
type Store struct {
	Name    string `json:"name"`
	Skipped string `json:"skipped,omitempty"`
}

// Cell is the result of one store, concurrency and range size.
type Cell struct {
	Store       string  `json:"store"`
	Concurrency int     `json:"concurrency"`
	RangeBytes  int64   `json:"range_bytes"`
	Reads       int     `json:"reads"`
	Seconds     float64 `json:"seconds"`
	MBPerSec    float64 `json:"mb_per_s"` // 10^6 bytes per second
	P50MS       float64 `json:"p50_ms"`
	P90MS       float64 `json:"p90_ms"`
	P99MS       float64 `json:"p99_ms"`
}

// Report is what -json writes.
type Report struct {
	ObjectBytes int64   `json:"object_bytes"`
	DurationS   float64 `json:"duration_s"`
	Go          string  `json:"go"`
	CPUs        int     `json:"cpus"`
	Stores      []Store `json:"stores"`
	Cells       []Cell  `json:"cells"`
}

func main() {
	object := flag.String("object", "64MiB", "size of the object read")
	concFlag := flag.String("concurrency", "1,4,16,64", "readers in flight")
	rangesFlag := flag.String("ranges", "64KiB,1MiB,8MiB", "bytes per read")
	latFlag := flag.String("latency", "20ms,50ms,100ms", "first-byte delays of the delayed S3 stores")
	duration := flag.Duration("duration", time.Second, "time each cell reads for")
	jsonOut := flag.String("json", "", "also write the results as JSON to this file")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rep, err := run(ctx, *object, *concFlag, *rangesFlag, *latFlag, *duration, os.Stdout)
	if err == nil && *jsonOut != "" {
		err = writeJSON(*jsonOut, rep)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "objstore:", err)
		os.Exit(1)
	}
}

func writeJSON(path string, rep *Report) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// target is a store to measure: a URI of a prefix the object is written under.
type target struct {
	name, uri string
	delay     time.Duration // the server's first-byte delay
	real      bool          // a bucket of the user's: delete the object after
	skipped   string
}

func run(ctx context.Context, objectFlag, concFlag, rangesFlag, latFlag string, d time.Duration, out io.Writer) (*Report, error) {
	size, err := parseSize(objectFlag)
	if err != nil {
		return nil, err
	}
	concs, err := parseList(concFlag, strconv.Atoi)
	if err != nil {
		return nil, fmt.Errorf("-concurrency: %w", err)
	}
	ranges, err := parseList(rangesFlag, parseSize)
	if err != nil {
		return nil, fmt.Errorf("-ranges: %w", err)
	}
	delays, err := parseList(latFlag, time.ParseDuration)
	if err != nil {
		return nil, fmt.Errorf("-latency: %w", err)
	}

	dir, err := os.MkdirTemp("", "croupier-objstore-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	srv, err := s3test.Start("bench")
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	s3uri := srv.URI("bench", "objstore")

	targets := []target{
		{name: "file", uri: "file://" + dir},
		{name: "mem", uri: "mem://croupier-bench/objstore"},
		{name: "s3", uri: s3uri},
	}
	for _, dl := range delays {
		targets = append(targets, target{name: fmt.Sprintf("s3+%dms", dl.Milliseconds()), uri: s3uri, delay: dl})
	}
	for _, env := range []string{"CROUPIER_BENCH_S3_URI", "CROUPIER_BENCH_GCS_URI"} {
		t := target{name: strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(env, "CROUPIER_BENCH_"), "_URI")) + " (real)", real: true}
		if t.uri = os.Getenv(env); t.uri == "" {
			t.skipped = env + " not set"
		}
		targets = append(targets, t)
	}

	rep := &Report{ObjectBytes: size, DurationS: d.Seconds(), Go: runtime.Version(), CPUs: runtime.NumCPU()}
	fmt.Fprintf(out, "object %s, %v per cell, %s, %d CPUs\n", formatSize(size), d, runtime.Version(), runtime.NumCPU())
	fmt.Fprintf(out, "%-12s %5s %7s %7s %10s %9s %9s %9s\n", "store", "conc", "range", "reads", "MB/s", "p50 ms", "p90 ms", "p99 ms")
	for _, t := range targets {
		rep.Stores = append(rep.Stores, Store{Name: t.name, Skipped: t.skipped})
		if t.skipped != "" {
			fmt.Fprintf(out, "%-12s skipped: %s\n", t.name, t.skipped)
			continue
		}
		srv.SetFaults(s3test.Faults{FirstByte: t.delay})
		cells, err := measureStore(ctx, t, size, concs, ranges, d, out)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", t.name, err)
		}
		rep.Cells = append(rep.Cells, cells...)
	}
	return rep, nil
}

// measureStore writes the object under t.uri and runs every cell on it.
func measureStore(ctx context.Context, t target, size int64, concs []int, ranges []int64, d time.Duration, out io.Writer) ([]Cell, error) {
	loc, err := store.OpenCreate(ctx, t.uri)
	if err != nil {
		return nil, err
	}
	defer loc.Close()
	key := loc.Join(objectKey)
	data := make([]byte, size)
	rand.NewChaCha8([32]byte{1}).Read(data)
	if err := loc.WriteAll(ctx, key, data, store.WriterOptions{}); err != nil {
		return nil, fmt.Errorf("write %s: %w", loc.ObjectURI(key), err)
	}
	if t.real {
		defer func() { _ = loc.Delete(context.WithoutCancel(ctx), key) }()
	}
	obj, err := loc.Stat(ctx, key)
	if err != nil {
		return nil, err
	}
	var cells []Cell
	for _, rb := range ranges {
		for _, c := range concs {
			cell, err := measure(ctx, loc, obj, c, rb, d)
			if err != nil {
				return nil, err
			}
			cell.Store = t.name
			fmt.Fprintf(out, "%-12s %5d %7s %7d %10.1f %9.2f %9.2f %9.2f\n", t.name, c, formatSize(rb),
				cell.Reads, cell.MBPerSec, cell.P50MS, cell.P90MS, cell.P99MS)
			cells = append(cells, cell)
		}
	}
	return cells, nil
}

// measure reads random ranges of obj with conc readers for d.
func measure(ctx context.Context, loc *store.Location, obj store.Object, conc int, rangeBytes int64, d time.Duration) (Cell, error) {
	if rangeBytes > obj.Size {
		return Cell{}, fmt.Errorf("range %s is larger than the object (%s)", formatSize(rangeBytes), formatSize(obj.Size))
	}
	r := loc.NewReaderAt(ctx, obj)
	slots := obj.Size / rangeBytes
	lat := make([][]time.Duration, conc)
	errs := make([]error, conc)
	var ready, done sync.WaitGroup
	ready.Add(conc)
	begin := make(chan struct{})
	var start, deadline time.Time
	for w := range conc {
		done.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(conc), uint64(w)))
			buf := make([]byte, rangeBytes)
			read := func() error {
				_, err := r.ReadAt(buf, rng.Int64N(slots)*rangeBytes)
				if errors.Is(err, io.EOF) {
					return nil
				}
				return err
			}
			// One untimed read first, so that every reader has its connection.
			errs[w] = read()
			ready.Done()
			<-begin
			for errs[w] == nil && time.Now().Before(deadline) && ctx.Err() == nil {
				t := time.Now()
				if errs[w] = read(); errs[w] == nil {
					lat[w] = append(lat[w], time.Since(t))
				}
			}
		})
	}
	ready.Wait()
	start = time.Now()
	deadline = start.Add(d)
	close(begin)
	done.Wait()
	secs := time.Since(start).Seconds()
	if err := errors.Join(append(errs, ctx.Err())...); err != nil {
		return Cell{}, err
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	return Cell{
		Concurrency: conc,
		RangeBytes:  rangeBytes,
		Reads:       len(all),
		Seconds:     secs,
		MBPerSec:    float64(int64(len(all))*rangeBytes) / secs / 1e6,
		P50MS:       percentile(all, 0.50),
		P90MS:       percentile(all, 0.90),
		P99MS:       percentile(all, 0.99),
	}, nil
}

// percentile returns the nearest-rank percentile p of sorted, in milliseconds.
func percentile(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	i := max(int(math.Ceil(p*float64(len(sorted))))-1, 0)
	return float64(sorted[i]) / float64(time.Millisecond)
}

var units = []struct {
	suffix string
	n      int64
}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}

// parseSize parses 64KiB, 1MiB, 8MiB, 1GiB or a number of bytes.
func parseSize(s string) (int64, error) {
	for _, u := range units {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n <= 0 {
				return 0, fmt.Errorf("bad size %q", s)
			}
			return n * u.n, nil
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("bad size %q (use e.g. 64KiB, 1MiB)", s)
	}
	return n, nil
}

// formatSize writes n with the largest unit that divides it.
func formatSize(n int64) string {
	for _, u := range units {
		if n%u.n == 0 {
			return strconv.FormatInt(n/u.n, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10) + "B"
}

// parseList parses a comma-separated list with parse.
func parseList[T any](s string, parse func(string) (T, error)) ([]T, error) {
	var out []T
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := parse(f)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}
