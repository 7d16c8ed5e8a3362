package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/fenceproxy/fenceproxy/s3"
)

// S3Gateway is S3 gateway mode's (S3 "resign") check of who signed a
// request and what its key may do, and its signing of what is forwarded
// with the store's credentials: the proxy is then the only holder of those.
// Package s3/gateway implements it.
type S3Gateway interface {
	// Verify checks r's SigV4 signature, in its Authorization header or
	// its presigned query, with the key's secret. Its errors refuse the
	// request with 403, or 400 for a malformed one: the status and S3 code
	// of the error's class in s3.Code's table (SignatureDoesNotMatch,
	// InvalidAccessKeyId, ...).
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
	// Valid reports whether the key still holds, nil if it does: an error
	// wrapping ErrKeyRevoked once the key was removed from the workers' keys,
	// its secret changed, or a grant the request was let through on went.
	// The proxy checks it before every read of the request's body and
	// before its last bytes go, when a write leaves the barrier, before it
	// signs, and before every read of the answer's body, so that a revoked
	// key's requests in flight end.
	Valid() error
	// PrepareBody replaces r's body, before anything reads it, when it is a
	// signed stream (aws-chunked with chunk signatures): each chunk verified
	// as it arrives, decoded and framed again for the store; a bad chunk
	// fails the body's read. Other bodies stay. Errors: a stream whose
	// framing headers do not make sense.
	PrepareBody(r *http.Request) error
	// Resign makes out (the outbound copy of the request) the store's, for
	// req (the request as S3 mode read it: bucket, decoded key, and whether
	// it creates an object), signed with the store's credentials; token,
	// when not "", is the write's fencing token (for the audit metadata).
	Resign(ctx context.Context, out *http.Request, req s3.Request, token string) error
}

// ErrKeyRevoked: in S3 gateway mode, the verified key was removed, its
// secret changed or a grant the request uses went while the request was in
// flight (403 AccessDenied, or the answer cut off): nothing more of it is
// sent or returned.
var ErrKeyRevoked = errors.New("the access key was revoked while its request was in flight")

// errNoGrant: the key is not granted what the request does.
type errNoGrant struct{ what string }

func (e errNoGrant) Error() string { return "the key is not granted " + e.what }

// gatewayCheck runs S3 gateway mode's checks on every request, reads too,
// before anything else reads its body: the signature (Verify), then the
// key's grants for what the request reads and writes, by the one reading of
// the request (ex.s3): its object or bucket, a listing's prefix, a
// DeleteObjects's keys each, a copy's source, a rename's source; then
// PrepareBody. It keeps the caller in ex for the signing. Errors wrap
// ErrForbidden (the signature) or s3.ErrAccessDenied (a grant).
func (p *Proxy) gatewayCheck(ex *exchange) error {
	r := ex.r
	caller, err := p.opts.Gateway.Verify(r)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrForbidden, err)
	}
	ex.keyID = caller.AccessKeyID() // for the log of a refusal below
	if err := p.checkGrants(ex, caller); err != nil {
		var ng errNoGrant
		if errors.As(err, &ng) {
			return fmt.Errorf("%w: %w", s3.ErrAccessDenied, err)
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
	ex.caller = caller
	return nil
}

// checkGrants checks what the request does, as S3 mode read it, against the
// caller's grants. An object is granted only if both its key as spelt and
// its alias class (s3.ObjectName) are: one store reads the one, another the
// other.
func (p *Proxy) checkGrants(ex *exchange, caller S3Caller) error {
	req := ex.s3
	bucket := req.Bucket
	object := func(b, key, alias string, write bool) bool {
		return caller.Allowed(b, key, write) && (alias == key || caller.Allowed(b, alias, write))
	}
	switch {
	case bucket == "":
		return errNoGrant{"a request to no bucket (ListBuckets)"}
	case req.Listing:
		if !caller.AllowedList(bucket, req.Prefix) {
			return errNoGrant{fmt.Sprintf("a listing of bucket %q below %q", bucket, req.Prefix)}
		}
	case req.Op.Writes == s3.Nothing && req.Key == "":
		if !caller.Allowed(bucket, "", false) {
			return errNoGrant{fmt.Sprintf("reads of bucket %q itself", bucket)}
		}
	case req.Op.Writes == s3.Nothing:
		if !object(bucket, req.Key, req.Object, false) {
			return errNoGrant{fmt.Sprintf("reads of %q in bucket %q", req.Key, bucket)}
		}
	case req.Op.Writes == s3.Objects && req.Key == "":
		if _, err := p.deleteResources(ex); err != nil {
			return err
		}
		for _, k := range ex.deleteKeys {
			if extra := s3.MarkerData(k); !object(bucket, k, s3.ObjectName(k), true) || extra != "" && !caller.Allowed(bucket, extra, true) {
				return errNoGrant{fmt.Sprintf("writes of %q in bucket %q", k, bucket)}
			}
		}
	case req.Key == "":
		if !caller.Allowed(bucket, "", true) {
			return errNoGrant{fmt.Sprintf("writes to bucket %q itself (create, delete, configure)", bucket)}
		}
	default:
		if !object(bucket, req.Key, req.Object, true) {
			return errNoGrant{fmt.Sprintf("writes of %q in bucket %q", req.Key, bucket)}
		}
	}
	// Every object the write changes besides: a rename's source, a
	// directory marker's data object.
	for _, o := range req.Changes() {
		if !object(o.Bucket, o.Key, o.Object, true) {
			return errNoGrant{fmt.Sprintf("writes of %q in bucket %q", o.Key, o.Bucket)}
		}
	}
	if src := req.Source; src != nil && !object(src.Bucket, src.Key, src.Object, false) {
		return errNoGrant{fmt.Sprintf("reads of the copy source %q in bucket %q", src.Key, src.Bucket)}
	}
	return nil
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
	if err := ex.caller.Valid(); err != nil {
		return nil, err // the key was removed: nothing is sent
	}
	token := ""
	if ex.fenced {
		token = ex.tokenText
	}
	if err := ex.caller.Resign(r.Context(), r, ex.s3, token); err != nil {
		return nil, err
	}
	resp, err := t.next.RoundTrip(r)
	if err == nil && resp.Body != nil && resp.Body != http.NoBody {
		// A download ends too when its key goes.
		resp.Body = &revocableBody{ReadCloser: resp.Body, valid: ex.caller.Valid}
	}
	return resp, err
}

// revocableBody is a response body that fails its reads once valid reports
// the request's key revoked (ErrKeyRevoked): ReverseProxy then aborts the
// answer, and the client gets no more of it.
type revocableBody struct {
	io.ReadCloser
	valid func() error
}

func (b *revocableBody) Read(p []byte) (int, error) {
	if err := b.valid(); err != nil {
		return 0, err
	}
	return b.ReadCloser.Read(p)
}
