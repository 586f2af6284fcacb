// Command commits measures append commits per second on a croupier table with
// 1, 4 and 8 concurrent writers, on file:// (a temporary folder) and on an
// S3-compatible server it runs on a loopback port.
//
//	go run ./bench/commits [-appends 25] [-rows 64] [-writers 1,4,8] [-latency 0] [-faults 0]
//
// -latency adds a fixed first-byte latency to every request of the S3 server,
// as a remote store has; -faults makes it inject that fraction of faults of
// every kind (see internal/s3test), which the commits must survive.
//
// Each writer is a goroutine with its own table handle and store connection;
// every append writes one small data file and commits one version, so the
// figure is dominated by the commit protocol (list, manifest read, exclusive
// create, retries on conflict), not by encoding.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/croupier-data/croupier/core/table"
	_ "github.com/croupier-data/croupier/core/table/parquetio" // writes tables
	_ "github.com/croupier-data/croupier/drivers/s3"           // s3://
	"github.com/croupier-data/croupier/internal/s3test"
)

var schema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "reward", Type: arrow.PrimitiveTypes.Float32},
}, nil)

func batch(start, n int64) array.RecordReader {
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	for i := start; i < start+n; i++ {
		b.Field(0).(*array.Int64Builder).Append(i)
		b.Field(1).(*array.Float32Builder).Append(float32(i))
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	r, err := array.NewRecordReader(schema, []arrow.RecordBatch{rec})
	if err != nil {
		panic(err)
	}
	return r
}

func main() {
	appends := flag.Int("appends", 25, "appends per writer")
	rows := flag.Int64("rows", 64, "rows per append")
	writersFlag := flag.String("writers", "1,4,8", "writer counts to measure")
	latency := flag.Duration("latency", 0, "first-byte latency of every S3 request")
	faults := flag.Float64("faults", 0, "fraction of S3 requests that get an injected fault")
	flag.Parse()
	if err := run(*appends, *rows, *writersFlag, s3test.Faults{Rate: *faults, Seed: 1, FirstByte: *latency}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(appends int, rows int64, writersFlag string, faults s3test.Faults) error {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "croupier-commits-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	srv, err := s3test.Start("bench")
	if err != nil {
		return err
	}
	defer srv.Close()
	srv.SetFaults(faults)
	fmt.Printf("%-6s %8s %8s %10s %10s\n", "store", "writers", "commits", "seconds", "commits/s")
	for _, store := range []string{"file", "s3"} {
		for _, ws := range strings.Split(writersFlag, ",") {
			writers, err := strconv.Atoi(ws)
			if err != nil {
				return err
			}
			name := fmt.Sprintf("t%s%d", store, writers)
			uri := "file://" + filepath.Join(dir, name)
			if store == "s3" {
				uri = srv.URI("bench", name)
			}
			tb, err := table.Create(ctx, uri, batch(0, 0), table.WriteOptions{})
			if err != nil {
				return err
			}
			tb.Close()
			start := time.Now()
			errs := make(chan error, writers)
			var wg sync.WaitGroup
			for w := range writers {
				wg.Go(func() {
					defer func() {
						if p := recover(); p != nil {
							errs <- fmt.Errorf("writer %d: panic: %v", w, p)
						}
					}()
					h, err := table.Open(ctx, uri)
					if err != nil {
						errs <- err
						return
					}
					defer h.Close()
					for j := range appends {
						if _, err := h.Append(ctx, batch(int64(w*appends+j)*rows, rows), table.WriteOptions{}); err != nil {
							errs <- err
							return
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			if err := <-errs; err != nil {
				return err
			}
			secs := time.Since(start).Seconds()
			n := writers * appends
			vs, err := table.Versions(ctx, uri)
			if err != nil {
				return err
			}
			if len(vs) != n+1 {
				return fmt.Errorf("%s: %d versions after %d appends", uri, len(vs), n)
			}
			fmt.Printf("%-6s %8d %8d %10.2f %10.1f\n", store, writers, n, secs, float64(n)/secs)
		}
	}
	return nil
}
