// Package proxy forwards HTTP requests to one backend and fences writes: a
// write reaches the backend only when its fencing token is not below the
// durable maximum of the resource it touches, and only after every write with
// a smaller token on that resource has finished upstream. See the project
// brief and Kleppmann 2016, "How to do distributed locking".
package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fenceproxy/fenceproxy/upstream"
)

// Options configures a Proxy. Zero durations get the defaults in brackets.
type Options struct {
	Upstream        *url.URL       // backend base URL; a path in it is joined in front of the inbound path
	TokenHeader     string         // header carrying the token [X-Fencing-Token]
	UnfencedMethods []string       // methods passed unchecked, case-sensitive [GET, HEAD, OPTIONS]
	ResourceDepth   int            // 0: whole path is the resource; N: first N segments
	AllowMissing    bool           // true: fenced methods without a token are forwarded unchecked (REQUIRE_TOKEN=false)
	DrainTimeout    time.Duration  // longest barrier wait [30s]
	DialTimeout     time.Duration  // upstream connect [5s]
	ResponseTimeout time.Duration  // upstream response headers after the request was sent [60s]
	Logger          *slog.Logger   // nil: discard
	Metrics         *Metrics       // nil: none
	UpstreamCAs     *x509.CertPool // roots for an https upstream; nil: the system roots
	// Observe logs and counts what would be refused but forwards everything,
	// for rolling fenceproxy out (FENCEPROXY_MODE=observe). Maxima are still raised.
	Observe bool
	// Transport replaces the upstream client (tests); nil builds an
	// upstream.Client from the timeouts, over an http.Transport.
	Transport http.RoundTripper
	// Verifier turns on signed-token mode: fenced writes need a valid
	// X-Fencing-Token-Signature (403 otherwise). nil: off.
	Verifier TokenVerifier
	// MaxTokenJump refuses (403) a token more than this above its resource's
	// maximum. 0: off.
	MaxTokenJump uint64
	// AbandonGrace keeps a resource's barrier closed this long after the proxy
	// gave up on a write it had sent whole; larger tokens also wait this long
	// after New (writes of the previous process may be in flight). 0: off.
	AbandonGrace time.Duration
	// UploadIdleTimeout cuts off a request body that pauses longer [30s].
	UploadIdleTimeout time.Duration
	// StandardClient sends every request through net/http's Transport
	// instead of package upstream's fast path (FENCEPROXY_UPSTREAM_FAST_PATH=false).
	StandardClient bool
	// CleanStart: the previous process on this store stopped cleanly, with
	// no write it forwarded still unfinished (tokenstore.Store.CleanStart),
	// so no write can be in flight from it and there is no start-up grace.
	CleanStart bool
}

// Proxy is an http.Handler that fences writes and forwards requests to the
// upstream with httputil.ReverseProxy, keeping Host, path bytes and headers
// as the client sent them (S3 SigV4 signatures stay valid).
type Proxy struct {
	opts     Options
	store    Store
	fence    *Fence
	unfenced map[string]bool
	rp       *httputil.ReverseProxy
	log      *slog.Logger
}

