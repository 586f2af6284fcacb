package permutation

import (
	"context"
	"encoding/binary"
	"fmt"
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

// shareKeys writes out the keys of this rank's rows of each split that
// another rank orders, and forgets them.
func (r *Rank) shareKeys(ctx context.Context) error {
	b := r.b
	if len(b.spec.GroupBy) == 0 || b.world == 1 {
		return nil
	}
	if b.keys == nil {
		b.keys = make([][]string, b.numParts())
	}
	for p, keys := range b.keys {
		if p%b.world == b.rank || len(keys) == 0 {
			continue
		}
		if err := r.sp.writeKeys(ctx, p, keys); err != nil {
			return err
		}
		b.keys[p] = nil
	}
	return nil
}

// gatherKeys reads, for each split this rank orders, every rank's keys of
// it, in rank order: the keys of its rows in row id order.
func (r *Rank) gatherKeys(ctx context.Context, scans []scanReport) error {
	b := r.b
	if len(b.spec.GroupBy) == 0 || b.world == 1 {
		return nil
	}
	for p := range b.keys {
		if p%b.world != b.rank {
			continue
		}
		var keys []string
		for i, s := range scans {
			switch {
			case i == b.rank:
				keys = append(keys, b.keys[p]...)
			case s.Spill.Rows[p] > 0:
				sp := r.all.ranks[i]
				got, err := readKeys(ctx, r.loc, sp.keysKey(p), s.Spill.Rows[p])
				if err != nil {
					return err
				}
				keys = append(keys, got...)
			}
		}
		b.keys[p] = keys
	}
	return nil
}

// writeKeys writes keys as the keys object of part p: each key's length,
// a uvarint, then its bytes.
func (s *spill) writeKeys(ctx context.Context, p int, keys []string) error {
	if err := s.claimFirst(); err != nil {
		return err
	}
	var n int
	for _, k := range keys {
		n += binary.MaxVarintLen64 + len(k)
	}
	data := make([]byte, 0, n)
	for _, k := range keys {
		data = binary.AppendUvarint(data, uint64(len(k)))
		data = append(data, k...)
	}
	s.written = true
	return errcode.Wrap(s.loc.WriteAll(ctx, s.keysKey(p), data, store.WriterOptions{}), errcode.Unavailable, "spill", s.loc.ObjectURI(s.keysKey(p)))
}

// readKeys reads the keys object at key, which holds n keys.
func readKeys(ctx context.Context, loc *store.Location, key string, n int64) ([]string, error) {
	data, err := loc.ReadAll(ctx, key)
	if err != nil {
		return nil, err
	}
	keys := make([]string, 0, n)
	for len(data) > 0 {
		l, w := binary.Uvarint(data)
		if w <= 0 || uint64(len(data)-w) < l {
			break
		}
		keys = append(keys, string(data[w:w+int(l)]))
		data = data[w+int(l):]
	}
	if len(data) > 0 || int64(len(keys)) != n {
		return nil, errcode.New(errcode.Corrupt, "spill", loc.ObjectURI(key), "%d group keys, not the %d rows of the split", len(keys), n)
	}
	return keys, nil
}
