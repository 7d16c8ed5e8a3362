package proxy

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/fenceproxy/fenceproxy/fence"
)

// readToken reads the write's token from its header. In S3 mode a
// presigned URL carries it in the query instead, under the header's name
// (any case): read there when the header is absent; both present and
// different is fence.ErrTokenMalformed. Errors as fence.TokenFromValues.
func (p *Proxy) readToken(r *http.Request) (uint64, error) {
	values := r.Header[p.tokenHeader]
	if p.s3 == nil || r.URL.RawQuery == "" {
		return fence.TokenFromValues(values, p.tokenHeader)
	}
	query := queryValues(r.URL.RawQuery, p.opts.TokenHeader)
	switch {
	case len(query) == 0:
		return fence.TokenFromValues(values, p.tokenHeader)
	case len(values) == 0:
		return fence.TokenFromValues(query, p.opts.TokenHeader+" (query)")
	case !slices.Equal(values, query):
		return 0, fmt.Errorf("%w: the %s header and query parameter differ (%q, %q)", fence.ErrTokenMalformed, p.opts.TokenHeader, values, query)
	}
	return fence.TokenFromValues(values, p.tokenHeader)
}

// queryValues returns the values of the query parameter name (matched
// without regard to case) in a raw query, split on "&" only; a value that
// does not unescape is kept as sent, so that it fails as a token.
func queryValues(rawQuery, name string) []string {
	var out []string
	for part := range strings.SplitSeq(rawQuery, "&") {
		k, v, _ := strings.Cut(part, "=")
		if uk, err := url.QueryUnescape(k); err == nil {
			k = uk
		}
		if !strings.EqualFold(k, name) {
			continue
		}
		if uv, err := url.QueryUnescape(v); err == nil {
			v = uv
		}
		out = append(out, v)
	}
	return out
}

// tokenParam reports a query parameter that carries the fencing token or its
// signature (read by the proxy, ignored by the store).
func (p *Proxy) tokenParam(name string) bool {
	return strings.EqualFold(name, p.opts.TokenHeader) || strings.EqualFold(name, "X-Fencing-Token-Signature")
}
