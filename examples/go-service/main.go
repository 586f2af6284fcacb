// Command go-service serves a pinned table's batches to remote trainers over HTTP,
// as Arrow IPC streams.
//
// It embeds the loader: every request deals one rank's batches of one epoch in
// the same order as the Python StreamingDataset with the same numbers, so a
// trainer that cannot run croupier itself (another host, another language) gets
// exactly the same steps, and resumes by asking for the step it stopped at.
//
//	go run ./examples/go-service --perm file:///perms/run-7 --split train \
//	    --global-batch-size 64 --num-splits 16
//
// Endpoints:
//
//	GET /info
//	    JSON: steps_per_epoch, num_rows, table uri/version, permutation id, …
//	GET /batches?rank=R&world_size=W&epoch=E&start_step=T&steps=N
//	    rank R of W's batches for global steps T … T+N−1 (N absent or 0: to the
//	    end of the epoch) as one Arrow IPC stream: the schema, then one record
//	    batch per step. Each record has an extra int64 column "_step" holding
//	    its global step.
//
// Bad parameters get 400 with the reason; a missing table or permutation 404;
// other failures 500. A client that disconnects cancels the reads.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/core/table/libzstd"
	_ "github.com/croupier-data/croupier/core/table/parquetio" // columns of every type
	_ "github.com/croupier-data/croupier/drivers/all"          // s3://, gs:// and azblob://
	"github.com/croupier-data/croupier/loader"
	"github.com/croupier-data/croupier/permutation"
)

// StepColumn is the extra column holding each record's global step.
const StepColumn = "_step"

// ContentType is the media type of an Arrow IPC stream.
const ContentType = "application/vnd.apache.arrow.stream"

// Config is what the service deals; every request shares it.
type Config struct {
	GlobalBatchSize int64
	NumSplits       int64 // 0 means GlobalBatchSize
	ShuffleSeed     uint64
	DropLast        bool
	Columns         []string // nil means every column
}

// Server deals one order of one pinned table.
type Server struct {
	table *table.Table
	order permutation.Order
	perms *permutation.Permutations // nil when dealing a table's own order
	cfg   Config
	steps int64            // global steps per epoch
	alloc memory.Allocator // batch memory; the batches never leave Go
}

// NewServer checks cfg against order with a one-rank loader and returns the server.
// The caller keeps ownership of t (and of perms, which may be nil).
func NewServer(t *table.Table, order permutation.Order, perms *permutation.Permutations, cfg Config, alloc memory.Allocator) (*Server, error) {
	if alloc == nil {
		alloc = memory.DefaultAllocator
	}
	s := &Server{table: t, order: order, perms: perms, cfg: cfg, alloc: alloc}
	l, err := s.newLoader(0, 1)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	s.steps = l.StepsPerEpoch()
	return s, nil
}

func (s *Server) newLoader(rank, worldSize int64) (*loader.Loader, error) {
	return loader.New(s.table, s.order, loader.Options{
		GlobalBatchSize: s.cfg.GlobalBatchSize,
		NumSplits:       s.cfg.NumSplits,
		WorldSize:       worldSize,
		Rank:            rank,
		Columns:         s.cfg.Columns,
		ShuffleSeed:     s.cfg.ShuffleSeed,
		DropLast:        s.cfg.DropLast,
		Allocator:       s.alloc,
	})
}

// Handler returns the service's routes.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /info", s.info)
	mux.HandleFunc("GET /batches", s.batches)
	return mux
}

// Info is the body of GET /info.
type Info struct {
	StepsPerEpoch   int64    `json:"steps_per_epoch"`
	NumRows         int64    `json:"num_rows"` // rows in the dealt order
	TableRows       int64    `json:"table_rows"`
	TableURI        string   `json:"table_uri"`
	TableVersion    string   `json:"table_version"`
	PermutationID   string   `json:"permutation_id"` // the order's ID: "<uuid>/<split>" or "identity"
	PermutationURI  string   `json:"permutation_uri,omitempty"`
	GlobalBatchSize int64    `json:"global_batch_size"`
	NumSplits       int64    `json:"num_splits"`
	ShuffleSeed     uint64   `json:"shuffle_seed"`
	DropLast        bool     `json:"drop_last"`
	Columns         []string `json:"columns"`
}

