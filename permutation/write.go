package permutation

import (
	"cmp"
	"context"
	"path"
	"slices"

	"golang.org/x/sync/errgroup"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/store"
	"github.com/croupier-data/croupier/internal/seal"
)

// write persists the chunks of m's splits that this rank orders; the
// manifest is written once every rank has written its (see Rank.commit),
// and only then is the permutation there. Chunks go under a
// folder named by the permutation's content ID, so a concurrent build of other
// inputs at the same URI can never overwrite them: the loser of the manifest
// race leaves only unreferenced chunks behind. Since that ID derives from
// the digests of all the chunks, the splits are ordered twice, the same way:
// once to digest their chunks, once to write them (the spills the first
// writes on its way, the orderer keeps for the second). No step holds more
// than a bucket's records and the chunks being written.
//
// Unlike a table commit (core/table's checkExclusiveCreate), a build does not
// probe the store's conditional writes nor refuse a store that ignores them,
// because every object it writes but build.json is a function of its inputs
// and is never replaced by different bytes under the same key: a chunk's key
// holds the content ID, and the manifest is that ID's sealed description. Two
// builds of the same permutation at one URI, racing or repeated, write the
// same bytes to the same keys, so either order leaves one whole permutation
// that verifies (and on a store that honours the condition, CreateExclusive
// reads the manifest back and finds its own bytes). Two builds of different
// permutations at one URI on a store that ignores the condition leave the
// manifest written last, whose chunks are all there (each build writes its
// chunks first): nothing stored is corrupted, and a permutation is derived
// data that the pinned table rebuilds. Build reads the manifest back and fails
// with Changed when it holds another permutation; it cannot see a manifest
// written after that read, as docs/storage.md says.
func write[T any](ctx context.Context, b *builder, loc *store.Location, o *orderer[T], m Manifest) error {
	if ok, err := loc.Exists(ctx, path.Join(loc.Key, manifestKey)); err == nil && ok {
		return errcode.New(errcode.AlreadyExists, "write permutation", loc.URI,
			"a permutation already exists there; permutations are immutable, persist to a new URI")
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	k := newChunker(b, o, "write", m.RowsIn(), func(split int, p part, c int64, data []byte) error {
		key := chunkKey(loc.Key, m.ID, split, p, c)
		g.Go(func() (err error) {
			defer errcode.Recover(&err, errcode.Internal, "write permutation", loc.ObjectURI(key))
			return loc.WriteAll(gctx, key, data, store.WriterOptions{})
		})
		return nil
	})
	err := o.run(gctx, k)
	if werr := g.Wait(); werr != nil {
		err = werr
	}
	if err != nil {
		return err
	}
	k.finish()
	return nil
}

// digests are the digests of the chunks a rank orders, and what every rank
// counts alike, the rows of each split, and with GroupBy the groups of each
// split it orders (none of the others').
type digests struct {
	Sums   []chunkSum `json:"sums"`
	Rows   []int64    `json:"rows"`
	Groups []int64    `json:"groups"`
}

// chunkSum is the digest of chunk C of part P of split S.
type chunkSum struct {
	S   int    `json:"s"`
	P   part   `json:"p"`
	C   int64  `json:"c"`
	Sum string `json:"sum"`
}

// digest orders the splits and digests the chunks this rank orders.
func digest[T any](ctx context.Context, b *builder, o *orderer[T]) (digests, error) {
	var d digests
	k := newChunker(b, o, "order", o.sp.total(), func(split int, p part, c int64, data []byte) error {
		d.Sums = append(d.Sums, chunkSum{split, p, c, seal.Sum(data)})
		return nil
	})
	if err := o.run(ctx, k); err != nil {
		return digests{}, err
	}
	k.finish()
	d.Rows, d.Groups = k.rows, k.groups
	return d, nil
}

// manifest returns the manifest of the splits that the ranks digested,
// each rank its chunks (see digest), whose ID derives from them all.
func (b *builder) manifest(sp spills, all []digests) (Manifest, error) {
	names, err := b.splitNames(sp)
	if err != nil {
		return Manifest{}, err
	}
	m := Manifest{Format: formatOf(b.spec), Table: b.t.Pin(), Spec: b.spec, IDWidth: sp.width,
		RowsScanned: b.stats.rows, RowsKept: b.stats.kept.Load(), RowGroups: b.stats.groups, RowGroupsSkipped: b.stats.skipped}
	grouped := len(b.spec.GroupBy) > 0
	var sums []chunkSum
	for _, d := range all {
		sums = append(sums, d.Sums...)
	}
	slices.SortFunc(sums, func(x, y chunkSum) int {
		return cmp.Or(cmp.Compare(x.S, y.S), cmp.Compare(x.P, y.P), cmp.Compare(x.C, y.C))
	})
	for i, name := range names {
		s := SplitInfo{Name: name, ChunkSHA256: []string{}, NumRows: all[0].Rows[i]}
		if grouped {
			s.GroupSHA256 = []string{}
			for _, d := range all { // only the rank that orders a split counts its groups
				s.NumGroups += d.Groups[i]
			}
		}
		m.Splits = append(m.Splits, s)
	}
	for _, c := range sums {
		s := &m.Splits[c.S]
		switch c.P {
		case rowIDs:
			s.ChunkSHA256 = append(s.ChunkSHA256, c.Sum)
		case lengths:
			s.LengthSHA256 = append(s.LengthSHA256, c.Sum)
		case groupStarts:
			s.GroupSHA256 = append(s.GroupSHA256, c.Sum)
		}
	}
	for _, s := range m.Splits {
		if int64(len(s.ChunkSHA256)) != (s.NumRows+ChunkIDs-1)/ChunkIDs {
			return Manifest{}, errcode.New(errcode.Internal, "build permutation", b.t.URI(),
				"split %q: the ranks digested %d chunks of its %d", s.Name, len(s.ChunkSHA256), (s.NumRows+ChunkIDs-1)/ChunkIDs)
		}
	}
	m.ID, err = contentID(m)
	return m, err
}

// RowsIn returns the rows of all the splits.
func (m Manifest) RowsIn() int64 {
	var n int64
	for _, s := range m.Splits {
		n += s.NumRows
	}
	return n
}

// chunker cuts each split, as the orderer gives it, into chunks of ChunkIDs
// records (fewer in a split's last), and hands out the persisted bytes of
// each chunk this rank orders (see orderer.owns): its row ids, with
// Spec.Lengths their lengths, and at the end of a split, with Spec.GroupBy,
// the chunks of its group starts.
type chunker[T any] struct {
	o       *orderer[T]
	width   int
	lengths bool
	out     func(split int, p part, c int64, data []byte) error
	phase   string
	total   int64
	done    int64 // records handed out or skipped
	ended   int64 // records of the splits ended

	buf    []T // the records of the current chunk, when it is this rank's
	fill   int // the records of the current chunk, whoever's it is
	split  int
	chunk  int64
	rows   []int64 // of each split ended
	groups []int64
}

func newChunker[T any](b *builder, o *orderer[T], phase string, total int64, out func(split int, p part, c int64, data []byte) error) *chunker[T] {
	return &chunker[T]{o: o, width: o.sp.width, lengths: b.spec.Lengths != "", out: out, phase: phase, total: total,
		buf: make([]T, 0, ChunkIDs)}
}

func (k *chunker[T]) add(records []T) error {
	for len(records) > 0 {
		n := min(ChunkIDs-k.fill, len(records))
		if k.o.owns(k.split, k.chunk) {
			k.buf = append(k.buf, records[:n]...)
		}
		k.fill += n
		records = records[n:]
		if k.fill == ChunkIDs {
			if err := k.flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

// skip passes over n records, which must all be of other ranks' chunks.
func (k *chunker[T]) skip(n int64) error {
	for n > 0 {
		if k.o.owns(k.split, k.chunk) {
			return errcode.New(errcode.Internal, "build permutation", k.o.b.t.URI(),
				"split %d: chunk %d is this rank's but its records were skipped", k.split, k.chunk)
		}
		m := min(int64(ChunkIDs-k.fill), n)
		k.fill += int(m)
		n -= m
		if k.fill == ChunkIDs {
			if err := k.flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

// flush hands out the current chunk when it is this rank's, and moves on.
func (k *chunker[T]) flush() error {
	if k.o.owns(k.split, k.chunk) {
		l := k.o.l
		if err := k.out(k.split, rowIDs, k.chunk, encodeRecords(k.buf, k.width, l.id)); err != nil {
			return err
		}
		if k.lengths {
			length := func(v T) uint64 { return uint64(l.length(v)) }
			if err := k.out(k.split, lengths, k.chunk, encodeRecords(k.buf, LengthWidth, length)); err != nil {
				return err
			}
		}
	}
	k.chunk++
	k.done += int64(k.fill)
	k.buf, k.fill = k.buf[:0], 0
	k.o.b.progress(Progress{Phase: k.phase, Done: k.done, Total: k.total})
	return nil
}

// end ends the current split, whose groups start at starts with GroupBy.
func (k *chunker[T]) end(starts []uint64) error {
	if k.fill > 0 {
		if err := k.flush(); err != nil {
			return err
		}
	}
	var err error
	forChunks(starts, func(c int64, chunk []uint64) {
		if err == nil {
			err = k.out(k.split, groupStarts, c, encodeIDs(chunk, k.width))
		}
	})
	if err != nil {
		return err
	}
	k.rows = append(k.rows, k.done-k.ended)
	k.groups = append(k.groups, int64(len(starts)))
	k.ended = k.done
	k.split++
	k.chunk = 0
	return nil
}

// finish reports the phase done.
func (k *chunker[T]) finish() {
	k.o.b.progress(Progress{Phase: k.phase, Done: k.done, Total: k.done})
}

// forChunks calls fn with each run of ChunkIDs values (fewer in the last).
func forChunks(values []uint64, fn func(c int64, chunk []uint64)) {
	for c := int64(0); c*ChunkIDs < int64(len(values)); c++ {
		fn(c, values[c*ChunkIDs:min((c+1)*ChunkIDs, int64(len(values)))])
	}
}
