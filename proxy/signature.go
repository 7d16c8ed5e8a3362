package proxy

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// HeaderSignature carries the signature of a fencing token in signed-token
// mode (FENCEPROXY_TOKEN_KEY): an HMAC-SHA256 over the resource key and the
// token, issued by the lease API beside the token.
const HeaderSignature = "X-Fencing-Token-Signature"

// TokenVerifier checks token signatures in signed-token mode (tokensig.Keys
// provides it).
type TokenVerifier interface {
	// Verify returns nil when signature, as sent in X-Fencing-Token-Signature,
	// signs token for resource under one of the configured keys.
	Verify(resource string, token uint64, signature string) error
}

// ErrSignature: signed-token mode is on and the write carries no valid
// signature for its token and resource (403). Without it a buggy or hostile
// worker could send 2^63-1 and fence a resource off for good.
var ErrSignature = errors.New("fencing token signature missing or invalid")

// checkSignature requires, for every resource a write touches, one
// X-Fencing-Token-Signature value that signs t for that resource (a MOVE
// carries one per resource, on separate header lines or comma-separated; the
// base64url alphabet has no comma). It returns the resource that lacks one.
// nil when signed-token mode is off.
func (p *Proxy) checkSignature(r *http.Request, resources []string, t uint64) (string, error) {
	if p.opts.Verifier == nil {
		return "", nil
	}
	var sigs []string
	for _, v := range r.Header.Values(HeaderSignature) {
		for s := range strings.SplitSeq(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				sigs = append(sigs, s)
			}
		}
	}
	if len(sigs) == 0 {
		return resources[0], fmt.Errorf("%w: send the signature issued with the token in the %s header", ErrSignature, HeaderSignature)
	}
	for _, res := range resources {
		ok := false
		for _, s := range sigs {
			if p.opts.Verifier.Verify(res, t, s) == nil {
				ok = true
				break
			}
		}
		if !ok {
			return res, fmt.Errorf("%w: no %s value signs token %d for resource %q", ErrSignature, HeaderSignature, t, res)
		}
	}
	return "", nil
}
