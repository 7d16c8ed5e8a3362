package s3

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
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
	// in the strict shape multipartOf describes.
	AbortUpload
)

// MaxInitiateBody bounds the CreateMultipartUpload answer the proxy reads to
// learn the upload's ID (S3's is a few hundred bytes).
const MaxInitiateBody = 64 << 10

// multipartOf returns the part an object request plays in a multipart
// upload and, for Complete and Abort, the upload's ID, from its method and
// parameters (the ignored ones left out).
//
// A DELETE is AbortUpload only in a strict form: uploadId (so spelled) with
// a non-empty value, and besides it only presigned-URL authentication
// (X-Amz-*) and aws-sdk-go-v2's x-id=AbortMultipartUpload. Anything else with
// an uploadId may be read by some store as DeleteObject, which destroys
// data, so it stays an object write.
func multipartOf(method string, q query) (Multipart, string) {
	switch method {
	case http.MethodPost:
		if q.has("uploads") {
			return CreateUpload, ""
		}
		if id, ok := q.get("uploadId"); ok && id != "" {
			return CompleteUpload, id
		}
	case http.MethodDelete:
		id, ok := q.get("uploadId")
		if !ok || id == "" {
			return NotMultipart, ""
		}
		for _, p := range q {
			switch {
			case p.name == "uploadId", p.name == "x-id" && p.value == "AbortMultipartUpload", presignParam(p.name):
			default:
				return NotMultipart, ""
			}
		}
		return AbortUpload, id
	}
	return NotMultipart, ""
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
