package permutation

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"path"
	"time"

	"github.com/google/uuid"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/store"
	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/internal/jsonargs"
	"github.com/croupier-data/croupier/internal/seal"
)

// FormatVersion is the version of the builder and of the persisted form. It
// changes whenever the same inputs would give a different permutation, but
// for one change: since builds go through buckets (see order.go), a full
// shuffle of a table of more than bucketIDs rows gets another order than the
// in-memory builder gave it. The version stayed, because what a reader must
// understand did not change: the objects and the manifest are as before, a
// reader deals the ids in whatever order they were written, and the
// permutation's ID, derived from its chunks' digests, differs from the one
// the in-memory builder gave the same inputs, so no permutation can be
// mistaken for another. A new version would only have made earlier readers
// refuse permutations that they deal correctly. Tables of at most bucketIDs
// rows get the same permutation, byte for byte.
//
// Version 2 seals the manifest (see internal/seal) and records the SHA-256 of
// every chunk in it, checked as the chunk is read; the permutation's ID
// derives from that manifest. Permutations of version 1, which have neither,
// still open and deal the same rows, unchecked.
//
// Version 3 is version 2 with optional parts, each in chunks beside the row
// ids whose SHA-256 the manifest records: the positions where each split's
// groups start (Spec.GroupBy), and each row's length (Spec.Lengths). A
// permutation may have either or both. One with neither is still written as
// version 2, byte for byte what this builder wrote before, so that its ID
// stays; a reader that predates version 3 refuses it instead of dealing
// groups apart or rows without their lengths.
//
// Version 4 is version 3's form for a shuffle whose ShuffleSpec.ClumpSize is
// AutoClump: clumps cut at the pinned table's page boundaries, which a
// reader recomputes from the table to keep them whole in later epochs (see
// docs/spec.md, "Page-aligned clumps"). Only such permutations are written
// as version 4; a reader that predates it refuses them instead of dealing
// their later epochs without clumps. Earlier builds recorded the power of
// two they chose for AutoClump, and those permutations open and deal as
// before.
const FormatVersion = 4

const (
	uncheckedFormat  = 1 // the last format without digests
	sealedFormat     = 2 // the format of permutations without optional parts
	partsFormat      = 3 // the format of permutations with groups or lengths
	pageClumpsFormat = 4 // the format of permutations with page-aligned clumps
)

// formatOf returns the format a permutation of spec is written in.
func formatOf(spec Spec) int {
	switch {
	case spec.Shuffle != nil && spec.Shuffle.ClumpSize == AutoClump:
		return pageClumpsFormat
	case len(spec.GroupBy) > 0 || spec.Lengths != "":
		return partsFormat
	}
	return sealedFormat
}

// ChunkIDs is the number of row ids in each persisted chunk object.
const ChunkIDs = 1 << 16

// The persisted form, under the permutation URI:
//
//	permutation.json          the manifest, written last: its presence commits;
//	                          sealed with its SHA-256
//	<id>/<i>/<j>.ids          chunk j of split i: ChunkIDs row ids (fewer in the
//	                          last chunk), each IDWidth bytes little endian;
//	                          <id> is the permutation's ID; the manifest holds
//	                          its SHA-256
//	<id>/<i>/<j>.len          with Spec.Lengths (format 3): the lengths of the
//	                          rows of chunk j, in the same order, each 4 bytes
//	                          little endian; the manifest holds its SHA-256
//	<id>/<i>/groups/<j>.ids   with Spec.GroupBy (format 3): chunk j of the
//	                          positions in split i where its groups start,
//	                          ascending from 0, in the encoding of the row ids;
//	                          the manifest holds its SHA-256
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
	// SHA256 is the manifest's seal, set by decoding.
	SHA256 string `json:"sha256,omitempty"`
}

// SplitInfo describes one split.
type SplitInfo struct {
	Name    string `json:"name"`
	NumRows int64  `json:"num_rows"`
	// ChunkSHA256 holds the hex SHA-256 of each of the split's chunks, in
	// order (none in format 1).
	ChunkSHA256 []string `json:"chunk_sha256,omitempty"`
	// LengthSHA256 holds the hex SHA-256 of each of the split's length
	// chunks, in order (format 3, with Spec.Lengths only).
	LengthSHA256 []string `json:"length_sha256,omitempty"`
	// NumGroups is the number of the split's groups, and GroupSHA256 the hex
	// SHA-256 of each chunk of their start positions (format 3, with
	// Spec.GroupBy only).
	NumGroups   int64    `json:"num_groups,omitempty"`
	GroupSHA256 []string `json:"group_sha256,omitempty"`
}

// clumpsOf describes the clumps of spec's shuffle, for errors.
func clumpsOf(spec Spec) string {
	if sh := spec.Shuffle; sh != nil && sh.ClumpSize == AutoClump {
		return "page-aligned clumps"
	}
	return "no page-aligned clumps"
}

// numChunks is the number of chunks of a split of n rows.
func numChunks(n int64) int64 { return (n + ChunkIDs - 1) / ChunkIDs }

// A split's persisted parts: its row ids, with Spec.Lengths their lengths,
// and with Spec.GroupBy the positions where its groups start.
type part int

const (
	rowIDs part = iota
	lengths
	groupStarts
)

// LengthWidth is the bytes of each persisted row length.
const LengthWidth = 4

func chunkKey(prefix, id string, split int, p part, chunk int64) string {
	dir := path.Join(prefix, id, fmt.Sprint(split))
	switch p {
	case lengths:
		return path.Join(dir, fmt.Sprintf("%08d.len", chunk))
	case groupStarts:
		return path.Join(dir, "groups", fmt.Sprintf("%08d.ids", chunk))
	}
	return path.Join(dir, fmt.Sprintf("%08d.ids", chunk))
}

