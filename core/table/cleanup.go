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
	// Grace protects versions and unreferenced files younger than it. Files:
	// they may belong to a commit in flight, which writes its data files
	// before its manifest. Versions: a writer that listed the versions before
	// version N was committed tries to create N, and must find it there (had
	// Cleanup deleted it, the writer would commit a version N without N's
	// rows, behind the latest). So an Append must take less than Grace from
	// listing the versions to committing; 0 is DefaultGrace.
	Grace time.Duration `json:"grace,omitempty"`
}

// CleanupResult says what Cleanup deleted.
type CleanupResult struct {
	DeletedVersions []int64  `json:"deleted_versions"`
	DeletedFiles    []string `json:"deleted_files"` // object URIs
	// AbortedUploads are the objects of the incomplete multipart uploads
	// aborted (S3 only): uploads of data files by writers that died.
	AbortedUploads []string `json:"aborted_uploads"`
	// Warnings say what Cleanup could not do after deleting what it
	// reports: the incomplete uploads could not be listed or aborted, as on
	// an S3-compatible store that does not implement ListMultipartUploads.
	Warnings []string `json:"warnings"`
}

// Cleanup deletes the manifests of the versions that are neither among the
// last opts.KeepLast nor younger than the grace period (as Iceberg expires
// snapshots older than a time but retains the last n), then the data files
// that no kept version references and that are older than the grace period
// (files of removed versions and orphans of crashed writers), and stale
// temporary files of interrupted commits (in _tmp/), and aborts the
// incomplete multipart uploads under the table's folder started before the
// grace period (those of writers killed while uploading a data file; see
// store.Location.AbortUploads); when the store cannot list or abort them,
// the result says so in Warnings. Manifests go first,
// oldest first, so that a Cleanup interrupted at any point leaves every
// remaining version readable. Readers holding a pin of a removed version fail
// with errcode.Changed naming the vanished file.
func Cleanup(ctx context.Context, uri string, opts CleanupOptions) (CleanupResult, error) {
	const op = "cleanup"
	res := CleanupResult{DeletedVersions: []int64{}, DeletedFiles: []string{}, AbortedUploads: []string{}, Warnings: []string{}}
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
	// The cutoff is taken before the listing: a version committed after the
	// listing is not kept, but its appender started less than the grace
	// before its commit, so its new data files are younger than the cutoff.
	cutoff := time.Now().Add(-opts.Grace)
	manifests, err := listManifests(ctx, loc)
	if err != nil {
		return res, err
	}
	if len(manifests) == 0 {
		return res, errcode.New(errcode.NotFound, op, uri, "croupier table has no committed version")
	}
	cut := 0
	for cut < len(manifests)-opts.KeepLast && manifests[cut].modTime.Before(cutoff) {
		cut++
	}
	versions := make([]int64, len(manifests))
	for i, m := range manifests {
		versions[i] = m.version
	}
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
	// latest version plus its own new ones, which are younger than the cutoff.
	for _, prefix := range []string{loc.Join(dataDir), loc.Join(store.TempDir + "/")} {
		objs, err := loc.List(ctx, prefix, 0)
		if err != nil {
			return res, err
		}
		for _, obj := range objs {
			if referenced[obj.Key] || !obj.ModTime.Before(cutoff) {
				continue
			}
			if err := loc.Delete(ctx, obj.Key); err != nil {
				return res, err
			}
			res.DeletedFiles = append(res.DeletedFiles, loc.ObjectURI(obj.Key))
		}
	}
	slices.Sort(res.DeletedFiles)
	// Versions and files are deleted by now: a store that cannot list or
	// abort uploads gets a warning, not an error that hides the deletions.
	// The caller's cancellation is still an error.
	aborted, err := loc.AbortUploads(ctx, loc.Join(""), cutoff)
	res.AbortedUploads = append(res.AbortedUploads, aborted...)
	if err != nil && errcode.Of(err) != errcode.Canceled {
		res.Warnings = append(res.Warnings, "incomplete multipart uploads not aborted: "+err.Error())
		err = nil
	}
	return res, err
}
