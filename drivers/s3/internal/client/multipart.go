package client

import (
	"context"
	"encoding/xml"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"time"
)

// CreateMultipartUpload starts a multipart upload of bucket/key and returns
// its id. Of opts, IfNoneMatch is not sent here but with
// CompleteMultipartUpload, where S3 checks it.
func (c *Client) CreateMultipartUpload(ctx context.Context, bucket, key string, opts PutOptions) (uploadID string, err error) {
	var res struct {
		UploadID string `xml:"UploadId"`
	}
	r := request{method: http.MethodPost, op: "CreateMultipartUpload", bucket: bucket, key: key,
		query: url.Values{"uploads": {""}}, header: opts.header()}
	if err := c.doXML(ctx, r, &res); err != nil {
		return "", err
	}
	if res.UploadID == "" {
		return "", fmt.Errorf("s3 CreateMultipartUpload %s/%s: an answer without an upload id", bucket, key)
	}
	return res.UploadID, nil
}

// UploadPart uploads body as part number part (1 to 10000) of the upload and
// returns the part's ETag.
func (c *Client) UploadPart(ctx context.Context, bucket, key, uploadID string, part int, body []byte) (etag string, err error) {
	r := request{method: http.MethodPut, op: "UploadPart", bucket: bucket, key: key, body: body,
		query:  url.Values{"partNumber": {strconv.Itoa(part)}, "uploadId": {uploadID}},
		header: http.Header{"Content-Md5": {contentMD5(body)}}}
	resp, err := c.send(ctx, r)
	if err != nil {
		return "", err
	}
	etag = resp.Header.Get("ETag")
	if etag == "" {
		return "", fmt.Errorf("s3 UploadPart %s/%s: an answer without an ETag", bucket, key)
	}
	return etag, nil
}

// Part is an uploaded part of a multipart upload.
type Part struct {
	Number int
	ETag   string
}

// CompleteMultipartUpload makes the upload's parts the object, in the order
// of their numbers. If ifNoneMatch, it fails with 412 Precondition Failed if
// the key exists. S3 may report a failure in a 200 answer: it is returned
// as the *Error it is.
func (c *Client) CompleteMultipartUpload(ctx context.Context, bucket, key, uploadID string, parts []Part, ifNoneMatch bool) error {
	type xmlPart struct {
		PartNumber int
		ETag       string
	}
	doc := struct {
		XMLName xml.Name  `xml:"CompleteMultipartUpload"`
		Parts   []xmlPart `xml:"Part"`
	}{}
	for _, p := range parts {
		doc.Parts = append(doc.Parts, xmlPart{p.Number, p.ETag})
	}
	sort.Slice(doc.Parts, func(i, j int) bool { return doc.Parts[i].PartNumber < doc.Parts[j].PartNumber })
	body, err := xml.Marshal(doc)
	if err != nil {
		return fmt.Errorf("s3 CompleteMultipartUpload %s/%s: %w", bucket, key, err)
	}
	h := http.Header{"Content-Type": {"application/xml"}, "Content-Md5": {contentMD5(body)}}
	if ifNoneMatch {
		h.Set("If-None-Match", "*")
	}
	var res struct{ ETag string }
	return c.doXML(ctx, request{method: http.MethodPost, op: "CompleteMultipartUpload", bucket: bucket, key: key,
		query: url.Values{"uploadId": {uploadID}}, header: h, body: body}, &res)
}

// AbortMultipartUpload ends the upload and deletes its parts.
func (c *Client) AbortMultipartUpload(ctx context.Context, bucket, key, uploadID string) error {
	_, err := c.send(ctx, request{method: http.MethodDelete, op: "AbortMultipartUpload", bucket: bucket, key: key,
		query: url.Values{"uploadId": {uploadID}}})
	return err
}

// Upload is a multipart upload in progress.
type Upload struct {
	Key       string
	UploadID  string
	Initiated time.Time
}

// ListUploads returns a page of the multipart uploads in progress in bucket
// whose keys start with prefix (ListMultipartUploads), from the markers
// that an earlier page returned ("" for the first page), and the markers
// of the next page; truncated says whether there is one.
func (c *Client) ListUploads(ctx context.Context, bucket, prefix, keyMarker, uploadIDMarker string) (ups []Upload, nextKey, nextUploadID string, truncated bool, err error) {
	q := url.Values{"uploads": {""}}
	for k, v := range map[string]string{"prefix": prefix, "key-marker": keyMarker, "upload-id-marker": uploadIDMarker} {
		if v != "" {
			q.Set(k, v)
		}
	}
	var res struct {
		Uploads []struct {
			Key       string
			UploadID  string `xml:"UploadId"`
			Initiated time.Time
		} `xml:"Upload"`
		IsTruncated        bool
		NextKeyMarker      string
		NextUploadIDMarker string `xml:"NextUploadIdMarker"`
	}
	if err := c.doXML(ctx, request{method: http.MethodGet, op: "ListMultipartUploads", bucket: bucket, query: q}, &res); err != nil {
		return nil, "", "", false, err
	}
	for _, u := range res.Uploads {
		ups = append(ups, Upload{Key: u.Key, UploadID: u.UploadID, Initiated: u.Initiated})
	}
	return ups, res.NextKeyMarker, res.NextUploadIDMarker, res.IsTruncated, nil
}
