// Package gateway is fenceproxy's S3 gateway mode (FENCEPROXY_S3=resign):
// workers sign their requests with keys of the proxy (s3/keyring), the proxy
// verifies each signature (sigv4) and grant, and signs what it forwards with
// the store's own credentials (s3/resign), so that it is the only holder of
// those. It implements proxy.S3Gateway.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/fenceproxy/fenceproxy/proxy"
	"github.com/fenceproxy/fenceproxy/s3"
	"github.com/fenceproxy/fenceproxy/s3/awschunked"
	"github.com/fenceproxy/fenceproxy/s3/keyring"
	"github.com/fenceproxy/fenceproxy/s3/resign"
	"github.com/fenceproxy/fenceproxy/s3/sigv4"
)

// Keys are the workers' keys: *keyring.Store (reloaded from its file).
type Keys interface {
	Keys() *keyring.Keys
}

// Options configures a Gateway. Keys, Region and Signer are required.
type Options struct {
	Keys   Keys           // the workers' keys and grants (FENCEPROXY_S3_CREDENTIALS_FILE)
	Region string         // the region workers sign for (FENCEPROXY_S3_REGION)
	Signer *resign.Signer // signs for the store
	// TokenMetadata adds x-amz-meta-fencing-token: <token> to PutObject,
	// CopyObject and CreateMultipartUpload (FENCEPROXY_S3_TOKEN_METADATA),
	// and drops a worker's own from every request.
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
		return nil, errors.New("gateway: no worker keys")
	case opts.Region == "":
		return nil, errors.New("gateway: no region")
	case opts.Signer == nil:
		return nil, errors.New("gateway: no signer for the store")
	}
	return &Gateway{opts: opts}, nil
}

// Verify checks r's SigV4 signature with the key's secret, from the keys in
// use now (one version for the whole request).
func (g *Gateway) Verify(r *http.Request) (proxy.S3Caller, error) {
	keys := g.opts.Keys.Keys()
	v := sigv4.Verifier{Secrets: keys, Region: g.opts.Region, Now: g.opts.Now}
	auth, err := v.Verify(r)
	if err != nil {
		return nil, err // its class has its S3 code and status in s3.Code's table
	}
	secret, _ := keys.Secret(auth.AccessKeyID)
	return &caller{g: g, keys: keys, auth: auth, secret: secret}, nil
}

// caller is one verified request's key.
type caller struct {
	g      *Gateway
	keys   *keyring.Keys
	auth   *sigv4.Auth
	secret string // the key's secret when verified, to tell a rotation
	// granted are the grants the request was let through on (Allowed and
	// AllowedList answers of true), to hold against a new version of the
	// keys. Written before the body is read, read by Valid after.
	granted []grantCheck
	// A signed stream re-framed for the store: its headers.
	reframed http.Header
}

func (c *caller) AccessKeyID() string { return c.auth.AccessKeyID }

// grantCheck is one question the request's grants answered yes.
type grantCheck struct {
	bucket, key string
	write, list bool
}

func (g grantCheck) allowed(keys *keyring.Keys, id string) bool {
	if g.list {
		return keys.AllowedList(id, g.bucket, g.key)
	}
	return keys.Allowed(id, g.bucket, g.key, g.write)
}

func (c *caller) Allowed(bucket, key string, write bool) bool {
	return c.check(grantCheck{bucket: bucket, key: key, write: write})
}

func (c *caller) AllowedList(bucket, prefix string) bool {
	return c.check(grantCheck{bucket: bucket, key: prefix, list: true})
}

func (c *caller) check(g grantCheck) bool {
	ok := g.allowed(c.keys, c.auth.AccessKeyID)
	if ok {
		c.granted = append(c.granted, g)
	}
	return ok
}

// Valid reports proxy.ErrKeyRevoked once the keys in use (re-read from the
// file every few seconds) no longer hold the verified key, hold it with
// another secret, or no longer grant what the request was let through on.
func (c *caller) Valid() error {
	keys := c.g.opts.Keys.Keys()
	if keys == c.keys {
		return nil
	}
	id := c.auth.AccessKeyID
	if secret, ok := keys.Secret(id); !ok || secret != c.secret {
		return fmt.Errorf("%w: key %q was removed from the workers' keys or its secret changed", proxy.ErrKeyRevoked, id)
	}
	for _, g := range c.granted {
		if !g.allowed(keys, id) {
			return fmt.Errorf("%w: key %q lost the grant of %q in bucket %q that the request uses", proxy.ErrKeyRevoked, id, g.key, g.bucket)
		}
	}
	return nil
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
		return fmt.Errorf("gateway: a signed stream needs x-amz-decoded-content-length, got %q", r.Header.Get("X-Amz-Decoded-Content-Length"))
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
		return fmt.Errorf("gateway: %w", err)
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
// token as metadata of an operation that creates an object (req.Op.Creates:
// PutObject, CopyObject, CreateMultipartUpload); a worker's own
// x-amz-meta-fencing-token never goes then, so that the metadata is always
// the proxy's.
func (c *caller) Resign(ctx context.Context, out *http.Request, req s3.Request, token string) error {
	in := resign.Request{Bucket: req.Bucket, Key: req.Key, SignedHeaders: c.auth.SignedHeaders, PayloadHash: c.auth.PayloadHash}
	if c.reframed != nil {
		for k, v := range c.reframed {
			out.Header[k] = v
		}
		in.PayloadHash = string(awschunked.UnsignedPayloadTrailer)
	}
	if c.g.opts.TokenMetadata {
		delete(out.Header, TokenMetadataHeader)
		if token != "" && req.Op.Creates {
			in.Header = http.Header{TokenMetadataHeader: {token}}
		}
	}
	return c.g.opts.Signer.Rewrite(ctx, out, in)
}

// TokenMetadataHeader is the audit metadata of TokenMetadata: the fencing
// token of the write that created the object.
const TokenMetadataHeader = "X-Amz-Meta-Fencing-Token"
