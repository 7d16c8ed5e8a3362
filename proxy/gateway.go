package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/fenceproxy/fenceproxy/fence"
	"github.com/fenceproxy/fenceproxy/s3"
)

// S3Gateway is S3 gateway mode's (S3 "resign") check of who signed a
// request and what its key may do, and its signing of what is forwarded
// with the store's credentials: the proxy is then the only holder of those.
// Package s3gateway implements it.
type S3Gateway interface {
	// Verify checks r's SigV4 signature, in its Authorization header or
	// its presigned query, with the key's secret. Its errors refuse the
	// request with 403; one with an S3Code() string method answers with
	// that code (SignatureDoesNotMatch, InvalidAccessKeyId, ...), one with
	// an HTTPStatus() int method of 400 with 400 (a malformed
	// Authorization, SigV2: S3's own status for those).
	Verify(r *http.Request) (S3Caller, error)
}

// S3Caller is a verified request's key: what it may do, and the signing of
// the request for the store.
type S3Caller interface {
	// Allowed reports whether the key may read (write false) or write key
	// (decoded; "" for the bucket itself) in bucket.
	Allowed(bucket, key string, write bool) bool
	// AllowedList reports whether the key may list bucket below prefix.
	AllowedList(bucket, prefix string) bool
	// AccessKeyID is the verified key's id (not secret: logs show it).
	AccessKeyID() string
	// PrepareBody replaces r's body, before anything reads it, when it is a
	// signed stream (aws-chunked with chunk signatures): each chunk verified
	// as it arrives, decoded and framed again for the store; a bad chunk
	// fails the body's read. Other bodies stay. Errors: a stream whose
	// framing headers do not make sense.
	PrepareBody(r *http.Request) error
	// Resign makes out (the outbound copy of the request) the store's,
	// for bucket and key (decoded), signed with the store's credentials;
	// token, when not "", is the write's fencing token (for the audit
	// metadata).
	Resign(ctx context.Context, out *http.Request, bucket, key, token string) error
}

// ErrAccessDenied: in S3 gateway mode, the verified key is not granted
// what the request does (403 AccessDenied).
var ErrAccessDenied = errors.New("access denied")

// errNoGrant: the key is not granted what the request does.
type errNoGrant struct{ what string }

func (e errNoGrant) Error() string  { return "the key is not granted " + e.what }
func (e errNoGrant) S3Code() string { return "AccessDenied" }

// listParams are the query parameters of the bucket listings: a GET of a
// bucket with no other parameter is a listing, checked by its prefix.
var listParams = map[string]bool{
	"list-type": true, "prefix": true, "delimiter": true, "max-keys": true, "continuation-token": true,
	"start-after": true, "fetch-owner": true, "encoding-type": true, "marker": true, "uploads": true,
	"key-marker": true, "upload-id-marker": true, "versions": true, "version-id-marker": true, "x-id": true,
	"max-uploads": true, "optional-object-attributes": true,
}

// gatewayCheck runs S3 gateway mode's checks on every request, reads too,
// before anything else reads its body: the signature (Verify), then the
// key's grants for what the request reads and writes (a DeleteObjects's
// keys each, a copy's source), then PrepareBody. It keeps the caller in ex
// for the signing. Errors wrap ErrForbidden (the signature) or
// ErrAccessDenied (a grant).
func (p *Proxy) gatewayCheck(ex *exchange) error {
	r := ex.r
	caller, err := p.opts.Gateway.Verify(r)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrForbidden, err)
	}
	ex.keyID = caller.AccessKeyID() // for the log of a refusal below
	bucket, key, err := splitS3Path(ex.path)
	if err != nil {
		return err
	}
	if bucket == "" {
		return fmt.Errorf("%w: %w", ErrAccessDenied, errNoGrant{"a request to no bucket (ListBuckets)"})
	}
	if err := p.checkGrants(ex, caller, bucket, key); err != nil {
		var ng errNoGrant
		if errors.As(err, &ng) {
			return fmt.Errorf("%w: %w", ErrAccessDenied, err)
		}
		return err // a DeleteObjects body that does not parse, ...
	}
	raw := r.Body
	if err := caller.PrepareBody(r); err != nil {
		return fmt.Errorf("%w: %w", errBadBody, err)
	}
	if r.Body != raw && raw != nil {
		ex.rawBody = raw
	}
	ex.caller, ex.bucket, ex.key = caller, bucket, key
	return nil
}

