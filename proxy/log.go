package proxy

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// logTarget is the request target for logs, with the values of credential
// query parameters replaced by REDACTED: logs are read more widely than the
// secrets they would leak.
func logTarget(r *http.Request) string {
	path, query, ok := strings.Cut(r.RequestURI, "?")
	if !ok {
		return r.RequestURI
	}
	parts := strings.Split(query, "&")
	for i, part := range parts {
		name, _, hasValue := strings.Cut(part, "=")
		if unescaped, err := url.QueryUnescape(name); err == nil {
			name = unescaped
		}
		if hasValue && slices.Contains(secretQueryParams, strings.ToLower(name)) {
			parts[i] = part[:strings.IndexByte(part, '=')+1] + "REDACTED"
		}
	}
	return path + "?" + strings.Join(parts, "&")
}

// secretQueryParams are query parameters that carry credentials: presigned S3
// URLs (SigV4 and SigV2) sign with them. Matched case-insensitively.
var secretQueryParams = []string{"x-amz-signature", "x-amz-credential", "x-amz-security-token", "signature", "awsaccesskeyid"}
