package proxy

import (
	"errors"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"

	"github.com/fenceproxy/fenceproxy/upstream"
	"github.com/fenceproxy/fenceproxy/wire"
)

// forwardedHeaders are dropped by ReverseProxy when Rewrite is set; the client's
// own values are put back so the backend sees (and signatures cover) them unchanged.
var forwardedHeaders = []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"}

// rewrite makes the outbound request the inbound one, sent to the upstream:
// same Host, path bytes, query and headers.
func (p *Proxy) rewrite(pr *httputil.ProxyRequest) {
	pr.SetURL(p.opts.Upstream)
	pr.Out.Host = pr.In.Host // SetURL would send the upstream's host; signatures cover the inbound one
	// ReverseProxy drops query parameters it cannot parse (";", bad escapes);
	// S3 signs the query as sent, so send it as sent.
	pr.Out.URL.RawQuery = pr.In.URL.RawQuery
	for _, h := range forwardedHeaders {
		if v, ok := pr.In.Header[h]; ok {
			pr.Out.Header[h] = v
		}
	}
	// Send the path bytes as received. EscapedPath reproduces them unless the
	// client sent bytes Go would escape; then send them verbatim.
	want := strings.TrimSuffix(p.opts.Upstream.EscapedPath(), "/") + rawPath(pr.In)
	if pr.Out.URL.EscapedPath() != want && !strings.HasPrefix(want, "//") {
		pr.Out.URL.Opaque = want
	}
	p.rewriteTrailers(pr)
}

// rewriteTrailers gives the outbound request the trailers the client
// announced, whose values clientBody copies at the body's end: ReverseProxy's
// clone of the request has the names only, and net/http fills the inbound
// request's map after the clone was made. Fields the fence reads from the
// header section (the token, its signature, Host, Destination, a method
// override) are never sent as trailers: the token is only ever read from the
// header section, and a backend that merges trailers into headers must not
// see another value than the fence did.
func (p *Proxy) rewriteTrailers(pr *httputil.ProxyRequest) {
	pr.Out.Trailer = nil
	ex := exchangeOf(pr.In)
	if len(pr.In.Trailer) == 0 || ex == nil || ex.in.body == nil {
		return
	}
	t := make(http.Header, len(pr.In.Trailer))
	for k := range pr.In.Trailer {
		if !p.fencedField(k) {
			t[k] = nil
		}
	}
	if len(t) == 0 {
		return
	}
	pr.Out.Trailer, ex.in.trailer = t, t
	// HTTP/1.1 carries trailers in the chunked coding only; an HTTP/2
	// request may declare its length as well.
	pr.Out.ContentLength = -1
}

// replayable mirrors net/http's rule for requests its Transport may send
// twice on its own: no body, and an idempotent method or an Idempotency-Key
// header (a fenced GET carries a method-override header).
func replayable(r *http.Request) bool {
	if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
		return false
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return len(r.Header["Idempotency-Key"]) > 0 || len(r.Header["X-Idempotency-Key"]) > 0
}

// responseWriter keeps the backend's response as it was: it drops the
// backend's "100 Continue", which ReverseProxy relays although net/http sends
// its own when the body is first read (a client should get one, not two), and
// it stops net/http from sniffing a Content-Type the backend did not send.
// One header never passes: wire.HeaderListener, which marks the control
// listener's answers. Every answer of the proxy listener (the backend's in
// every mode, 1xx included, and an owner replica's in cluster mode) goes
// through WriteHeader, so none can make this listener pass for the control
// API, to which clients send their admin and lease bearers.
// It also notes what the exchange sent, for the metrics and the access log.
// It lives in the exchange, so it costs no allocation of its own.
type responseWriter struct {
	http.ResponseWriter
	status  int   // the final status sent, 0 before
	written int64 // body bytes written
	// failed: ReverseProxy's ErrorHandler (upstreamError) answered, so the
	// status is not the backend's.
	failed bool
}

func (w *responseWriter) WriteHeader(code int) {
	if code == http.StatusContinue {
		return
	}
	h := w.Header()
	delete(h, wire.HeaderListener) // canonical: net/http and the fast path canonicalise response header names
	if code >= 200 {
		if _, ok := h["Content-Type"]; !ok {
			h["Content-Type"] = nil // present but empty: net/http sends none and sniffs none
		}
	}
	if w.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *responseWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK // net/http's implicit header
	}
	n, err := w.ResponseWriter.Write(b)
	w.written += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach Flush and deadlines.
func (w *responseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// CopyBuffers lends ReverseProxy its 32 KiB body copy buffers: allocating
// one per request was the largest allocation of a small write (pprof). The
// cluster's forwarding to a shard's owner shares it.
var CopyBuffers httputil.BufferPool = &bufferPool{p: sync.Pool{New: func() any { return new([32 << 10]byte) }}}

type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte { return b.p.Get().(*[32 << 10]byte)[:] }

func (b *bufferPool) Put(s []byte) {
	if cap(s) >= 32<<10 {
		b.p.Put((*[32 << 10]byte)(s[:32<<10]))
	}
}

// dialError reports a failure to connect to the backend (upstream.DialError):
// nothing of the request was sent.
func dialError(err error) bool {
	var de *upstream.DialError
	return errors.As(err, &de)
}
