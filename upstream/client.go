// Package upstream is fenceproxy's client for its one backend: an
// http.RoundTripper that sends the common request shape (HTTP/1.1 over plain
// TCP, a Content-Length body of at most SmallBodyMax bytes) through
// fasthttp's HostClient, which writes and reads on the calling goroutine, and
// everything else through a standard *http.Transport that New builds
// (HTTP/1.1 only, TLS 1.2 or newer, never through an HTTP_PROXY).
//
// Measured in the project's benchmark (docs/PERFORMANCE.md), the upstream
// client is where a Go proxy loses most of its time; net/http's Transport
// hands every request between three goroutines.
//
// Failures are classified where they arise, on both paths: when no
// connection to the backend could be made (DNS lookup, TCP connect, and for
// an https upstream the TLS handshake, which the Transport's dialer does
// itself for this reason), RoundTrip returns a *DialError, and nothing of the
// request was written; any other error may come after the backend got it.
//
// What the fast path keeps of net/http's behaviour: header names and values
// as given (canonical keys, one line per value, nothing added: no User-Agent,
// no Accept-Encoding), the request target as url.URL.RequestURI gives it,
// streamed request and response bodies, response trailers, the dial timeout
// (a *DialError) and the response-header timeout (an error whose Timeout() is
// true). What it does not do, and so leaves to the Transport: TLS, Expect:
// 100-continue, chunked or large request bodies, request trailers, protocol
// upgrades, requests whose httptrace asks for connection events. Like the
// Transport, the fast path sends a bodyless read (GET, HEAD) a second time
// when its connection closed before any answer, and never a write.
// Informational (1xx) responses are read and dropped.
//
// Every connection closes with a reset, never an orderly close (see
// dialer), and a request with a validity (WithValidUntil) ends with it on
// both paths.
package upstream

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"net/textproto"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

// SmallBodyMax is the largest request body (bytes, from Content-Length) the
// fast path sends. It fits the socket buffers, so a backend that answers
// before reading the body (a 403, a 413) is still heard; larger uploads go
// through the Transport, which reads the answer while it writes.
const SmallBodyMax = 64 << 10

// ErrPastValidity is RoundTrip's error for a request whose validity
// (WithValidUntil) had ended when it was to be written: nothing of it was
// written, and a caller may answer as if it was never sent.
var ErrPastValidity = errors.New("upstream: the request's validity ended before it was written; nothing was sent")

type validUntilKey struct{}

// WithValidUntil returns a copy of ctx for a request that may be in
// exchange with the backend only while its validity lasts: until the time
// validUntil returns (read right before the request is written; the zero
// time: no end), and until ctx is done, which the caller makes happen when
// the validity ends (however often it was renewed meanwhile). Past
// validUntil when the request is to be written, RoundTrip writes nothing and
// returns ErrPastValidity. Once written, the exchange ends when ctx is done,
// with a reset, on both paths: the Transport follows ctx; the fast path
// sends such a request's body from a stream whose first Read puts a watch on
// the connection fasthttp picked (a bodiless one goes through the
// Transport). fenceproxy's cluster mode gives a write's ownership this way.
func WithValidUntil(ctx context.Context, validUntil func() time.Time) context.Context {
	return context.WithValue(ctx, validUntilKey{}, validUntil)
}

// errValidityEnded fails a write system call of a request whose validity
// ended while it was being written (see guardConn).
var errValidityEnded = errors.New("upstream: the request's validity ended while it was being written")

// validityGuard is the guard (guardConn) of a request with a validity: an
// error once ctx is done or validUntil has passed; nil without a validity.
func validityGuard(r *http.Request) func() error {
	f, _ := r.Context().Value(validUntilKey{}).(func() time.Time)
	if f == nil {
		return nil
	}
	ctx := r.Context()
	return func() error {
		if ctx.Err() != nil {
			return errValidityEnded
		}
		if u := f(); !u.IsZero() && !time.Now().Before(u) {
			return errValidityEnded
		}
		return nil
	}
}

