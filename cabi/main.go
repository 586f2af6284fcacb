// Command cabi is libcroupier, the C ABI of croupier, built with
// go build -buildmode=c-shared. See ABI.md for the contract.
//
// Every export is the same four moves: guard (recover panics, fill the error
// message), look up handles, call the Go API, map the error to its code. Logic
// belongs in the Go packages, never here.
package main

/*
#include <stdint.h>
#include <stdlib.h>

#include "arrow_c.h"

typedef void (*croupier_progress)(const char* phase, int64_t done, int64_t total, int64_t kept, int64_t bytes);

static void croupier_call_progress(croupier_progress fn, const char* phase, int64_t done, int64_t total,
                                   int64_t kept, int64_t bytes) {
  fn(phase, done, total, kept, bytes);
}

typedef int (*croupier_rewrite_progress)(int64_t rows, int64_t total_rows, int64_t bytes, int64_t total_bytes);

static int croupier_call_rewrite_progress(croupier_rewrite_progress fn, int64_t rows, int64_t total_rows,
                                          int64_t bytes, int64_t total_bytes) {
  return fn(rows, total_rows, bytes, total_bytes);
}
*/
import "C"

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"io"
	"runtime"
	"runtime/debug"
	"slices"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/cdata"

	"github.com/croupier-data/croupier"
	"github.com/croupier-data/croupier/core/blockcache"
	"github.com/croupier-data/croupier/core/catalog"
	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/core/table/libzstd"
	_ "github.com/croupier-data/croupier/core/table/parquetio" // writing tables; every column type
	_ "github.com/croupier-data/croupier/drivers/all"          // s3://, gs:// and azblob://
	"github.com/croupier-data/croupier/internal/jsonargs"
	"github.com/croupier-data/croupier/loader"
	"github.com/croupier-data/croupier/permutation"
)

// abiVersion numbers this C ABI: the functions, their signatures and the JSON
// they take and give. It grows by one with every change a caller could
// notice, and callers refuse a library whose number is not theirs
// (python/croupier/_native.py, ABI_VERSION). exports.json lists the exports'
// signatures at this number; TestExportList fails when they drift from it.
//
//go:generate go test -run TestExportList -update
const abiVersion = 14

var cVersion = C.CString(croupier.Version) // allocated once, never freed

func main() {}

// The library decompresses zstd pages with libzstd (core/table/libzstd).
func init() { libzstd.Register() }

// guard runs fn, turning a panic into an Internal error, and reports fn's error
// through errOut as a C string the caller frees. errOut may be NULL.
func guard(errOut **C.char, fn func() error) C.int {
	return report(errOut, recovered(fn))
}

func recovered(fn func() error) (err error) {
	defer errcode.Recover(&err, errcode.Internal, "croupier", "")
	defer beginCall()() // see cancel.go
	return fn()
}

func report(errOut **C.char, err error) C.int {
	if err == nil {
		return 0
	}
	if errOut != nil {
		*errOut = C.CString(err.Error())
	}
	return C.int(errcode.Of(err))
}

// handleOut stores a new handle for the object a Go call returned.
func handleOut[T any](out *C.uint64_t) func(T, error) error {
	return func(v T, err error) error {
		if err != nil {
			return err
		}
		*out = C.uint64_t(newHandle(v))
		return nil
	}
}

// decodeJSON decodes an export's JSON argument into v; NULL leaves v as it is.
func decodeJSON(s *C.char, v any, what string) error {
	return decodeBytes(cBytes(s), v, what)
}

// cBytes copies a C string; NULL is nil.
func cBytes(s *C.char) []byte {
	if s == nil {
		return nil
	}
	return []byte(C.GoString(s))
}

func decodeBytes(b []byte, v any, what string) error {
	if b == nil {
		return nil
	}
	return jsonargs.Decode(b, v, true, "decode "+what, "")
}

