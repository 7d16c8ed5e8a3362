// Package resign makes a worker's verified S3 request the store's: it
// addresses the store's endpoint, keeps only what the worker signed (and the
// framing), and signs the result with the proxy's own credentials (its own
// SigV4 signer, identical in output to aws-sdk-go-v2's v4 signer). It is the
// outbound half of gateway mode (FENCEPROXY_S3=resign), where the proxy is
// the only holder of the store's credentials; the inbound half verifies the
// worker's signature first.
package resign

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// presignPrefix starts the query parameters of presigned-URL authentication
// (X-Amz-Algorithm, -Credential, -Signature, -Content-Sha256, ...): the
// worker's, which the store must never see; no S3 operation has another
// parameter so named.
const presignPrefix = "x-amz-"

// neverForwarded are header names (lower case) that no outbound request
// carries from the worker, signed or not: its credentials, what the signer
// sets, and what the proxy itself reads.
var neverForwarded = map[string]bool{
	"authorization": true, "x-amz-security-token": true, "x-amz-date": true, "x-amz-content-sha256": true,
	"host": true, "forwarded": true, "x-forwarded-for": true, "x-forwarded-host": true, "x-forwarded-proto": true,
	"connection": true, "keep-alive": true, "proxy-authorization": true, "te": true, "upgrade": true,
}

// framing are header names (lower case) forwarded whether signed or not:
// how the body is framed, which the store needs to read it. Of an unsigned
// Content-Encoding only the aws-chunked coding of a streaming payload
// (STREAMING-*) is framing; any other coding (gzip), and aws-chunked on any
// other payload, would be stored as the object's metadata, so it is dropped.
var framing = []string{"content-encoding", "x-amz-decoded-content-length", "x-amz-trailer", "expect"}

// awsChunked is the Content-Encoding of an aws-chunked (streaming) body.
const awsChunked = "aws-chunked"

// unsignedOutbound are headers sent to the store without being signed:
// Google Cloud Storage's XML API rewrites Accept-Encoding on the way in, so a
// signature over it fails there.
var unsignedOutbound = [...]string{"Accept-Encoding"}

// Signer re-signs requests for one store. Safe for concurrent use.
type Signer struct {
	// Endpoint is the store's base URL (FENCEPROXY_UPSTREAM): scheme and
	// host; a path in it is joined in front of every request's.
	Endpoint *url.URL
	// Region is the store's signing region (FENCEPROXY_S3_REGION): us-east-1
	// or the bucket's region for AWS, "auto" for Cloudflare R2.
	Region string
	// VirtualHosted addresses the store as {bucket}.{endpoint host}; false:
	// path style, {endpoint}/{bucket}/{key}.
	VirtualHosted bool
	// Credentials are the store's (the AWS default chain, refreshed by its
	// cache). Required.
	Credentials aws.CredentialsProvider
	// Dropped reports further header names (lower case) never forwarded:
	// the fencing token and its signature. nil: none.
	Dropped func(name string) bool
	// Now is the signing time; nil: time.Now.
	Now func() time.Time

	v4 v4Signer
	// signHTTP replaces v4.sign when set: the tests' reference signer
	// (aws-sdk-go-v2's SignHTTP).
	signHTTP func(ctx context.Context, creds aws.Credentials, r *http.Request, payloadHash, region string, t time.Time) error
}

// Request is what the inbound verification found out about a request.
type Request struct {
	Bucket, Key   string   // decoded; Key "" for a request to the bucket
	SignedHeaders []string // the worker's signed header names, lower case
	PayloadHash   string   // the worker's x-amz-content-sha256, re-signed as is
	// Header holds headers the proxy adds itself (signed): the audit
	// metadata x-amz-meta-fencing-token. nil: none.
	Header http.Header
}

// ErrBucket: a bucket name the store's address cannot carry.
var ErrBucket = errors.New("resign: bad bucket name")

// hostLabel reports a bucket name that is a valid part of a host name:
// lower-case letters, digits, '-' and '.', starting and ending with a letter
// or digit, 3 to 63 bytes (S3's bucket naming rules).
func hostLabel(b string) bool {
	if len(b) < 3 || len(b) > 63 {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return false
		}
	}
	return b[0] != '-' && b[0] != '.' && b[len(b)-1] != '-' && b[len(b)-1] != '.'
}

// ErrQuery: a query that does not parse or repeats a parameter (the store
// would read it otherwise than it was verified and checked).
var ErrQuery = errors.New("resign: query does not parse or repeats a parameter")