// MaxResponseHeaderBytes bounds a response's header block on the fast path
// (the same 64 KiB fenceproxy allows inbound); a larger one is a 502.
const MaxResponseHeaderBytes = 64 << 10

// Options configures a Client and the Transport under it. Durations are Go
// durations (5s, 250ms); a zero or negative one gets the default in brackets.
type Options struct {
	// FastPath sends requests of the common shape (see the package comment)
	// to an http upstream through fasthttp; false sends every request through
	// the Transport. An https upstream has no fast path either way.
	FastPath bool
	// DialTimeout bounds a connect (DNS lookup and TCP connect) and,
	// separately, an https upstream's TLS handshake
	// (FENCEPROXY_UPSTREAM_DIAL_TIMEOUT). Zero or negative: no bound but the
	// system's.
	DialTimeout time.Duration
	// ResponseTimeout bounds the wait for the response headers after the
	// request was written (http.Transport.ResponseHeaderTimeout), not the
	// body that follows. Zero or negative: no bound.
	ResponseTimeout time.Duration
	// IdleTimeout closes the fast path's keep-alive connections idle this
	// long; keep it below the backend's own idle timeout, since the fast path
	// does not resend a request that met a connection the backend had just
	// closed. The Transport's idle connections close after 90s. [10s]
	IdleTimeout time.Duration
	// RootCAs are the certificate authorities an https upstream's
	// certificate must chain to. nil: the system roots.
	RootCAs *x509.CertPool
	// UnsentMax bounds, in bytes, what the kernel holds unsent of a request
	// on each connection (TCP_NOTSENT_LOWAT on Linux; elsewhere ignored):
	// what it can still deliver after the process stopped
	// (FENCEPROXY_UPSTREAM_UNSENT_MAX). Zero or negative: the system's
	// send buffer (up to 4 MiB on Linux).
	UnsentMax int
	// ExpectContinueTimeout is how long the Transport holds back the body
	// of a request with Expect: 100-continue for the server's "100
	// Continue" or its answer (http.Transport.ExpectContinueTimeout). [1s]
	ExpectContinueTimeout time.Duration
}

func (o Options) withDefaults() Options {
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = 10 * time.Second
	}
	if o.ExpectContinueTimeout <= 0 {
		o.ExpectContinueTimeout = time.Second
	}
	return o
}

// Client is an http.RoundTripper for one upstream: a fast path for the
// common request shape and a Transport for the rest (see the package comment).
type Client struct {
	host     string // host:port dialled
	urlHost  string // the base URL's host, as requests to it carry it
	hc       *fasthttp.HostClient
	fallback http.RoundTripper // the Transport; tests put their own here
	timeout  time.Duration
	conns    sync.Map // netip.AddrPort (local) -> *conn, to clear a read deadline
}

// New returns a Client for base, the upstream's http or https URL (its
// scheme and host; the path is the caller's business). It builds both paths:
// the fast path only for an http base and opts.FastPath.
func New(base *url.URL, opts Options) *Client {
	opts = opts.withDefaults()
	return newClient(base, newTransport(opts), opts.FastPath, opts)
}

func newClient(base *url.URL, fallback http.RoundTripper, fast bool, opts Options) *Client {
	c := &Client{fallback: fallback, timeout: opts.ResponseTimeout}
	if !fast || base == nil || base.Scheme != "http" {
		return c
	}
	c.host, c.urlHost = base.Host, base.Host
	if base.Port() == "" {
		c.host = net.JoinHostPort(base.Hostname(), "80")
	}
	d := newDialer(opts)
	c.hc = &fasthttp.HostClient{
		Addr: c.host,
		Dial: func(addr string) (net.Conn, error) {
			nc, err := d.dialContext(context.Background(), "tcp", addr)
			if err != nil {
				return nil, err // a *DialError: nothing was sent
			}
			cn := &conn{Conn: nc, owner: c, gc: guardOf(nc)}
			if ap, ok := addrPort(nc.LocalAddr()); ok {
				cn.key = ap
				c.conns.Store(ap, cn)
			}
			return cn, nil
		},
		MaxConns:                      math.MaxInt32, // like the Transport: no cap per host
		MaxIdleConnDuration:           opts.IdleTimeout,
		ReadTimeout:                   opts.ResponseTimeout,
		ReadBufferSize:                MaxResponseHeaderBytes,
		MaxIdemponentCallAttempts:     math.MaxInt32, // bounded by retryIfErr
		RetryIfErr:                    c.retryIfErr,
		DisableHeaderNamesNormalizing: true,
		DisablePathNormalizing:        true,
		NoDefaultUserAgentHeader:      true,
		StreamResponseBody:            true,
	}
	return c
}