// checkGrants checks what the request does against the caller's grants, by
// the S3 catalogue's operation for each method it may run as.
func (p *Proxy) checkGrants(ex *exchange, caller S3Caller, bucket, key string) error {
	r := ex.r
	for _, m := range methods(r) {
		op := s3.Lookup(m, ex.path, r.URL.RawQuery, r.Header)
		switch {
		case op.Writes == s3.Nothing && key == "":
			query, err := url.ParseQuery(r.URL.RawQuery)
			if err != nil {
				return fmt.Errorf("%w: the query does not parse", errNoGrant{"this bucket read"})
			}
			listing := true
			for k := range query {
				if !listParams[k] && !isPresignParam(k) && !p.tokenParam(k) {
					listing = false
				}
			}
			if listing && !caller.AllowedList(bucket, query.Get("prefix")) {
				return errNoGrant{fmt.Sprintf("a listing of bucket %q below %q", bucket, query.Get("prefix"))}
			}
			if !listing && !caller.Allowed(bucket, "", false) {
				return errNoGrant{fmt.Sprintf("reads of bucket %q itself", bucket)}
			}
		case op.Writes == s3.Nothing:
			if !caller.Allowed(bucket, key, false) {
				return errNoGrant{fmt.Sprintf("reads of %q in bucket %q", key, bucket)}
			}
		case op.Writes == s3.Objects:
			resources, err := p.deleteKeys(ex)
			if err != nil {
				return err
			}
			for _, k := range resources {
				if !caller.Allowed(bucket, k, true) {
					return errNoGrant{fmt.Sprintf("writes of %q in bucket %q", k, bucket)}
				}
			}
		case key == "":
			if !caller.Allowed(bucket, key, true) {
				return errNoGrant{fmt.Sprintf("writes to bucket %q itself (create, delete, configure)", bucket)}
			}
		default:
			if !caller.Allowed(bucket, key, true) {
				return errNoGrant{fmt.Sprintf("writes of %q in bucket %q", key, bucket)}
			}
		}
	}
	if src := r.Header.Get("X-Amz-Copy-Source"); src != "" {
		sb, sk, err := copySource(src)
		if err != nil || !caller.Allowed(sb, sk, false) {
			return errNoGrant{fmt.Sprintf("reads of the copy source %q", src)}
		}
	}
	return nil
}

// deleteKeys returns a DeleteObjects's keys, reading its body once
// (deleteResources, which resolve then answers from the exchange).
func (p *Proxy) deleteKeys(ex *exchange) ([]string, error) {
	if _, err := p.deleteResources(ex); err != nil {
		return nil, err
	}
	return ex.deleteKeys, nil
}

// splitS3Path returns the bucket and the decoded key of an S3 path
// (/{bucket}/{key}, as Addressing returns it).
func splitS3Path(path string) (bucket, key string, err error) {
	bucket, rawKey, _ := strings.Cut(strings.TrimPrefix(path, "/"), "/")
	if bucket, err = url.PathUnescape(bucket); err != nil {
		return "", "", fmt.Errorf("%w: the bucket does not unescape", fence.ErrBadResource)
	}
	if key, err = url.PathUnescape(rawKey); err != nil {
		return "", "", fmt.Errorf("%w: the key does not unescape", fence.ErrBadResource)
	}
	return bucket, key, nil
}

// copySource splits an x-amz-copy-source value: [/]bucket/key[?versionId=v],
// URL-encoded.
func copySource(v string) (bucket, key string, err error) {
	v, _, _ = strings.Cut(strings.TrimPrefix(v, "/"), "?")
	v, err = url.PathUnescape(v)
	if err != nil {
		return "", "", err
	}
	bucket, key, ok := strings.Cut(v, "/")
	if !ok || bucket == "" || key == "" {
		return "", "", errors.New("not bucket/key")
	}
	return bucket, key, nil
}

// isPresignParam reports a query parameter of presigned-URL authentication.
func isPresignParam(name string) bool {
	return len(name) > 6 && strings.EqualFold(name[:6], "X-Amz-")
}

// gatewayTransport signs every request for the store (S3Caller.Resign)
// before the transport under it sends it; a request of no gateway exchange
// is refused, so that nothing unsigned by the proxy leaves in gateway mode.
type gatewayTransport struct{ next http.RoundTripper }

// errNotVerified: a request reached the store's transport without a
// verified caller (a bug, not a client's doing).
var errNotVerified = errors.New("proxy: a request without a verified S3 caller reached the gateway transport")

func (t gatewayTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	ex := exchangeOf(r)
	if ex == nil || ex.caller == nil {
		return nil, errNotVerified
	}
	token := ""
	if ex.fenced {
		token = ex.tokenText
	}
	if err := ex.caller.Resign(r.Context(), r, ex.bucket, ex.key, token); err != nil {
		return nil, err
	}
	return t.next.RoundTrip(r)
}
