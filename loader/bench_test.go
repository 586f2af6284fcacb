package loader_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"

	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/internal/s3test"
	"github.com/croupier-data/croupier/internal/tabletest"
	"github.com/croupier-data/croupier/loader"
	"github.com/croupier-data/croupier/permutation"
)

// shuffled is an Order holding its row ids in memory.
type shuffled []uint64

func (shuffled) ID() string   { return "shuffled" }
func (o shuffled) Len() int64 { return int64(len(o)) }
func (o shuffled) RowIDs(_ context.Context, start, stop int64) ([]uint64, error) {
	return o[start:stop], nil
}

// shuffle returns a random order of n rows, the same for every n.
func shuffle(n int64) shuffled {
	perm := make(shuffled, n)
	for i, j := range rand.New(rand.NewPCG(2, 2)).Perm(int(n)) {
		perm[i] = uint64(j)
	}
	return perm
}

// cpuTime is the CPU time the process has used: on a shared machine it
// varies less than wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// writeLM writes rows of pretokenized text (an id and 256–1023 random token
// ids) as zstd Parquet files of 4,096-row row groups, as bench/ does.
func writeLM(b *testing.B, dir string, files, rowsPerFile int) int64 {
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "tokens", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32)},
	}, nil)
	rng := rand.New(rand.NewPCG(1, 1))
	var id int64
	for f := range files {
		rb := array.NewRecordBuilder(memory.DefaultAllocator, schema)
		toks := rb.Field(1).(*array.ListBuilder)
		vals := toks.ValueBuilder().(*array.Int32Builder)
		for range rowsPerFile {
			rb.Field(0).(*array.Int64Builder).Append(id)
			id++
			toks.Append(true)
			for range 256 + rng.IntN(768) {
				vals.Append(rng.Int32N(50000))
			}
		}
		rec := rb.NewRecordBatch()
		rb.Release()
		data := tabletest.EncodeRecord(b, rec, parquet.WithMaxRowGroupLength(4096),
			parquet.WithCompression(compress.Codecs.Zstd), parquet.WithPageIndexEnabled(true))
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("part-%03d.parquet", f)), data, 0o644); err != nil {
			b.Fatal(err)
		}
		rec.Release()
	}
	return id
}

// readEpochs reads an epoch of l for each benchmark iteration, and reports
// rows a second of wall and of CPU time, and the bytes of pages decoded for
// each byte delivered.
func readEpochs(b *testing.B, l *loader.Loader) {
	ctx := context.Background()
	var rows, delivered, decoded int64
	cpu0 := cpuTime()
	for b.Loop() {
		s, err := l.Stream(ctx, loader.StreamOptions{})
		if err != nil {
			b.Fatal(err)
		}
		for batch, err := range s.All(ctx) {
			if err != nil {
				b.Fatal(err)
			}
			rows += batch.Record.NumRows()
			delivered += table.RecordBytes(batch.Record)
			batch.Record.Release()
		}
		decoded += s.Stats().DecodedBytes
		s.Close()
	}
	b.ReportMetric(float64(rows)/b.Elapsed().Seconds(), "rows/s")
	b.ReportMetric(float64(rows)/(cpuTime()-cpu0).Seconds(), "rows/cpu-s")
	b.ReportMetric(float64(decoded)/float64(delivered), "decoded/delivered")
}

// BenchmarkEpoch reads one epoch of LM rows in the orders of bench/, from
// local files, with a global batch of 64 on one rank:
//
//	go test ./loader -run '^$' -bench Epoch -benchtime 3x
func BenchmarkEpoch(b *testing.B) {
	dir := b.TempDir()
	n := writeLM(b, dir, 2, 20_000)
	ctx := context.Background()
	tb, err := table.Open(ctx, "file://"+dir)
	if err != nil {
		b.Fatal(err)
	}
	defer tb.Close()
	perm := shuffle(n)
	for _, bc := range []struct {
		name   string
		order  permutation.Order
		splits int64
	}{
		{"sequential", permutation.Identity{N: n}, 1},
		{"strided", permutation.Identity{N: n}, 64},
		{"shuffled", perm, 64},
	} {
		b.Run(bc.name, func(b *testing.B) {
			l, err := loader.New(tb, bc.order, loader.Options{GlobalBatchSize: 64, NumSplits: bc.splits})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			readEpochs(b, l)
		})
	}
}

