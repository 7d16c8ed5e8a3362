// Package s3gateway is fenceproxy's S3 gateway mode (FENCEPROXY_S3=resign):
// workers sign their requests with keys of the proxy (s3keys), the proxy
// verifies each signature (sigv4) and grant, and signs what it forwards with
// the store's own credentials (s3resign), so that it is the only holder of
// those. It implements proxy.S3Gateway.
package s3gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/fenceproxy/fenceproxy/awschunked"
	"github.com/fenceproxy/fenceproxy/proxy"
	"github.com/fenceproxy/fenceproxy/s3keys"
	"github.com/fenceproxy/fenceproxy/s3resign"
	"github.com/fenceproxy/fenceproxy/sigv4"
)

// Keys are the workers' keys: *s3keys.Store (reloaded from its file).
type Keys interface {
	Keys() *s3keys.Keys
}

// Options configures a Gateway. Keys, Region and Signer are required.
type Options struct {
	Keys   Keys             // the workers' keys and grants (FENCEPROXY_S3_CREDENTIALS_FILE)
	Region string           // the region workers sign for (FENCEPROXY_S3_REGION)
	Signer *s3resign.Signer // signs for the store
	// TokenMetadata adds x-amz-meta-fencing-token: <token> to PutObject,
	// CopyObject and CreateMultipartUpload (FENCEPROXY_S3_TOKEN_METADATA).
	TokenMetadata bool
	Now           func() time.Time // nil: time.Now
}

// Gateway verifies workers and signs for the store. Safe for concurrent use.
type Gateway struct {
	opts Options
}

// New returns the gateway of opts; it fails naming a missing option.
func New(opts Options) (*Gateway, error) {
	switch {
	case opts.Keys == nil:
		return nil, errors.New("s3gateway: no worker keys")
	case opts.Region == "":
		return nil, errors.New("s3gateway: no region")
	case opts.Signer == nil:
		return nil, errors.New("s3gateway: no signer for the store")
	}
	return &Gateway{opts: opts}, nil
}

// codedError carries the S3 code of a verification failure for the proxy's
// answer (proxy.S3Gateway's contract).
type codedError struct{ err error }

func (e codedError) Error() string   { return e.err.Error() }
func (e codedError) Unwrap() error   { return e.err }
func (e codedError) S3Code() string  { return sigv4.Code(e.err) }
func (e codedError) HTTPStatus() int { return sigv4.Status(e.err) }

// Verify checks r's SigV4 signature with the key's secret, from the keys in
// use now (one version for the whole request).
func (g *Gateway) Verify(r *http.Request) (proxy.S3Caller, error) {
	keys := g.opts.Keys.Keys()
	v := sigv4.Verifier{Secrets: keys, Region: g.opts.Region, Now: g.opts.Now}
	auth, err := v.Verify(r)
	if err != nil {
		return nil, codedError{err}
	}
	return &caller{g: g, keys: keys, auth: auth}, nil
}

// caller is one verified request's key.
type caller struct {
	g    *Gateway
	keys *s3keys.Keys
	auth *sigv4.Auth
	// A signed stream re-framed for the store: its headers.
	reframed http.Header
}

func (c *caller) AccessKeyID() string { return c.auth.AccessKeyID }

func (c *caller) Allowed(bucket, key string, write bool) bool {
	return c.keys.Allowed(c.auth.AccessKeyID, bucket, key, write)
}

func (c *caller) AllowedList(bucket, prefix string) bool {
	return c.keys.AllowedList(c.auth.AccessKeyID, bucket, prefix)
}

// checksumTrailer is the trailer the store gets for a signed stream that
// had none: the re-framed body is not signed, so a checksum checks it.
const checksumTrailer = "x-amz-checksum-crc32"

// PrepareBody decodes a signed aws-chunked body as it arrives (each chunk's
// signature checked before its bytes go on) and frames it again as
// STREAMING-UNSIGNED-PAYLOAD-TRAILER with a checksum trailer, streaming.
func (c *caller) PrepareBody(r *http.Request) error {
	form := awschunked.Form(c.auth.PayloadHash)
	if form != awschunked.SignedPayload && form != awschunked.SignedPayloadTrailer {
		return nil
	}
	n, err := strconv.ParseInt(r.Header.Get("X-Amz-Decoded-Content-Length"), 10, 64)
	if err != nil || n < 0 {
		return fmt.Errorf("s3gateway: a signed stream needs x-amz-decoded-content-length, got %q", r.Header.Get("X-Amz-Decoded-Content-Length"))
	}
	var trailers []string
	trailer := checksumTrailer
	if form == awschunked.SignedPayloadTrailer {
		t := strings.ToLower(strings.TrimSpace(r.Header.Get("X-Amz-Trailer")))
		trailers, trailer = []string{t}, t
	}
	body := io.Reader(http.NoBody)
	if r.Body != nil {
		body = r.Body
	}
	dec := awschunked.NewReader(body, awschunked.Options{Form: form, SigningKey: c.auth.SigningKey,
		Date: c.auth.Date.UTC().Format("20060102T150405Z"), Scope: c.auth.Scope, Seed: c.auth.Signature,
		DecodedLength: n, Trailers: trailers})
	enc, err := awschunked.NewUnsignedTrailerEncoder(dec, n, trailer, 0)
	if err != nil {
		return fmt.Errorf("s3gateway: %w", err)
	}
	closer := r.Body
	r.Body = struct {
		io.Reader
		io.Closer
	}{enc, closerOf(closer)}
	r.ContentLength = enc.ContentLength()
	r.TransferEncoding = nil
	c.reframed = enc.Header()
	return nil
}

func closerOf(c io.Closer) io.Closer {
	if c == nil {
		return io.NopCloser(nil)
	}
	return c
}

// Resign signs out for the store: only the worker's signed headers and the
// framing go, the payload hash the worker signed (a re-framed stream:
// STREAMING-UNSIGNED-PAYLOAD-TRAILER), and with TokenMetadata the write's
// token as metadata.
func (c *caller) Resign(ctx context.Context, out *http.Request, bucket, key, token string) error {
	in := s3resign.Request{Bucket: bucket, Key: key, SignedHeaders: c.auth.SignedHeaders, PayloadHash: c.auth.PayloadHash}
	if c.reframed != nil {
		for k, v := range c.reframed {
			out.Header[k] = v
		}
		in.PayloadHash = string(awschunked.UnsignedPayloadTrailer)
	}
	if token != "" && c.g.opts.TokenMetadata && createsObject(out, key) {
		in.Header = http.Header{"X-Amz-Meta-Fencing-Token": {token}}
	}
	return c.g.opts.Signer.Rewrite(ctx, out, in)
}

// createsObject reports PutObject, CopyObject and CreateMultipartUpload: a
// PUT of an object without a sub-resource, or a POST ?uploads.
func createsObject(r *http.Request, key string) bool {
	if key == "" {
		return false
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return false
	}
	switch r.Method {
	case http.MethodPut:
		for k := range q {
			if !strings.HasPrefix(strings.ToLower(k), "x-") {
				return false // a part, an ACL, tags, ...
			}
		}
		return true
	case http.MethodPost:
		return q.Has("uploads")
	}
	return false
}
