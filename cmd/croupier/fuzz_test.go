package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/croupier-data/croupier/internal/tabletest"
)

// FuzzDealCheckpoint runs `croupier deal --checkpoint` with the input as the
// state dict (seeds: testdata/fuzz/FuzzDealCheckpoint) over a 55-row table.
// It exits 0 with the batch of the step after the checkpoint, or 1 or 2 with
// a message; it never panics or hangs.
func FuzzDealCheckpoint(f *testing.F) {
	f.Add([]byte(`{"format": 1, "permutation_id": "identity", "num_splits": 4, "global_batch_size": 8, "steps_consumed": 3}`))
	dir := f.TempDir()
	tableDir := filepath.Join(dir, "table")
	os.MkdirAll(tableDir, 0o755)
	tabletest.Write(f, tableDir, []int64{30, 25}, 10)
	ckpt := filepath.Join(dir, "state.json")
	f.Fuzz(func(t *testing.T, state []byte) {
		if err := os.WriteFile(ckpt, state, 0o644); err != nil {
			t.Fatal(err)
		}
		var out, errOut bytes.Buffer
		code := run(context.Background(), []string{"deal", "--checkpoint", ckpt, "--table", tableDir, "--json"}, &out, &errOut)
		switch code {
		case 0:
			var d dealOutput
			if err := json.Unmarshal(out.Bytes(), &d); err != nil {
				t.Fatalf("exit 0 with output %q: %v", out.String(), err)
			}
			for _, r := range d.Ranks {
				for _, id := range r.RowIDs {
					if id >= 55 {
						t.Fatalf("row id %d of a 55-row table", id)
					}
				}
			}
		case 1, 2:
			if !strings.HasPrefix(errOut.String(), "croupier: ") {
				t.Fatalf("exit %d with stderr %q", code, errOut.String())
			}
		default:
			t.Fatalf("exit %d", code)
		}
	})
}
