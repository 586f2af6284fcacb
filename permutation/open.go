package permutation

import (
	"container/list"
	"context"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/store"
	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/internal/seal"
)

// Permutations is an opened persisted permutation: the splits of one pinned
// table version. It is safe for concurrent use.
type Permutations struct {
	loc    *store.Location
	m      Manifest
	build  BuildRecord
	table  *table.Table
	splits []*Split

	spansMu sync.Mutex
	spans   *pageSpans // the table's page spans, once read
}

// pageSpans returns the page spans of the permutation's table, reading them
// on the first call that succeeds.
func (p *Permutations) pageSpans(ctx context.Context) (*pageSpans, error) {
	p.spansMu.Lock()
	defer p.spansMu.Unlock()
	if p.spans == nil {
		s, err := loadPageSpans(ctx, p.table)
		if err != nil {
			return nil, err
		}
		p.spans = s
	}
	return p.spans, nil
}

// Open opens the permutation persisted at uri and checks that the table
// version it was built over is still there, unchanged. Opening reads the
// manifest only; row ids are read by range as they are asked for.
func Open(ctx context.Context, uri string) (*Permutations, error) {
	return OpenWith(ctx, uri, table.OpenOptions{})
}

// OpenWith is Open with the options its table is opened with: a catalog and
// a block cache (the pin names the version: opts.Version must be 0).
func OpenWith(ctx context.Context, uri string, opts table.OpenOptions) (*Permutations, error) {
	loc, err := store.Open(ctx, uri)
	if err != nil {
		return nil, err
	}
	p, err := open(ctx, loc, opts)
	if err != nil {
		loc.Close()
		return nil, err
	}
	return p, nil
}

func open(ctx context.Context, loc *store.Location, opts table.OpenOptions) (*Permutations, error) {
	m, err := readManifest(ctx, loc)
	if err != nil {
		return nil, err
	}
	t, err := table.OpenPinWith(ctx, m.Table, opts)
	if err != nil {
		return nil, errcode.Wrap(err, errcode.Changed, "open permutation", loc.URI)
	}
	if err := t.Verify(ctx); err != nil {
		t.Close()
		return nil, errcode.Wrap(fmt.Errorf("the table version it was built over is gone or changed: %w", err),
			errcode.Changed, "open permutation", loc.URI)
	}
	p := &Permutations{loc: loc, m: m, table: t}
	// The build record is informative: a missing or unreadable one is no
	// error, and one of another build at this URI (see builder.write) is
	// not this permutation's.
	if b, err := loc.ReadAll(ctx, path.Join(loc.Key, buildKey)); err == nil {
		var rec BuildRecord
		if json.Unmarshal(b, &rec) == nil && rec.ID == m.ID {
			p.build = rec
		}
	}
	for i, s := range m.Splits {
		p.splits = append(p.splits, &Split{p: p, index: i, info: s,
			chunks: [...]*chunkCache{rowIDs: newChunkCache(16), lengths: newChunkCache(16)}})
	}
	return p, nil
}

// ID returns the permutation's UUID.
func (p *Permutations) ID() string { return p.m.ID }

// URI returns where the permutation is persisted.
func (p *Permutations) URI() string { return p.loc.URI }

// Manifest returns the permutation's manifest: provenance and statistics.
func (p *Permutations) Manifest() Manifest { return p.m }

// Build returns when and how fast the permutation was built (zero if unknown).
func (p *Permutations) Build() BuildRecord { return p.build }

// Table returns the pinned table version the permutation orders.
func (p *Permutations) Table() *table.Table { return p.table }

// Splits returns the splits in order.
func (p *Permutations) Splits() []*Split { return p.splits }

// Split returns the split called name.
func (p *Permutations) Split(name string) (*Split, error) {
	for _, s := range p.splits {
		if s.info.Name == name {
			return s, nil
		}
	}
	names := make([]string, len(p.splits))
	for i, s := range p.splits {
		names[i] = s.info.Name
	}
	return nil, errcode.New(errcode.InvalidArgument, "split", p.loc.URI, "no split %q; the permutation has: %s", name, strings.Join(names, ", "))
}

