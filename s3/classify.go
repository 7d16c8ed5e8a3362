// Package s3 reads S3 REST requests as S3 stores read them: the addressing
// (path and virtual-hosted style), the catalogue of operations, and
// Classify, which decides once, from the bytes a store will read, what a
// request does (Request: the operation, the bucket, the objects it changes
// or reads) or refuses a spelling that stores could read otherwise. Below
// it: the signature (sigv4), the chunked bodies (awschunked), the gateway's
// worker keys (keyring), the re-signing for the store (resign) and the
// gateway that puts them together (gateway). It also holds the one table of
// S3 error codes of the proxy's answers (errors.go).
package s3

import (
	"net/http"
	"net/url"
	"strings"
)

// Kind is what a request to a backend that may speak S3 writes, as the
// generic mode (FENCEPROXY_S3=off) sees it: the path, or keys in the body.
type Kind int

const (
	// Path: the request writes (at most) what its path names, the object or
	// the bucket: PutObject, CopyObject (fenced on its destination, the path;
	// the x-amz-copy-source is only read), UploadPart, DeleteObject, the
	// multipart calls, and every non-S3 request.
	Path Kind = iota
	// BulkDelete: DeleteObjects (POST /{bucket}?delete) names its keys in
	// the XML body.
	BulkDelete
	// FormUpload: a browser upload (POST Object: a multipart/form-data POST
	// to a bucket) names its key in a form field.
	FormUpload
)

// InBody returns what a request writes, given whether it runs as POST (its
// method, or a method-override header's), its raw query, its header, and
// its resource key (bucket first). S3 mode reads requests with Classify.
func InBody(posts bool, rawQuery string, header http.Header, key string) Kind {
	if !posts {
		return Path
	}
	if hasParam(rawQuery, "delete") {
		return BulkDelete
	}
	ct := strings.ToLower(header.Get("Content-Type"))
	if strings.HasPrefix(ct, "multipart/form-data") && !strings.Contains(strings.TrimSuffix(key, "/"), "/") {
		return FormUpload
	}
	return Path
}

// hasParam reports whether a raw query has the parameter name, splitting on
// both "&" and ";" since backends disagree on the latter, and matching case
// insensitively (S3 is case-sensitive; some backends are not).
func hasParam(rawQuery, name string) bool {
	for part := range strings.FieldsFuncSeq(rawQuery, func(r rune) bool { return r == '&' || r == ';' }) {
		n, _, _ := strings.Cut(part, "=")
		if unescaped, err := url.QueryUnescape(n); err == nil {
			n = unescaped
		}
		if strings.EqualFold(n, name) {
			return true
		}
	}
	return false
}
