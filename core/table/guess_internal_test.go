package table

import (
	"context"
	"testing"

	"github.com/croupier-data/croupier/internal/tabletest"
)

// TestDecodeGuessChargesCopiesOnly checks what a decoder is charged beyond
// the rows it keeps: of columns the page decoder handles, whose rows it
// copies out of the pages as it decodes them (rows kept, charged to the
// kept rows' budget), only what it holds, however many rows a piece keeps,
// so that pieces of many rows decode side by side; a copy of the rows for
// a column decoded whole, or when the rows repeat.
func TestDecodeGuessChargesCopiesOnly(t *testing.T) {
	ctx := context.Background()
	tb, err := Create(ctx, "file://"+t.TempDir(), tabletest.Reader(0, 4096), WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	key := GroupRef{0, 0}
	rows := make([]int64, 2048)
	for i := range rows {
		rows[i] = int64(2 * i)
	}
	for _, tc := range []struct {
		columns []string
		wholes  bool // a column pqarrow decodes whole
	}{{[]string{"id", "tokens"}, false}, {[]string{"id", "meta"}, true}} {
		r, err := tb.NewReader(ReaderOptions{Columns: tc.columns})
		if err != nil {
			t.Fatal(err)
		}
		_, held, err := r.GuessBytes(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		sizes, fast, _, err := r.guessColumns(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		var whole, all int64
		for c, n := range sizes {
			all += n * int64(len(rows)) / 4096
			if !fast[c] {
				whole += n * int64(len(rows)) / 4096
			}
		}
		if (whole > 0) != tc.wholes {
			t.Fatalf("columns %v: %d bytes of columns decoded whole", tc.columns, whole)
		}
		for _, w := range []struct {
			w    wanted
			want int64
		}{{wanted{}, held}, {wanted{rows: rows}, held + whole}, {wanted{rows: rows, repeats: true}, held + all}} {
			got, err := r.decodeGuess(ctx, key, w.w)
			if err != nil {
				t.Fatal(err)
			}
			if got != w.want {
				t.Errorf("columns %v, %d rows (repeats %t): charged %d, want %d", tc.columns, len(w.w.rows), w.w.repeats, got, w.want)
			}
		}
		r.Close()
	}
}
