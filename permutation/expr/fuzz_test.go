package expr_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/permutation/expr"
)

// FuzzParse checks that no text makes Parse, Eval, Mask or MayMatch panic or
// hang, that every failure is an InvalidArgument error, that Eval's result has
// the promised type and length, and that MayMatch, judging from the Parquet
// statistics of the test record written as row groups of two rows, never
// rules out a row group that Mask says has a matching row.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"i > 0 AND s = 'apple'", "st.in.c BETWEEN -1 AND 1", "`st.in.deep.e` IS NULL",
		"s LIKE 'a\\_%' ESCAPE '!'", "i % 10 < 8", "coalesce(i, j, 1) IN (1, 2, NULL)",
		"length(l) > 1 OR NOT b", "*", "1 union select 2", "a.b.c.d", "",
		"u > 100 AND g <= 0.5", "NOT (s >= 'b') OR d = 'red'", "i IS NOT NULL AND j IS NULL",
		"b IS NOT TRUE", "f > -1e308 AND f < 1e308", "i = 9223372036854775807",
		"i - -9223372036854775807 - 2 > 0", "s BETWEEN 'a' AND 'az'", "NOT NOT b",
		"ts >= TIMESTAMP '2026-12-01 00:00:00' - INTERVAL 2 HOUR", "ts IN ('1970-01-01', NULL)",
		"coalesce(ts, DATE '2000-01-01') < '1970-01-01 00:00:00.000001+01:00'", "ts + INTERVAL 1 WEEK > ts",
		"dec > 1.245 OR dec = -0.5", "dec NOT IN (0, 1.25) AND dec BETWEEN -1 AND 1e7",
	} {
		f.Add(s)
	}
	mem := checkedMem(f)
	rec := testRecord(f, mem)
	f.Cleanup(rec.Release)
	var buf bytes.Buffer
	w, err := pqarrow.NewFileWriter(rec.Schema(), &buf, parquet.NewWriterProperties(parquet.WithMaxRowGroupLength(2)),
		pqarrow.DefaultWriterProps())
	if err != nil {
		f.Fatal(err)
	}
	if err := w.Write(rec); err != nil {
		f.Fatal(err)
	}
	if err := w.Close(); err != nil {
		f.Fatal(err)
	}
	pf, err := file.NewParquetReader(bytes.NewReader(buf.Bytes()))
	if err != nil {
		f.Fatal(err)
	}
	stats := rowGroupStats(pf)
	pf.Close()
	f.Fuzz(func(t *testing.T, text string) {
		e, err := expr.Parse(text, testSchema)
		if err != nil {
			if errcode.Of(err) != errcode.InvalidArgument {
				t.Fatalf("%q: %v has code %s", text, err, errcode.Of(err))
			}
			return
		}
		out, err := e.Eval(context.Background(), rec, mem)
		if err != nil {
			if errcode.Of(err) != errcode.InvalidArgument {
				t.Fatalf("%q: eval: %v has code %s", text, err, errcode.Of(err))
			}
			return
		}
		defer out.Release()
		if out.Len() != int(rec.NumRows()) || out.DataType().ID() != e.Type().ID() {
			t.Fatalf("%q: %d values of %s", text, out.Len(), out.DataType())
		}
		mask, err := e.Mask(context.Background(), rec, mem)
		if err != nil {
			if errcode.Of(err) != errcode.InvalidArgument {
				t.Fatalf("%q: mask: %v has code %s", text, err, errcode.Of(err))
			}
			return
		}
		for g, st := range stats {
			if e.MayMatch(st) {
				continue
			}
			for i := 2 * g; i < min(2*g+2, len(mask)); i++ {
				if mask[i] {
					t.Fatalf("%q: row group %d ruled out, but row %d matches", text, g, i)
				}
			}
		}
	})
}