// retryIfErr sends a request again on another connection when the pooled
// one it took was found dead before anything was written (see
// deadAttempts), and a second time only as net/http's Transport would: a
// read (GET, HEAD, OPTIONS, TRACE; no body) whose connection closed before
// any answer, as happens when a backend restarted or dropped an idle
// connection. Writes are never resent (the first copy may be applied); the
// proxy sends replayable writes through the Transport, which reports resends.
func (c *Client) retryIfErr(req *fasthttp.Request, attempts int, err error) (resetTimeout, retry bool) {
	if errors.Is(err, errConnDead) {
		// Nothing was written: safe for any request.
		limit, ok := req.UserValue(deadLimitKey{}).(int)
		if !ok {
			limit = attempts - 1 + c.deadAttempts()
			req.SetUserValue(deadLimitKey{}, limit)
		}
		return false, attempts < limit
	}
	if attempts > 1 || req.IsBodyStream() || len(req.Body()) > 0 {
		return false, false
	}
	switch string(req.Header.Method()) {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
	default:
		return false, false
	}
	if !errors.Is(err, fasthttp.ErrConnectionClosed) && !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
		return false, false
	}
	req.SetUserValue(resentKey{}, true) // the first copy may have been written: see RoundTrip
	return false, true
}

// deadLimitKey holds a fast-path request's bound on its attempts, fixed at
// the first pooled connection it found dead (see deadAttempts).
type deadLimitKey struct{}

// resentKey marks a fast-path request that is being sent again after an
// attempt that may have reached the backend.
type resentKey struct{}

// CloseIdleConnections closes idle keep-alive connections of both paths.
func (c *Client) CloseIdleConnections() {
	if c.hc != nil {
		c.hc.CloseIdleConnections()
	}
	if ci, ok := c.fallback.(interface{ CloseIdleConnections() }); ok {
		ci.CloseIdleConnections()
	}
}

// Fast reports whether RoundTrip sends r through the fast path.
func (c *Client) Fast(r *http.Request) bool {
	if c.hc == nil || r.URL.Scheme != "http" || r.URL.Host != c.urlHost {
		return false
	}
	if r.Method == http.MethodConnect || r.Host == "" || r.URL.Opaque != "" || !strings.HasPrefix(r.URL.RawPath+r.URL.Path, "/") {
		return false
	}
	if strings.Contains(r.URL.RawQuery, "#") || strings.Contains(r.URL.RawPath, "#") {
		return false // fasthttp would cut the target at "#" (a fragment); net/http sends it as is
	}
	if r.URL.ForceQuery && r.URL.RawQuery == "" {
		return false // fasthttp would drop a bare "?"; net/http sends it
	}
	if r.ContentLength < 0 || r.ContentLength > SmallBodyMax || len(r.TransferEncoding) > 0 || len(r.Trailer) > 0 || r.Close {
		return false
	}
	if r.ContentLength == 0 {
		if r.Body != nil && r.Body != http.NoBody {
			return false // a body of unknown length
		}
		if r.Context().Value(validUntilKey{}) != nil && protected("validity") {
			return false // no body to hang the exchange's watch on (see WithValidUntil)
		}
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch:
			// fasthttp frames these without a body as net/http does: no
			// Content-Length for GET and HEAD, "Content-Length: 0" for the rest.
		default:
			return false // fasthttp would add "Content-Length: 0"; net/http does not
		}
	}
	for _, h := range [...]string{"Expect", "Upgrade", "Transfer-Encoding", "Trailer", "Connection"} {
		if _, ok := r.Header[h]; ok {
			return false
		}
	}
	if t := httptrace.ContextClientTrace(r.Context()); t != nil && wantsConnEvents(t) {
		return false
	}
	return true
}

