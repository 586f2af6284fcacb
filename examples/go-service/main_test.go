package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/internal/tabletest"
	"github.com/croupier-data/croupier/loader"
	"github.com/croupier-data/croupier/permutation"
)

const (
	testG = 8
	testS = 4
)

// fixture serves a shuffled permutation of a 3-file table through an httptest server.
type fixture struct {
	url   string
	table *table.Table
	order permutation.Order
	alloc *memory.CheckedAllocator
}

// newFixture starts the service. With checkMemory, the test fails unless every
// byte of batch memory is freed once the server has stopped.
func newFixture(t *testing.T, checkMemory bool) *fixture {
	t.Helper()
	ctx := context.Background()
	dir, permDir := t.TempDir(), t.TempDir()
	tabletest.Write(t, dir, []int64{70, 50, 80}, 32)
	tb, err := table.Open(ctx, "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tb.Close() })
	perms, err := permutation.Build(ctx, tb, permutation.Spec{
		Filter:  "id % 5 != 0",
		Shuffle: &permutation.ShuffleSpec{Seed: 7},
	}, "file://"+permDir+"/perm", permutation.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { perms.Close() })
	order, err := perms.SplitAt(0)
	if err != nil {
		t.Fatal(err)
	}
	alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
	srv, err := NewServer(tb, order, perms, Config{GlobalBatchSize: testG, NumSplits: testS, DropLast: true}, alloc)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	// Close waits for every handler to return: only then must all memory be back.
	t.Cleanup(func() {
		hs.Close()
		if checkMemory {
			alloc.AssertSize(t, 0)
		}
	})
	return &fixture{url: hs.URL, table: tb, order: order, alloc: alloc}
}

// get returns the response to GET path?query, failing the test on transport errors.
func (f *fixture) get(t *testing.T, path string, q url.Values) *http.Response {
	t.Helper()
	resp, err := http.Get(f.url + path + "?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// batches reads GET /batches and returns the ids of each step, keyed by step, in order.
func (f *fixture) batches(t *testing.T, q url.Values) (steps []int64, ids [][]int64) {
	t.Helper()
	resp := f.get(t, "/batches", q)
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET /batches?%s: %s: %s", q.Encode(), resp.Status, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != ContentType {
		t.Errorf("Content-Type = %q", ct)
	}
	rd, err := ipc.NewReader(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Release()
	if got := rd.Schema().Field(rd.Schema().NumFields() - 1).Name; got != StepColumn {
		t.Fatalf("last column is %q, want %q", got, StepColumn)
	}
	for rd.Next() {
		rec := rd.RecordBatch()
		idCol := rec.Column(rec.Schema().FieldIndices("id")[0]).(*array.Int64)
		stepCol := rec.Column(int(rec.NumCols()) - 1).(*array.Int64)
		step := stepCol.Value(0)
		for i := range stepCol.Len() {
			if stepCol.Value(i) != step {
				t.Fatalf("record mixes steps %d and %d", step, stepCol.Value(i))
			}
		}
		steps = append(steps, step)
		ids = append(ids, slices.Clone(idCol.Int64Values()))
	}
	if err := rd.Err(); err != nil {
		t.Fatal(err)
	}
	return steps, ids
}

// want returns rank r of w's ids at step t, from the library directly.
func (f *fixture) want(t *testing.T, epoch, step, r, w int64) []int64 {
	t.Helper()
	l, err := loader.New(f.table, f.order, loader.Options{
		GlobalBatchSize: testG, NumSplits: testS, WorldSize: w, Rank: r, DropLast: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ids, err := l.RowIDs(context.Background(), epoch, step)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]int64, len(ids))
	for i, id := range ids {
		out[i] = int64(id) // tabletest's id column equals the row id
	}
	return out
}

func query(kv ...string) url.Values {
	q := url.Values{}
	for i := 0; i < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	return q
}

func TestInfo(t *testing.T) {
	f := newFixture(t, true)
	resp := f.get(t, "/info", nil)
	var in Info
	if err := json.NewDecoder(resp.Body).Decode(&in); err != nil {
		t.Fatal(err)
	}
	m := f.order.Len()
	if in.NumRows != m || in.TableRows != 200 || in.StepsPerEpoch != m/testS*testS/testG {
		t.Errorf("info = %+v; order has %d rows", in, m)
	}
	if in.PermutationID != f.order.ID() || in.TableVersion != f.table.Version() || in.NumSplits != testS {
		t.Errorf("info = %+v", in)
	}
}

func TestBatchesMatchLoader(t *testing.T) {
	f := newFixture(t, true)
	for _, epoch := range []int64{0, 1} {
		e := strconv.FormatInt(epoch, 10)
		steps, one := f.batches(t, query("epoch", e))
		spe := f.order.Len() / testS * testS / testG
		if int64(len(steps)) != spe {
			t.Fatalf("epoch %d: got %d steps, want %d", epoch, len(steps), spe)
		}
		_, r0 := f.batches(t, query("epoch", e, "rank", "0", "world_size", "2"))
		_, r1 := f.batches(t, query("epoch", e, "rank", "1", "world_size", "2"))
		for i, step := range steps {
			if step != int64(i) {
				t.Fatalf("record %d has step %d", i, step)
			}
			if w := f.want(t, epoch, step, 0, 1); !slices.Equal(one[i], w) {
				t.Fatalf("epoch %d step %d: ids %v, want %v", epoch, step, one[i], w)
			}
			if w := f.want(t, epoch, step, 1, 2); !slices.Equal(r1[i], w) {
				t.Fatalf("epoch %d step %d rank 1/2: ids %v, want %v", epoch, step, r1[i], w)
			}
			union := slices.Sorted(slices.Values(append(slices.Clone(r0[i]), r1[i]...)))
			if !slices.Equal(union, slices.Sorted(slices.Values(one[i]))) {
				t.Fatalf("epoch %d step %d: ranks 0+1 of 2 deal %v, one rank %v", epoch, step, union, one[i])
			}
		}
	}
}

func TestResume(t *testing.T) {
	f := newFixture(t, true)
	_, all := f.batches(t, query("rank", "1", "world_size", "2"))
	steps, part := f.batches(t, query("rank", "1", "world_size", "2", "start_step", "3", "steps", "2"))
	if !slices.Equal(steps, []int64{3, 4}) {
		t.Fatalf("steps %v, want [3 4]", steps)
	}
	for i := range part {
		if !slices.Equal(part[i], all[3+i]) {
			t.Fatalf("resumed step %d: %v, want %v", 3+i, part[i], all[3+i])
		}
	}
	// To the end of the epoch, and an empty stream at its end.
	steps, _ = f.batches(t, query("start_step", "5"))
	if want := int64(len(all)) - 5; int64(len(steps)) != want || steps[0] != 5 {
		t.Fatalf("from step 5: steps %v, want %d steps from 5", steps, want)
	}
	steps, _ = f.batches(t, query("start_step", strconv.Itoa(len(all))))
	if len(steps) != 0 {
		t.Fatalf("from the end: steps %v", steps)
	}
}

func TestBadParameters(t *testing.T) {
	f := newFixture(t, true)
	for _, tc := range []struct {
		q    url.Values
		want string
	}{
		{query("rank", "x"), "rank"},
		{query("steps", "-1"), "steps"},
		{query("world_size", "0"), "world_size"},
		{query("rank", "2", "world_size", "2"), "rank"},
		{query("world_size", "3"), "3"},   // does not divide S
		{query("start_step", "99"), "99"}, // past the end
	} {
		resp := f.get(t, "/batches", tc.q)
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), tc.want) {
			t.Errorf("GET /batches?%s: %s %q, want 400 naming %q", tc.q.Encode(), resp.Status, body, tc.want)
		}
	}
	resp, err := http.Post(f.url+"/batches", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /batches: %s", resp.Status)
	}
}

func TestClientDisconnect(t *testing.T) {
	// The handler stops when the client goes; the fixture's cleanup waits for
	// it and checks that every byte of batch memory was freed.
	f := newFixture(t, true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.url+"/batches", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd, err := ipc.NewReader(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Release()
	if !rd.Next() {
		t.Fatal(rd.Err())
	}
	cancel()        // the handler stops; the fixture's cleanup checks that it freed everything
	for rd.Next() { // the rest, if any was buffered, then a read error or the end
	}
}

func TestOpenFlags(t *testing.T) {
	ctx := context.Background()
	if _, _, _, err := open(ctx, "", "", ""); err == nil {
		t.Error("no --perm or --table: no error")
	}
	if _, _, _, err := open(ctx, "file:///a", "", "file:///b"); err == nil {
		t.Error("both --perm and --table: no error")
	}
	dir := t.TempDir()
	tabletest.Write(t, dir, []int64{30}, 16)
	tb, order, perms, err := open(ctx, "", "", "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	if perms != nil || order.Len() != 30 || order.ID() != "identity" {
		t.Errorf("--table: order %s of %d rows", order.ID(), order.Len())
	}
	if _, err := NewServer(tb, order, nil, Config{GlobalBatchSize: 6, NumSplits: 4}, nil); err == nil {
		t.Error("G % S != 0: no error")
	}
}