func encodeJSON(v any, out **C.char) error {
	b, err := json.Marshal(v)
	if err != nil {
		return errcode.Wrap(err, errcode.Internal, "encode", "")
	}
	*out = C.CString(string(b))
	return nil
}

//export croupier_version
func croupier_version() *C.char { return cVersion }

//export croupier_abi_version
func croupier_abi_version() C.int64_t { return abiVersion }

//export croupier_init
func croupier_init(gomaxprocs, memoryLimit C.int64_t, errOut **C.char) C.int {
	return guard(errOut, func() error {
		if gomaxprocs > 0 {
			runtime.GOMAXPROCS(int(gomaxprocs))
		}
		if memoryLimit > 0 {
			debug.SetMemoryLimit(int64(memoryLimit))
		}
		return nil
	})
}

//export croupier_allocated_bytes
func croupier_allocated_bytes() (n C.int64_t) {
	guard(nil, func() error {
		n = C.int64_t(loader.DefaultAllocator.AllocatedBytes())
		return nil
	})
	return n
}

//export croupier_goroutines
func croupier_goroutines() (n C.int64_t) {
	guard(nil, func() error {
		n = C.int64_t(runtime.NumGoroutine())
		return nil
	})
	return n
}

//export croupier_gomaxprocs
func croupier_gomaxprocs() (n C.int64_t) {
	guard(nil, func() error {
		n = C.int64_t(runtime.GOMAXPROCS(0))
		return nil
	})
	return n
}

//export croupier_string_free
func croupier_string_free(s *C.char) { C.free(unsafe.Pointer(s)) }

//export croupier_release
func croupier_release(h C.uint64_t, errOut **C.char) C.int {
	return guard(errOut, func() error {
		v, err := release(uint64(h))
		if err != nil {
			return err
		}
		return closeObject(v)
	})
}

