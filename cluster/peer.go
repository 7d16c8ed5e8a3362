package cluster

import (
	"context"
	"crypto/subtle"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fenceproxy/fenceproxy/proxy"
	"github.com/fenceproxy/fenceproxy/s3"
	"github.com/fenceproxy/fenceproxy/shard"
	"github.com/fenceproxy/fenceproxy/upstream"
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

// forwardKey holds a forward's *forwarding in its request's context.
type forwardKey struct{}

// forwarding is one forward: the owner's peer address, the target handler
// ("proxy" or "control") and the resource, for the error answers; and the
// client's body, read through it so that a failure to read it is told from
// the owner's.
type forwarding struct {
	addr, target, resource string
	body                   io.ReadCloser // nil: no body
	bodyErr                atomic.Pointer[error]
}

// forwardOf is the forwarding of r's context; an empty one outside a forward.
func forwardOf(r *http.Request) *forwarding {
	if f, ok := r.Context().Value(forwardKey{}).(*forwarding); ok {
		return f
	}
	return &forwarding{}
}

// Read reads the client's body, noting a failure other than its end.
func (f *forwarding) Read(p []byte) (int, error) {
	n, err := f.body.Read(p)
	if err != nil && err != io.EOF {
		f.bodyErr.CompareAndSwap(nil, &err)
	}
	return n, err
}

func (f *forwarding) Close() error { return f.body.Close() }

// bodyFailed is the failure to read the client's body, or nil.
func (f *forwarding) bodyFailed() error {
	if e := f.bodyErr.Load(); e != nil {
		return *e
	}
	return nil
}

// newForwarding prepares the forwarding to owners.
func (c *Cluster) newForwarding() {
	o := c.opts
	c.peer = &httputil.ReverseProxy{
		Rewrite:        c.rewrite,
		Transport:      newPeerTransport(o.DialTimeout, o.DrainTimeout, o.DrainTimeout+o.ResponseTimeout+5*time.Second),
		FlushInterval:  -1,
		BufferPool:     proxy.CopyBuffers,
		ErrorHandler:   c.forwardError,
		ErrorLog:       slog.NewLogLogger(c.log.Handler(), slog.LevelWarn),
		ModifyResponse: c.checkPeerAnswer,
	}
}

// peerTransport sends forwarded requests, to each owner's peer address
// over an upstream.Client of its own (made at the first forward there): the
// common shape (a Content-Length body of at most upstream.SmallBodyMax
// bytes, no Expect, no trailers) through fasthttp's HostClient, on the
// calling goroutine over kept-alive connections, the body read whole before
// anything is sent (an upload that stalls or breaks never reaches the
// owner); the rest (larger or chunked bodies, Expect: 100-continue, no body,
// trailers, a path only URL.Opaque spells) through net/http's Transport,
// streamed. Both send the request as ReverseProxy made it (header names and
// values as they are, the target's bytes: see rewrite) and add nothing: no
// compression, no proxy from the environment.
//
// A failure to connect is an upstream.DialError: nothing was sent. A
// request is sent once: the fast path carries only requests with a body
// (see forwardTo) and sends one again, on another connection, only when the
// kept-alive one it took was found closed before anything was written on
// it; the Transport sends a bodyless read (GET, HEAD, OPTIONS, TRACE, or
// one with an Idempotency-Key) again when its kept-alive connection failed,
// as net/http does, and a resend that cannot connect is then no DialError.
// A client's Expect: 100-continue holds its body back until the owner
// admits the write (up to expect, the owner's longest wait at its barrier),
// as without the hop. An owner that stalls (a frozen process still accepts
// connections) is given up on after answer: its longest wait at the barrier
// plus the backend's. The fast path reads the owner's answer as the
// owner's own fast path reads the backend's, with the same differences from
// net/http (docs/PERFORMANCE.md, The upstream client), which show only when
// the owner relays such an answer from its backend through its Transport
// (an https backend): 1xx answers dropped, a header block over 64 KiB or a
// trailer fasthttp forbids a 502, a repeated Content-Type or Server line
// the last one. Connections close with a reset (see upstream).
type peerTransport struct {
	opts    upstream.Options
	clients sync.Map // peer address -> *upstream.Client
}

func newPeerTransport(dial, expect, answer time.Duration) *peerTransport {
	return &peerTransport{opts: upstream.Options{FastPath: true, DialTimeout: dial, ResponseTimeout: answer,
		ExpectContinueTimeout: expect}}
}

// RoundTrip implements http.RoundTripper.
func (t *peerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c, ok := t.clients.Load(r.URL.Host)
	if !ok {
		c, _ = t.clients.LoadOrStore(r.URL.Host, upstream.New(&url.URL{Scheme: "http", Host: r.URL.Host}, t.opts))
	}
	return c.(*upstream.Client).RoundTrip(r)
}

// CloseIdleConnections closes the kept-alive connections to every peer.
func (t *peerTransport) CloseIdleConnections() {
	t.clients.Range(func(_, c any) bool {
		c.(*upstream.Client).CloseIdleConnections()
		return true
	})
}

// noEnd is the validity of a forward (upstream.WithValidUntil): none but
// its context's.
func noEnd() time.Time { return time.Time{} }

// forwardTo returns the handler that sends a request on resource whole to
// the owner m's handler target ("proxy" or "control"). The forward follows
// the client's context on both of peerTransport's paths
// (upstream.WithValidUntil without an end): when the client goes away
// before the owner's answer came, the exchange with the owner ends at once,
// its connection closed with a reset, as net/http's Transport ends it.
func (c *Cluster) forwardTo(m shard.Member, target, resource string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f := &forwarding{addr: m.Addr, target: target, resource: resource}
		r = r.WithContext(upstream.WithValidUntil(context.WithValue(r.Context(), forwardKey{}, f), noEnd))
		if r.Body != nil && r.Body != http.NoBody {
			f.body, r.Body = r.Body, f
		}
		c.peer.ServeHTTP(w, r)
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
// (Host, the target's bytes, headers, X-Forwarded-* included), to the
// owner's peer address, with the peer secret and the target handler.
func (c *Cluster) rewrite(pr *httputil.ProxyRequest) {
	in, out := pr.In, pr.Out
	f := forwardOf(in)
	out.URL.Scheme, out.URL.Host = "http", f.addr
	out.Host = in.Host
	// The target's bytes as received: a re-encoded path could name another
	// resource or break a signature over it. The path is sent as the URL
	// spells it when that is the same bytes, else verbatim (URL.Opaque,
	// which only the Transport sends); ReverseProxy drops query parameters
	// it cannot parse (";", bad escapes), so the query is put back whole.
	if raw, _, _ := strings.Cut(in.RequestURI, "?"); out.URL.EscapedPath() != raw && strings.HasPrefix(raw, "/") && !strings.HasPrefix(raw, "//") {
		out.URL.Opaque = raw
	}
	out.URL.RawQuery = in.URL.RawQuery
	for _, h := range []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"} {
		if v, ok := in.Header[h]; ok {
			out.Header[h] = v
		}
	}
	out.Header.Set(headerPeerSecret, c.opts.PeerSecrets[0])
	out.Header.Set(headerPeerTarget, f.target)
}

// forwardError answers a forward that failed: 503 shard_unavailable (with
// Retry-After) when the owner could not be reached, so nothing was sent, or
// refused this replica's peer secret (which it checks before anything else);
// 400 bad_body when the client's body broke or ended early, so the owner
// did not get it whole; 502 when the request was sent and no answer came
// (its outcome unknown).
func (c *Cluster) forwardError(w http.ResponseWriter, r *http.Request, err error) {
	f := forwardOf(r)
	resource := f.resource
	attrs := []any{"peer", f.addr, "resource", resource, "method", r.Method, "error", err.Error()}
	var dial *upstream.DialError
	switch {
	case errors.Is(err, errPeerSecret):
		c.forwards.WithLabelValues("refused").Inc()
		c.log.Error("owner replica refused the peer secret: every replica's FENCEPROXY_PEER_SECRET list must share a secret", attrs...)
		c.refuse(w, r, wire.Problem{Status: http.StatusServiceUnavailable, Reason: wire.ReasonShardUnavailable, Title: "Shard unavailable",
			Resource: resource, Detail: "the replica that owns this resource's shard refused this replica's peer secret (a configuration error); nothing was forwarded"})
		return
	case errors.As(err, &dial):
		c.forwards.WithLabelValues("unreachable").Inc()
		c.log.Warn("write refused: the owner replica is unreachable", attrs...)
		c.refuse(w, r, wire.Problem{Status: http.StatusServiceUnavailable, Reason: wire.ReasonShardUnavailable, Title: "Shard unavailable",
			Resource: resource, Detail: "the replica that owns this resource's shard could not be reached; nothing was forwarded"})
		return
	}
	if r.Context().Err() != nil {
		return // the client went away
	}
	if berr := f.bodyFailed(); berr != nil {
		// The client broke its body (an early end, bad chunked framing): a
		// small one was read whole before anything was sent, a larger one
		// cut short on its way, which the owner does not apply.
		c.log.Info("request body malformed or cut short; the owner replica did not get it whole",
			"peer", f.addr, "resource", resource, "method", r.Method, "remote", r.RemoteAddr, "error", berr.Error())
		w.Header().Set(wire.HeaderRefused, wire.ReasonBadBody)
		if r.ProtoMajor == 1 {
			w.Header().Set("Connection", "close") // the rest of the body is still on the wire
		}
		c.writeProblem(w, r, wire.Problem{Status: http.StatusBadRequest, Reason: wire.ReasonBadBody, Title: "Malformed request body",
			Resource: resource, Detail: "the request body was malformed or cut short; the replica that owns this resource's shard did not get it whole"})
		return
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
	if c.opts.S3 && forwardOf(r).target == "proxy" {
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
