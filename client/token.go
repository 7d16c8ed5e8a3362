package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/fenceproxy/fenceproxy/fence"
	"github.com/fenceproxy/fenceproxy/wire"
)

// DefaultHeader is the request header that carries the fencing token unless
// the proxy was started with another FENCEPROXY_TOKEN_HEADER.
const DefaultHeader = wire.DefaultTokenHeader

// HeaderSignature carries the token's signature when the proxy runs in
// signed-token mode (FENCEPROXY_TOKEN_KEY); the lease API issues it with
// the token (Lease.TokenSignature).
const HeaderSignature = wire.HeaderSignature

// HeaderPrefix names the prefix fence a write's token is for (a token from
// an outside coordinator for a partition): see WithPrefix.
const HeaderPrefix = wire.HeaderPrefix

// MaxToken is the largest token the proxy accepts (2^63-1).
const MaxToken = fence.MaxToken

// ErrNoToken, returned by a token function, sends the request without a token
// header (for unfenced methods such as GET, or callers that hold no lease).
// ContextToken returns it when the context carries no token.
var ErrNoToken = errors.New("fenceproxy: no fencing token")

type tokenKey struct{}

// WithToken returns a context whose requests carry token (see ContextToken,
// RequestToken and the nil Token of Transport).
func WithToken(ctx context.Context, token uint64) context.Context {
	return context.WithValue(ctx, tokenKey{}, token)
}

// WithSignedToken is WithToken that also carries the token's signature
// (signed-token mode): Transport and StackFencing send it in
// X-Fencing-Token-Signature with that token.
func WithSignedToken(ctx context.Context, token uint64, signature string) context.Context {
	return context.WithValue(WithToken(ctx, token), signatureKey{}, signedToken{token, signature})
}

// WithLease is WithSignedToken with the lease's token and signature (the
// signature is empty when the proxy runs without signing keys).
func WithLease(ctx context.Context, l Lease) context.Context {
	return WithSignedToken(ctx, l.Token, l.TokenSignature)
}

type signatureKey struct{}

type prefixKey struct{}

// WithPrefix returns a context whose fenced requests (those that carry a
// token) also name prefix, a prefix fence's name ending in "/" (spelt as in
// a lease URL; in S3 mode starting with the bucket), in X-Fencing-Prefix:
// the proxy raises that prefix fence to the token with the write, so a
// token from an outside coordinator for a partition fences every key
// below it from the new holder's first write on. Every key written must be
// below prefix.
func WithPrefix(ctx context.Context, prefix string) context.Context {
	return context.WithValue(ctx, prefixKey{}, prefix)
}

// PrefixFromContext returns the prefix set by WithPrefix, "" for none.
func PrefixFromContext(ctx context.Context) string {
	p, _ := ctx.Value(prefixKey{}).(string)
	return p
}

type signedToken struct {
	token     uint64
	signature string
}

// SignatureFromContext returns the signature set by WithSignedToken or
// WithLease if it signs token (a signature belongs to one token); false
// otherwise, or when it is empty.
func SignatureFromContext(ctx context.Context, token uint64) (string, bool) {
	s, ok := ctx.Value(signatureKey{}).(signedToken)
	if !ok || s.token != token || s.signature == "" {
		return "", false
	}
	return s.signature, true
}

// TokenFromContext returns the token set by WithToken, if any.
func TokenFromContext(ctx context.Context) (uint64, bool) {
	t, ok := ctx.Value(tokenKey{}).(uint64)
	return t, ok
}

// ContextToken is a token function for S3Fencing and StackFencing: the token
// set by WithToken, or ErrNoToken when there is none.
func ContextToken(ctx context.Context) (uint64, error) {
	if t, ok := TokenFromContext(ctx); ok {
		return t, nil
	}
	return 0, ErrNoToken
}

// RequestToken is a token function for Transport: ContextToken of the
// request's context. It is what a Transport with a nil Token uses.
func RequestToken(r *http.Request) (uint64, error) { return ContextToken(r.Context()) }

// formatToken renders a token as the proxy reads it, refusing values above MaxToken.
func formatToken(t uint64) (string, error) {
	if t > MaxToken {
		return "", fmt.Errorf("fenceproxy: token %d is above the largest accepted token 2^63-1", t)
	}
	return strconv.FormatUint(t, 10), nil
}

// Transport is an http.RoundTripper that sets the fencing token header on
// every request for which Token returns a token, X-Fencing-Token-Signature
// when it has a signature for that token (signed-token mode), and
// X-Fencing-Prefix when the context names one (WithPrefix). It clones the
// request first: the caller's request is never modified.
type Transport struct {
	// Base sends the requests; nil means http.DefaultTransport.
	Base http.RoundTripper
	// Token returns the request's fencing token. An error wrapping ErrNoToken
	// sends the request unchanged; any other error fails the request without
	// sending it. Nil means RequestToken (the token set with WithToken).
	Token func(*http.Request) (uint64, error)
	// Header is the token header; "" means DefaultHeader.
	Header string
	// Signature returns the signature of the request's token, "" for none.
	// Nil means the one set with WithSignedToken or WithLease for that token.
	Signature func(r *http.Request, token uint64) string
}

// signature is the X-Fencing-Token-Signature value for req's token tok.
func (t *Transport) signature(req *http.Request, tok uint64) string {
	if t.Signature != nil {
		return t.Signature(req, tok)
	}
	s, _ := SignatureFromContext(req.Context(), tok)
	return s
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	tokenOf := t.Token
	if tokenOf == nil {
		tokenOf = RequestToken
	}
	tok, err := tokenOf(req)
	if errors.Is(err, ErrNoToken) {
		return base.RoundTrip(req)
	}
	if err == nil {
		var s string
		if s, err = formatToken(tok); err == nil {
			header := t.Header
			if header == "" {
				header = DefaultHeader
			}
			r2 := req.Clone(req.Context())
			r2.Header.Set(header, s)
			if sig := t.signature(req, tok); sig != "" {
				r2.Header.Set(HeaderSignature, sig)
			}
			if p := PrefixFromContext(req.Context()); p != "" {
				r2.Header.Set(HeaderPrefix, p)
			}
			return base.RoundTrip(r2)
		}
	}
	// A RoundTripper must close the body, also on errors.
	if req.Body != nil {
		req.Body.Close()
	}
	return nil, fmt.Errorf("fenceproxy: fencing token for %s %s: %w", req.Method, req.URL.Redacted(), err)
}
