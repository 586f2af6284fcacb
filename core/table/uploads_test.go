package table_test

import (
	"context"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/croupier-data/croupier/core/store"
	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/internal/tabletest"
)

// TestCleanupAbortsAbandonedUploads starts multipart uploads of data files
// and abandons them, as a writer killed while uploading does: Cleanup leaves
// them while they are younger than the grace period, then aborts those under
// the table's folder, and leaves another table's alone.
func TestCleanupAbortsAbandonedUploads(t *testing.T) {
	ctx := context.Background()
	s := startS3(t)
	uri := s.URI("bkt", "uploads/tbl")
	tb, err := table.Create(ctx, uri, tabletest.Reader(0, 10), table.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tb.Close()
	// The AWS SDK's client starts the uploads, as another writer would.
	u, err := url.Parse(s.URI("bkt", ""))
	if err != nil {
		t.Fatal(err)
	}
	client := s3.New(s3.Options{BaseEndpoint: aws.String(u.Query().Get("endpoint")), UsePathStyle: true,
		Region: "us-east-1", Credentials: aws.AnonymousCredentials{}})
	abandoned, other := "uploads/tbl/data/killed.parquet", "uploads/tbl2/data/killed.parquet"
	for _, key := range []string{abandoned, other} {
		up, err := client.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("bkt"), Key: aws.String(key)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := client.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("bkt"), Key: aws.String(key),
			UploadId: up.UploadId, PartNumber: aws.Int32(1), Body: strings.NewReader("part of a data file")}); err != nil {
			t.Fatal(err)
		}
	}
	uploads := func() []string {
		out, err := client.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String("bkt")})
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, u := range out.Uploads {
			keys = append(keys, aws.ToString(u.Key))
		}
		slices.Sort(keys)
		return keys
	}
	if got := uploads(); !slices.Equal(got, []string{abandoned, other}) {
		t.Fatalf("uploads %v before Cleanup", got)
	}

	res, err := table.Cleanup(ctx, uri, table.CleanupOptions{KeepLast: 1, Grace: time.Hour})
	if err != nil || len(res.AbortedUploads) != 0 {
		t.Fatalf("Cleanup within the grace period aborted %v, %v", res.AbortedUploads, err)
	}
	res, err = table.Cleanup(ctx, uri, table.CleanupOptions{KeepLast: 1, Grace: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"s3://bkt/" + abandoned}; !slices.Equal(res.AbortedUploads, want) {
		t.Fatalf("aborted %v, want %v", res.AbortedUploads, want)
	}
	if got := uploads(); !slices.Equal(got, []string{other}) {
		t.Fatalf("uploads %v after Cleanup, want only the other table's", got)
	}
}

// TestCleanupWithoutUploadListings: on a store that refuses to list
// multipart uploads (501 NotImplemented, as some S3-compatible stores
// answer), Cleanup still deletes the old version and the orphaned data
// file, reports them, and says in a warning that the uploads could not be
// listed; the refusal is final, not retried as the store being unavailable.
func TestCleanupWithoutUploadListings(t *testing.T) {
	ctx := context.Background()
	s := startS3(t)
	uri := s.URI("bkt", "nolist/tbl")
	tb, err := table.Create(ctx, uri, tabletest.Reader(0, 10), table.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tb.Close()
	if _, err := table.Append(ctx, uri, tabletest.Reader(10, 10), table.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	orphan := "nolist/tbl/data/orphan.parquet"
	if err := s.Put("bkt", orphan, []byte("left by a writer that died")); err != nil {
		t.Fatal(err)
	}
	s.RefuseUploadListings(true)
	res, err := table.Cleanup(ctx, uri, table.CleanupOptions{KeepLast: 1, Grace: time.Nanosecond})
	if err != nil {
		t.Fatalf("Cleanup failed, hiding what it deleted: %v", err)
	}
	if !slices.Equal(res.DeletedVersions, []int64{1}) || !slices.Equal(res.DeletedFiles, []string{"s3://bkt/" + orphan}) {
		t.Errorf("deleted versions %v and files %v, want [1] and the orphan", res.DeletedVersions, res.DeletedFiles)
	}
	if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "multipart uploads") ||
		!strings.Contains(res.Warnings[0], "NotImplemented") || strings.Contains(res.Warnings[0], "attempts") {
		t.Errorf("warnings %q, want one saying the uploads could not be listed, not retried", res.Warnings)
	}
	loc, err := store.Open(ctx, uri)
	if err != nil {
		t.Fatal(err)
	}
	defer loc.Close()
	if ok, err := loc.Exists(ctx, orphan); err != nil || ok {
		t.Errorf("orphan still there (%v) after Cleanup reported it deleted", err)
	}
	got, err := table.Open(ctx, uri)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	if got.Version() != "2" || got.NumRows() != 20 {
		t.Errorf("after Cleanup: version %s with %d rows, want 2 with 20", got.Version(), got.NumRows())
	}
}