// New returns a Proxy over store. It fails when Upstream is not an absolute
// http(s) URL.
func New(store Store, opts Options) (*Proxy, error) {
	if opts.Upstream == nil || (opts.Upstream.Scheme != "http" && opts.Upstream.Scheme != "https") || opts.Upstream.Host == "" {
		return nil, errors.New("proxy: Upstream must be an absolute http or https URL")
	}
	if opts.TokenHeader == "" {
		opts.TokenHeader = "X-Fencing-Token"
	}
	if opts.UnfencedMethods == nil {
		opts.UnfencedMethods = []string{http.MethodGet, http.MethodHead, http.MethodOptions}
	}
	if opts.DrainTimeout <= 0 {
		opts.DrainTimeout = 30 * time.Second
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = 5 * time.Second
	}
	if opts.ResponseTimeout <= 0 {
		opts.ResponseTimeout = 60 * time.Second
	}
	if opts.UploadIdleTimeout <= 0 {
		opts.UploadIdleTimeout = 30 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Metrics != nil {
		store = timedStore{Store: store, hist: opts.Metrics.RaiseDuration}
	}
	p := &Proxy{
		opts:     opts,
		store:    store,
		fence:    NewFence(store, opts.DrainTimeout),
		unfenced: make(map[string]bool),
		log:      opts.Logger,
	}
	for _, m := range opts.UnfencedMethods {
		p.unfenced[m] = true
	}
	p.fence.abandonGrace = opts.AbandonGrace
	p.fence.maxJump = opts.MaxTokenJump
	if !opts.CleanStart {
		p.fence.startUntil = time.Now().Add(opts.AbandonGrace)
	}
	transport := opts.Transport
	if transport == nil {
		std := &http.Transport{
			Proxy:                 nil, // never send the backend's traffic through HTTP_PROXY
			DialContext:           (&net.Dialer{Timeout: opts.DialTimeout, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:          512,
			MaxIdleConnsPerHost:   512,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   opts.DialTimeout,
			ExpectContinueTimeout: time.Second,
			ResponseHeaderTimeout: opts.ResponseTimeout,
			DisableCompression:    true, // would add Accept-Encoding and change the signed request
			TLSClientConfig:       &tls.Config{RootCAs: opts.UpstreamCAs, MinVersion: tls.VersionTLS12},
		}
		// The common request shape goes through fasthttp's client, the rest
		// through std; see package upstream.
		transport = std
		if !opts.StandardClient {
			transport = upstream.New(opts.Upstream, std, upstream.Options{
				DialTimeout: opts.DialTimeout, ResponseTimeout: opts.ResponseTimeout})
		}
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite:    p.rewrite,
		Transport:  transport,
		BufferPool: copyBuffers,
		// A status net/http's server cannot send (WriteHeader panics below
		// 100) becomes a 502 instead of a dropped connection.
		ModifyResponse: func(res *http.Response) error {
			if res.StatusCode < 100 || res.StatusCode > 999 {
				return fmt.Errorf("backend answered with status %d", res.StatusCode)
			}
			return nil
		},
		ErrorHandler: p.upstreamError,
		ErrorLog:     slog.NewLogLogger(opts.Logger.Handler(), slog.LevelWarn),
	}
	return p, nil
}

// Fence returns the proxy's fence (for inspection and tests).
func (p *Proxy) Fence() *Fence { return p.fence }

// ServeHTTP fences the request if its method is a write, then forwards it.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w = responseWriter{w}
	if len(r.TransferEncoding) > 0 {
		// net/http frames a request with both Transfer-Encoding and
		// Content-Length by the former and drops the latter, out of sight.
		// RFC 9112 section 6.3 then requires closing the connection, so that
		// bytes a front proxy counted as body are never read as a request.
		w.Header().Set("Connection", "close")
	}
	// Read the token before ReverseProxy touches any header.
	t, err := TokenFromHeader(r.Header, p.opts.TokenHeader)
	token := "" // for logs and problem bodies
	if err == nil {
		token = strconv.FormatUint(t, 10)
	}
	if terr := checkTarget(r); terr != nil {
		p.refuse(w, r, "", token, terr)
		return
	}
	if herr := p.checkHopByHop(r); herr != nil {
		p.refuse(w, r, "", token, herr)
		return
	}
	if p.unfencedRequest(r) || (errors.Is(err, ErrTokenMissing) && p.opts.AllowMissing) {
		p.opts.Metrics.decision("unfenced")
		defer p.opts.Metrics.forwarding(false)()
		p.rp.ServeHTTP(w, r)
		return
	}
	resources, rerr := p.resources(r)
	if err == nil {
		err = rerr
	}
	resource := ""
	if len(resources) > 0 {
		resource = resources[0]
	}
	if p.opts.Observe {
		p.observe(w, r, resources, t, token, err)
		return
	}
	if err == nil {
		var unsigned string
		if unsigned, err = p.checkSignature(r, resources, t); err != nil {
			resource = unsigned
		}
	}
	if err != nil {
		p.refuse(w, r, resource, token, err)
		return
	}
	// The body stays unread until the request is admitted: a stale client that
	// sent Expect: 100-continue never uploads.
	fw := &forwardedWrite{client: r.Context(), resource: resource, token: token}
	fw.fl = &fw.flight
	fw.fl.token = t
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		fw.fl.body.Store(bodySent)
	} else {
		fw.body = &fw.upload
		fw.upload.init(w, r, fw.fl, p.opts.UploadIdleTimeout)
	}
	var release func()
	if len(resources) == 1 {
		release, err = p.fence.admit(r.Context(), resource, t, fw.fl, new(<-chan time.Time))
	} else {
		release, err = p.fence.admitAll(r.Context(), resources, t, fw.fl)
	}
	if err != nil {
		p.refuse(w, r, resource, token, err)
		return
	}
	defer release()
	p.opts.Metrics.decision("forwarded")
	defer p.opts.Metrics.forwarding(true)()
	if fw.body != nil {
		r.Body = fw.body
	}
	// Once forwarded, a write runs to the backend's answer even if its client
	// hangs up: the backend may already be applying it, and the barrier must
	// not open for a larger token before it is done. A client gone mid-upload
	// still ends the exchange, since its body can no longer be read.
	ctx := context.WithValue(context.WithoutCancel(fw.client), forwardedKey{}, fw)
	sent := &fw.wrote
	if replayable(r) {
		fw.traced = true
		// net/http's Transport silently sends such a request again when a
		// reused connection fails after sending it; the first copy may still
		// be applied, so the write counts as abandoned.
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { sent.Add(1) }})
		defer func() {
			if sent.Load() > 1 && p.opts.AbandonGrace > 0 {
				fw.fl.abandoned.Store(true)
				p.log.LogAttrs(fw.client, slog.LevelWarn, "the upstream client sent the write twice; "+
					"larger tokens on its resource wait the abandon grace, as the backend may apply the first copy late",
					slog.String("resource", resource), slog.String("token", token), slog.String("method", r.Method),
					slog.String("target", logTarget(r)), slog.String("abandon_grace", p.opts.AbandonGrace.String()))
			}
		}()
	}
	r = r.WithContext(ctx)
	defer func() {
		if fw.client.Err() != nil && !fw.answered {
			p.log.LogAttrs(fw.client, slog.LevelInfo, "client went away before the answer",
				slog.Int("status", 499), slog.String("resource", resource), slog.String("token", token),
				slog.String("method", r.Method), slog.String("target", logTarget(r)))
		}
	}()
	p.rp.ServeHTTP(w, r)
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