// BenchmarkBeyondBudget reads a full shuffle of LM rows written as a croupier
// table with memory budgets the projected columns are 4 and 32 times,
// beside a sequential read with a budget that holds the table, the baseline
// of the ratios docs/tuning.md gives; in 16 (the default), 8 and 4 KiB zstd
// pages, the smaller of which hold a few rows of these token lists, and in 16
// KiB (the default layout) and 4 KiB lz4 pages:
//
//	go test ./loader -run '^$' -bench BeyondBudget -benchtime 3x
func BenchmarkBeyondBudget(b *testing.B) {
	dir := b.TempDir()
	writeLM(b, dir, 1, 40_000)
	ctx := context.Background()
	src, err := table.Open(ctx, "file://"+dir)
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close()
	const projected = 40_000 * (640*4 + 4 + 8) // Arrow bytes of the rows, about
	for _, layout := range []table.WriteOptions{
		{PageBytes: table.DefaultPageBytes, Compression: "zstd"},
		{PageBytes: 8 << 10, Compression: "zstd"},
		{PageBytes: 4 << 10, Compression: "zstd"},
		{PageBytes: table.DefaultPageBytes, Compression: "lz4"},
		{PageBytes: 4 << 10, Compression: "lz4"},
	} {
		tb, err := table.Rewrite(ctx, src, "file://"+b.TempDir()+"/t", table.RewriteOptions{WriteOptions: layout})
		if err != nil {
			b.Fatal(err)
		}
		defer tb.Close()
		n := tb.NumRows()
		var size int64
		for _, f := range tb.Files() {
			size += f.Size
		}
		perm := shuffle(n)
		for _, bc := range []struct {
			name   string
			order  permutation.Order
			budget int64
		}{
			{"sequential", permutation.Identity{N: n}, 2 * projected},
			{"full-4x", perm, projected / 4},
			{"full-32x", perm, projected / 32},
		} {
			b.Run(fmt.Sprintf("%s-%dKiB/%s", layout.Compression, layout.PageBytes>>10, bc.name), func(b *testing.B) {
				l, err := loader.New(tb, bc.order, loader.Options{GlobalBatchSize: 64, NumSplits: 8, MemoryBudget: bc.budget})
				if err != nil {
					b.Fatal(err)
				}
				defer l.Close()
				readEpochs(b, l)
				b.ReportMetric(float64(size)/float64(n), "file-bytes/row")
			})
		}
	}
}

// rollouts yields rows [start, start+n) of RL rollouts as bench/follow.py
// writes them: an id, 16–112 token ids and a reward.
func rollouts(start, n int64) array.RecordReader {
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "tokens", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32)},
		{Name: "reward", Type: arrow.PrimitiveTypes.Float32},
	}, nil)
	rng := rand.New(rand.NewPCG(uint64(start), 3))
	rb := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer rb.Release()
	toks := rb.Field(1).(*array.ListBuilder)
	vals := toks.ValueBuilder().(*array.Int32Builder)
	for id := start; id < start+n; id++ {
		rb.Field(0).(*array.Int64Builder).Append(id)
		toks.Append(true)
		for range 16 + rng.IntN(97) {
			vals.Append(rng.Int32N(50000))
		}
		rb.Field(2).(*array.Float32Builder).Append(rng.Float32())
	}
	rec := rb.NewRecordBatch()
	defer rec.Release()
	r, err := array.NewRecordReader(schema, []arrow.RecordBatch{rec})
	if err != nil {
		panic(err) // the record has the schema
	}
	return r
}

