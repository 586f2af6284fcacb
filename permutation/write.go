package permutation

import (
	"context"
	"path"

	"golang.org/x/sync/errgroup"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/store"
	"github.com/croupier-data/croupier/internal/seal"
)

// write persists the split chunks, then the manifest. Chunks go under a
// folder named by the permutation's content ID, so a concurrent build of other
// inputs at the same URI can never overwrite them: the loser of the manifest
// race leaves only unreferenced chunks behind. Since that ID derives from
// the digests of all the chunks, the splits are ordered twice, the same way:
// once to digest their chunks, once to write them. No step holds more than a
// bucket's records and the chunks being written.
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
func write[T any](ctx context.Context, b *builder, loc *store.Location, o *orderer[T]) (Manifest, error) {
	m, err := digest(ctx, b, o)
	if err != nil {
		return Manifest{}, err
	}
	if ok, err := loc.Exists(ctx, path.Join(loc.Key, manifestKey)); err == nil && ok {
		return Manifest{}, errcode.New(errcode.AlreadyExists, "write permutation", loc.URI,
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
	err = o.run(gctx, k)
	if werr := g.Wait(); werr != nil {
		err = werr
	}
	if err != nil {
		return Manifest{}, err
	}
	k.finish()
	return m, writeManifest(ctx, loc, m)
}

// digest orders the splits and returns the manifest that describes them.
func digest[T any](ctx context.Context, b *builder, o *orderer[T]) (Manifest, error) {
	names, err := b.splitNames(o.sp)
	if err != nil {
		return Manifest{}, err
	}
	m := Manifest{Format: sealedFormat, Table: b.t.Pin(), Spec: b.spec, IDWidth: o.sp.width,
		RowsScanned: b.stats.rows, RowsKept: b.stats.kept.Load(), RowGroups: b.stats.groups, RowGroupsSkipped: b.stats.skipped}
	grouped := len(b.spec.GroupBy) > 0
	if grouped || b.spec.Lengths != "" {
		m.Format = FormatVersion
	}
	for _, name := range names {
		s := SplitInfo{Name: name, ChunkSHA256: []string{}}
		if grouped {
			s.GroupSHA256 = []string{}
		}
		m.Splits = append(m.Splits, s)
	}
	var total int64
	for _, n := range o.sp.rows {
		total += n
	}
	k := newChunker(b, o, "order", total, func(split int, p part, _ int64, data []byte) error {
		s := &m.Splits[split]
		sum := seal.Sum(data)
		switch p {
		case rowIDs:
			s.ChunkSHA256 = append(s.ChunkSHA256, sum)
		case lengths:
			s.LengthSHA256 = append(s.LengthSHA256, sum)
		case groupStarts:
			s.GroupSHA256 = append(s.GroupSHA256, sum)
		}
		return nil
	})
	if err := o.run(ctx, k); err != nil {
		return Manifest{}, err
	}
	k.finish()
	for i := range m.Splits {
		m.Splits[i].NumRows = k.rows[i]
		if grouped {
			m.Splits[i].NumGroups = k.groups[i]
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
// each: its row ids, with Spec.Lengths their lengths, and at the end of a
// split, with Spec.GroupBy, the chunks of its group starts.
type chunker[T any] struct {
	b       *builder
	l       layout[T]
	width   int
	lengths bool
	out     func(split int, p part, c int64, data []byte) error
	phase   string
	total   int64
	done    int64 // records handed out
	ended   int64 // records of the splits ended

	buf    []T
	split  int
	chunk  int64
	rows   []int64 // of each split ended
	groups []int64
}

func newChunker[T any](b *builder, o *orderer[T], phase string, total int64, out func(split int, p part, c int64, data []byte) error) *chunker[T] {
	return &chunker[T]{b: b, l: o.l, width: o.sp.width, lengths: b.spec.Lengths != "", out: out, phase: phase, total: total,
		buf: make([]T, 0, ChunkIDs)}
}

func (k *chunker[T]) add(records []T) error {
	for len(records) > 0 {
		n := min(ChunkIDs-len(k.buf), len(records))
		k.buf = append(k.buf, records[:n]...)
		records = records[n:]
		if len(k.buf) == ChunkIDs {
			if err := k.flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

// flush hands out the chunk in the buffer.
func (k *chunker[T]) flush() error {
	if err := k.out(k.split, rowIDs, k.chunk, encodeRecords(k.buf, k.width, k.l.id)); err != nil {
		return err
	}
	if k.lengths {
		length := func(v T) uint64 { return uint64(k.l.length(v)) }
		if err := k.out(k.split, lengths, k.chunk, encodeRecords(k.buf, LengthWidth, length)); err != nil {
			return err
		}
	}
	k.chunk++
	k.done += int64(len(k.buf))
	k.buf = k.buf[:0]
	k.b.progress(Progress{Phase: k.phase, Done: k.done, Total: k.total})
	return nil
}

// end ends the current split, whose groups start at starts with GroupBy.
func (k *chunker[T]) end(starts []uint64) error {
	if len(k.buf) > 0 {
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
	k.b.progress(Progress{Phase: k.phase, Done: k.done, Total: k.done})
}

// forChunks calls fn with each run of ChunkIDs values (fewer in the last).
func forChunks(values []uint64, fn func(c int64, chunk []uint64)) {
	for c := int64(0); c*ChunkIDs < int64(len(values)); c++ {
		fn(c, values[c*ChunkIDs:min((c+1)*ChunkIDs, int64(len(values)))])
	}
}