// wantsConnEvents reports a trace that asks for events only net/http's
// Transport reports (ReverseProxy's own trace asks for 1xx responses only).
func wantsConnEvents(t *httptrace.ClientTrace) bool {
	return t.GetConn != nil || t.GotConn != nil || t.PutIdleConn != nil || t.GotFirstResponseByte != nil ||
		t.Got100Continue != nil || t.DNSStart != nil || t.DNSDone != nil || t.ConnectStart != nil ||
		t.ConnectDone != nil || t.TLSHandshakeStart != nil || t.TLSHandshakeDone != nil ||
		t.WroteHeaderField != nil || t.WroteHeaders != nil || t.Wait100Continue != nil || t.WroteRequest != nil
}

// RoundTrip implements http.RoundTripper. Errors: a *DialError when no
// connection could be made and nothing of the request was written; an error
// whose Timeout() is true when the response headers did not come within
// ResponseTimeout; otherwise the request may have reached the backend.
func (c *Client) RoundTrip(r *http.Request) (*http.Response, error) {
	if !c.Fast(r) {
		return c.roundTripFallback(r)
	}
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	req.Header.DisableSpecialHeader() // send exactly the headers below
	req.Header.DisableNormalizing()
	req.UseHostHeader = true
	req.Header.SetMethod(r.Method)
	// An absolute URI keeps a leading "//" in the path a path and not a host;
	// the request line is its path and query, byte for byte.
	req.SetRequestURI("http://" + c.host + r.URL.RequestURI())
	req.Header.Add("Host", r.Host)
	if ua := r.Header["User-Agent"]; len(ua) > 0 && ua[0] != "" {
		req.Header.Add("User-Agent", ua[0]) // net/http sends the first, and none when empty
	}
	for k, vs := range r.Header {
		switch k {
		case "Host", "User-Agent", "Content-Length":
			continue
		}
		for _, v := range vs {
			// As net/http writes values: surrounding blanks off, line breaks
			// as spaces (inbound values have neither; this keeps the paths alike).
			req.Header.Add(k, headerValue.Replace(textproto.TrimString(v)))
		}
	}
	var watched *watchedBody // a write with a validity: see WithValidUntil
	if r.ContentLength > 0 {
		// The body is read whole before anything goes upstream: a stalled or
		// cut upload then never reaches the backend at all, and a request
		// that met a dead keep-alive connection can be sent on another.
		buf := getBodyBuffer(int(r.ContentLength))
		defer putBodyBuffer(buf)
		_, err := io.ReadFull(r.Body, buf[:r.ContentLength])
		r.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("upstream: reading the request body: %w", err)
		}
		body := buf[:r.ContentLength]
		if f, _ := r.Context().Value(validUntilKey{}).(func() time.Time); f != nil && protected("validity") {
			watched = &watchedBody{client: c, ctx: r.Context(), body: body, guard: validityGuard(r)}
			// The last moment to refuse: nothing is written yet.
			if until := f(); !until.IsZero() && !time.Now().Before(until) {
				return nil, ErrPastValidity
			}
		} else {
			req.SetBodyRaw(body)
			// setRawBodyFraming adds the Content-Length line for a raw body.
		}
	} else if r.Body != nil {
		r.Body.Close()
	}

	resp := fasthttp.AcquireResponse()
	resp.Header.SetNoDefaultContentType(true)
	var err error
	if watched != nil {
		err = watched.do(req, resp)
	} else {
		err = c.hc.Do(req, resp)
	}
	if err != nil {
		fasthttp.ReleaseResponse(resp)
		return nil, c.mapError(err, req.UserValue(resentKey{}) != nil, watched)
	}
	body := resp.BodyStream()
	if body != nil {
		// Do returned with the headers: the response-header timeout is over
		// and the body streams without one, as with the Transport.
		if ap, ok := addrPort(resp.LocalAddr()); ok {
			if cn, ok := c.conns.Load(ap); ok {
				cn.(*conn).SetReadDeadline(time.Time{})
			}
		}
	}
	out := &http.Response{
		Status:        statusLine(resp.StatusCode()),
		StatusCode:    resp.StatusCode(),
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        make(http.Header, resp.Header.Len()),
		ContentLength: int64(resp.Header.ContentLength()),
		Close:         resp.ConnectionClose(),
		Request:       r,
	}
	for k, v := range resp.Header.All() {
		key := headerKey(k)
		switch key {
		case "Transfer-Encoding":
			out.TransferEncoding = []string{"chunked"}
			continue
		case "Trailer":
			continue
		}
		out.Header[key] = append(out.Header[key], string(v))
	}
	if out.ContentLength < 0 {
		out.ContentLength = -1
	}
	for k := range resp.Header.Trailers() {
		if out.Trailer == nil {
			out.Trailer = make(http.Header)
		}
		out.Trailer[http.CanonicalHeaderKey(string(k))] = nil
	}
	if body == nil || r.Method == http.MethodHead {
		out.Body = http.NoBody
		if body != nil {
			resp.CloseBodyStream()
		}
		fasthttp.ReleaseResponse(resp)
		return out, nil
	}
	rb := &responseBody{resp: resp, body: body, out: out}
	if r.Context().Done() != nil {
		// A client that goes away ends the exchange, as with the Transport.
		// (A fenced write's context ends only with its validity.)
		rb.stop = context.AfterFunc(r.Context(), rb.abort)
	}
	out.Body = rb
	return out, nil
}

