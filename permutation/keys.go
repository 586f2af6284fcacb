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
// first rows, row id order: keys holds each group's key (its canonical
// encoding, hash.go), index the number of each key. The scan spills each
// row with its group's number (spill.groups), so a group costs its key once
// and a row 4 bytes of its record, not a key of its own in memory.
type groups struct {
	index map[string]uint32
	keys  []string
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

// A numbering says what the group numbers in each rank's spilled records
// of a part are in the part: to[r] maps rank r's numbers to the part's
// (nil: the same numbers, in a build of one rank); n is the part's groups.
type numbering struct {
	n  int
	to [][]uint32
}

// shareKeys writes out the keys of this rank's groups of each split that
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
		if p%b.world == b.rank || g == nil || len(g.keys) == 0 {
			continue
		}
		if err := r.sp.writeKeys(ctx, p, g.keys); err != nil {
			return err
		}
		b.keys[p] = nil
	}
	return nil
}

// gatherKeys numbers the groups of each split this rank orders as one
// process does, in the order of their first rows: every rank's groups, in
// rank order, each rank's numbered on from those of the ranks before it (a
// key seen before keeps its number). It reads the other ranks' keys.
func (r *Rank) gatherKeys(ctx context.Context, scans []scanReport) error {
	b := r.b
	if len(b.spec.GroupBy) == 0 {
		return nil
	}
	b.numbers = make([]numbering, b.numParts())
	for p := range b.numbers {
		if p%b.world != b.rank {
			continue
		}
		if b.world == 1 {
			if g := b.keys[p]; g != nil {
				b.numbers[p].n = len(g.keys)
			}
			b.keys[p] = nil // each row's group is in its record
			continue
		}
		all := &groups{}
		b.numbers[p].to = make([][]uint32, len(scans))
		for i, s := range scans {
			var keys []string
			switch {
			case i == b.rank && b.keys[p] != nil:
				keys = b.keys[p].keys
			case i != b.rank && s.Spill.Rows[p] > 0:
				var err error
				if keys, err = readKeys(ctx, r.loc, r.all.ranks[i].keysKey(p)); err != nil {
					return err
				}
			}
			to := make([]uint32, len(keys))
			for j, k := range keys {
				n, err := all.number(k)
				if err != nil {
					return err
				}
				to[j] = n
			}
			b.numbers[p].to[i] = to
		}
		b.numbers[p].n = len(all.keys)
		b.keys[p] = nil
	}
	return nil
}

// writeKeys writes keys, a rank's groups of part p in the order of their
// numbers, as the keys object of part p: their number, a uvarint, then each
// key's length, a uvarint, and its bytes.
func (s *spill) writeKeys(ctx context.Context, p int, keys []string) error {
	if err := s.claimFirst(); err != nil {
		return err
	}
	n := binary.MaxVarintLen64 * (1 + len(keys))
	for _, k := range keys {
		n += len(k)
	}
	data := binary.AppendUvarint(make([]byte, 0, n), uint64(len(keys)))
	for _, k := range keys {
		data = binary.AppendUvarint(data, uint64(len(k)))
		data = append(data, k...)
	}
	s.written = true
	return errcode.Wrap(s.loc.WriteAll(ctx, s.keysKey(p), data, store.WriterOptions{}), errcode.Unavailable, "spill", s.loc.ObjectURI(s.keysKey(p)))
}

// readKeys reads the keys object at key.
func readKeys(ctx context.Context, loc *store.Location, key string) ([]string, error) {
	data, err := loc.ReadAll(ctx, key)
	if err != nil {
		return nil, err
	}
	count, w := binary.Uvarint(data)
	if w <= 0 || count > uint64(len(data)) {
		return nil, errcode.New(errcode.Corrupt, "spill", loc.ObjectURI(key), "no count of group keys")
	}
	data = data[w:]
	keys := make([]string, 0, count)
	for len(data) > 0 {
		l, w := binary.Uvarint(data)
		if w <= 0 || uint64(len(data)-w) < l {
			break
		}
		keys = append(keys, string(data[w:w+int(l)]))
		data = data[w+int(l):]
	}
	if len(data) > 0 || uint64(len(keys)) != count {
		return nil, errcode.New(errcode.Corrupt, "spill", loc.ObjectURI(key), "%d group keys, not the %d it says", len(keys), count)
	}
	return keys, nil
}
