// Package s3 tells what an S3 REST request writes, as the fence sees it: one
// table of request shapes whose targets are not the request path alone. The
// proxy fences a write on its path's resource; a shape this classifier names
// needs more (its keys are in the body) or is refused.
package s3

import (
	"net/http"
	"net/url"
	"strings"
)

// Kind is what an S3 request writes, as far as the fence is concerned.
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

// Classify returns what a request writes, given whether it runs as POST (its
// method, or a method-override header's), its raw query, its header, and
// its resource key (bucket first).
func Classify(posts bool, rawQuery string, header http.Header, key string) Kind {
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
