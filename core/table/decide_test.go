package table_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/internal/tabletest"
)

// TestDecide checks, on file, mem and S3, that of eight handles of one
// table racing to record a decision exactly one's is recorded, and every
// one returns it; that Decision reads it back, and is NotFound for a
// decision not made; that Cleanup leaves decisions; and that a name
// leaving the decisions' folder is refused.
func TestDecide(t *testing.T) {
	ctx := context.Background()
	for name, uri := range stores(t) {
		t.Run(name, func(t *testing.T) {
			tb, err := table.Create(ctx, uri, tabletest.Reader(0, 10), table.WriteOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer tb.Close()
			if _, err := tb.Decision(ctx, "run/0"); errcode.Of(err) != errcode.NotFound {
				t.Fatalf("a decision not made: %v, want NotFound", err)
			}
			got := make([]string, 8)
			var wg sync.WaitGroup
			for i := range got {
				wg.Go(func() {
					h, err := table.Open(ctx, uri)
					if err != nil {
						t.Error(err)
						return
					}
					defer h.Close()
					d, err := h.Decide(ctx, "run/0", fmt.Appendf(nil, "decided by %d", i))
					if err != nil {
						t.Error(err)
					}
					got[i] = string(d)
				})
			}
			wg.Wait()
			for _, d := range got {
				if d != got[0] || d == "" {
					t.Fatalf("the racing handles returned %q", got)
				}
			}
			if _, err := tb.Append(ctx, tabletest.Reader(10, 10), table.WriteOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := table.Cleanup(ctx, uri, table.CleanupOptions{KeepLast: 1, Grace: 1}); err != nil {
				t.Fatal(err)
			}
			if d, err := tb.Decision(ctx, "run/0"); err != nil || string(d) != got[0] {
				t.Fatalf("after a cleanup the decision reads %q, %v; want %q", d, err, got[0])
			}
			for _, bad := range []string{"../escape", "run/../../x", "./run", "/run", "run//0", ""} {
				if _, err := tb.Decide(ctx, bad, []byte("x")); errcode.Of(err) != errcode.InvalidArgument {
					t.Errorf("decision name %q: %v, want InvalidArgument", bad, err)
				}
			}
		})
	}
}
