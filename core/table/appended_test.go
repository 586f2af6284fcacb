package table

import (
	"context"
	"testing"

	"github.com/croupier-data/croupier/core/store"
	"github.com/croupier-data/croupier/internal/tabletest"
)

// TestAppendedThroughOneManifest checks that what each version added, read
// from the latest manifest alone, is what each version's own manifest says,
// for every range of versions, a version that added no file among them; and
// that a manifest whose files do not record their versions (as older
// croupier wrote them) says so instead.
func TestAppendedThroughOneManifest(t *testing.T) {
	ctx := context.Background()
	uri := "file://" + t.TempDir()
	tb, err := Create(ctx, uri, tabletest.Reader(0, 30), WriteOptions{RowGroupRows: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	var start int64 = 30
	for _, n := range []int64{40, 0, 7, 100} {
		if n == 0 {
			commitEmptyVersion(t, tb)
			continue
		}
		if _, err := tb.Append(ctx, tabletest.Reader(start, n), WriteOptions{RowGroupRows: 16}); err != nil {
			t.Fatal(err)
		}
		start += n
	}
	for to := int64(1); to <= 5; to++ {
		for from := int64(1); from <= to; from++ {
			got, ok, err := tb.AppendedThrough(ctx, from, to)
			if err != nil || !ok || len(got) != int(to-from+1) {
				t.Fatalf("versions %d to %d: %d, ok %t, %v", from, to, len(got), ok, err)
			}
			for i, a := range got {
				want, err := tb.Appended(ctx, from+int64(i))
				if err != nil {
					t.Fatal(err)
				}
				if a != want {
					t.Errorf("versions %d to %d: version %d added %+v by the latest manifest, %+v by its own", from, to, from+int64(i), a, want)
				}
			}
		}
	}
	// Version 5's manifest as a croupier that did not record versions wrote it.
	m, err := readManifest(ctx, tb.loc, nil, 5)
	if err != nil {
		t.Fatal(err)
	}
	for i := range m.Files {
		m.Files[i].Version = 0
	}
	m.SHA256 = ""
	data, err := m.encode()
	if err != nil {
		t.Fatal(err)
	}
	if err := tb.loc.WriteAll(ctx, tb.loc.Join(manifestName(5)), data, store.WriterOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := tb.AppendedThrough(ctx, 1, 5); err != nil || ok || got != nil {
		t.Errorf("a manifest without versions: %v, ok %t, %v", got, ok, err)
	}
	if _, _, err := tb.AppendedThrough(ctx, 3, 2); err == nil {
		t.Error("versions 3 to 2: no error")
	}
}

// commitEmptyVersion commits a version of tb's table that adds no file, as
// croupier committed an append of no rows before it refused one.
func commitEmptyVersion(t *testing.T, tb *Table) {
	t.Helper()
	ctx := context.Background()
	m, err := readLatest(ctx, tb.loc, nil, "commit an empty version")
	if err != nil {
		t.Fatal(err)
	}
	next := *m
	next.Version, next.Parent, next.Added, next.SHA256 = m.Version+1, m.Version, 0, ""
	if err := commitManifest(ctx, tb.loc, &next); err != nil {
		t.Fatal(err)
	}
}
