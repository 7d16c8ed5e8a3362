package proxy

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/fenceproxy/fenceproxy/fence"
	"github.com/fenceproxy/fenceproxy/wire"
)

// TokenVerifier checks token signatures in signed-token mode (tokensig.Keys
// provides it).
type TokenVerifier interface {
	// Verify returns nil when signature, as sent in X-Fencing-Token-Signature,
	// signs token for resource under one of the configured keys.
	Verify(resource string, token uint64, signature string) error
}

var (
	// ErrSignature: signed-token mode is on and the write carries no valid
	// signature for its token and resource (403). Without it a buggy or
	// hostile worker could send 2^63-1 and fence a resource off for good.
	ErrSignature = errors.New("fencing token signature missing or invalid")
	// ErrForbidden: Options.Authenticate refused the request (403).
	ErrForbidden = errors.New("request refused by authentication")
)

// SignedTokens returns an Options.Authenticate for signed-token mode
// (FENCEPROXY_TOKEN_KEY): a fenced write needs, for every resource it
// touches, one X-Fencing-Token-Signature value that signs its token for that
// resource or for a prefix fence above it (a name ending in "/" that the
// resource starts with: a lease on a partition signs for every key below
// it). With prefixOwnName (fence.Options.PrefixOwnName) a prefix fence P/
// also signs for the resource P, which it covers: the directory marker P/ of
// the partition's holder resolves to P in S3 mode, and a plain-mode write to
// P/ is one to P as well (fence.Resolver.Alias). A MOVE carries one per
// resource, on separate header lines or comma-separated; the base64url
// alphabet has no comma. Other requests pass. The error is a
// *fence.ResourceError naming the resource that lacks one, wrapping
// ErrSignature.
func SignedTokens(v TokenVerifier, prefixOwnName bool) func(r *http.Request, resources []string, token uint64) error {
	return func(r *http.Request, resources []string, t uint64) error {
		if len(resources) == 0 {
			return nil // not a fenced write
		}
		var sigs []string
		values := r.Header.Values(wire.HeaderSignature)
		if len(values) == 0 && r.URL.RawQuery != "" {
			// A presigned URL carries it in its query, with the token.
			values = queryValues(r.URL.RawQuery, wire.HeaderSignature)
		}
		for _, h := range values {
			for s := range strings.SplitSeq(h, ",") {
				if s = strings.TrimSpace(s); s != "" {
					sigs = append(sigs, s)
				}
			}
		}
		if len(sigs) == 0 {
			return &fence.ResourceError{Resource: resources[0],
				Err: fmt.Errorf("%w: send the signature issued with the token in the %s header", ErrSignature, wire.HeaderSignature)}
		}
		for _, res := range resources {
			if !signedFor(v, res, t, sigs, prefixOwnName) {
				return &fence.ResourceError{Resource: res,
					Err: fmt.Errorf("%w: no %s value signs token %d for resource %q", ErrSignature, wire.HeaderSignature, t, res)}
			}
		}
		return nil
	}
}

// signedFor reports whether one of sigs signs t for resource or for a
// prefix fence above it (with ownName also resource + "/").
func signedFor(v TokenVerifier, resource string, t uint64, sigs []string, ownName bool) bool {
	for _, s := range sigs {
		if v.Verify(resource, t, s) == nil {
			return true
		}
	}
	if ownName && !strings.HasSuffix(resource, "/") {
		for _, s := range sigs {
			if v.Verify(resource+"/", t, s) == nil {
				return true
			}
		}
	}
	for i := len(resource) - 2; i >= 0; i-- {
		if resource[i] != '/' {
			continue
		}
		for _, s := range sigs {
			if v.Verify(resource[:i+1], t, s) == nil {
				return true
			}
		}
	}
	return false
}