// encodeIDs returns values as width-byte little-endian integers.
func encodeIDs(values []uint64, width int) []byte {
	return encodeRecords(values, width, func(v uint64) uint64 { return v })
}

// encodeRecords returns value of each record as width-byte little-endian
// integers.
func encodeRecords[T any](records []T, width int, value func(T) uint64) []byte {
	out := make([]byte, len(records)*width)
	for i, v := range records {
		if width == 4 {
			binary.LittleEndian.PutUint32(out[i*4:], uint32(value(v)))
		} else {
			binary.LittleEndian.PutUint64(out[i*8:], value(v))
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

// contentID derives the permutation's UUID from its manifest (with ID empty),
// which holds the chunks' digests: equal inputs give equal IDs, different
// ones differ.
func contentID(m Manifest) (string, error) {
	m.ID = ""
	b, err := json.Marshal(m)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return uuid.NewSHA1(uuid.NameSpaceURL, sum[:]).String(), nil
}

// writeManifest makes the permutation visible, atomically. It refuses to
// replace an existing permutation: permutations are immutable.
func writeManifest(ctx context.Context, loc *store.Location, m Manifest) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return errcode.Wrap(err, errcode.Internal, "write permutation", loc.URI)
	}
	err = loc.CreateExclusive(ctx, path.Join(loc.Key, manifestKey), seal.JSON(b))
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
	where := loc.ObjectURI(key)
	sealed, err := seal.Check(b)
	if err != nil {
		return Manifest{}, errcode.Wrap(fmt.Errorf("malformed manifest: %w", err), errcode.Corrupt, op, where)
	}
	var m Manifest
	if err := jsonargs.Unmarshal(b, &m, true); err != nil {
		return Manifest{}, errcode.Wrap(fmt.Errorf("malformed manifest: %w", err), errcode.Corrupt, op, where)
	}
	// The ID names the folder of the row id chunks: only a UUID in its
	// canonical form keeps them inside the permutation's folder.
	if u, err := uuid.Parse(m.ID); err != nil || u.String() != m.ID {
		return Manifest{}, errcode.New(errcode.Corrupt, op, where, "id %q is not a UUID", m.ID)
	}
	grouped, withLengths := len(m.Spec.GroupBy) > 0, m.Spec.Lengths != ""
	switch {
	case m.Format < uncheckedFormat || m.Format > FormatVersion:
		return Manifest{}, errcode.New(errcode.InvalidArgument, op, where, "format %d is not supported (this build reads %d to %d)",
			m.Format, uncheckedFormat, FormatVersion)
	case m.Format != uncheckedFormat && !sealed:
		return Manifest{}, errcode.New(errcode.Corrupt, op, where, "format %d without its %s seal at the end", m.Format, seal.Field)
	case m.Format == uncheckedFormat && sealed:
		return Manifest{}, errcode.New(errcode.Corrupt, op, where, "format %d with the seal of format %d", m.Format, sealedFormat)
	case m.Format != formatOf(m.Spec) && (m.Format != uncheckedFormat || formatOf(m.Spec) != sealedFormat):
		return Manifest{}, errcode.New(errcode.Corrupt, op, where,
			"format %d with group_by %q, lengths column %q and %s: such a permutation is recorded in format %d",
			m.Format, m.Spec.GroupBy, m.Spec.Lengths, clumpsOf(m.Spec), formatOf(m.Spec))
	case m.IDWidth != 4 && m.IDWidth != 8:
		return Manifest{}, errcode.New(errcode.Corrupt, op, where, "id_width %d is neither 4 nor 8", m.IDWidth)
	case len(m.Splits) == 0:
		return Manifest{}, errcode.New(errcode.Corrupt, op, where, "no splits")
	}
	for _, s := range m.Splits {
		if s.NumRows < 0 {
			return Manifest{}, errcode.New(errcode.Corrupt, op, where, "split %q has %d rows", s.Name, s.NumRows)
		}
		want := numChunks(s.NumRows)
		if m.Format == uncheckedFormat {
			want = 0
		}
		if int64(len(s.ChunkSHA256)) != want {
			return Manifest{}, errcode.New(errcode.Corrupt, op, where, "split %q has %d chunk digests, want %d", s.Name, len(s.ChunkSHA256), want)
		}
		if !withLengths {
			want = 0
		}
		if int64(len(s.LengthSHA256)) != want {
			return Manifest{}, errcode.New(errcode.Corrupt, op, where, "split %q has %d length chunk digests, want %d", s.Name, len(s.LengthSHA256), want)
		}
		switch {
		case !grouped && (s.NumGroups != 0 || s.GroupSHA256 != nil):
			return Manifest{}, errcode.New(errcode.Corrupt, op, where, "split %q of a permutation without group_by has groups", s.Name)
		case grouped && (s.NumGroups < 0 || s.NumGroups > s.NumRows || (s.NumGroups == 0) != (s.NumRows == 0)):
			return Manifest{}, errcode.New(errcode.Corrupt, op, where, "split %q has %d groups of its %d rows", s.Name, s.NumGroups, s.NumRows)
		case int64(len(s.GroupSHA256)) != numChunks(s.NumGroups):
			return Manifest{}, errcode.New(errcode.Corrupt, op, where, "split %q has %d group chunk digests, want %d",
				s.Name, len(s.GroupSHA256), numChunks(s.NumGroups))
		}
	}
	return m, nil
}
