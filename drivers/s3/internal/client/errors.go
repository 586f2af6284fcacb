package client

import (
	"encoding/xml"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// Error is an error S3 answered: a status outside 2xx, or an error document
// in a 200 answer (CompleteMultipartUpload sends those).
type Error struct {
	// StatusCode is the HTTP status of the answer.
	StatusCode int
	// Code is S3's error code (NoSuchKey, PreconditionFailed, SlowDown, …);
	// for an answer without an error document (HEAD's), one made of the
	// status's text (NotFound).
	Code string
	// Message is S3's description of the error, if it sent one.
	Message string
	// RequestID is the x-amz-request-id of the answer, which AWS support
	// asks for.
	RequestID string
	// Op is the S3 operation (GetObject, PutObject, …).
	Op string
	// Bucket and Key name what the request was about; Key is "" for
	// requests about the bucket.
	Bucket, Key string
}

// Error returns, for instance, "s3 GetObject bkt/key: 412
// PreconditionFailed: At least one of the pre-conditions you specified did
// not hold".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("s3 " + e.Op + " " + e.Bucket)
	if e.Key != "" {
		b.WriteString("/" + e.Key)
	}
	b.WriteString(": ")
	if e.StatusCode/100 == 2 {
		b.WriteString(e.Code + " in a " + strconv.Itoa(e.StatusCode) + " answer")
	} else {
		b.WriteString(strconv.Itoa(e.StatusCode) + " " + e.Code)
	}
	if e.Message != "" {
		b.WriteString(": " + e.Message)
	}
	if e.RequestID != "" {
		b.WriteString(" (request id " + e.RequestID + ")")
	}
	return b.String()
}

// HTTPStatusCode returns the HTTP status of the error, by which callers
// classify it. That of an error document in a 200 answer is the status S3
// gives the error elsewhere: 503 for SlowDown and ServiceUnavailable, else
// 500, since S3 sends those for failures of its own while it processes the
// request.
func (e *Error) HTTPStatusCode() int {
	if e.StatusCode/100 != 2 {
		return e.StatusCode
	}
	if e.Code == "SlowDown" || e.Code == "ServiceUnavailable" {
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// errorDocument is S3's XML error body.
type errorDocument struct {
	XMLName   xml.Name
	Code      string `xml:"Code"`
	Message   string `xml:"Message"`
	RequestID string `xml:"RequestId"`
}

// maxErrorBody bounds how much of an error answer's body is read.
const maxErrorBody = 64 << 10

// responseError returns the *Error of resp, a non-2xx answer to op about
// bucket/key, reading its error document if it has one. It closes the body.
func responseError(resp *http.Response, op, bucket, key string) *Error {
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	e := &Error{StatusCode: resp.StatusCode, Op: op, Bucket: bucket, Key: key,
		RequestID: resp.Header.Get("X-Amz-Request-Id")}
	var doc errorDocument
	if xml.Unmarshal(body, &doc) == nil && doc.XMLName.Local == "Error" {
		e.Code, e.Message = doc.Code, doc.Message
		if e.RequestID == "" {
			e.RequestID = doc.RequestID
		}
	}
	if e.Code == "" {
		e.Code = strings.ReplaceAll(http.StatusText(resp.StatusCode), " ", "")
	}
	if region := resp.Header.Get("X-Amz-Bucket-Region"); region != "" && resp.StatusCode/100 == 3 {
		if e.Message == "" {
			e.Message = "the bucket is in region " + region
		} else {
			e.Message += " (the bucket is in region " + region + ")"
		}
	}
	if e.Code == "" {
		e.Code = "Status" + strconv.Itoa(resp.StatusCode)
	}
	return e
}

// CredentialsError says that no credentials were found to sign requests
// with, and where they were looked for.
type CredentialsError struct {
	// Looked lists the places looked at, each with what was found there.
	Looked []string
}

// Error lists the places looked at and suggests anonymous requests for a
// public bucket.
func (e *CredentialsError) Error() string {
	return "no AWS credentials found (looked at " + strings.Join(e.Looked, "; ") +
		"); for a public bucket, anonymous=true sends requests unsigned"
}