// Rewrite makes out, a copy of the worker's request (as
// httputil.ProxyRequest.Out), the store's request for in: the store's URL in
// the configured style with the key escaped as S3 canonicalises it, the
// query without presigned-URL authentication or dropped parameters, only the
// headers the worker signed plus the framing (never its credentials, the
// fencing headers, X-Forwarded-*, an unsigned Content-Encoding other than
// aws-chunked, or HTTP trailers), then signed for the store with the
// payload hash the worker signed. The body is left as it is. Errors:
// ErrQuery (also for a repeated parameter); ErrBucket; the credentials
// provider's; ErrHeaderCase (two header names that differ only in case);
// after an error out must not be sent.
func (s *Signer) Rewrite(ctx context.Context, out *http.Request, in Request) error {
	query, err := s.query(out.URL.RawQuery)
	if err != nil {
		return err
	}
	u := *s.Endpoint
	base := strings.TrimSuffix(u.EscapedPath(), "/")
	var path string // each in one concatenation
	switch {
	case s.VirtualHosted:
		if !hostLabel(in.Bucket) {
			return fmt.Errorf("%w: bucket %q cannot be a host name label (virtual-hosted style)", ErrBucket, in.Bucket)
		}
		u.Host = in.Bucket + "." + u.Host
		path = base + "/" + escapePath(in.Key) // "/" for the bucket
	case in.Key != "":
		path = base + "/" + escapePath(in.Bucket) + "/" + escapePath(in.Key)
	default:
		path = base + "/" + escapePath(in.Bucket)
	}
	// escapePath's output always unescapes, and is what EscapedPath then sends.
	p, _ := url.PathUnescape(path)
	u.Opaque, u.Path, u.RawPath, u.RawQuery = "", p, path, query
	out.URL, out.Host = &u, u.Host

	// out.Header is the outbound copy: filtered in place.
	h := out.Header
	if h == nil {
		h = http.Header{}
	}
	var unsigned [len(unsignedOutbound)]struct {
		v  []string
		ok bool
	}
	for i, k := range unsignedOutbound {
		unsigned[i].v, unsigned[i].ok = h[k]
	}
	signedCE := false
	for k := range h {
		signed, keep := s.forwarded(k, in.SignedHeaders)
		switch {
		case keep && asciiEqualFold(k, "content-encoding") && k != "Content-Encoding":
			delete(h, k) // not as net/http keys it: checked under one name only
		case !keep:
			delete(h, k)
		case k == "Content-Encoding":
			signedCE = signed
		}
	}
	if ce, ok := h["Content-Encoding"]; ok && !signedCE {
		delete(h, "Content-Encoding")
		// aws-chunked is framing only of a streaming payload; on any other
		// the store would keep it as the object's Content-Encoding, which
		// the worker did not sign.
		if !strings.HasPrefix(in.PayloadHash, "STREAMING-") {
			ce = nil
		}
		for _, v := range ce {
			for c := range strings.SplitSeq(v, ",") {
				if strings.EqualFold(strings.TrimSpace(c), awsChunked) {
					h.Set("Content-Encoding", awsChunked)
				}
			}
		}
	}
	for k, v := range in.Header {
		h[k] = v
	}
	h.Set("X-Amz-Content-Sha256", in.PayloadHash)
	out.Header = h
	// HTTP trailers are never signed (S3's trailers travel inside an
	// aws-chunked body).
	out.Trailer = nil

	creds, err := s.Credentials.Retrieve(ctx)
	if err != nil {
		return fmt.Errorf("resign: the store's credentials: %w", err)
	}
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	// S3 signs the path as sent, escaped once (escapePath), not twice.
	if s.signHTTP != nil {
		if err := s.signHTTP(ctx, creds, out, in.PayloadHash, s.Region, now()); err != nil {
			return fmt.Errorf("resign: signing: %w", err)
		}
	} else if err := s.v4.sign(out, creds, in.PayloadHash, "s3", s.Region, now()); err != nil {
		return err
	}
	for i, k := range unsignedOutbound {
		if unsigned[i].ok {
			out.Header[k] = unsigned[i].v
		}
	}
	return nil
}

// forwarded reports whether the outbound header name (as the map keys it)
// goes to the store, and whether because the worker signed it (else it is
// framing). Names compare in ASCII case only.
func (s *Signer) forwarded(name string, signedHeaders []string) (signed, keep bool) {
	lower := ""
	for _, n := range signedHeaders {
		if asciiEqualFold(n, name) {
			lower, signed = n, true
			break
		}
	}
	if lower == "" {
		for _, n := range framing {
			if asciiEqualFold(n, name) {
				lower = n
				break
			}
		}
	}
	switch {
	case lower == "", neverForwarded[lower], s.Dropped != nil && s.Dropped(lower):
		return false, false
	case slices.ContainsFunc(unsignedOutbound[:], func(h string) bool { return asciiEqualFold(h, lower) }):
		return false, false // goes back on after signing
	}
	return signed, true
}

// asciiEqualFold is strings.EqualFold for ASCII only: no other letter (the
// Kelvin sign) folds into a header name.
func asciiEqualFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// query returns rawQuery without presigned-URL authentication and the
// dropped parameters, encoded as SigV4 canonicalises queries.
func (s *Signer) query(rawQuery string) (string, error) {
	if rawQuery == "" {
		return "", nil
	}
	if strings.Contains(rawQuery, ";") {
		return "", ErrQuery
	}
	values, err := url.ParseQuery(rawQuery)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrQuery, err)
	}
	for k, v := range values {
		// The signer sorts a repeated parameter's values, and stores differ
		// in which one they read: prefix=jobs/&prefix= was checked as
		// "jobs/" and listed by versitygw as "" (the whole bucket).
		if len(v) > 1 {
			return "", fmt.Errorf("%w: parameter %.60q repeated", ErrQuery, k)
		}
		if len(k) >= len(presignPrefix) && strings.EqualFold(k[:len(presignPrefix)], presignPrefix) {
			delete(values, k)
		}
		if s.Dropped != nil && s.Dropped(strings.ToLower(k)) {
			delete(values, k)
		}
	}
	// url.Values.Encode writes a space as "+", which S3 reads as a space in a
	// query but SigV4's canonical form spells %20.
	return strings.ReplaceAll(values.Encode(), "+", "%20"), nil
}

// escapePath escapes a bucket or key as S3's canonical URI does: every byte
// but the unreserved ones (A-Z a-z 0-9 - . _ ~) and "/" as %XX.
func escapePath(p string) string {
	if !strings.ContainsFunc(p, func(r rune) bool { return !unreserved(r) }) {
		return p
	}
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		c := p[i]
		if unreserved(rune(c)) {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

// unreserved reports a byte that S3's canonical URI leaves as it is.
func unreserved(c rune) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~' || c == '/'
}
