package expr_test

import (
	"context"
	"testing"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/permutation/expr"
)

// FuzzParse checks that no text makes Parse or Eval panic, that every
// failure is an errcode error, and that Eval's result has the promised type
// and length.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"i > 0 AND s = 'apple'", "st.in.c BETWEEN -1 AND 1", "`st.in.deep.e` IS NULL",
		"s LIKE 'a\\_%' ESCAPE '!'", "i % 10 < 8", "coalesce(i, j, 1) IN (1, 2, NULL)",
		"length(l) > 1 OR NOT b", "*", "1 union select 2", "a.b.c.d", "",
	} {
		f.Add(s)
	}
	mem := checkedMem(f)
	rec := testRecord(f, mem)
	f.Cleanup(rec.Release)
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
	})
}