// SplitAt returns split i.
func (p *Permutations) SplitAt(i int) (*Split, error) {
	if i < 0 || i >= len(p.splits) {
		return nil, errcode.New(errcode.InvalidArgument, "split", p.loc.URI, "split index %d out of range [0, %d)", i, len(p.splits))
	}
	return p.splits[i], nil
}

// Close releases the permutation's store connections.
func (p *Permutations) Close() error {
	p.table.Close()
	return p.loc.Close()
}

// Split is one named split of a permutation: an Order of row ids, and a
// LengthOrder when the permutation records lengths.
type Split struct {
	p      *Permutations
	index  int
	info   SplitInfo
	chunks [2]*chunkCache // of row ids and of lengths, by part
	once   rowsOnce

	groupsMu sync.Mutex
	starts   []int64       // GroupStarts, or where page-aligned clumps start, once read
	epoch    *groupedOrder // the grouped or clumped order ForEpoch made last
}

// ID names the split for checkpoints: the permutation's UUID and the split name.
func (s *Split) ID() string { return s.p.m.ID + "/" + s.info.Name }

// Name returns the split's name.
func (s *Split) Name() string { return s.info.Name }

// Len returns the number of rows in the split.
func (s *Split) Len() int64 { return s.info.NumRows }

// Permutations returns the permutation the split belongs to.
func (s *Split) Permutations() *Permutations { return s.p }

// RowIDs returns the row ids at positions [start, stop) of the split.
func (s *Split) RowIDs(ctx context.Context, start, stop int64) ([]uint64, error) {
	return s.read(ctx, rowIDs, start, stop)
}

// LengthsColumn returns the column the permutation's lengths come from, or
// "" when it records none.
func (s *Split) LengthsColumn() string { return s.p.m.Spec.Lengths }

// Lengths returns the lengths of the rows at positions [start, stop) of the
// split (see Spec.Lengths).
func (s *Split) Lengths(ctx context.Context, start, stop int64) ([]uint64, error) {
	if s.LengthsColumn() == "" {
		return nil, errcode.New(errcode.InvalidArgument, "lengths", s.p.loc.URI,
			"the permutation records no lengths: build it with lengths=<column>")
	}
	return s.read(ctx, lengths, start, stop)
}

// read returns part p of positions [start, stop) of the split.
func (s *Split) read(ctx context.Context, p part, start, stop int64) ([]uint64, error) {
	if start < 0 || stop > s.info.NumRows || start > stop {
		return nil, errcode.New(errcode.InvalidArgument, "row ids", s.p.loc.URI,
			"positions [%d, %d) out of range [0, %d) of split %q", start, stop, s.info.NumRows, s.info.Name)
	}
	out := make([]uint64, 0, stop-start)
	for pos := start; pos < stop; {
		c := pos / ChunkIDs
		vals, err := s.chunk(ctx, p, c)
		if err != nil {
			return nil, err
		}
		end := min(stop, (c+1)*ChunkIDs)
		out = append(out, vals[pos-c*ChunkIDs:end-c*ChunkIDs]...)
		pos = end
	}
	return out, nil
}

// chunk returns the decoded values of chunk c of part p, rowIDs or lengths.
func (s *Split) chunk(ctx context.Context, p part, c int64) ([]uint64, error) {
	return s.chunks[p].get(c, func() ([]uint64, error) {
		vals, err := s.readChunk(ctx, p, c, min(ChunkIDs, s.info.NumRows-c*ChunkIDs))
		if err != nil || p == lengths {
			return vals, err
		}
		where := s.p.loc.ObjectURI(chunkKey(s.p.loc.Key, s.p.m.ID, s.index, p, c))
		limit := uint64(s.p.table.NumRows())
		for _, id := range vals {
			if id >= limit {
				return nil, errcode.New(errcode.Corrupt, "read row ids", where,
					"row id %d is outside the table's %d rows", id, limit)
			}
		}
		if id, earlier, ok := s.once.record(c, vals, limit, numChunks(s.info.NumRows)); !ok {
			in := "twice in it"
			if earlier {
				in = "in it and in an earlier chunk"
			}
			return nil, errcode.New(errcode.Corrupt, "read row ids", where,
				"permutation %s, split %q, chunk %d: row %d is %s; a split holds each row once", s.p.m.ID, s.info.Name, c, id, in)
		}
		return vals, nil
	})
}

