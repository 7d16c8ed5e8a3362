package cluster

import (
	"context"
	"crypto/subtle"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"time"

	"github.com/fenceproxy/fenceproxy/proxy"
	"github.com/fenceproxy/fenceproxy/s3"
	"github.com/fenceproxy/fenceproxy/shard"
	"github.com/fenceproxy/fenceproxy/wire"
)

// Headers of a request forwarded to the owner over the peer listener. The
// owner removes both before its handlers see the request.
const (
	// headerPeerSecret carries FENCEPROXY_PEER_SECRET.
	headerPeerSecret = "Fenceproxy-Peer-Secret"
	// headerPeerTarget names the owner's handler: "proxy" or "control".
	headerPeerTarget = "Fenceproxy-Peer-Target"
)

// headerPeerRefused marks the peer listener's own refusal of a request
// without the peer secret, so that the forwarding replica tells it from an
// answer of the owner's handlers.
const headerPeerRefused = "Fenceproxy-Peer-Refused"

// errPeerSecret: the owner refused this replica's PEER_SECRET.
var errPeerSecret = errors.New("the owner replica refused this replica's FENCEPROXY_PEER_SECRET: the replicas' secret lists share no secret")

// fromPeerKey marks the context of a request that came over the peer
// listener: it is never forwarded again.
type fromPeerKey struct{}

// The forwarding's context values: the owner's peer address, the target
// handler ("proxy" or "control") and the resource, for the error answers.
type (
	peerAddrKey     struct{}
	peerTargetKey   struct{}
	peerResourceKey struct{}
)

// newForwarding prepares the forwarding to owners.
func (c *Cluster) newForwarding() {
	o := c.opts
	c.peer = &httputil.ReverseProxy{
		Rewrite:        c.rewrite,
		Transport:      peerTransport(o.DialTimeout, o.DrainTimeout, o.DrainTimeout+o.ResponseTimeout+5*time.Second),
		FlushInterval:  -1,
		BufferPool:     proxy.CopyBuffers,
		ErrorHandler:   c.forwardError,
		ErrorLog:       slog.NewLogLogger(c.log.Handler(), slog.LevelWarn),
		ModifyResponse: c.checkPeerAnswer,
	}
}

// peerTransport sends forwarded requests: no proxy from the environment, no
// compression added, connections kept for reuse. A client's Expect:
// 100-continue holds its body back until the owner admits the write (up to
// expect, the owner's longest wait at its barrier), as without the hop. An
// owner that stalls (a frozen process still accepts connections) is given
// up on after answer: its longest wait at the barrier plus the backend's.
func peerTransport(dial, expect, answer time.Duration) *http.Transport {
	return &http.Transport{
		DialContext:           (&net.Dialer{Timeout: dial, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		DisableCompression:    true,
		ExpectContinueTimeout: expect,
		ResponseHeaderTimeout: answer,
	}
}

// forwardTo returns the handler that sends a request on resource whole to
// the owner m's handler target ("proxy" or "control").
func (c *Cluster) forwardTo(m shard.Member, target, resource string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := context.WithValue(r.Context(), peerAddrKey{}, m.Addr)
		ctx = context.WithValue(context.WithValue(ctx, peerTargetKey{}, target), peerResourceKey{}, resource)
		c.peer.ServeHTTP(w, r.WithContext(ctx))
	})
}

// checkPeerAnswer is the forwarding's ModifyResponse.
func (c *Cluster) checkPeerAnswer(resp *http.Response) error {
	if resp.Header.Get(headerPeerRefused) != "" {
		return errPeerSecret
	}
	c.forwards.WithLabelValues("ok").Inc()
	return nil
}

// rewrite is the forwarding's Rewrite: the request as the client sent it
// (Host, the path's bytes, query, headers, X-Forwarded-* included), to the
// owner's peer address, with the peer secret and the target handler.
func (c *Cluster) rewrite(pr *httputil.ProxyRequest) {
	in, out := pr.In, pr.Out
	out.URL.Scheme, out.URL.Host = "http", in.Context().Value(peerAddrKey{}).(string)
	out.Host = in.Host
	// The target's bytes as received: a re-encoded path could name another
	// resource or break a signature over it. ReverseProxy drops query
	// parameters it cannot parse (";", bad escapes): the query goes whole.
	if raw, _, _ := strings.Cut(in.RequestURI, "?"); strings.HasPrefix(raw, "/") && !strings.HasPrefix(raw, "//") {
		out.URL.Opaque = raw
	}
	out.URL.RawQuery = in.URL.RawQuery
	for _, h := range []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"} {
		if v, ok := in.Header[h]; ok {
			out.Header[h] = v
		}
	}
	out.Header.Set(headerPeerSecret, c.opts.PeerSecrets[0])
	out.Header.Set(headerPeerTarget, in.Context().Value(peerTargetKey{}).(string))
}