var headerValue = strings.NewReplacer("\n", " ", "\r", " ")

// statusLines holds http.Response.Status for the codes 100 to 599, built
// once: formatting it per response was a visible allocation (pprof).
var statusLines = func() (s [600]string) {
	for c := 100; c < len(s); c++ {
		s[c] = strconv.Itoa(c) + " " + http.StatusText(c)
	}
	return s
}()

// statusLine returns http.Response.Status for code, as net/http forms it.
func statusLine(code int) string {
	if code >= 100 && code < len(statusLines) {
		return statusLines[code]
	}
	return strconv.Itoa(code) + " " + http.StatusText(code)
}

// headerKey returns the canonical form of a response header name; the
// names every response carries come without an allocation.
func headerKey(k []byte) string {
	switch string(k) { // no allocation for the comparison
	case "Content-Length":
		return "Content-Length"
	case "Content-Type":
		return "Content-Type"
	case "Date":
		return "Date"
	case "Server":
		return "Server"
	case "Etag", "ETag":
		return "Etag"
	case "Connection":
		return "Connection"
	case "Last-Modified":
		return "Last-Modified"
	case "X-Amz-Request-Id":
		return "X-Amz-Request-Id"
	case "X-Amz-Id-2":
		return "X-Amz-Id-2"
	}
	return http.CanonicalHeaderKey(string(k))
}

// mapError gives fasthttp's errors the shapes net/http's Transport gives:
// a timeout is a net.Error whose Timeout() is true. resent: an earlier
// attempt may have reached the backend. watched: the request's validity
// watch, nil if none.
func (c *Client) mapError(err error, resent bool, watched *watchedBody) error {
	if watched != nil && watched.ended() {
		return fmt.Errorf("upstream: the request's validity ended before the response headers: %w", context.Cause(watched.ctx))
	}
	if errors.Is(err, fasthttp.ErrTimeout) {
		return fmt.Errorf("upstream: no response headers within %s: %w", c.timeout, os.ErrDeadlineExceeded)
	}
	var de *DialError
	if resent && errors.As(err, &de) {
		return resendFailed(de)
	}
	return err
}