func (s *Server) info(w http.ResponseWriter, _ *http.Request) {
	in := Info{
		StepsPerEpoch:   s.steps,
		NumRows:         s.order.Len(),
		TableRows:       s.table.NumRows(),
		TableURI:        s.table.URI(),
		TableVersion:    s.table.Version(),
		PermutationID:   s.order.ID(),
		GlobalBatchSize: s.cfg.GlobalBatchSize,
		NumSplits:       s.cfg.NumSplits,
		ShuffleSeed:     s.cfg.ShuffleSeed,
		DropLast:        s.cfg.DropLast,
		Columns:         s.cfg.Columns,
	}
	if in.NumSplits == 0 {
		in.NumSplits = in.GlobalBatchSize
	}
	if s.perms != nil {
		in.PermutationURI = s.perms.URI()
	}
	if in.Columns == nil {
		for _, f := range s.table.Schema().Fields() {
			in.Columns = append(in.Columns, f.Name)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(in)
}

// batchQuery is the parsed query of GET /batches.
type batchQuery struct {
	rank, worldSize, epoch, startStep, steps int64
}

func parseBatchQuery(r *http.Request) (batchQuery, error) {
	q := r.URL.Query()
	get := func(name string, def int64) (int64, error) {
		v := q.Get(name)
		if v == "" {
			return def, nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("%s=%q: want an integer >= 0", name, v)
		}
		return n, nil
	}
	var bq batchQuery
	var err error
	for _, p := range []struct {
		name string
		dst  *int64
		def  int64
	}{
		{"rank", &bq.rank, 0},
		{"world_size", &bq.worldSize, 1},
		{"epoch", &bq.epoch, 0},
		{"start_step", &bq.startStep, 0},
		{"steps", &bq.steps, 0},
	} {
		if *p.dst, err = get(p.name, p.def); err != nil {
			return bq, err
		}
	}
	if bq.worldSize == 0 {
		return bq, errors.New("world_size=0: want an integer >= 1")
	}
	return bq, nil
}

// status maps a library error to an HTTP status.
func status(err error) int {
	switch errcode.Of(err) {
	case errcode.InvalidArgument:
		return http.StatusBadRequest
	case errcode.NotFound:
		return http.StatusNotFound
	default:
		return http.StatusInternalServerError
	}
}

func (s *Server) batches(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context() // canceled when the client goes away
	bq, err := parseBatchQuery(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if bq.startStep > s.steps {
		http.Error(w, fmt.Sprintf("start_step=%d is past the end of the epoch (%d steps)",
			bq.startStep, s.steps), http.StatusBadRequest)
		return
	}
	stop := s.steps
	if bq.steps > 0 && bq.startStep+bq.steps < stop {
		stop = bq.startStep + bq.steps
	}

	l, err := s.newLoader(bq.rank, bq.worldSize)
	if err != nil {
		http.Error(w, err.Error(), status(err))
		return
	}
	defer l.Close()
	schema, err := l.Schema()
	if err != nil {
		http.Error(w, err.Error(), status(err))
		return
	}
	out := arrow.NewSchema(append(schema.Fields(),
		arrow.Field{Name: StepColumn, Type: arrow.PrimitiveTypes.Int64}), nil)

	st, err := l.Stream(ctx, loader.StreamOptions{Epoch: bq.epoch, StartStep: bq.startStep})
	if err != nil {
		http.Error(w, err.Error(), status(err))
		return
	}
	defer st.Close()

	// Read the first batch before answering, so that its failure still gets a status.
	var first *loader.Batch
	if bq.startStep < stop {
		b, err := st.Next(ctx)
		if err != nil && !errors.Is(err, io.EOF) {
			http.Error(w, err.Error(), status(err))
			return
		}
		if err == nil {
			first = &b
		}
	}

	w.Header().Set("Content-Type", ContentType)
	w.Header().Set("X-Steps-Per-Epoch", strconv.FormatInt(s.steps, 10))
	rc := http.NewResponseController(w)
	iw := ipc.NewWriter(w, ipc.WithSchema(out), ipc.WithAllocator(s.alloc))
	send := func(b loader.Batch) error {
		defer b.Record.Release()
		rec := s.withStep(out, b)
		defer rec.Release()
		if err := iw.Write(rec); err != nil {
			return err
		}
		return rc.Flush()
	}
	abort := func(err error) {
		// The status is sent: cut the stream short, so that the client sees a
		// truncated stream instead of a clean end.
		if ctx.Err() == nil {
			log.Printf("GET %s: %v", r.URL, err)
		}
		panic(http.ErrAbortHandler)
	}
	if first != nil {
		if err := send(*first); err != nil {
			abort(err)
		}
		for next := first.Step + 1; next < stop; next++ {
			b, err := st.Next(ctx)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				abort(err)
			}
			if err := send(b); err != nil {
				abort(err)
			}
		}
	}
	if err := iw.Close(); err != nil { // writes the end-of-stream marker (and the schema if no batch)
		abort(err)
	}
}

// withStep returns b's record with the StepColumn appended.
func (s *Server) withStep(schema *arrow.Schema, b loader.Batch) arrow.RecordBatch {
	n := int(b.Record.NumRows())
	bld := array.NewInt64Builder(s.alloc)
	defer bld.Release()
	bld.Reserve(n)
	for range n {
		bld.UnsafeAppend(b.Step)
	}
	step := bld.NewArray()
	defer step.Release()
	cols := append(append([]arrow.Array(nil), b.Record.Columns()...), step)
	return array.NewRecordBatch(schema, cols, b.Record.NumRows())
}

// open opens what the flags name: a permutation split, or a table in its own order.
func open(ctx context.Context, permURI, split, tableURI string) (*table.Table, permutation.Order, *permutation.Permutations, error) {
	switch {
	case permURI != "" && tableURI != "":
		return nil, nil, nil, errors.New("give --perm or --table, not both")
	case permURI != "":
		perms, err := permutation.Open(ctx, permURI)
		if err != nil {
			return nil, nil, nil, err
		}
		var sp *permutation.Split
		if split == "" {
			sp, err = perms.SplitAt(0)
		} else {
			sp, err = perms.Split(split)
		}
		if err != nil {
			perms.Close()
			return nil, nil, nil, err
		}
		return perms.Table(), sp, perms, nil
	case tableURI != "":
		t, err := table.Open(ctx, tableURI)
		if err != nil {
			return nil, nil, nil, err
		}
		return t, permutation.Identity{N: t.NumRows()}, nil, nil
	default:
		return nil, nil, nil, errors.New("give --perm URI (and --split) or --table URI")
	}
}

func run() error {
	var (
		permURI  = flag.String("perm", "", "permutation URI to deal from")
		split    = flag.String("split", "", "split of --perm (default: its first)")
		tableURI = flag.String("table", "", "table URI to deal in its own order (instead of --perm)")
		g        = flag.Int64("global-batch-size", 0, "samples per global step, all ranks together")
		numSplit = flag.Int64("num-splits", 0, "streams an epoch is dealt from (default: global batch size)")
		seed     = flag.Uint64("shuffle-seed", 0, "seed of the per-epoch order")
		dropLast = flag.Bool("drop-last", true, "drop the final partial step of an epoch")
		columns  = flag.String("columns", "", "comma-separated columns to serve (default: all)")
		addr     = flag.String("addr", "127.0.0.1:8080", "address to listen on")
	)
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %q", flag.Args())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	t, order, perms, err := open(ctx, *permURI, *split, *tableURI)
	if err != nil {
		return err
	}
	if perms != nil {
		defer perms.Close()
	} else {
		defer t.Close()
	}
	cfg := Config{GlobalBatchSize: *g, NumSplits: *numSplit, ShuffleSeed: *seed, DropLast: *dropLast}
	if *columns != "" {
		cfg.Columns = strings.Split(*columns, ",")
	}
	srv, err := NewServer(t, order, perms, cfg, nil)
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	log.Printf("serving %s (version %s, order %s, %d steps per epoch) on http://%s",
		t.URI(), t.Version(), order.ID(), srv.steps, ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return hs.Shutdown(shutdown)
	}
}

func main() {
	libzstd.Register() // decompress zstd pages with libzstd where built with cgo
	if err := run(); err != nil {
		log.Fatal(err)
	}
}