// rowsOnce checks that a split holds each row once, as its chunks of row
// ids are read: a chunk edited with its digest and the manifest's seal
// redone would otherwise deal a row twice in an epoch, and another never.
// It holds a bit per row of the table, from the first chunk read on, and
// marks a chunk's rows the first time it is read; a chunk read again (after
// the chunk cache let it go) has the digest it had, and is not marked
// again.
type rowsOnce struct {
	mu     sync.Mutex
	seen   []uint64 // a bit per table row: in a chunk marked
	marked []bool   // by chunk
}

// record marks the rows ids of chunk c, of a split of chunks chunks over a
// table of rows rows. It returns false and the first row already marked,
// and whether an earlier chunk holds it, leaving no mark of c.
func (o *rowsOnce) record(c int64, ids []uint64, rows uint64, chunks int64) (dup uint64, earlier, ok bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.seen == nil {
		o.seen, o.marked = make([]uint64, (rows+63)/64), make([]bool, chunks)
	}
	if o.marked[c] {
		return 0, false, true
	}
	for i, id := range ids {
		if o.seen[id/64]&(1<<(id%64)) != 0 {
			earlier = !slices.Contains(ids[:i], id)
			for _, undo := range ids[:i] {
				o.seen[undo/64] &^= 1 << (undo % 64)
			}
			return id, earlier, false
		}
		o.seen[id/64] |= 1 << (id % 64)
	}
	o.marked[c] = true
	return 0, false, true
}

// readChunk reads and decodes the n values of chunk c of part p, checking
// them against the digest the manifest records (none in format 1).
func (s *Split) readChunk(ctx context.Context, p part, c, n int64) ([]uint64, error) {
	kind, what, width, digests := "chunk", "row ids", s.p.m.IDWidth, s.info.ChunkSHA256
	switch p {
	case lengths:
		kind, what, width, digests = "length chunk", "lengths", LengthWidth, s.info.LengthSHA256
	case groupStarts:
		kind, what, digests = "group chunk", "group starts", s.info.GroupSHA256
	}
	op, key := "read "+what, chunkKey(s.p.loc.Key, s.p.m.ID, s.index, p, c)
	b, err := s.p.loc.ReadAll(ctx, key)
	if errcode.Of(err) == errcode.NotFound {
		// The manifest, written last, promises every chunk.
		return nil, errcode.New(errcode.Corrupt, op, s.p.loc.ObjectURI(key),
			"%s %d of split %q is missing", kind, c, s.info.Name)
	}
	if err != nil {
		return nil, err
	}
	if int64(len(b)) != n*int64(width) {
		return nil, errcode.New(errcode.Corrupt, op, s.p.loc.ObjectURI(key),
			"%d bytes, want %d %s of %d bytes", len(b), n, what, width)
	}
	if s.p.m.Format != uncheckedFormat {
		if got, want := seal.Sum(b), digests[c]; got != want {
			return nil, errcode.New(errcode.Corrupt, op, s.p.loc.ObjectURI(key),
				"%s %d of split %q hashes to sha256 %.16s…, the manifest records %.16s…: it changed after it was written",
				kind, c, s.info.Name, got, want)
		}
	}
	vals := make([]uint64, n)
	decodeIDs(b, width, vals)
	return vals, nil
}

// Grouped reports whether the split's rows come in groups (Spec.GroupBy).
func (s *Split) Grouped() bool { return len(s.p.m.Spec.GroupBy) > 0 }