// forwardedWrite is a fenced write being forwarded, as upstreamError sees it
// through the request's context.
type forwardedWrite struct {
	client          context.Context // the client's own context (the forwarded one never ends early)
	fl              *flight
	body            *uploadBody // nil: no body
	resource, token string
	answered        bool         // upstreamError answered the client itself (cut or idle upload)
	traced          bool         // wrote counts the copies sent (the write is replayable)
	wrote           atomic.Int32 // copies of the request written upstream, when traced

	flight flight     // what fl points to (one allocation for the three)
	upload uploadBody // what body points to, when there is a body
}

type forwardedKey struct{}

// forwarded returns the forwarded write of r, nil for unfenced requests.
func forwarded(r *http.Request) *forwardedWrite {
	fw, _ := r.Context().Value(forwardedKey{}).(*forwardedWrite)
	return fw
}

// methodOverrideHeaders ask some backends (Rails, Express's method-override,
// Google APIs) to run another method than the request line's.
var methodOverrideHeaders = []string{"X-Http-Method-Override", "X-Http-Method", "X-Method-Override"}

func isMethodOverride(name string) bool {
	return slices.Contains(methodOverrideHeaders, http.CanonicalHeaderKey(name))
}

// methods returns the request line's method and every method an override
// header asks for (upper-cased: frameworks compare them so).
func methods(r *http.Request) []string {
	ms := []string{r.Method}
	for _, h := range methodOverrideHeaders {
		for _, v := range r.Header[h] {
			for m := range strings.SplitSeq(v, ",") {
				ms = append(ms, strings.ToUpper(strings.TrimSpace(m)))
			}
		}
	}
	return ms
}

func hasMethodOverride(r *http.Request) bool {
	for _, h := range methodOverrideHeaders {
		if _, ok := r.Header[h]; ok {
			return true
		}
	}
	return false
}

// unfencedRequest reports whether every method the request may run as (its
// own and any override header's) is unfenced: a GET asking the backend to
// DELETE is fenced like the DELETE.
func (p *Proxy) unfencedRequest(r *http.Request) bool {
	if !hasMethodOverride(r) {
		return p.unfenced[r.Method] // the common case, without allocating
	}
	for _, m := range methods(r) {
		if !p.unfenced[m] {
			return false
		}
	}
	return true
}