// forwardError answers a forward that failed: 503 shard_unavailable (with
// Retry-After) when the owner could not be reached, so nothing was sent, or
// refused this replica's peer secret (which it checks before anything else);
// 502 when the request was sent and no answer came (its outcome unknown).
func (c *Cluster) forwardError(w http.ResponseWriter, r *http.Request, err error) {
	addr, _ := r.Context().Value(peerAddrKey{}).(string)
	resource, _ := r.Context().Value(peerResourceKey{}).(string)
	attrs := []any{"peer", addr, "resource", resource, "method", r.Method, "error", err.Error()}
	var op *net.OpError
	switch {
	case errors.Is(err, errPeerSecret):
		c.forwards.WithLabelValues("refused").Inc()
		c.log.Error("owner replica refused the peer secret: every replica's FENCEPROXY_PEER_SECRET list must share a secret", attrs...)
		c.refuse(w, r, wire.Problem{Status: http.StatusServiceUnavailable, Reason: wire.ReasonShardUnavailable, Title: "Shard unavailable",
			Resource: resource, Detail: "the replica that owns this resource's shard refused this replica's peer secret (a configuration error); nothing was forwarded"})
		return
	case errors.As(err, &op) && op.Op == "dial":
		c.forwards.WithLabelValues("unreachable").Inc()
		c.log.Warn("write refused: the owner replica is unreachable", attrs...)
		c.refuse(w, r, wire.Problem{Status: http.StatusServiceUnavailable, Reason: wire.ReasonShardUnavailable, Title: "Shard unavailable",
			Resource: resource, Detail: "the replica that owns this resource's shard could not be reached; nothing was forwarded"})
		return
	}
	if r.Context().Err() != nil {
		return // the client went away
	}
	c.forwards.WithLabelValues("failed").Inc()
	c.log.Warn("forward to the owner replica failed", attrs...)
	c.writeProblem(w, r, wire.Problem{Status: http.StatusBadGateway, Title: http.StatusText(http.StatusBadGateway), Resource: resource,
		Detail: "the replica that owns this resource's shard did not answer; the write may or may not have been applied"})
}

// refuse answers a refusal of the proxy's own: Fencing-Refused and
// Retry-After, as every 503 the proxy gives.
func (c *Cluster) refuse(w http.ResponseWriter, r *http.Request, p wire.Problem) {
	w.Header().Set(wire.HeaderRefused, p.Reason)
	w.Header().Set("Retry-After", "1")
	c.writeProblem(w, r, p)
}

// writeProblem answers p as the proxy would: an S3 <Error> in S3 mode on
// the proxy listener, else a problem.
func (c *Cluster) writeProblem(w http.ResponseWriter, r *http.Request, p wire.Problem) {
	if c.opts.S3 && r.Context().Value(peerTargetKey{}) == "proxy" {
		s3.WriteError(w, p.Status, s3.ErrorOf(p, r.URL.Path))
		return
	}
	wire.WriteProblem(w, p)
}

// PeerHandler serves the peer listener: requests forwarded by other
// replicas, with the peer secret, to proxyH (the proxy) or controlH (the
// control API); without it, 403 and the refusal marked for the sender.
func (c *Cluster) PeerHandler(proxyH, controlH http.Handler) http.Handler {
	secrets := make([][]byte, len(c.opts.PeerSecrets))
	for i, s := range c.opts.PeerSecrets {
		secrets[i] = []byte(s)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := []byte(r.Header.Get(headerPeerSecret)), 0
		for _, s := range secrets {
			ok |= subtle.ConstantTimeCompare(got, s) // every one compared: no timing of which
		}
		if ok != 1 {
			c.log.Error("peer request refused: wrong or missing peer secret (every replica's FENCEPROXY_PEER_SECRET list must share a secret)",
				"remote", r.RemoteAddr, "method", r.Method)
			w.Header().Set(headerPeerRefused, "secret")
			wire.WriteProblem(w, wire.Problem{Status: http.StatusForbidden, Reason: wire.ReasonForbidden, Title: "Forbidden",
				Detail: "the peer listener serves only other fenceproxy replicas (FENCEPROXY_PEER_SECRET)"})
			return
		}
		target := r.Header.Get(headerPeerTarget)
		r.Header.Del(headerPeerSecret)
		r.Header.Del(headerPeerTarget)
		r = r.WithContext(context.WithValue(r.Context(), fromPeerKey{}, true))
		switch target {
		case "proxy":
			proxyH.ServeHTTP(w, r)
		case "control":
			controlH.ServeHTTP(w, r)
		default:
			wire.WriteProblem(w, wire.Problem{Status: http.StatusBadRequest, Reason: wire.ReasonBadRequest, Title: "Bad peer request",
				Detail: "unknown " + headerPeerTarget})
		}
	})
}
