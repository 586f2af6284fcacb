package table_test

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/internal/seedtest"
	"github.com/croupier-data/croupier/internal/tabletest"
)

// crcFiles are pyarrow-written files of the same rows, with and without page
// CRCs (see testdata/crc/make.py).
const (
	crcFile   = "testdata/crc/pages-crc.parquet"
	noCRCFile = "testdata/crc/pages-nocrc.parquet"
)

// readIDs reads the rows ids name from tb, through Read (whole column
// chunks) or Keep (only the pages holding them, from the offset index),
// the row group fetched before it is decoded or, streamed, streamed from
// the file as it is decoded (a fetch share smaller than any row group).
func readIDs(ctx context.Context, tb *table.Table, ids []uint64, keep, streamed bool) (arrow.RecordBatch, error) {
	opts := table.ReaderOptions{}
	if streamed {
		opts.FetchBytes = 1
	}
	r, err := tb.NewReader(opts)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	if !keep {
		return r.Read(ctx, ids)
	}
	k, err := r.Keep(ctx, ids, nil)
	if err != nil {
		return nil, err
	}
	defer k.Close()
	return k.Read(ctx, 0, len(ids))
}

// TestPageCRCs flips one seeded bit at 600 seeded positions of the pages of a
// file written with page CRCs, and reads rows of the row group flipped, its
// whole column chunks or a random row (then only the pages holding it),
// fetched or streamed: a
// flip in the bytes of a page read gives Corrupt naming the file and the CRC
// mismatch; any other flip gives Corrupt or exactly the right rows. The file
// reads the same rows as its copy without CRCs.
func TestPageCRCs(t *testing.T) {
	ctx := context.Background()
	orig, err := os.ReadFile(crcFile)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "pages.parquet")
	os.WriteFile(path, orig, 0o644)
	fi, _ := os.Stat(path)
	tb := open(t, "file://"+path)
	noCRC, err := filepath.Abs(noCRCFile)
	if err != nil {
		t.Fatal(err)
	}
	plain := open(t, "file://"+noCRC)
	md, err := tb.Footer(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The pages of each row group, and which of their bytes follow a header.
	type group struct{ start, end int64 }
	var groups []group
	payload := map[int64]bool{}
	for g := range md.NumRowGroups() {
		rg := md.RowGroup(g)
		gr := group{int64(len(orig)), 0}
		for c := range rg.NumColumns() {
			cc, err := rg.ColumnChunk(c)
			if err != nil {
				t.Fatal(err)
			}
			spans, err := table.PagePayloads(orig, cc.DataPageOffset(), cc.TotalCompressedSize())
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range spans {
				for i := s[0]; i < s[1]; i++ {
					payload[i] = true
				}
			}
			gr.start, gr.end = min(gr.start, cc.DataPageOffset()), max(gr.end, cc.DataPageOffset()+cc.TotalCompressedSize())
		}
		groups = append(groups, gr)
	}
	rowsOf := func(g int) []uint64 {
		ids := make([]uint64, md.RowGroup(g).NumRows())
		for i := range ids {
			ids[i] = uint64(g*len(ids) + i)
		}
		return ids
	}
	for g := range groups {
		for _, keep := range []bool{false, true} {
			want, err := readIDs(ctx, plain, rowsOf(g), keep, false)
			if err != nil {
				t.Fatal(err)
			}
			for _, streamed := range []bool{false, true} {
				got, err := readIDs(ctx, tb, rowsOf(g), keep, streamed)
				if err != nil || !array.RecordEqual(got, want) {
					t.Fatalf("row group %d (streamed %t): the file with CRCs reads %v, %v; want the rows of the one without", g, streamed, got, err)
				}
				got.Release()
			}
			want.Release()
		}
	}
	rng := rand.New(rand.NewPCG(seedtest.Seed(t), 0))
	detected, inPages, inStreams := 0, map[bool]int{}, map[bool]int{}
	for range 600 {
		g := rng.IntN(len(groups))
		p := groups[g].start + rng.Int64N(groups[g].end-groups[g].start)
		b := slices.Clone(orig)
		b[p] ^= 1 << rng.IntN(8)
		os.WriteFile(path, b, 0o644)
		os.Chtimes(path, fi.ModTime(), fi.ModTime())
		ids := rowsOf(g)
		keep, streamed := rng.IntN(2) == 1, rng.IntN(2) == 1
		if keep {
			ids = ids[rng.IntN(len(ids)):][:1]
		}
		got, err := readIDs(ctx, tb, ids, keep, streamed)
		if err == nil {
			want, _ := readIDs(ctx, plain, ids, keep, false)
			if payload[p] && !keep {
				t.Fatalf("bit flipped in a page at byte %d: no error", p)
			}
			if !array.RecordEqual(got, want) {
				t.Fatalf("bit flipped at byte %d (keep %t): other rows, no error", p, keep)
			}
			got.Release()
			want.Release()
			continue
		}
		detected++
		if errcode.Of(err) != errcode.Corrupt || !strings.Contains(err.Error(), path) {
			t.Fatalf("bit flipped at byte %d: %v (%s), want Corrupt naming the file", p, err, errcode.Of(err))
		}
		if payload[p] {
			if !strings.Contains(err.Error(), "CRC") {
				t.Fatalf("bit flipped in a page at byte %d: %v, want a CRC mismatch", p, err)
			}
			inPages[keep]++
			inStreams[streamed]++
		}
	}
	if inPages[false] == 0 || inPages[true] == 0 || inStreams[false] == 0 || inStreams[true] == 0 {
		t.Fatalf("CRC mismatches: %d reading chunks, %d reading pages, %d fetched, %d streamed; want some of each",
			inPages[false], inPages[true], inStreams[false], inStreams[true])
	}
	t.Logf("%d of 600 flips detected; CRC mismatches: %d reading chunks, %d reading pages, %d streamed", detected, inPages[false], inPages[true], inStreams[true])
}