// resources returns the resource keys a fenced write touches: its path's, and
// for a WebDAV COPY or MOVE also its Destination's. ErrBadResource for a path
// the fence cannot name; ErrUnsupported for S3 writes whose key is in the body.
func (p *Proxy) resources(r *http.Request) ([]string, error) {
	if err := CheckRawPath(rawPath(r)); err != nil {
		return nil, err
	}
	key, err := ResourceKey(r.URL.Path, p.opts.ResourceDepth)
	if err != nil {
		return nil, err
	}
	if r.Method == http.MethodPost || (hasMethodOverride(r) && slices.Contains(methods(r), http.MethodPost)) {
		if bulkDelete(r.URL.RawQuery) {
			return []string{key}, ErrUnsupported
		}
		if formUpload(r, key) {
			return []string{key}, ErrFormUpload
		}
	}
	keys := []string{key}
	for _, dest := range r.Header.Values("Destination") {
		u, err := url.Parse(dest)
		if err != nil || !strings.HasPrefix(u.Path, "/") {
			// RFC 4918 10.3: an absolute URI or an absolute path; a backend
			// would resolve a relative one against a path the fence cannot know.
			return keys, fmt.Errorf("%w: Destination %q is not an absolute URL or absolute path", ErrBadResource, dest)
		}
		// Check the header as sent: url.Parse re-escapes "\\", which other
		// parsers read as "/".
		if err := CheckRawPath(dest); err != nil {
			return keys, fmt.Errorf("Destination: %w", err)
		}
		dk, err := ResourceKey(u.Path, p.opts.ResourceDepth)
		if err != nil {
			return keys, fmt.Errorf("Destination: %w", err)
		}
		keys = append(keys, dk)
	}
	return keys, nil
}

// CheckRawPath refuses a raw (still percent-encoded) path with bytes that
// backends read as something else than a path byte: raw "\\" (a slash to
// WHATWG URL parsers), raw "#" (a fragment), raw spaces, and control bytes raw
// or percent-encoded. Otherwise a stale write could reach an object under an
// alias the fence does not know. Encoded "%5C", "%23" and "%20" are ordinary
// key bytes (S3 keys may hold them) and pass. ErrBadResource.
func CheckRawPath(raw string) error {
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c <= ' ' || c == 0x7f || c == '\\' || c == '#' {
			return fmt.Errorf("%w: byte %q is not allowed in a path", ErrBadResource, c)
		}
		if c == '%' && i+2 < len(raw) && (raw[i+1] == '0' || raw[i+1] == '1' || strings.EqualFold(raw[i+1:i+3], "7f")) {
			return fmt.Errorf("%w: encoded control byte %q in the path", ErrBadResource, raw[i:i+3])
		}
	}
	return nil
}

// formUpload reports an S3 "POST Object" browser upload: a multipart form
// POSTed to a bucket, naming the object's key in a form field.
func formUpload(r *http.Request, key string) bool {
	ct := strings.ToLower(r.Header.Get("Content-Type"))
	return strings.HasPrefix(ct, "multipart/form-data") && !strings.Contains(strings.TrimSuffix(key, "/"), "/")
}

// responseWriter keeps the backend's response as it was: it drops the
// backend's "100 Continue", which ReverseProxy relays although net/http sends
// its own when the body is first read (a client should get one, not two), and
// it stops net/http from sniffing a Content-Type the backend did not send.
type responseWriter struct{ http.ResponseWriter }

