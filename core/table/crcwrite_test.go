package table

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/internal/tabletest"
)

// discard is an io.WriteCloser that keeps nothing but a count.
type discard struct{ n int64 }

func (d *discard) Write(p []byte) (int, error) { d.n += int64(len(p)); return len(p), nil }
func (d *discard) Close() error                { return nil }

// BenchmarkWritePageCRCs encodes the same 200,000 rows as a croupier data
// file (zstd, 16 KiB pages, page index) with and without page CRCs,
// alternately, and reports the ratio of the fastest encoding of each
// (crc/nocrc): the cost of the CRC writer, measured so that other load on
// the machine falls on both alike (docs/tuning.md records it).
func BenchmarkWritePageCRCs(b *testing.B) {
	rec := tabletest.Record(0, 200_000)
	defer rec.Release()
	opts, _ := WriteOptions{}.withDefaults()
	props := writerProps(opts, valuesPerCheck(rec, opts.PageBytes))
	aprops := pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema())
	encode := func(crc bool) (time.Duration, int64) {
		start := time.Now()
		sink := &discard{}
		var w io.Writer = sink
		if crc {
			w = newPageCRCWriter(sink)
		}
		pw, err := pqarrow.NewFileWriter(rec.Schema(), w, props, aprops)
		if err != nil {
			b.Fatal(err)
		}
		if err := pw.WriteBuffered(rec); err != nil {
			b.Fatal(err)
		}
		if err := pw.Close(); err != nil {
			b.Fatal(err)
		}
		return time.Since(start), sink.n
	}
	fastest := []time.Duration{time.Hour, time.Hour}
	var size [2]int64
	for b.Loop() {
		for i, crc := range []bool{true, false} {
			d, n := encode(crc)
			fastest[i], size[i] = min(fastest[i], d), n
		}
	}
	b.ReportMetric(float64(fastest[0].Microseconds()), "crc-µs")
	b.ReportMetric(float64(fastest[1].Microseconds()), "nocrc-µs")
	b.ReportMetric(float64(fastest[0])/float64(fastest[1]), "crc/nocrc")
	b.ReportMetric(float64(size[0])/float64(size[1]), "crc/nocrc-bytes")
}

// TestCRCWriterFailsInternal checks that a failure of the page CRC writer
// is Internal, a bug, whatever the write it ends: not the store's fault.
func TestCRCWriterFailsInternal(t *testing.T) {
	for _, file := range [][]byte{[]byte("PAR2"), []byte("PAR1 and no footer")} {
		w := newPageCRCWriter(&discard{})
		_, err := w.Write(file)
		if err == nil {
			err = w.Close()
		}
		if err == nil {
			t.Fatalf("%q: no error", file)
		}
		err = errcode.Wrap(err, writeCode(err, errcode.Unavailable), "write", "file")
		if errcode.Of(err) != errcode.Internal || !strings.Contains(err.Error(), "page CRCs: ") {
			t.Errorf("%q: %v, code %s, want Internal", file, err, errcode.Of(err))
		}
	}
}