// BenchmarkFollow reads a croupier table of 200,000 rollouts written as 100
// appends to the in-process S3 server, as bench/follow.py does: pinned, a
// shuffle of the latest version opened afresh each time; following, rounds
// of 20,000 rows from version 1. Rows a second count up to the last batch:
//
//	go test ./loader -run '^$' -bench Follow -benchtime 5x
func BenchmarkFollow(b *testing.B) {
	srv, err := s3test.Start("bench")
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	ctx := context.Background()
	uri := srv.URI("bench", "rollouts")
	const versions, perVersion = 100, 2000
	tb, err := table.Create(ctx, uri, rollouts(0, perVersion), table.WriteOptions{})
	if err != nil {
		b.Fatal(err)
	}
	tb.Close()
	for v := int64(1); v < versions; v++ {
		if _, err := table.Append(ctx, uri, rollouts(v*perVersion, perVersion), table.WriteOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	n := int64(versions * perVersion)
	perm := shuffle(n)
	opts := loader.Options{GlobalBatchSize: 256, DropLast: true}
	// each reads the table once and returns the rows it dealt and the time
	// to its last batch.
	read := func(b *testing.B, each func(t *table.Table, start time.Time) (int64, time.Duration)) {
		var rows int64
		var wall time.Duration
		cpu0 := cpuTime()
		srv.ResetCounts()
		for b.Loop() {
			start := time.Now()
			t, err := table.Open(ctx, uri)
			if err != nil {
				b.Fatal(err)
			}
			r, d := each(t, start)
			t.Close()
			rows += r
			wall += d
		}
		b.ReportMetric(float64(rows)/wall.Seconds(), "rows/s")
		b.ReportMetric(float64(rows)/(cpuTime()-cpu0).Seconds(), "rows/cpu-s")
		b.ReportMetric(float64(srv.Requests())/float64(b.N), "requests/op")
		b.ReportMetric(float64(srv.BytesServed())/float64(b.N), "bytes/op")
	}
	b.Run("pinned", func(b *testing.B) {
		read(b, func(t *table.Table, start time.Time) (int64, time.Duration) {
			l, err := loader.New(t, perm, opts)
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			s, err := l.Stream(ctx, loader.StreamOptions{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			var rows int64
			for batch, err := range s.All(ctx) {
				if err != nil {
					b.Fatal(err)
				}
				rows += batch.Record.NumRows()
				batch.Record.Release()
			}
			return rows, time.Since(start)
		})
	})
	b.Run("following", func(b *testing.B) {
		read(b, func(t *table.Table, start time.Time) (int64, time.Duration) {
			f, err := loader.NewFollower(t, opts, loader.FollowOptions{RowsPerRound: 20_000, WaitTimeout: 50 * time.Millisecond, PollInterval: 10 * time.Millisecond})
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			s, err := f.Stream(ctx, f.Start(), 0, loader.StreamOptions{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			var rows int64
			var last time.Duration
			for {
				batch, err := s.Next(ctx)
				if err == io.EOF {
					return rows, last
				}
				if err != nil {
					b.Fatal(err)
				}
				rows += batch.Record.NumRows()
				batch.Record.Release()
				last = time.Since(start)
			}
		})
	})
}

// BenchmarkMerge merges two workers' rows of a run of 1,024 rollouts
// (tokens of 640 int32 and logprobs of 640 float32 each, about 5 KB), rows
// alternating at random as in a full shuffle:
//
//	go test ./loader -run '^$' -bench Merge
func BenchmarkMerge(b *testing.B) {
	const rows, width = 1024, 640
	rng := rand.New(rand.NewPCG(1, 1))
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "tokens", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32)},
		{Name: "logprobs", Type: arrow.ListOf(arrow.PrimitiveTypes.Float32)},
	}, nil)
	builders := [2]*array.RecordBuilder{array.NewRecordBuilder(memory.DefaultAllocator, schema), array.NewRecordBuilder(memory.DefaultAllocator, schema)}
	var places [2][]loader.Place
	for i := range rows {
		w := rng.IntN(2)
		rb := builders[w]
		rb.Field(0).(*array.Int64Builder).Append(int64(i))
		toks, lps := rb.Field(1).(*array.ListBuilder), rb.Field(2).(*array.ListBuilder)
		toks.Append(true)
		lps.Append(true)
		for range width {
			toks.ValueBuilder().(*array.Int32Builder).Append(rng.Int32())
			lps.ValueBuilder().(*array.Float32Builder).Append(rng.Float32())
		}
		places[w] = append(places[w], loader.Place{Step: int32(i / 64), Index: int32(i % 64)})
	}
	recs := []arrow.RecordBatch{builders[0].NewRecordBatch(), builders[1].NewRecordBatch()}
	mem := loader.DefaultAllocator
	b.SetBytes(rows * width * 8)
	for b.Loop() {
		rec, _, err := loader.Merge(context.Background(), mem, recs, places[:], rows/64)
		if err != nil {
			b.Fatal(err)
		}
		rec.Release()
	}
}
