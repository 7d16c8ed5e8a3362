package s3

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// Multipart is the part a request plays in an S3 multipart upload, as far as
// the proxy's upload records go.
type Multipart int

const (
	// NotMultipart: any other request (parts, ListParts and the rest are
	// plain object writes or reads).
	NotMultipart Multipart = iota
	// CreateUpload: CreateMultipartUpload, POST /{bucket}/{key}?uploads;
	// its answer names the upload.
	CreateUpload
	// CompleteUpload: CompleteMultipartUpload, POST
	// /{bucket}/{key}?uploadId=ID.
	CompleteUpload
	// AbortUpload: AbortMultipartUpload, DELETE /{bucket}/{key}?uploadId=ID,
	// in the strict shape MultipartOf describes.
	AbortUpload
)

// MaxInitiateBody bounds the CreateMultipartUpload answer the proxy reads to
// learn the upload's ID (S3's is a few hundred bytes).
const MaxInitiateBody = 64 << 10

// MultipartOf returns the part a request plays in a multipart upload and,
// for Complete and Abort, the upload's ID. method is the request's (a
// method-override header is the caller's to rule out), path is /{bucket}/{key}
// as Addressing returns it, rawQuery the query as sent. ignored reports query
// parameters that the store does not read (the fencing token's); nil: none.
//
// A DELETE is AbortUpload only in a strict form: uploadId (so spelled) once
// with a non-empty value, and besides it only presigned-URL authentication
// (X-Amz-*), aws-sdk-go-v2's x-id=AbortMultipartUpload and the ignored
// parameters; "&"-separated, no ";". Anything else with an uploadId may be
// read by some store as DeleteObject, which destroys data, so it stays an
// object write.
func MultipartOf(method, path, rawQuery string, ignored func(name string) bool) (Multipart, string) {
	if !strings.Contains(strings.TrimPrefix(path, "/"), "/") || rawQuery == "" {
		return NotMultipart, ""
	}
	switch method {
	case http.MethodPost:
		if hasParam(rawQuery, "uploads") {
			return CreateUpload, ""
		}
		if id, ok := uploadID(rawQuery, nil); ok {
			return CompleteUpload, id
		}
	case http.MethodDelete:
		if ignored == nil {
			ignored = func(string) bool { return false }
		}
		if id, ok := uploadID(rawQuery, ignored); ok {
			return AbortUpload, id
		}
	}
	return NotMultipart, ""
}

// uploadID returns the uploadId of a raw query. With ignored not nil (an
// abort) the query must have MultipartOf's strict form; else it is the
// first uploadId, whatever surrounds it.
func uploadID(rawQuery string, ignored func(string) bool) (string, bool) {
	strict := ignored != nil
	if strict && strings.Contains(rawQuery, ";") {
		return "", false
	}
	var id string
	n := 0
	for part := range strings.SplitSeq(rawQuery, "&") {
		k, v, _ := strings.Cut(part, "=")
		name, err := url.QueryUnescape(k)
		if err != nil {
			return "", false
		}
		value, err := url.QueryUnescape(v)
		if err != nil {
			return "", false
		}
		switch {
		case name == "uploadId":
			if n++; n == 1 {
				id = value
			}
		case !strict:
		case name == "x-id" && value == "AbortMultipartUpload",
			len(name) > 6 && strings.EqualFold(name[:6], "X-Amz-"),
			ignored(name):
		default:
			return "", false
		}
	}
	if id == "" || (strict && n != 1) {
		return "", false
	}
	return id, true
}

// ErrNoUploadID: a CreateMultipartUpload answer without an upload ID.
var ErrNoUploadID = errors.New("s3: no UploadId in the CreateMultipartUpload answer")

// InitiatedUpload returns the UploadId of a CreateMultipartUpload answer's
// body (InitiateMultipartUploadResult), read to at most MaxInitiateBody
// bytes. It returns the bytes it read too, so that the caller can pass them
// on. Errors: a body longer than the limit, not XML, of another element, or
// without an UploadId (ErrNoUploadID); read errors.
func InitiatedUpload(body io.Reader) (id string, read []byte, err error) {
	read, err = io.ReadAll(io.LimitReader(body, MaxInitiateBody+1))
	if err != nil {
		return "", read, err
	}
	if len(read) > MaxInitiateBody {
		return "", read, fmt.Errorf("s3: CreateMultipartUpload answer longer than %d bytes", MaxInitiateBody)
	}
	var res struct {
		XMLName  xml.Name
		UploadID string `xml:"UploadId"`
	}
	if err := xml.NewDecoder(bytes.NewReader(read)).Decode(&res); err != nil {
		return "", read, fmt.Errorf("s3: CreateMultipartUpload answer: %w", err)
	}
	if res.XMLName.Local != "InitiateMultipartUploadResult" {
		return "", read, fmt.Errorf("s3: CreateMultipartUpload answer is <%s>, not <InitiateMultipartUploadResult>", res.XMLName.Local)
	}
	if res.UploadID == "" {
		return "", read, ErrNoUploadID
	}
	return res.UploadID, read, nil
}