// watchedBody sends a fast-path write that has a validity (WithValidUntil)
// as a body stream: at its first Read fasthttp has picked the connection and
// named it in the response (Response.LocalAddr), so the exchange's watch
// goes on that connection (conn.startWatch): when ctx is done while the
// exchange still holds the connection, the connection's deadline is set to
// now, which ends the exchange wherever it is and closes the connection (a
// reset), and marks the connection so that it is never used again. A watch
// that fires later does nothing: the connection may carry another exchange
// by then. fasthttp does not resend a body stream, so do sends again itself
// when a pooled connection was found dead before anything was written.
type watchedBody struct {
	client *Client
	ctx    context.Context
	body   []byte
	guard  func() error // validityGuard, put on the connection's writes

	resp *fasthttp.Response
	cn   *conn // the connection watched, once known
	r    bytes.Reader
	stop func() bool // ends the watch; nil until the first Read
	cut  atomic.Bool // the watch fired
}

func (b *watchedBody) Read(p []byte) (int, error) {
	if b.stop == nil {
		b.stop = func() bool { return true }
		if ap, ok := addrPort(b.resp.LocalAddr()); ok {
			if cn, ok := b.client.conns.Load(ap); ok {
				cn := cn.(*conn)
				b.cn = cn
				cn.startWatch(b)
				b.stop = context.AfterFunc(b.ctx, func() {
					b.cut.Store(true)
					cn.cutBy(b)
				})
			}
		}
	}
	return b.r.Read(p)
}

// ended reports whether the watch cut the exchange.
func (b *watchedBody) ended() bool { return b.cut.Load() }

// do sends req with b as its body stream, again on another connection
// (see deadAttempts) while a pooled one is found dead before anything of
// the request was written on it.
func (b *watchedBody) do(req *fasthttp.Request, resp *fasthttp.Response) error {
	limit := b.client.deadAttempts()
	for attempt := 1; ; attempt++ {
		b.resp, b.stop, b.cn = resp, nil, nil
		b.r.Reset(b.body)
		req.SetBodyStream(b, len(b.body))
		err := b.client.hc.Do(req, resp)
		if b.stop != nil {
			b.stop()
		}
		if b.cn != nil {
			b.cn.endWatch(b)
			if err == nil && b.cn.cut.Load() {
				// Cut after its answer had come: the exchange is over, but
				// the connection must not go back to the pool.
				resp.SetConnectionClose()
			}
		}
		if !errors.Is(err, errConnDead) || attempt >= limit || b.ended() {
			return err
		}
	}
}

// roundTripFallback sends r through the Transport, noting whether any
// attempt wrote it: the Transport resends some requests on a new connection
// after a reused one failed, possibly after writing them on it. Whatever
// ends the exchange early (a body whose Read fails, ctx cancelled) closes
// the connection, which resets it (see dialer).
func (c *Client) roundTripFallback(r *http.Request) (*http.Response, error) {
	var wrote atomic.Bool
	var conn atomic.Pointer[net.Conn]
	guard := validityGuard(r)
	if !protected("validity") {
		guard = nil
	}
	ctx := httptrace.WithClientTrace(r.Context(), &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) {
			conn.Store(&info.Conn)
			if gc := guardOf(info.Conn); gc != nil {
				gc.setGuard(guard) // nil clears a guard left by the connection's last request
			}
		},
		// Also called when the write failed: part of it may have gone out.
		WroteRequest: func(httptrace.WroteRequestInfo) { wrote.Store(true) },
	})
	resp, err := c.fallback.RoundTrip(r.WithContext(ctx))
	if err != nil {
		var de *DialError
		if wrote.Load() && errors.As(err, &de) {
			err = resendFailed(de)
		}
		return nil, err
	}
	resp.Request = r
	if resp.TLS == nil {
		// The Transport takes the state from a *tls.Conn only.
		if c := conn.Load(); c != nil {
			if tc, ok := (*c).(tlsConn); ok {
				cs := tc.ConnectionState()
				resp.TLS = &cs
			}
		}
	}
	return resp, nil
}