// NumGroups returns the number of the split's groups; 0 if it has none.
func (s *Split) NumGroups() int64 { return s.info.NumGroups }

// GroupStarts returns the positions in the split's stored order where its
// groups start, ascending from 0, followed by Len: group g is positions
// [starts[g], starts[g+1]). It reads every group chunk on the first call,
// 8 bytes a group, and keeps them. A split without groups has none.
func (s *Split) GroupStarts(ctx context.Context) ([]int64, error) {
	if !s.Grouped() {
		return nil, errcode.New(errcode.InvalidArgument, "group starts", s.p.loc.URI, "split %q has no groups", s.info.Name)
	}
	s.groupsMu.Lock()
	defer s.groupsMu.Unlock()
	if s.starts != nil {
		return s.starts, nil
	}
	n := s.info.NumGroups
	starts := make([]int64, 0, n+1)
	for c := range numChunks(n) {
		ids, err := s.readChunk(ctx, groupStarts, c, min(ChunkIDs, n-c*ChunkIDs))
		if err != nil {
			return nil, err
		}
		for _, id := range ids {
			// Strictly ascending from 0 and inside the split: a group is never empty.
			if at := int64(len(starts)); (at == 0 && id != 0) || (at > 0 && int64(id) <= starts[at-1]) || id >= uint64(s.info.NumRows) {
				return nil, errcode.New(errcode.Corrupt, "read group starts", s.p.loc.ObjectURI(chunkKey(s.p.loc.Key, s.p.m.ID, s.index, groupStarts, c)),
					"group %d starts at position %d, not after the group before it and inside the split's %d rows", at, id, s.info.NumRows)
			}
			starts = append(starts, int64(id))
		}
	}
	s.starts = append(starts, s.info.NumRows)
	return s.starts, nil
}

// unitStarts returns where the split's groups start, or, with page-aligned
// clumps, its clumps, followed by Len (see GroupStarts and ForEpoch).
func (s *Split) unitStarts(ctx context.Context) ([]int64, error) {
	if s.Grouped() {
		return s.GroupStarts(ctx)
	}
	spans, err := s.p.pageSpans(ctx)
	if err != nil {
		return nil, err
	}
	s.groupsMu.Lock()
	defer s.groupsMu.Unlock()
	if s.starts != nil {
		return s.starts, nil
	}
	c := newClumpCutter(spans)
	for at := int64(0); at < s.info.NumRows; at += ChunkIDs {
		ids, err := s.RowIDs(ctx, at, min(at+ChunkIDs, s.info.NumRows))
		if err != nil {
			return nil, err
		}
		for _, id := range ids {
			c.add(id)
		}
	}
	s.starts = append(c.starts, s.info.NumRows)
	return s.starts, nil
}

// chunkCache keeps the most recently used decoded chunks of one split.
type chunkCache struct {
	size int
	mu   sync.Mutex
	lru  *list.List // of *chunkEntry, most recent first
	byC  map[int64]*list.Element
}

type chunkEntry struct {
	c   int64
	ids []uint64
}

func newChunkCache(size int) *chunkCache {
	return &chunkCache{size: size, lru: list.New(), byC: map[int64]*list.Element{}}
}

func (cc *chunkCache) get(c int64, load func() ([]uint64, error)) ([]uint64, error) {
	cc.mu.Lock()
	if e, ok := cc.byC[c]; ok {
		cc.lru.MoveToFront(e)
		cc.mu.Unlock()
		return e.Value.(*chunkEntry).ids, nil
	}
	cc.mu.Unlock()
	ids, err := load()
	if err != nil {
		return nil, err
	}
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if _, ok := cc.byC[c]; !ok {
		cc.byC[c] = cc.lru.PushFront(&chunkEntry{c: c, ids: ids})
		for cc.lru.Len() > cc.size {
			back := cc.lru.Back()
			delete(cc.byC, back.Value.(*chunkEntry).c)
			cc.lru.Remove(back)
		}
	}
	return ids, nil
}
