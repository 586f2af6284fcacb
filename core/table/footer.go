package table

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/apache/arrow-go/v18/parquet/metadata"
	"golang.org/x/sync/errgroup"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/store"
	"github.com/croupier-data/croupier/internal/seal"
)

// footerGuess is how many trailing bytes the first read of a file of size
// bytes fetches, so that one request usually gets the whole footer. A footer
// grows with columns × row groups, and row groups with the file's size: 1/512
// of the file (between 64 KiB and 1 MiB) held the footers of files of 31
// columns and 12 row groups (170 KiB in 127 MB), where a fixed 64 KiB took a
// second round trip.
func footerGuess(size int64) int64 {
	return min(max(size/512, 64<<10), 1<<20, size)
}

var magic = []byte("PAR1")

// tailBytes are trailing bytes of a file, from offset off: what the read of
// its footer fetched.
type tailBytes struct {
	off int64
	b   []byte
}

// readFooters returns the parsed footers of objs: known[i] where the caller
// has read it already (known may be nil), else from the catalog where it has
// them (keyed by each object's identity, for objects that name one version:
// cacheable), else from the store; footers read from the store are added to
// the catalog in one transaction. Where sums[i] is set (sums may be nil),
// footer i must be the one it names (File.FooterSHA256): a footer known or
// cached that is not is a miss, and one read from the store that is not
// fails with errcode.Changed. tails[i] holds the bytes fetched with footer i
// when it was read from the store.
func readFooters(ctx context.Context, loc *store.Location, cat Cache, objs []store.Object, known [][]byte, sums []string) (mds []*metadata.FileMetaData, tails []tailBytes, err error) {
	raw := make([][]byte, len(objs))
	copy(raw, known)
	keys := make([]string, len(objs))
	if cat != nil {
		var ask []string
		for i, o := range objs {
			if cacheable(o) {
				keys[i] = cacheKey("footer", loc.ObjectURI(o.Key), o)
				ask = append(ask, keys[i])
			}
		}
		found := cat.Get(ask)
		for i := range objs {
			if keys[i] != "" {
				if raw[i] == nil {
					raw[i] = found[0]
				}
				found = found[1:]
			}
		}
	}
	mds = make([]*metadata.FileMetaData, len(objs))
	tails = make([]tailBytes, len(objs))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i, o := range objs {
		var sum string
		if sums != nil {
			sum = sums[i]
		}
		g.Go(func() (err error) {
			defer errcode.Recover(&err, errcode.Internal, "read footer", loc.ObjectURI(o.Key))
			where := loc.ObjectURI(o.Key)
			if raw[i] != nil && (sum == "" || seal.Sum(raw[i]) == sum) {
				// A footer known or cached that does not parse is a miss, not
				// an error: the store's copy decides.
				if mds[i], err = parseFooter(raw[i], where); err == nil {
					return nil
				}
			}
			if raw[i], tails[i], _, err = fetchFooter(gctx, loc, o); err != nil {
				return err
			}
			if got := seal.Sum(raw[i]); sum != "" && got != sum {
				return errcode.New(errcode.Changed, "read footer", where,
					"not the file its table's manifest names: its footer's SHA-256 is %s, the manifest records %s "+
						"(another file, or a damaged copy, under its name)", got, sum)
			}
			mds[i], err = parseFooter(raw[i], where)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, nil, err
	}
	if cat != nil {
		var putKeys []string
		var put [][]byte
		for i := range objs {
			if tails[i].b != nil && keys[i] != "" {
				putKeys, put = append(putKeys, keys[i]), append(put, raw[i])
			}
		}
		cat.Put(putKeys, put)
	}
	return mds, tails, nil
}

// fetchFooter reads the raw Thrift footer of obj from the store, and returns
// it, the bytes read that hold it, and the identity of the version read: obj,
// or what the store reported with the data when obj has no modification
// time (a listed size only).
func fetchFooter(ctx context.Context, loc *store.Location, obj store.Object) ([]byte, tailBytes, store.Object, error) {
	const op = "read footer"
	where := loc.ObjectURI(obj.Key)
	if obj.Size < 12 {
		return nil, tailBytes{}, obj, errcode.New(errcode.Corrupt, op, where, "not a Parquet file: %d bytes is too short", obj.Size)
	}
	r := loc.NewReaderAt(ctx, obj)
	n := footerGuess(obj.Size)
	tail := make([]byte, n)
	if _, err := r.ReadAt(tail, obj.Size-n); err != nil {
		return nil, tailBytes{}, obj, err
	}
	if obj.ModTime.IsZero() { // a second read must be of the same version
		obj = r.Seen()
		r = loc.NewReaderAt(ctx, obj)
	}
	if !bytes.Equal(tail[n-4:], magic) {
		return nil, tailBytes{}, obj, errcode.New(errcode.Corrupt, op, where, "not a Parquet file: no PAR1 magic at the end")
	}
	flen := int64(binary.LittleEndian.Uint32(tail[n-8:]))
	if flen+12 > obj.Size {
		return nil, tailBytes{}, obj, errcode.New(errcode.Corrupt, op, where, "footer length %d exceeds file size %d", flen, obj.Size)
	}
	if flen+8 > n {
		tail = make([]byte, flen+8)
		if _, err := r.ReadAt(tail, obj.Size-flen-8); err != nil {
			return nil, tailBytes{}, obj, err
		}
		n = flen + 8
	}
	return tail[n-8-flen : n-8], tailBytes{obj.Size - n, tail}, obj, nil
}

// parseFooter parses a raw Thrift footer.
func parseFooter(raw []byte, where string) (md *metadata.FileMetaData, err error) {
	const op = "read footer"
	// The thrift decoder panics on some malformed input.
	defer errcode.Recover(&err, errcode.Corrupt, op, where)
	md, err = metadata.NewFileMetaData(raw, nil)
	if err != nil {
		return nil, errcode.Wrap(fmt.Errorf("malformed footer: %w", err), errcode.Corrupt, op, where)
	}
	if err := checkFooterSchema(md); err != nil {
		return nil, errcode.Wrap(fmt.Errorf("malformed footer: %w", err), errcode.Corrupt, op, where)
	}
	// Row ids are laid out by the row groups' sizes: they must add up.
	var rows int64
	for i := range md.NumRowGroups() {
		n := md.RowGroup(i).NumRows()
		if n < 0 || rows > math.MaxInt64-n {
			return nil, errcode.New(errcode.Corrupt, op, where, "malformed footer: row group %d has %d rows", i, n)
		}
		rows += n
	}
	if rows != md.NumRows {
		return nil, errcode.New(errcode.Corrupt, op, where, "malformed footer: row groups hold %d rows, the file %d", rows, md.NumRows)
	}
	return md, nil
}
