package main

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/internal/jsonargs"
	"github.com/croupier-data/croupier/internal/tabletest"
	"github.com/croupier-data/croupier/loader"
	"github.com/croupier-data/croupier/permutation"
)

// FuzzDatasetOptions opens a dataset and a stream with JSON options as
// croupier_dataset_open and croupier_stream_open decode them (Python sends
// them; seeds: testdata/fuzz/FuzzDatasetOptions), under guard's recover, and
// takes one batch. Bad options must fail with an InvalidArgument error that
// names its cause in the user's terms (no Go type names), never a panic
// (which the ABI would report as Internal) or a hang.
func FuzzDatasetOptions(f *testing.F) {
	f.Add([]byte(`{"global_batch_size": 8}`), []byte(`{}`))
	dir := f.TempDir()
	tabletest.Write(f, dir, []int64{30, 25}, 10)
	tb, err := table.Open(context.Background(), "file://"+dir)
	if err != nil {
		f.Fatal(err)
	}
	defer tb.Close()
	f.Fuzz(func(t *testing.T, options, stream []byte) {
		var l *loader.Loader
		err := recovered(func() (err error) {
			l, err = newLoader(tb, permutation.Identity{N: tb.NumRows()}, options)
			return err
		})
		if err != nil {
			if errcode.Of(err) != errcode.InvalidArgument {
				t.Fatalf("dataset %s: %v (%s)", options, err, errcode.Of(err))
			}
			if m := jsonargs.GoWord(err.Error()); m != "" {
				t.Fatalf("message %q holds %q", err, m)
			}
			return
		}
		defer closeObject(l)
		var s *loader.Stream
		err = recovered(func() (err error) {
			s, err = openStream(l, stream)
			return err
		})
		if err != nil {
			if errcode.Of(err) != errcode.InvalidArgument {
				t.Fatalf("stream %s: %v (%s)", stream, err, errcode.Of(err))
			}
			if m := jsonargs.GoWord(err.Error()); m != "" {
				t.Fatalf("message %q holds %q", err, m)
			}
			return
		}
		defer s.Close()
		b, err := s.Next(context.Background())
		switch {
		case errors.Is(err, io.EOF):
		case err != nil:
			t.Fatalf("next: %v (%s)", err, errcode.Of(err))
		default:
			if b.Record.NumRows() != l.RankBatchSize() && l.Options().DropLast {
				t.Fatalf("step %d: %d rows, want %d", b.Step, b.Record.NumRows(), l.RankBatchSize())
			}
			b.Record.Release()
		}
	})
}
