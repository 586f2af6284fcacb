package table_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/croupier-data/croupier/core/store"
	"github.com/croupier-data/croupier/core/table"
)

// TestCleanupAbortsAbandonedUploads starts multipart uploads of data files
// and abandons them, as a writer killed while uploading does: Cleanup leaves
// them while they are younger than the grace period, then aborts those under
// the table's folder, and leaves another table's alone.
func TestCleanupAbortsAbandonedUploads(t *testing.T) {
	ctx := context.Background()
	s := startS3(t)
	uri := s.URI("bkt", "uploads/tbl")
	tb, err := table.Create(ctx, uri, idReader(0, 10), table.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tb.Close()
	loc, err := store.Open(ctx, s.URI("bkt", ""))
	if err != nil {
		t.Fatal(err)
	}
	defer loc.Close()
	var client *s3.Client
	if !loc.Bucket.As(&client) {
		t.Fatal("no S3 client")
	}
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