// closeObject closes the object of a released handle.
func closeObject(v any) error {
	if n := heapOf(v); n > 0 {
		defer holdHeap(-n)
	}
	if c, ok := v.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// tableOptions are the JSON options of croupier_table_open and the writers:
// the table package's options plus the catalog's path and the block cache's
// folder and bound.
type tableOptions struct {
	table.OpenOptions
	table.WriteOptions
	Catalog    string `json:"catalog"`     // bbolt catalog file caching footers and manifests; "" for none
	CacheDir   string `json:"cache_dir"`   // folder of the block cache; "" for none
	CacheBytes int64  `json:"cache_bytes"` // its bound; 0 for blockcache's default
}

func decodeTableOptions(s *C.char) (tableOptions, error) {
	var o tableOptions
	if err := decodeJSON(s, &o, "table options"); err != nil {
		return o, err
	}
	if o.Catalog != "" {
		cat := catalog.Open(catalog.Options{Path: o.Catalog})
		o.OpenOptions.Catalog, o.WriteOptions.Catalog = cat, cat
	}
	if o.CacheDir != "" {
		c, err := blockcache.Open(blockcache.Options{Dir: o.CacheDir, MaxBytes: o.CacheBytes})
		if err != nil {
			return o, err
		}
		o.OpenOptions.BlockCache = c
	}
	return o, nil
}

//export croupier_table_open
func croupier_table_open(uri, optionsJSON *C.char, out *C.uint64_t, errOut **C.char) C.int {
	return guard(errOut, func() error {
		o, err := decodeTableOptions(optionsJSON)
		if err != nil {
			return err
		}
		return handleOut[*table.Table](out)(table.OpenWith(callContext(), C.GoString(uri), o.OpenOptions))
	})
}

// importStream takes ownership of a caller's ArrowArrayStream.
func importStream(stream *C.struct_ArrowArrayStream) (array.RecordReader, error) {
	r, err := cdata.ImportCRecordReader((*cdata.CArrowArrayStream)(unsafe.Pointer(stream)), nil)
	if err != nil {
		return nil, errcode.Wrap(err, errcode.InvalidArgument, "import stream", "")
	}
	return r.(array.RecordReader), nil
}

// writeArgs decodes a writer's options and imports its data.
func writeArgs(optionsJSON *C.char, stream *C.struct_ArrowArrayStream) (tableOptions, array.RecordReader, error) {
	o, err := decodeTableOptions(optionsJSON)
	if err != nil {
		return o, nil, err
	}
	data, err := importStream(stream)
	return o, data, err
}

//export croupier_table_create
func croupier_table_create(uri *C.char, stream *C.struct_ArrowArrayStream, optionsJSON *C.char, out *C.uint64_t, errOut **C.char) C.int {
	return guard(errOut, func() error {
		o, data, err := writeArgs(optionsJSON, stream)
		if err != nil {
			return err
		}
		defer data.Release()
		return handleOut[*table.Table](out)(table.Create(callContext(), C.GoString(uri), data, o.WriteOptions))
	})
}

//export croupier_table_append
func croupier_table_append(uri *C.char, stream *C.struct_ArrowArrayStream, optionsJSON *C.char, outVersion *C.int64_t, errOut **C.char) C.int {
	return guard(errOut, func() error {
		o, data, err := writeArgs(optionsJSON, stream)
		if err != nil {
			return err
		}
		defer data.Release()
		v, err := table.Append(callContext(), C.GoString(uri), data, o.WriteOptions)
		if err != nil {
			return err
		}
		*outVersion = C.int64_t(v)
		return nil
	})
}

//export croupier_table_rewrite
func croupier_table_rewrite(th C.uint64_t, uri, optionsJSON *C.char, progress C.croupier_rewrite_progress, out *C.uint64_t, errOut **C.char) C.int {
	return guard(errOut, func() error {
		t, err := lookup[*table.Table](uint64(th))
		if err != nil {
			return err
		}
		var opts table.RewriteOptions
		if err := decodeJSON(optionsJSON, &opts, "rewrite options"); err != nil {
			return err
		}
		ctx, cancel := context.WithCancel(callContext())
		defer cancel()
		if progress != nil {
			opts.Progress = func(p table.RewriteProgress) {
				if C.croupier_call_rewrite_progress(progress, C.int64_t(p.Rows), C.int64_t(p.TotalRows),
					C.int64_t(p.Bytes), C.int64_t(p.TotalBytes)) != 0 {
					cancel()
				}
			}
		}
		return handleOut[*table.Table](out)(table.Rewrite(ctx, t, C.GoString(uri), opts))
	})
}

//export croupier_table_versions
func croupier_table_versions(uri *C.char, out **C.char, errOut **C.char) C.int {
	return guard(errOut, func() error {
		vs, err := table.Versions(callContext(), C.GoString(uri))
		if err != nil {
			return err
		}
		return encodeJSON(vs, out)
	})
}

//export croupier_table_history
func croupier_table_history(uri *C.char, out **C.char, errOut **C.char) C.int {
	return guard(errOut, func() error {
		vs, err := table.History(callContext(), C.GoString(uri))
		if err != nil {
			return err
		}
		return encodeJSON(vs, out)
	})
}

//export croupier_table_cleanup
func croupier_table_cleanup(uri, optionsJSON *C.char, out **C.char, errOut **C.char) C.int {
	return guard(errOut, func() error {
		var o table.CleanupOptions
		if err := decodeJSON(optionsJSON, &o, "cleanup options"); err != nil {
			return err
		}
		res, err := table.Cleanup(callContext(), C.GoString(uri), o)
		if err != nil {
			return err
		}
		return encodeJSON(res, out)
	})
}

//export croupier_catalog_register
func croupier_catalog_register(path, name, uri *C.char, errOut **C.char) C.int {
	return guard(errOut, func() error {
		return catalog.Open(catalog.Options{Path: C.GoString(path)}).Register(C.GoString(name), C.GoString(uri))
	})
}

//export croupier_catalog_lookup
func croupier_catalog_lookup(path, name *C.char, out **C.char, errOut **C.char) C.int {
	return guard(errOut, func() error {
		uri, err := catalog.Open(catalog.Options{Path: C.GoString(path)}).Lookup(C.GoString(name))
		if err != nil {
			return err
		}
		*out = C.CString(uri)
		return nil
	})
}

//export croupier_table_open_pin
func croupier_table_open_pin(pinJSON, optionsJSON *C.char, out *C.uint64_t, errOut **C.char) C.int {
	return guard(errOut, func() error {
		pin, err := table.DecodePin([]byte(C.GoString(pinJSON)))
		if err != nil {
			return err
		}
		o, err := decodeTableOptions(optionsJSON)
		if err != nil {
			return err
		}
		return handleOut[*table.Table](out)(table.OpenPinWith(callContext(), pin, o.OpenOptions))
	})
}

//export croupier_table_pin
func croupier_table_pin(h C.uint64_t, out **C.char, errOut **C.char) C.int {
	return guard(errOut, func() error {
		t, err := lookup[*table.Table](uint64(h))
		if err != nil {
			return err
		}
		return encodeJSON(t.Pin(), out)
	})
}

//export croupier_table_info
func croupier_table_info(h C.uint64_t, out **C.char, errOut **C.char) C.int {
	return guard(errOut, func() error {
		t, err := lookup[*table.Table](uint64(h))
		if err != nil {
			return err
		}
		return encodeJSON(t.Info(), out)
	})
}

//export croupier_table_schema
func croupier_table_schema(h C.uint64_t, out *C.struct_ArrowSchema, errOut **C.char) C.int {
	return guard(errOut, func() error {
		t, err := lookup[*table.Table](uint64(h))
		if err != nil {
			return err
		}
		cdata.ExportArrowSchema(t.Schema(), (*cdata.CArrowSchema)(unsafe.Pointer(out)))
		return nil
	})
}

//export croupier_table_take
func croupier_table_take(th C.uint64_t, ids *C.uint64_t, n C.int64_t, columnsJSON *C.char, outArray *C.struct_ArrowArray, outSchema *C.struct_ArrowSchema, errOut **C.char) C.int {
	return guard(errOut, func() error {
		t, err := lookup[*table.Table](uint64(th))
		if err != nil {
			return err
		}
		var columns []string
		if err := decodeJSON(columnsJSON, &columns, "columns"); err != nil {
			return err
		}
		if n < 0 {
			return errcode.New(errcode.InvalidArgument, "take", t.URI(), "%d row ids", n)
		}
		r, err := t.NewReader(table.ReaderOptions{Columns: columns, Allocator: loader.DefaultAllocator})
		if err != nil {
			return err
		}
		defer r.Close()
		rec, err := r.Read(callContext(), slices.Clone(unsafe.Slice((*uint64)(unsafe.Pointer(ids)), int(n))))
		if err != nil {
			return err
		}
		defer rec.Release()
		cdata.ExportArrowRecordBatch(rec, (*cdata.CArrowArray)(unsafe.Pointer(outArray)), (*cdata.CArrowSchema)(unsafe.Pointer(outSchema)))
		return nil
	})
}

//export croupier_dataset_open
func croupier_dataset_open(th C.uint64_t, optionsJSON *C.char, out *C.uint64_t, errOut **C.char) C.int {
	return guard(errOut, func() error {
		t, err := lookup[*table.Table](uint64(th))
		if err != nil {
			return err
		}
		return openDataset(t, permutation.Identity{N: t.NumRows()}, optionsJSON, out)
	})
}

//export croupier_dataset_open_split
func croupier_dataset_open_split(ph C.uint64_t, split C.int64_t, optionsJSON *C.char, out *C.uint64_t, errOut **C.char) C.int {
	return guard(errOut, func() error {
		p, err := lookup[*permutation.Permutations](uint64(ph))
		if err != nil {
			return err
		}
		s, err := p.SplitAt(int(split))
		if err != nil {
			return err
		}
		return openDataset(p.Table(), s, optionsJSON, out)
	})
}

func openDataset(t *table.Table, order permutation.Order, optionsJSON *C.char, out *C.uint64_t) error {
	return handleOut[*loader.Loader](out)(newLoader(t, order, cBytes(optionsJSON)))
}

// newLoader decodes a dataset's JSON options and opens its loader.
func newLoader(t *table.Table, order permutation.Order, options []byte) (*loader.Loader, error) {
	var opts loader.Options
	if err := decodeBytes(options, &opts, "dataset options"); err != nil {
		return nil, err
	}
	l, err := loader.New(t, order, opts)
	if err == nil {
		holdHeap(heapOf(l)) // until closeObject
	}
	return l, err
}

// openStream decodes a stream's JSON options and opens it.
func openStream(l *loader.Loader, options []byte) (*loader.Stream, error) {
	var so loader.StreamOptions
	if err := decodeBytes(options, &so, "stream options"); err != nil {
		return nil, err
	}
	return openStreamForCall(l, so)
}

//export croupier_dataset_info
func croupier_dataset_info(h C.uint64_t, out **C.char, errOut **C.char) C.int {
	return guard(errOut, func() error {
		l, err := lookup[*loader.Loader](uint64(h))
		if err != nil {
			return err
		}
		return encodeJSON(l.Info(), out)
	})
}

//export croupier_dataset_step
func croupier_dataset_step(h C.uint64_t, epoch, step C.int64_t, out **C.char, errOut **C.char) C.int {
	return guard(errOut, func() error {
		l, err := lookup[*loader.Loader](uint64(h))
		if err != nil {
			return err
		}
		if epoch < 0 {
			return errcode.New(errcode.InvalidArgument, "step", l.Table().URI(), "epoch %d is negative", epoch)
		}
		ranks, err := l.Step(callContext(), int64(epoch), int64(step))
		if err != nil {
			return err
		}
		return encodeJSON(ranks, out)
	})
}

//export croupier_dataset_epoch_steps
func croupier_dataset_epoch_steps(h C.uint64_t, epoch C.int64_t, out *C.int64_t, errOut **C.char) C.int {
	return guard(errOut, func() error {
		l, err := lookup[*loader.Loader](uint64(h))
		if err != nil {
			return err
		}
		if epoch < 0 {
			return errcode.New(errcode.InvalidArgument, "epoch steps", "", "epoch %d is negative", epoch)
		}
		n, err := l.EpochSteps(callContext(), int64(epoch))
		if err != nil {
			return err
		}
		*out = C.int64_t(n)
		return nil
	})
}

//export croupier_stream_open
func croupier_stream_open(dh C.uint64_t, optionsJSON *C.char, out *C.uint64_t, errOut **C.char) C.int {
	return guard(errOut, func() error {
		l, err := lookup[*loader.Loader](uint64(dh))
		if err != nil {
			return err
		}
		return handleOut[*loader.Stream](out)(openStream(l, cBytes(optionsJSON)))
	})
}

//export croupier_stream_next
func croupier_stream_next(h C.uint64_t, outArray *C.struct_ArrowArray, outSchema *C.struct_ArrowSchema, outStep, outSteps *C.int64_t, errOut **C.char) C.int {
	return guard(errOut, func() error {
		s, err := lookup[batchStream](uint64(h))
		if err != nil {
			return err
		}
		b, err := s.Next(callContext())
		if errors.Is(err, io.EOF) {
			*outStep = -1
			return nil
		}
		if err != nil {
			return err
		}
		defer b.Record.Release()
		rec := b.Record
		if b.Places != nil {
			rec = withPlaces(rec, b.Places)
			defer rec.Release()
		}
		// A stream's schema never changes: a caller that has it passes no
		// out_schema and skips exporting and importing it for every batch.
		var schema *cdata.CArrowSchema
		if outSchema != nil {
			schema = (*cdata.CArrowSchema)(unsafe.Pointer(outSchema))
		}
		cdata.ExportArrowRecordBatch(rec, (*cdata.CArrowArray)(unsafe.Pointer(outArray)), schema)
		*outStep, *outSteps = C.int64_t(b.Step), C.int64_t(b.Steps)
		return nil
	})
}

// placesColumn names the column croupier_stream_next adds to the batches of
// a stream whose workers share steps.
const placesColumn = "croupier.places"

// withPlaces returns rec with its rows' places as a last int64 column:
// a row that is row i of the rank's share of step Batch.Step + j has
// j<<32 | i. One column crosses the C ABI with the batch, in the same call.
func withPlaces(rec arrow.RecordBatch, places []loader.Place) arrow.RecordBatch {
	b := array.NewInt64Builder(loader.DefaultAllocator)
	defer b.Release()
	b.Reserve(len(places))
	for _, p := range places {
		b.UnsafeAppend(int64(p.Step)<<32 | int64(p.Index))
	}
	col := b.NewInt64Array()
	defer col.Release()
	fields := slices.Concat(rec.Schema().Fields(), []arrow.Field{{Name: placesColumn, Type: arrow.PrimitiveTypes.Int64}})
	md := rec.Schema().Metadata()
	return array.NewRecordBatch(arrow.NewSchema(fields, &md), slices.Concat(rec.Columns(), []arrow.Array{col}), rec.NumRows())
}

//export croupier_merge_shared
func croupier_merge_shared(stream *C.struct_ArrowArrayStream, steps C.int64_t, outArray *C.struct_ArrowArray, outSchema *C.struct_ArrowSchema, outSizes *C.int64_t, errOut **C.char) C.int {
	return guard(errOut, func() error {
		r, err := importStream(stream)
		if err != nil {
			return err
		}
		defer r.Release()
		if steps < 0 {
			return errcode.New(errcode.InvalidArgument, "merge shared steps", "", "steps %d is negative", steps)
		}
		recs, places, err := withoutPlaces(r)
		defer func() {
			for _, rec := range recs {
				rec.Release()
			}
		}()
		if err != nil {
			return err
		}
		rec, sizes, err := loader.Merge(callContext(), loader.DefaultAllocator, recs, places, int(steps))
		if err != nil {
			return err
		}
		defer rec.Release()
		var schema *cdata.CArrowSchema
		if outSchema != nil {
			schema = (*cdata.CArrowSchema)(unsafe.Pointer(outSchema))
		}
		cdata.ExportArrowRecordBatch(rec, (*cdata.CArrowArray)(unsafe.Pointer(outArray)), schema)
		out := unsafe.Slice(outSizes, len(sizes))
		for i, n := range sizes {
			out[i] = C.int64_t(n)
		}
		return nil
	})
}

// withoutPlaces reads the record batches of r, whose last column is
// placesColumn, and returns them without it, and their places.
func withoutPlaces(r array.RecordReader) ([]arrow.RecordBatch, [][]loader.Place, error) {
	const op = "merge shared steps"
	schema := r.Schema()
	last := schema.NumFields() - 1
	if last < 0 || schema.Field(last).Name != placesColumn || schema.Field(last).Type.ID() != arrow.INT64 {
		return nil, nil, errcode.New(errcode.InvalidArgument, op, "", "the record batches' last column is not %s (int64): %s", placesColumn, schema)
	}
	md := schema.Metadata()
	data := arrow.NewSchema(schema.Fields()[:last], &md)
	var recs []arrow.RecordBatch
	var places [][]loader.Place
	for r.Next() {
		rec := r.RecordBatch()
		keys := rec.Column(last).(*array.Int64)
		if keys.NullN() > 0 {
			return recs, nil, errcode.New(errcode.InvalidArgument, op, "", "record batch %d has null places", len(recs))
		}
		ps := make([]loader.Place, keys.Len())
		for i, v := range keys.Int64Values() {
			ps[i] = loader.Place{Step: int32(v >> 32), Index: int32(uint32(v))}
		}
		recs = append(recs, array.NewRecordBatch(data, rec.Columns()[:last], rec.NumRows()))
		places = append(places, ps)
	}
	if err := r.Err(); err != nil {
		return recs, nil, errcode.Wrap(err, errcode.InvalidArgument, op, "")
	}
	return recs, places, nil
}

//export croupier_stream_stats
func croupier_stream_stats(h C.uint64_t, out **C.char, errOut **C.char) C.int {
	return guard(errOut, func() error {
		s, err := lookup[batchStream](uint64(h))
		if err != nil {
			return err
		}
		if f, ok := s.(*loader.FollowStream); ok {
			return encodeJSON(f.FollowStats(), out)
		}
		return encodeJSON(s.(*loader.Stream).Stats(), out)
	})
}

//export croupier_stream_run_end
func croupier_stream_run_end(h C.uint64_t, first, most, bytes C.int64_t, out *C.int64_t, errOut **C.char) C.int {
	return guard(errOut, func() error {
		s, err := lookup[batchStream](uint64(h))
		if err != nil {
			return err
		}
		st, ok := s.(*loader.Stream)
		if !ok {
			return errcode.New(errcode.InvalidArgument, "end a run of steps", "", "handle %d is a follow stream, whose steps are not sent in runs", h)
		}
		end, err := st.RunEnd(callContext(), int64(first), int64(most), int64(bytes))
		if err != nil {
			return err
		}
		*out = C.int64_t(end)
		return nil
	})
}

//export croupier_permutation_build
func croupier_permutation_build(th C.uint64_t, specJSON, uri, optionsJSON *C.char, progress C.croupier_progress, out *C.uint64_t, errOut **C.char) C.int {
	return guard(errOut, func() error {
		var o struct {
			Memory int64 `json:"memory"`
		}
		t, spec, err := buildInput(th, specJSON, optionsJSON, &o)
		if err != nil {
			return err
		}
		opts := permutation.BuildOptions{Memory: o.Memory}
		if held := cmp.Or(o.Memory, permutation.DefaultBuildMemory); held > 0 {
			holdHeap(held)
			defer holdHeap(-held)
		}
		opts.Progress = buildProgress(progress)
		return handleOut[*permutation.Permutations](out)(permutation.Build(callContext(), t, spec, C.GoString(uri), opts))
	})
}

// buildInput returns what a build is asked for: the table of handle th, the
// spec, and the options decoded into o, whose fields are the call's.
func buildInput(th C.uint64_t, specJSON, optionsJSON *C.char, o any) (*table.Table, permutation.Spec, error) {
	var spec permutation.Spec
	t, err := lookup[*table.Table](uint64(th))
	if err != nil {
		return nil, spec, err
	}
	if err := decodeJSON(specJSON, &spec, "permutation spec"); err != nil {
		return nil, spec, err
	}
	if err := decodeJSON(optionsJSON, o, "build options"); err != nil {
		return nil, spec, err
	}
	return t, spec, nil
}

// buildProgress returns the Go callback that calls a build's C progress
// callback, nil for NULL.
func buildProgress(progress C.croupier_progress) func(permutation.Progress) {
	if progress == nil {
		return nil
	}
	return func(p permutation.Progress) {
		phase := C.CString(p.Phase)
		defer C.free(unsafe.Pointer(phase))
		C.croupier_call_progress(progress, phase, C.int64_t(p.Done), C.int64_t(p.Total), C.int64_t(p.Kept), C.int64_t(p.Bytes))
	}
}

// buildRank is a rank of a distributed build, open between the calls that
// step it, holding its build's memory on the Go heap.
type buildRank struct {
	*permutation.Rank
	held int64
	done bool // whether the permutation was handed out
}

func (r *buildRank) Close() error {
	defer holdHeap(-r.held)
	return r.Rank.Close()
}

//export croupier_permutation_rank_open
func croupier_permutation_rank_open(th C.uint64_t, specJSON, uri, optionsJSON *C.char, progress C.croupier_progress, out *C.uint64_t, errOut **C.char) C.int {
	return guard(errOut, func() error {
		var o struct {
			Memory int64 `json:"memory"`
			Rank   int   `json:"rank"`
			World  int   `json:"world"`
		}
		t, spec, err := buildInput(th, specJSON, optionsJSON, &o)
		if err != nil {
			return err
		}
		opts := permutation.BuildOptions{Memory: o.Memory, Progress: buildProgress(progress)}
		r, err := permutation.NewRank(callContext(), t, spec, C.GoString(uri), opts, permutation.RankOptions{Rank: o.Rank, World: o.World})
		if err != nil {
			return err
		}
		br := &buildRank{Rank: r, held: cmp.Or(o.Memory, permutation.DefaultBuildMemory)}
		holdHeap(br.held)
		*out = C.uint64_t(newHandle(br))
		return nil
	})
}

//export croupier_permutation_rank_next
func croupier_permutation_rank_next(h C.uint64_t, gatheredJSON *C.char, report **C.char, perm *C.uint64_t, errOut **C.char) C.int {
	return guard(errOut, func() error {
		r, err := lookup[*buildRank](uint64(h))
		if err != nil {
			return err
		}
		if r.done {
			return errcode.New(errcode.InvalidArgument, "build permutation", "", "the build of this rank is over")
		}
		var gathered [][]byte
		if gatheredJSON != nil {
			var reports []json.RawMessage
			if err := decodeJSON(gatheredJSON, &reports, "rank reports"); err != nil {
				return err
			}
			for _, rep := range reports {
				gathered = append(gathered, rep)
			}
		}
		rep, err := r.Next(callContext(), gathered)
		switch {
		case err != nil:
			return err
		case rep != nil:
			*report = C.CString(string(rep))
			return nil
		}
		if r.Permutations() == nil {
			return errcode.New(errcode.InvalidArgument, "build permutation", "", "the build of this rank failed")
		}
		*report, r.done = nil, true
		*perm = C.uint64_t(newHandle(r.Permutations()))
		return nil
	})
}

//export croupier_permutation_open
func croupier_permutation_open(uri, optionsJSON *C.char, out *C.uint64_t, errOut **C.char) C.int {
	return guard(errOut, func() error {
		o, err := decodeTableOptions(optionsJSON)
		if err != nil {
			return err
		}
		return handleOut[*permutation.Permutations](out)(permutation.OpenWith(callContext(), C.GoString(uri), o.OpenOptions))
	})
}

//export croupier_permutation_info
func croupier_permutation_info(h C.uint64_t, out **C.char, errOut **C.char) C.int {
	return guard(errOut, func() error {
		p, err := lookup[*permutation.Permutations](uint64(h))
		if err != nil {
			return err
		}
		return encodeJSON(permutationInfo{URI: p.URI(), Manifest: p.Manifest(), Build: p.Build()}, out)
	})
}

// permutationInfo is the reply of croupier_permutation_info.
type permutationInfo struct {
	URI      string                  `json:"uri"`
	Manifest permutation.Manifest    `json:"manifest"`
	Build    permutation.BuildRecord `json:"build"`
}

//export croupier_permutation_row_ids
func croupier_permutation_row_ids(h C.uint64_t, split, start, stop C.int64_t, dst *C.uint64_t, errOut **C.char) C.int {
	return guard(errOut, func() error {
		p, err := lookup[*permutation.Permutations](uint64(h))
		if err != nil {
			return err
		}
		s, err := p.SplitAt(int(split))
		if err != nil {
			return err
		}
		ids, err := s.RowIDs(callContext(), int64(start), int64(stop))
		if err != nil {
			return err
		}
		copy(unsafe.Slice((*uint64)(unsafe.Pointer(dst)), len(ids)), ids)
		return nil
	})
}
