package permutation

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"time"

	"github.com/google/uuid"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/store"
	"github.com/croupier-data/croupier/core/table"
)

// FormatVersion is the version of the builder and of the persisted form. It
// changes whenever the same inputs would give a different permutation.
const FormatVersion = 1

// ChunkIDs is the number of row ids in each persisted chunk object.
const ChunkIDs = 1 << 16

// The persisted form, under the permutation URI:
//
//	permutation.json          the manifest, written last: its presence commits
//	<id>/<i>/<j>.ids          chunk j of split i: ChunkIDs row ids (fewer in the
//	                          last chunk), each IDWidth bytes little endian;
//	                          <id> is the permutation's ID
//	build.json                when the permutation was built and how long it took
//
// Every object but build.json is a function of the inputs alone, so two builds
// of the same table version with the same spec are byte-identical, and the
// permutation's ID (a UUID derived from the manifest's content) is the same.
const (
	manifestKey = "permutation.json"
	buildKey    = "build.json"
)

// BuildRecord says when a permutation was built. It is kept beside the
// manifest, not in it, so that the manifest stays a function of the inputs.
type BuildRecord struct {
	ID      string    `json:"id"`
	BuiltAt time.Time `json:"built_at"`
	Seconds float64   `json:"build_seconds"`
}

// Manifest describes a persisted permutation.
type Manifest struct {
	Format  int         `json:"format"`
	ID      string      `json:"id"`
	Table   table.Pin   `json:"table"`
	Spec    Spec        `json:"spec"`
	IDWidth int         `json:"id_width"` // bytes per row id: 4 or 8
	Splits  []SplitInfo `json:"splits"`
	// Statistics of the build.
	RowsScanned      int64 `json:"rows_scanned"`
	RowsKept         int64 `json:"rows_kept"`
	RowGroups        int64 `json:"row_groups"`
	RowGroupsSkipped int64 `json:"row_groups_skipped"`
}

// SplitInfo describes one split.
type SplitInfo struct {
	Name    string `json:"name"`
	NumRows int64  `json:"num_rows"`
}

func chunkKey(prefix, id string, split int, chunk int64) string {
	return path.Join(prefix, id, fmt.Sprint(split), fmt.Sprintf("%08d.ids", chunk))
}

// encodeIDs returns ids as IDWidth-byte little-endian integers.
func encodeIDs(ids []uint64, width int) []byte {
	out := make([]byte, len(ids)*width)
	for i, id := range ids {
		if width == 4 {
			binary.LittleEndian.PutUint32(out[i*4:], uint32(id))
		} else {
			binary.LittleEndian.PutUint64(out[i*8:], id)
		}
	}
	return out
}

func decodeIDs(b []byte, width int, out []uint64) {
	for i := range out {
		if width == 4 {
			out[i] = uint64(binary.LittleEndian.Uint32(b[i*4:]))
		} else {
			out[i] = binary.LittleEndian.Uint64(b[i*8:])
		}
	}
}

// contentID derives the permutation's UUID from its manifest (with ID empty)
// and chunk digests: equal inputs give equal IDs, different ones differ.
func contentID(m Manifest, chunkDigest []byte) (string, error) {
	m.ID = ""
	b, err := json.Marshal(m)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	h.Write(b)
	h.Write(chunkDigest)
	return uuid.NewSHA1(uuid.NameSpaceURL, h.Sum(nil)).String(), nil
}

// writeManifest makes the permutation visible, atomically. It refuses to
// replace an existing permutation: permutations are immutable.
func writeManifest(ctx context.Context, loc *store.Location, m Manifest) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return errcode.Wrap(err, errcode.Internal, "write permutation", loc.URI)
	}
	err = loc.CreateExclusive(ctx, path.Join(loc.Key, manifestKey), append(b, '\n'))
	if errcode.Of(err) == errcode.AlreadyExists {
		return errcode.New(errcode.AlreadyExists, "write permutation", loc.URI,
			"a permutation already exists there; permutations are immutable, persist to a new URI")
	}
	return err
}

// readManifest reads and checks the manifest under loc.
func readManifest(ctx context.Context, loc *store.Location) (Manifest, error) {
	const op = "open permutation"
	key := path.Join(loc.Key, manifestKey)
	b, err := loc.ReadAll(ctx, key)
	if err != nil {
		if errcode.Of(err) == errcode.NotFound {
			return Manifest{}, errcode.New(errcode.NotFound, op, loc.URI, "no permutation there (%s is missing)", manifestKey)
		}
		return Manifest{}, errcode.Wrap(err, errcode.Unavailable, op, loc.URI)
	}
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return Manifest{}, errcode.Wrap(fmt.Errorf("malformed manifest: %w", err), errcode.Corrupt, op, loc.ObjectURI(key))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Manifest{}, errcode.New(errcode.Corrupt, op, loc.ObjectURI(key), "malformed manifest: data after its JSON object")
	}
	// The ID names the folder of the row id chunks: only a UUID in its
	// canonical form keeps them inside the permutation's folder.
	if u, err := uuid.Parse(m.ID); err != nil || u.String() != m.ID {
		return Manifest{}, errcode.New(errcode.Corrupt, op, loc.ObjectURI(key), "id %q is not a UUID", m.ID)
	}
	switch {
	case m.Format != FormatVersion:
		return Manifest{}, errcode.New(errcode.InvalidArgument, op, loc.ObjectURI(key), "format %d is not supported (this build reads %d)", m.Format, FormatVersion)
	case m.IDWidth != 4 && m.IDWidth != 8:
		return Manifest{}, errcode.New(errcode.Corrupt, op, loc.ObjectURI(key), "id_width %d is neither 4 nor 8", m.IDWidth)
	case len(m.Splits) == 0:
		return Manifest{}, errcode.New(errcode.Corrupt, op, loc.ObjectURI(key), "no splits")
	}
	for _, s := range m.Splits {
		if s.NumRows < 0 {
			return Manifest{}, errcode.New(errcode.Corrupt, op, loc.ObjectURI(key), "split %q has %d rows", s.Name, s.NumRows)
		}
	}
	return m, nil
}