// resendFailed is the error of a resend that could not connect after an
// earlier attempt may have reached the backend: neither a DialError nor a
// dial *net.OpError, so that no caller takes it for "nothing was sent".
func resendFailed(de *DialError) error {
	return fmt.Errorf("upstream: the request may have been written on a connection that then failed, "+
		"and sending it again could not connect: %v", de.Err)
}

// responseBody streams a fast-path response body; at its end it fills the
// trailers, which ReverseProxy copies after the body.
type responseBody struct {
	resp *fasthttp.Response
	body io.Reader
	out  *http.Response
	done bool
	stop func() bool // ends the context watch; nil: none

	mu     sync.Mutex // abort against Close
	closed bool
}

func (b *responseBody) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	n, err := b.body.Read(p)
	if err == io.EOF {
		b.done = true
		// Names as the backend sent them, announced or not, as net/http does.
		for k := range b.resp.Header.Trailers() {
			key := http.CanonicalHeaderKey(string(k))
			if b.out.Trailer == nil {
				b.out.Trailer = make(http.Header)
			}
			b.out.Trailer[key] = nil
			for _, v := range b.resp.Header.PeekAll(string(k)) {
				b.out.Trailer[key] = append(b.out.Trailer[key], string(v))
			}
		}
	}
	return n, err
}

// abort closes the connection under a Read in progress: the client went away.
func (b *responseBody) abort() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed {
		if c, ok := b.body.(interface{ CloseWithError(error) error }); ok {
			_ = c.CloseWithError(context.Canceled)
		}
	}
}

// Close returns a fully read connection to the pool and closes any other.
func (b *responseBody) Close() error {
	if b.stop != nil {
		b.stop()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	err := b.resp.CloseBodyStream()
	fasthttp.ReleaseResponse(b.resp)
	return err
}

// maxAttempts bounds the attempts of one request beyond the connections
// open: dead pooled connections (a backend restart closes them all) are
// skipped without a send, each closed as it is found, so a request gets
// through a pool of any size; the rest as retryIfErr says.
const maxAttempts = 8

// bodyBuffers hold a fast-path body while it is read whole, in three size
// classes: a slow client holds its buffer for as long as it takes, and a
// 1 KiB body held in 64 KiB was most of what a slow upload cost (issue 29).
var (
	bodyBuffers4K  = sync.Pool{New: func() any { return new([4 << 10]byte) }}
	bodyBuffers16K = sync.Pool{New: func() any { return new([16 << 10]byte) }}
	bodyBuffers    = sync.Pool{New: func() any { return new([SmallBodyMax]byte) }}
)

// getBodyBuffer lends a buffer of at least n bytes (at most SmallBodyMax);
// putBodyBuffer takes it back.
func getBodyBuffer(n int) []byte {
	switch {
	case n <= 4<<10:
		return bodyBuffers4K.Get().(*[4 << 10]byte)[:]
	case n <= 16<<10:
		return bodyBuffers16K.Get().(*[16 << 10]byte)[:]
	}
	return bodyBuffers.Get().(*[SmallBodyMax]byte)[:]
}

func putBodyBuffer(b []byte) {
	switch len(b) {
	case 4 << 10:
		bodyBuffers4K.Put((*[4 << 10]byte)(b))
	case 16 << 10:
		bodyBuffers16K.Put((*[16 << 10]byte)(b))
	case SmallBodyMax:
		bodyBuffers.Put((*[SmallBodyMax]byte)(b))
	}
}

// deadAttempts is how many attempts a request may spend on pooled
// connections found dead before anything was written on them, counted from
// when it takes its first: every connection open then, and maxAttempts
// more.
func (c *Client) deadAttempts() int { return maxAttempts + c.hc.ConnsCount() }

// errConnDead: a pooled connection was found closed, or holding bytes no
// request asked for, before anything of the request was written on it.
var errConnDead = errors.New("upstream: pooled connection closed by the backend (nothing sent on it)")

// conn is a fast-path connection, known by its local address so that
// RoundTrip can find it after fasthttp's Do. Before a request reuses it, it
// checks that the backend has not closed it and sent nothing unasked since
// the last response, as net/http's Transport notices with its read loop: a
// request sent on a closed connection fails after it may have been written,
// and stray bytes would be read as the next request's response.
type conn struct {
	net.Conn
	owner *Client
	key   netip.AddrPort
	gc    *guardConn // under it; nil if none
	once  sync.Once
	read  bool // a response was read since the last write: the next write starts a request on a reused connection
	// cut: a validity watch set a past deadline on it (watchedBody); it
	// may be back in the pool, but is never written on again.
	cut atomic.Bool

	// The watch on the exchange that holds the connection (startWatch):
	// watch is its watchedBody, armed once the exchange wrote on the
	// connection (a watch still armed when the next request starts is the
	// last exchange's, and ends there). watched mirrors watch != nil, for
	// the writes and deadlines of connections without one.
	wmu     sync.Mutex
	watch   *watchedBody
	armed   bool
	watched atomic.Bool
}

func (c *conn) Read(p []byte) (int, error) {
	c.read = true
	return c.Conn.Read(p)
}

func (c *conn) Write(p []byte) (int, error) {
	if c.cut.Load() {
		return 0, errConnDead
	}
	next := c.read // a new request starts on the reused connection
	if c.read {
		c.read = false
		if !idle(c.Conn) {
			return 0, errConnDead
		}
	}
	if c.watched.Load() {
		c.wmu.Lock()
		if next && c.armed {
			c.endWatchLocked() // the last exchange's
		}
		c.armed = c.watch != nil
		c.wmu.Unlock()
	}
	return c.Conn.Write(p)
}

// startWatch makes b the watch of the exchange that holds c now, with its
// guard on c's writes.
func (c *conn) startWatch(b *watchedBody) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.watch, c.armed = b, false
	c.watched.Store(true)
	if c.gc != nil {
		c.gc.setGuard(b.guard)
	}
}

