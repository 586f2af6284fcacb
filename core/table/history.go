package table

import (
	"context"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/store"
)

// VersionInfo is what a committed version of a croupier table holds, as its
// manifest records it.
type VersionInfo struct {
	Version int64 `json:"version"`
	// Committed is when the writer of the version built its manifest (its
	// clock, UTC), just before the commit made it visible.
	Committed time.Time `json:"committed"`
	// NumRows counts the rows of the version: its own and every earlier
	// version's that it keeps.
	NumRows int64 `json:"num_rows"`
	// AddedRows counts the rows this version added to its parent.
	AddedRows int64 `json:"added_rows"`
}

// History returns the committed versions of the croupier table at uri,
// ascending, with when each was committed and its rows. It reads every
// version's manifest: one request a version. Versions removed by Cleanup, also
// while it reads, are not listed.
func History(ctx context.Context, uri string) ([]VersionInfo, error) {
	loc, err := store.Open(ctx, uri)
	if err != nil {
		return nil, err
	}
	defer loc.Close()
	if err := mustBeCroupier(ctx, loc); err != nil {
		return nil, err
	}
	return history(ctx, loc, nil)
}

// History returns the committed versions of t's croupier table now, as
// History does; t's catalog, if any, caches their manifests.
func (t *Table) History(ctx context.Context) ([]VersionInfo, error) {
	if t.pin.Kind != KindCroupier {
		return nil, errcode.New(errcode.InvalidArgument, "list versions", t.pin.URI,
			"a plain Parquet dataset has only its pinned version %s", t.pin.Version)
	}
	return history(ctx, t.loc, t.cat)
}

func history(ctx context.Context, loc *store.Location, cat Cache) ([]VersionInfo, error) {
	versions, err := listVersions(ctx, loc)
	if err != nil {
		return nil, err
	}
	out := make([]VersionInfo, 0, len(versions))
	for _, v := range versions {
		m, err := readManifest(ctx, loc, cat, v)
		if errcode.Of(err) == errcode.NotFound {
			continue // removed by a Cleanup since the listing
		}
		if err != nil {
			return nil, err
		}
		info := VersionInfo{Version: v, Committed: m.Timestamp, NumRows: m.NumRows}
		for _, f := range m.Files[len(m.Files)-m.Added:] {
			info.AddedRows += f.NumRows
		}
		out = append(out, info)
	}
	return out, nil
}

// Listed is a croupier table found under a location by List.
type Listed struct {
	// URI names the table: the location's URI, query included, with the
	// table's folder under it.
	URI string `json:"uri"`
	// Versions counts its committed versions; Latest is the newest, 0 for
	// a table whose creation has not committed (or never will).
	Versions int   `json:"versions"`
	Latest   int64 `json:"latest_version"`
}

// List returns the croupier tables at or under the location uri, by URI,
// with their versions, from one listing of everything under it (data files
// included: a location of many tables and files takes many pages of a
// listing).
func List(ctx context.Context, uri string) ([]Listed, error) {
	const op = "list tables"
	loc, err := store.Open(ctx, uri)
	if err != nil {
		return nil, err
	}
	defer loc.Close()
	u, err := url.Parse(uri) // store.Open parsed it
	if err != nil {
		return nil, errcode.Wrap(err, errcode.InvalidArgument, op, loc.URI)
	}
	prefix := loc.Join("")
	objs, err := loc.List(ctx, prefix, 0)
	if err != nil {
		return nil, err
	}
	found := map[string]*Listed{} // by folder, relative to the location
	for _, obj := range objs {
		folder, name, ok := cutVersions(strings.TrimPrefix(obj.Key, prefix))
		if !ok {
			continue
		}
		v, isManifest := parseManifestName(name)
		if !isManifest && name != createdMarker {
			continue
		}
		t := found[folder]
		if t == nil {
			child := *u
			if folder != "" {
				child.Path = strings.TrimSuffix(u.Path, "/") + "/" + folder
				child.RawPath = ""
			}
			t = &Listed{URI: child.String()}
			found[folder] = t
		}
		if isManifest {
			t.Versions++
			t.Latest = max(t.Latest, v)
		}
	}
	out := make([]Listed, 0, len(found))
	for _, t := range found {
		out = append(out, *t)
	}
	slices.SortFunc(out, func(a, b Listed) int { return strings.Compare(a.URI, b.URI) })
	return out, nil
}

// cutVersions splits a key relative to a location at its last _versions/
// folder: the table's folder before it (no trailing slash; "" for the
// location itself) and the key under the table's folder.
func cutVersions(rel string) (folder, name string, ok bool) {
	i := strings.LastIndex(rel, versionsDir)
	if i < 0 || (i > 0 && rel[i-1] != '/') {
		return "", "", false
	}
	return strings.TrimSuffix(rel[:i], "/"), rel[i:], true
}
