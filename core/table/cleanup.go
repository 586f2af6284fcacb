package table

import (
	"context"
	"slices"
	"time"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/store"
)

// DefaultGrace is how old an unreferenced data file must be before Cleanup
// deletes it when CleanupOptions.Grace is 0.
const DefaultGrace = 24 * time.Hour

// CleanupOptions configure Cleanup.
type CleanupOptions struct {
	// KeepLast versions are kept (at least 1: the latest is never removed).
	KeepLast int `json:"keep_last"`
	// Grace protects unreferenced files younger than it: they may belong to a
	// commit in flight, which writes its data files before its manifest. An
	// Append that takes longer than Grace between writing its data and
	// committing can lose its files to a concurrent Cleanup; 0 is DefaultGrace.
	Grace time.Duration `json:"grace,omitempty"`
}

// CleanupResult says what Cleanup deleted.
type CleanupResult struct {
	DeletedVersions []int64  `json:"deleted_versions"`
	DeletedFiles    []string `json:"deleted_files"` // object URIs
}

// Cleanup deletes the manifests of every version but the last opts.KeepLast,
// then the data files that no kept version references and that are older than
// the grace period (files of removed versions and orphans of crashed writers),
// and stale temporary files of interrupted commits (in _tmp/). Manifests go first, oldest
// first, so that a Cleanup interrupted at any point leaves every remaining
// version readable. Readers holding a pin of a removed version fail with
// errcode.Changed naming the vanished file.
func Cleanup(ctx context.Context, uri string, opts CleanupOptions) (CleanupResult, error) {
	const op = "cleanup"
	res := CleanupResult{DeletedVersions: []int64{}, DeletedFiles: []string{}}
	if opts.KeepLast < 1 {
		return res, errcode.New(errcode.InvalidArgument, op, uri, "keep_last must be at least 1, got %d", opts.KeepLast)
	}
	if opts.Grace <= 0 {
		opts.Grace = DefaultGrace
	}
	loc, err := store.Open(ctx, uri)
	if err != nil {
		return res, err
	}
	defer loc.Close()
	if err := mustBeCroupier(ctx, loc); err != nil {
		return res, err
	}
	versions, err := listVersions(ctx, loc)
	if err != nil {
		return res, err
	}
	if len(versions) == 0 {
		return res, errcode.New(errcode.NotFound, op, uri, "croupier table has no committed version")
	}
	cut := max(0, len(versions)-opts.KeepLast)
	kept, drop := versions[cut:], versions[:cut]
	// Read every kept manifest first: if one is unreadable nothing is deleted.
	referenced := map[string]bool{}
	for _, v := range kept {
		m, err := readManifest(ctx, loc, nil, v)
		if err != nil {
			return res, err
		}
		for _, f := range m.Files {
			referenced[loc.Join(f.Key)] = true
		}
	}
	for _, v := range drop {
		key := loc.Join(manifestName(v))
		if err := loc.Delete(ctx, key); err != nil {
			return res, err
		}
		res.DeletedVersions = append(res.DeletedVersions, v)
	}
	// A version committed while Cleanup ran references only files of the kept
	// latest version plus its own new ones, which are younger than the grace.
	cutoff := time.Now().Add(-opts.Grace)
	for _, prefix := range []string{loc.Join(dataDir), loc.Join(store.TempDir + "/")} {
		objs, err := loc.List(ctx, prefix, 0)
		if err != nil {
			return res, err
		}
		for _, obj := range objs {
			if obj.IsDir || referenced[obj.Key] || !obj.ModTime.Before(cutoff) {
				continue
			}
			if err := loc.Delete(ctx, obj.Key); err != nil {
				return res, err
			}
			res.DeletedFiles = append(res.DeletedFiles, loc.ObjectURI(obj.Key))
		}
	}
	slices.Sort(res.DeletedFiles)
	return res, nil
}