// endWatch ends b's watch on c, if c still has it.
func (c *conn) endWatch(b *watchedBody) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.watch == b {
		c.endWatchLocked()
	}
}

func (c *conn) endWatchLocked() {
	c.watch, c.armed = nil, false
	c.watched.Store(false)
	if c.gc != nil {
		c.gc.setGuard(nil)
	}
}

// cutBy ends the exchange on c when b's watch fired while it holds c: a
// past deadline, and c is never written on again.
func (c *conn) cutBy(b *watchedBody) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.watch != b {
		return
	}
	c.cut.Store(true)
	_ = c.Conn.SetDeadline(time.Now())
}

// SetReadDeadline, SetWriteDeadline and SetDeadline keep a cut
// connection's deadline past: fasthttp sets the read deadline after it
// wrote the request, which would otherwise undo a cut made meanwhile.
func (c *conn) SetReadDeadline(t time.Time) error {
	return c.setDeadline(t, c.Conn.SetReadDeadline)
}

func (c *conn) SetWriteDeadline(t time.Time) error {
	return c.setDeadline(t, c.Conn.SetWriteDeadline)
}

func (c *conn) SetDeadline(t time.Time) error {
	return c.setDeadline(t, c.Conn.SetDeadline)
}

func (c *conn) setDeadline(t time.Time, set func(time.Time) error) error {
	if !c.watched.Load() && !c.cut.Load() {
		return set(t) // no watch can cut it meanwhile: startWatch runs on the exchange's goroutine
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.cut.Load() {
		t = time.Now()
	}
	return set(t)
}

func (c *conn) Close() error {
	c.once.Do(func() {
		if c.key.IsValid() {
			c.owner.conns.Delete(c.key)
		}
	})
	return c.Conn.Close()
}

func addrPort(a net.Addr) (netip.AddrPort, bool) {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.AddrPort(), true
	}
	return netip.AddrPort{}, false
}