// BenchmarkPageCRCs reads every row group of the same rows from a file with
// page CRCs and from one without, alternately, and reports the ratio of the
// fastest read of each (crc/nocrc): the cost of checking CRCs, measured so
// that other load on the machine falls on both alike (docs/tuning.md records
// it).
func BenchmarkPageCRCs(b *testing.B) {
	ctx := context.Background()
	var readers []*table.Reader
	var groups int
	for _, file := range []string{crcFile, noCRCFile} {
		path, err := filepath.Abs(file)
		if err != nil {
			b.Fatal(err)
		}
		tb, err := table.Open(ctx, "file://"+path)
		if err != nil {
			b.Fatal(err)
		}
		defer tb.Close()
		r, err := tb.NewReader(table.ReaderOptions{})
		if err != nil {
			b.Fatal(err)
		}
		defer r.Close()
		readers = append(readers, r)
		groups = len(tb.Files()[0].RowGroups)
	}
	fastest := []time.Duration{time.Hour, time.Hour}
	for b.Loop() {
		for i, r := range readers {
			start := time.Now()
			for g := range groups {
				rec, err := r.ReadGroup(ctx, 0, g)
				if err != nil {
					b.Fatal(err)
				}
				rec.Release()
			}
			fastest[i] = min(fastest[i], time.Since(start))
		}
	}
	b.ReportMetric(float64(fastest[0].Microseconds()), "crc-µs")
	b.ReportMetric(float64(fastest[1].Microseconds()), "nocrc-µs")
	b.ReportMetric(float64(fastest[0])/float64(fastest[1]), "crc/nocrc")
}

// TestWrittenPagesCarryCRCs writes a croupier table in pages of a few rows
// and checks that every page of every column chunk, dictionary pages
// included, carries the CRC of its bytes; that the offset indexes and
// footers still locate them (the rows read through the offset index and
// through whole chunks are the rows written); and that a flipped bit in any
// page is Corrupt.
func TestWrittenPagesCarryCRCs(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	opts := table.WriteOptions{RowGroupRows: 40, PageBytes: 256}
	tb, err := table.Create(ctx, "file://"+dir, tabletest.Reader(0, 300), opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Append(ctx, tabletest.Reader(1000, 130), opts); err != nil {
		t.Fatal(err)
	}
	tb.Close()
	tb = open(t, "file://"+dir)
	want := tabletest.Record(0, 300)
	defer want.Release()
	more := tabletest.Record(1000, 130)
	defer more.Release()
	all := make([]uint64, tb.NumRows())
	for i := range all {
		all[i] = uint64(i)
	}
	for _, keep := range []bool{false, true} {
		got, err := readIDs(ctx, tb, all, keep, false)
		if err != nil {
			t.Fatal(err)
		}
		if !array.RecordEqual(got.NewSlice(0, 300), want) || !array.RecordEqual(got.NewSlice(300, 430), more) {
			t.Fatalf("keep %t: the rows read are not the rows written", keep)
		}
		got.Release()
	}
	pages := 0
	type span struct{ off, n int64 }
	var spans []span
	for i, f := range tb.Files() {
		b, err := os.ReadFile(filepath.Join(dir, f.Key))
		if err != nil {
			t.Fatal(err)
		}
		md, err := tb.Footer(ctx, i)
		if err != nil {
			t.Fatal(err)
		}
		for g := range md.NumRowGroups() {
			rg := md.RowGroup(g)
			for c := range rg.NumColumns() {
				cc, err := rg.ColumnChunk(c)
				if err != nil {
					t.Fatal(err)
				}
				off := cc.DataPageOffset()
				if d := cc.DictionaryPageOffset(); cc.HasDictionaryPage() && d > 0 {
					off = min(off, d)
				}
				n, good, err := table.PageCRCs(b, off, cc.TotalCompressedSize())
				if err != nil || n != good {
					t.Fatalf("%s row group %d column %d: %d pages, %d with their CRC, %v", f.Key, g, c, n, good, err)
				}
				pages += n
				if i == 0 {
					spans = append(spans, span{off, cc.TotalCompressedSize()})
				}
			}
		}
	}
	if pages < 2*len(tb.Files())*tabletest.Schema.NumFields() {
		t.Fatalf("only %d pages: the test wants several pages a chunk", pages)
	}
	// One flip in a page of each chunk of the first file, checked by a read of
	// all its rows.
	path := filepath.Join(dir, tb.Files()[0].Key)
	orig, _ := os.ReadFile(path)
	fi, _ := os.Stat(path)
	for _, s := range spans {
		payloads, err := table.PagePayloads(orig, s.off, s.n)
		if err != nil {
			t.Fatal(err)
		}
		p := payloads[len(payloads)/2]
		b := slices.Clone(orig)
		b[(p[0]+p[1])/2] ^= 0x10
		os.WriteFile(path, b, 0o644)
		os.Chtimes(path, fi.ModTime(), fi.ModTime())
		got, err := readIDs(ctx, tb, all[:300], false, false)
		if errcode.Of(err) != errcode.Corrupt || !strings.Contains(err.Error(), "CRC") {
			t.Fatalf("bit flipped at byte %d: %v, want Corrupt naming the CRC", (p[0]+p[1])/2, err)
		}
		if got != nil {
			got.Release()
		}
	}
	os.WriteFile(path, orig, 0o644)
	os.Chtimes(path, fi.ModTime(), fi.ModTime())
}