func (w responseWriter) WriteHeader(code int) {
	if code == http.StatusContinue {
		return
	}
	if h := w.Header(); code >= 200 {
		if _, ok := h["Content-Type"]; !ok {
			h["Content-Type"] = nil // present but empty: net/http sends none and sniffs none
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach Flush and deadlines.
func (w responseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// ErrFormUpload: an S3 browser upload (POST Object: a multipart form POSTed to
// a bucket) names its key in the body; it is refused like a bulk delete (400).
var ErrFormUpload = fmt.Errorf("%w: S3 POST Object (form upload) names its key in the body; upload with PUT", errUnsupported)

// ErrUnsupported: S3 multi-object delete (POST /{bucket}?delete) names its keys
// in the body, where the fence cannot see them; it is refused, whatever the
// token, rather than forwarded unfenced (400). Delete objects one by one.
var ErrUnsupported = fmt.Errorf("%w: S3 multi-object delete (POST ?delete) names its keys in the body; delete the objects one by one", errUnsupported)

// errUnsupported is the class of writes the fence cannot see the target of.
var errUnsupported = errors.New("write cannot be fenced")

// bulkDelete reports whether a raw query has a "delete" parameter, splitting
// on both "&" and ";" since backends disagree on the latter.
func bulkDelete(rawQuery string) bool {
	for _, part := range strings.FieldsFunc(rawQuery, func(r rune) bool { return r == '&' || r == ';' }) {
		name, _, _ := strings.Cut(part, "=")
		if unescaped, err := url.QueryUnescape(name); err == nil {
			name = unescaped
		}
		if strings.EqualFold(name, "delete") { // S3 is case-sensitive; some backends are not
			return true
		}
	}
	return false
}

// checkTarget accepts origin-form request targets ("/path"), and "*" for
// OPTIONS. Absolute-form ("http://host/path") is for forward proxies and
// authority-form for CONNECT tunnels: fenceproxy is neither, and would
// otherwise forward them to its upstream under another Host. ErrBadResource.
func checkTarget(r *http.Request) error {
	switch uri := r.RequestURI; {
	case strings.HasPrefix(uri, "/"): // also every HTTP/2 request but CONNECT
		return nil
	case uri == "*" && r.Method == http.MethodOptions:
		return nil
	case uri == "*":
		return fmt.Errorf("%w: the target * is only for OPTIONS", ErrBadResource)
	default:
		return fmt.Errorf("%w: target %.64q is not a path; fenceproxy is a reverse proxy, not a forward proxy or tunnel: send the path only", ErrBadResource, uri)
	}
}

// ErrHopByHop: a Connection header names a header the fence relies on, or the
// request asks for a protocol upgrade whose later bytes would skip the fence (400).
var ErrHopByHop = errors.New("hop-by-hop header would bypass the fence")

func (p *Proxy) checkHopByHop(r *http.Request) error {
	if len(r.Header.Values("Upgrade")) > 0 {
		return fmt.Errorf("%w: protocol upgrades are not forwarded", ErrHopByHop)
	}
	for _, v := range r.Header.Values("Connection") {
		for name := range strings.SplitSeq(v, ",") {
			name = strings.TrimSpace(name)
			if strings.EqualFold(name, p.opts.TokenHeader) || strings.EqualFold(name, HeaderSignature) ||
				strings.EqualFold(name, "Host") || strings.EqualFold(name, "Destination") || isMethodOverride(name) {
				return fmt.Errorf("%w: Connection names %s", ErrHopByHop, name)
			}
		}
	}
	return nil
}

// forwardedHeaders are dropped by ReverseProxy when Rewrite is set; the client's
// own values are put back so the backend sees (and signatures cover) them unchanged.
var forwardedHeaders = []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"}

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
}

// rawPath returns the path of the request target exactly as received.
func rawPath(r *http.Request) string {
	uri := r.RequestURI
	if !strings.HasPrefix(uri, "/") {
		return r.URL.EscapedPath()
	}
	if i := strings.IndexByte(uri, '?'); i >= 0 {
		uri = uri[:i]
	}
	return uri
}

// upstreamError maps a failed upstream exchange: upload cut off by a larger
// token -> 409, upload paused past the idle timeout -> 408, client gone -> 499
// (logged only), timeout -> 504, anything else -> 502. Nothing is retried: a
// write may have reached the backend. A write whose whole body was handed to
// the backend is abandoned: it keeps its resource's barrier closed for the
// abandon grace, since a slow backend may still apply it.
func (p *Proxy) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	fw := forwarded(r)
	if fw != nil && fw.body != nil {
		if why := fw.body.stopReason(); why != nil {
			p.uploadStopped(w, r, fw, why)
			return
		}
	}
	status, kind := http.StatusBadGateway, "other"
	gone := r.Context().Err() != nil
	if fw != nil {
		gone = fw.client.Err() != nil
	}
	var ne net.Error
	switch {
	case gone:
		status, kind = 499, "client_gone" // nobody reads a response
	case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()):
		status, kind = http.StatusGatewayTimeout, "timeout"
	}
	p.opts.Metrics.upstreamError(kind)
	// A dial error means the last attempt sent nothing; an earlier copy of a
	// replayable write may have gone out on a reused connection.
	abandoned := fw != nil && fw.fl.body.Load() == bodySent && p.opts.AbandonGrace > 0 &&
		(!dialError(err) || (fw.traced && fw.wrote.Load() > 0))
	if abandoned {
		fw.fl.abandoned.Store(true)
	}
	if gone && fw != nil && !abandoned {
		return // ServeHTTP logs a gone client of a forwarded write once, as 499
	}
	attrs := []slog.Attr{slog.String("method", r.Method), slog.String("target", logTarget(r)),
		slog.Int("status", status), slog.String("error", err.Error())}
	if abandoned {
		attrs = append(attrs, slog.String("resource", fw.resource), slog.String("token", fw.token),
			slog.String("abandon_grace", p.opts.AbandonGrace.String()))
		p.log.LogAttrs(r.Context(), slog.LevelWarn, "upstream exchange failed after the whole write was sent; "+
			"larger tokens on its resource wait the abandon grace, as the backend may still apply it", attrs...)
	} else {
		p.log.LogAttrs(r.Context(), slog.LevelWarn, "upstream exchange failed", attrs...)
	}
	if status == 499 {
		return
	}
	writeProblem(w, problem{Status: status, Title: http.StatusText(status),
		Detail: "the backend could not be reached or did not answer in time"})
}

// uploadStopped answers a write whose upload the proxy stopped before its
// end: the backend did not get the whole body, so it cannot apply it and the
// barrier opens at once.
func (p *Proxy) uploadStopped(w http.ResponseWriter, r *http.Request, fw *forwardedWrite, why error) {
	fw.answered = true
	attrs := []slog.Attr{slog.String("resource", fw.resource), slog.String("token", fw.token),
		slog.String("method", r.Method), slog.String("target", logTarget(r))}
	var pb problem
	switch why {
	case errUploadCut:
		p.opts.Metrics.upstreamError("upload_cut")
		current, _ := p.store.Max(fw.resource)
		pb, _ = p.problemFor(&StaleError{Resource: fw.resource, Token: fw.fl.token, Current: current})
		pb.Detail = errUploadCut.Error() + "; the backend did not get it whole"
		pb.Token = fw.token
		w.Header().Set(HeaderRefused, pb.Reason)
		w.Header().Set(HeaderCurrentToken, pb.CurrentToken)
		p.log.LogAttrs(r.Context(), slog.LevelInfo, "upload cut off by a larger token", append(attrs,
			slog.Int("status", pb.Status), slog.String("current_token", pb.CurrentToken))...)
	case errUploadIdle:
		p.opts.Metrics.upstreamError("upload_timeout")
		pb = problem{Status: http.StatusRequestTimeout, Title: "Request body timeout",
			Detail: "no body bytes arrived within the upload idle timeout; the upload was cut off and the backend did not get it whole"}
		p.log.LogAttrs(r.Context(), slog.LevelInfo, "upload cut off: client paused past the upload idle timeout",
			append(attrs, slog.Int("status", pb.Status), slog.String("upload_idle_timeout", p.opts.UploadIdleTimeout.String()))...)
	default:
		p.opts.Metrics.upstreamError("client_gone")
		p.log.LogAttrs(r.Context(), slog.LevelInfo, "client went away during the upload", append(attrs,
			slog.Int("status", 499), slog.String("error", why.Error()))...)
		return
	}
	w.Header().Set("Connection", "close") // the rest of the body is still on the wire
	writeProblem(w, pb)
}

// dialError reports a failure to connect to the backend: nothing was sent.
func dialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// copyBuffers lends ReverseProxy its 32 KiB body copy buffers: allocating one
// per request was the largest allocation of a small write (pprof).
var copyBuffers = &bufferPool{p: sync.Pool{New: func() any { return new([32 << 10]byte) }}}

type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte { return b.p.Get().(*[32 << 10]byte)[:] }
func (b *bufferPool) Put(s []byte) {
	if cap(s) >= 32<<10 {
		b.p.Put((*[32 << 10]byte)(s[:32<<10]))
	}
}
