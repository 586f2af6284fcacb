package permutation

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"path"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/store"
)

// Group keys of distributed builds. With GroupBy, a split's groups are
// formed from the keys of all its kept rows at once, on the rank that orders
// the split, rank p mod W (see orderer.segments): each rank writes the keys
// of its own rows of every other rank's split as one object of its spill,
// which that rank reads back, in rank order, as it orders the split (see
// docs/spec.md, "Distributed builds"). The ranks hold no more keys than a
// single process does: each split's, on the one rank that orders it.

// keysKey returns the key of the group keys of part p in spill s.
func (s *spill) keysKey(p int) string { return path.Join(s.prefix, "keys", fmt.Sprint(p)) }

// groups numbers the groups of one part's kept rows in the order of their
// first rows, row id order: of holds each row's group, keys each group's key
// (its canonical encoding, hash.go), index the number of each key. A row
// costs its group's number, 4 bytes, and a group its key once: holding each
// row's key as a string of its own took 30 bytes a row and more.
type groups struct {
	index map[string]uint32
	keys  []string
	of    []uint32
}

// number returns the group of key, numbering it next if it is new.
func (g *groups) number(key string) (uint32, error) {
	if n, ok := g.index[key]; ok {
		return n, nil
	}
	if len(g.keys) == math.MaxUint32 {
		return 0, badSpec("group_by: more than %d groups in one split", uint32(math.MaxUint32))
	}
	if g.index == nil {
		g.index = map[string]uint32{}
	}
	n := uint32(len(g.keys))
	g.index[key] = n
	g.keys = append(g.keys, key)
	return n, nil
}

// add appends a row whose group key is key.
func (g *groups) add(key string) error {
	n, err := g.number(key)
	g.of = append(g.of, n)
	return err
}

// merge appends the rows of o, the rows that follow g's in row id order,
// numbering o's groups on from g's.
func (g *groups) merge(o *groups) error {
	to := make([]uint32, len(o.keys))
	for i, k := range o.keys {
		n, err := g.number(k)
		if err != nil {
			return err
		}
		to[i] = n
	}
	for _, n := range o.of {
		g.of = append(g.of, to[n])
	}
	return nil
}

// shareKeys writes out the groups of this rank's rows of each split that
// another rank orders, and forgets them.
func (r *Rank) shareKeys(ctx context.Context) error {
	b := r.b
	if len(b.spec.GroupBy) == 0 || b.world == 1 {
		return nil
	}
	if b.keys == nil {
		b.keys = make([]*groups, b.numParts())
	}
	for p, g := range b.keys {
		if p%b.world == b.rank || g == nil || len(g.of) == 0 {
			continue
		}
		if err := r.sp.writeKeys(ctx, p, g); err != nil {
			return err
		}
		b.keys[p] = nil
	}
	return nil
}

// gatherKeys reads, for each split this rank orders, every rank's groups of
// it, in rank order, and numbers them as one process does: in the order of
// their first rows, row id order.
func (r *Rank) gatherKeys(ctx context.Context, scans []scanReport) error {
	b := r.b
	if len(b.spec.GroupBy) == 0 || b.world == 1 {
		return nil
	}
	for p := range b.keys {
		if p%b.world != b.rank {
			continue
		}
		all := &groups{}
		for i, s := range scans {
			var g *groups
			switch {
			case i == b.rank:
				g = b.keys[p]
			case s.Spill.Rows[p] > 0:
				var err error
				if g, err = readKeys(ctx, r.loc, r.all.ranks[i].keysKey(p), s.Spill.Rows[p]); err != nil {
					return err
				}
			}
			if g == nil {
				continue
			}
			if err := all.merge(g); err != nil {
				return err
			}
		}
		b.keys[p] = all
	}
	return nil
}

// writeKeys writes g as the keys object of part p: the number of its groups,
// a uvarint; each group's key, in order, its length, a uvarint, then its
// bytes; then each row's group, a uvarint.
func (s *spill) writeKeys(ctx context.Context, p int, g *groups) error {
	if err := s.claimFirst(); err != nil {
		return err
	}
	n := binary.MaxVarintLen64 * (1 + len(g.keys) + len(g.of))
	for _, k := range g.keys {
		n += len(k)
	}
	data := binary.AppendUvarint(make([]byte, 0, n), uint64(len(g.keys)))
	for _, k := range g.keys {
		data = binary.AppendUvarint(data, uint64(len(k)))
		data = append(data, k...)
	}
	for _, n := range g.of {
		data = binary.AppendUvarint(data, uint64(n))
	}
	s.written = true
	return errcode.Wrap(s.loc.WriteAll(ctx, s.keysKey(p), data, store.WriterOptions{}), errcode.Unavailable, "spill", s.loc.ObjectURI(s.keysKey(p)))
}

// readKeys reads the keys object at key, which holds the groups of n rows.
func readKeys(ctx context.Context, loc *store.Location, key string, n int64) (*groups, error) {
	data, err := loc.ReadAll(ctx, key)
	if err != nil {
		return nil, err
	}
	bad := func(format string, args ...any) (*groups, error) {
		return nil, errcode.New(errcode.Corrupt, "spill", loc.ObjectURI(key), format, args...)
	}
	count, w := binary.Uvarint(data)
	if w <= 0 || count > uint64(len(data)) {
		return bad("no count of groups")
	}
	data = data[w:]
	g := &groups{keys: make([]string, 0, count), of: make([]uint32, 0, n)}
	for range count {
		l, w := binary.Uvarint(data)
		if w <= 0 || uint64(len(data)-w) < l {
			return bad("%d group keys, not %d", len(g.keys), count)
		}
		g.keys = append(g.keys, string(data[w:w+int(l)]))
		data = data[w+int(l):]
	}
	for len(data) > 0 {
		x, w := binary.Uvarint(data)
		if w <= 0 || x >= count {
			return bad("row %d of the split has no group of the %d", len(g.of), count)
		}
		g.of = append(g.of, uint32(x))
		data = data[w:]
	}
	if int64(len(g.of)) != n {
		return bad("the groups of %d rows, not the %d rows of the split", len(g.of), n)
	}
	return g, nil
}
