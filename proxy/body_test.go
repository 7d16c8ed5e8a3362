package proxy_test

// Request body tests: a body the client broke (bad chunked framing, cut short
// before a half-close, an HTTP/2 stream shorter than its content-length) is
// never answered 2xx and never reaches the backend whole; an exchange the
// proxy could not complete is never an empty 200; request trailers reach the
// backend with their values. Over raw HTTP/1.1 connections and HTTP/2 (TLS
// with ALPN, as the proxy listener serves it), on the fast path and the
// streamed path.

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/fenceproxy/fenceproxy/fence"
	"github.com/fenceproxy/fenceproxy/proxy"
	"github.com/fenceproxy/fenceproxy/wire"
)

// bodySeen is a request whose whole body the backend read: one it could apply.
type bodySeen struct {
	Method, Path, Token, Body, ContentLength string
	Trailer                                  http.Header
}

// bodyBackend records the requests whose body arrived whole, with their
// trailers, and counts those whose body did not (never applied).
type bodyBackend struct {
	*httptest.Server
	mu     sync.Mutex
	whole  []bodySeen
	broken int
}

func newBodyBackend(t *testing.T) *bodyBackend {
	t.Helper()
	b := &bodyBackend{}
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		b.mu.Lock()
		defer b.mu.Unlock()
		if err != nil {
			b.broken++
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		b.whole = append(b.whole, bodySeen{Method: r.Method, Path: r.URL.Path, Token: r.Header.Get("X-Fencing-Token"),
			Body: string(body), ContentLength: r.Header.Get("Content-Length"), Trailer: r.Trailer.Clone()})
		w.Header().Set("X-Backend", "yes")
		io.WriteString(w, "stored")
	}))
	t.Cleanup(b.Close)
	return b
}

// applied returns the whole requests received for path.
func (b *bodyBackend) applied(path string) []bodySeen {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []bodySeen
	for _, s := range b.whole {
		if s.Path == path {
			out = append(out, s)
		}
	}
	return out
}

// bodyProxy is a proxy in front of a backend, with its barrier and its log.
type bodyProxy struct {
	srv     *httptest.Server
	barrier *fence.Barrier
	log     *fwdLog
}

// newBodyProxy serves a proxy for upstream with opts over an in-memory store:
// plain HTTP/1.1, or with h2 TLS and HTTP/2 by ALPN (the proxy listener with
// FENCEPROXY_TLS_*).
func newBodyProxy(t *testing.T, upstream string, opts proxy.Options, h2 bool) bodyProxy {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	opts.Upstream = u
	logs := &fwdLog{}
	opts.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	b, err := fence.New(newForwardStore(), fence.Options{DrainTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	p, err := proxy.New(b, opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(p)
	if h2 {
		srv.EnableHTTP2 = true
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	return bodyProxy{srv, b, logs}
}

// linesFor returns the log records about target.
func (p bodyProxy) linesFor(target string) []map[string]any {
	var out []map[string]any
	for _, rec := range p.log.records() {
		if rec["target"] == target {
			out = append(out, rec)
		}
	}
	return out
}

// checkOneLine waits until the log has a record about target and checks that
// it stays the only one.
func (p bodyProxy) checkOneLine(t *testing.T, target string) map[string]any {
	t.Helper()
	fwdEventually(t, "a log line about "+target, func() bool { return len(p.linesFor(target)) > 0 })
	time.Sleep(50 * time.Millisecond) // asserting nothing happens: no second line comes right after the first
	lines := p.linesFor(target)
	if len(lines) != 1 {
		t.Fatalf("%d log lines about %s, want 1: %v", len(lines), target, lines)
	}
	return lines[0]
}

// bodyMode is a way a request reaches the upstream: each path through the
// proxy must treat a broken body alike.
type bodyMode struct {
	name   string
	method string
	token  string // "" for none
	opts   func(*proxy.Options)
	fenced bool // admitted through the barrier (raises the maximum)
}

var bodyModes = []bodyMode{
	{name: "fenced", method: http.MethodPut, token: "7", fenced: true},
	{name: "unfenced POST", method: http.MethodPost, opts: func(o *proxy.Options) {
		o.UnfencedMethods = append(o.UnfencedMethods, http.MethodPost)
	}},
	{name: "no token, REQUIRE_TOKEN=false", method: http.MethodPut, opts: func(o *proxy.Options) { o.RequireToken = false }},
	{name: "observe", method: http.MethodPut, token: "7", opts: func(o *proxy.Options) { o.Mode = "observe" }},
}

func (m bodyMode) options(fast bool) proxy.Options {
	opts := fwdOptions()
	opts.UpstreamFastPath = fast
	if m.opts != nil {
		m.opts(&opts)
	}
	return opts
}

// checkBadBody checks the proxy's 400 bad_body problem.
func checkBadBody(t *testing.T, resp *http.Response, body []byte) {
	t.Helper()
	pb := fwdProblem(t, resp, body, http.StatusBadRequest, wire.ReasonBadBody)
	if pb["reason"] != wire.ReasonBadBody || pb["detail"] == "" {
		t.Errorf("problem %v, want reason %s and a detail", pb, wire.ReasonBadBody)
	}
}

// TestBrokenBodyHTTP1 sends request bodies that break their framing, or end
// early and then half-close the connection (the client can still read), on
// every path to the upstream and with the fast path on and off: each gets
// the proxy's 400 bad_body (never a 2xx, never a 502), the backend applies
// nothing, and the proxy logs one line about it.
func TestBrokenBodyHTTP1(t *testing.T) {
	backend := newBodyBackend(t)
	cases := []struct {
		name      string
		header    string
		body      string
		halfClose bool
	}{
		{"bad chunk size", "Transfer-Encoding: chunked", "3\r\nabc\r\nZZ\r\n", false},
		{"chunk longer than its size", "Transfer-Encoding: chunked", "3\r\nabcdef\r\n0\r\n\r\n", false},
		{"chunked cut short, half-close", "Transfer-Encoding: chunked", "5\r\nab", true},
		{"Content-Length cut short, half-close", "Content-Length: 10", "abc", true},
		// Above upstream.SmallBodyMax: the streamed path also with the fast path on.
		{"large Content-Length cut short, half-close", "Content-Length: 100000", strings.Repeat("x", 1000), true},
	}
	for _, mode := range bodyModes {
		for _, fast := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/fast=%v", mode.name, fast), func(t *testing.T) {
				p := newBodyProxy(t, backend.URL, mode.options(fast), false)
				for i, c := range cases {
					t.Run(c.name, func(t *testing.T) {
						target := fmt.Sprintf("/bkt/h1-%d", i)
						var b strings.Builder
						fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: h\r\n%s\r\n", mode.method, target, c.header)
						if mode.token != "" {
							b.WriteString("X-Fencing-Token: " + mode.token + "\r\n")
						}
						b.WriteString("\r\n" + c.body)
						conn, br := fwdDial(t, p.srv)
						if _, err := io.WriteString(conn, b.String()); err != nil {
							t.Fatal(err)
						}
						if c.halfClose {
							if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
								t.Fatal(err)
							}
						}
						resp, err := http.ReadResponse(br, &http.Request{Method: mode.method})
						if err != nil {
							t.Fatalf("no answer: %v", err)
						}
						body, _ := io.ReadAll(resp.Body)
						resp.Body.Close()
						checkBadBody(t, resp, body)
						if !resp.Close {
							t.Errorf("answer without Connection: close; the rest of the body is still on the wire")
						}
						line := p.checkOneLine(t, target)
						if line["status"] != float64(http.StatusBadRequest) || line["reason"] != wire.ReasonBadBody {
							t.Errorf("log line %v, want status 400 and reason bad_body", line)
						}
						if got := backend.applied(target); len(got) != 0 {
							t.Errorf("the backend applied %v", got)
						}
						if mode.fenced {
							fwdEventually(t, "nothing in flight", func() bool { return p.barrier.InFlight("bkt/h1-"+strconv.Itoa(i)) == 0 })
							// The raise happens at admission, before the body is
							// read: it stays (documented), as after a 502.
							if m, err := p.barrier.Max(strings.TrimPrefix(target, "/")); err != nil || m != 7 {
								t.Errorf("maximum %d, %v; want 7, raised at admission", m, err)
							}
						}
					})
				}
			})
		}
	}
}

// TestBrokenBodyClientReset: a client that resets its connection in
// mid-upload can read no answer; the proxy logs it once as gone (499) and the
// backend applies nothing.
func TestBrokenBodyClientReset(t *testing.T) {
	backend := newBodyBackend(t)
	for _, mode := range bodyModes {
		for _, fast := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/fast=%v", mode.name, fast), func(t *testing.T) {
				p := newBodyProxy(t, backend.URL, mode.options(fast), false)
				const target = "/bkt/reset"
				raw := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n", mode.method, target)
				if mode.token != "" {
					raw += "X-Fencing-Token: " + mode.token + "\r\n"
				}
				conn, _ := fwdDial(t, p.srv)
				io.WriteString(conn, raw+"\r\nabc")
				time.Sleep(100 * time.Millisecond) // no event: the proxy starts reading the body (no token: no barrier to watch)
				conn.(*net.TCPConn).SetLinger(0)
				conn.Close() // RST
				line := p.checkOneLine(t, target)
				if line["status"] != float64(499) {
					t.Errorf("log line %v, want status 499", line)
				}
				if got := backend.applied(target); len(got) != 0 {
					t.Errorf("the backend applied %v", got)
				}
			})
		}
	}
}

// TestUpstreamFailureAfterHalfClose: a client that half-closes after sending
// its whole request still reads; when the upstream exchange then fails, it
// must not get a 2xx (net/http would send an empty 200 for a handler that
// writes nothing).
func TestUpstreamFailureAfterHalfClose(t *testing.T) {
	hangup := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
	}))
	t.Cleanup(hangup.Close)
	for _, mode := range []bodyMode{bodyModes[0], {name: "unfenced GET", method: http.MethodGet}} {
		for _, fast := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/fast=%v", mode.name, fast), func(t *testing.T) {
				p := newBodyProxy(t, hangup.URL, mode.options(fast), false)
				raw := fmt.Sprintf("%s /bkt/hangup HTTP/1.1\r\nHost: h\r\n", mode.method)
				if mode.token != "" {
					raw += "X-Fencing-Token: " + mode.token + "\r\n"
				}
				if mode.method != http.MethodGet {
					raw += "Content-Length: 4\r\n\r\ndata"
				} else {
					raw += "\r\n"
				}
				conn, br := fwdDial(t, p.srv)
				io.WriteString(conn, raw)
				conn.(*net.TCPConn).CloseWrite()
				resp, err := http.ReadResponse(br, &http.Request{Method: mode.method})
				if err == nil {
					body, _ := io.ReadAll(resp.Body)
					if resp.StatusCode < 300 {
						t.Fatalf("status %d (body %q) for an exchange the backend hung up on", resp.StatusCode, body)
					}
					t.Logf("answered %d %s", resp.StatusCode, body)
				} else {
					t.Logf("no answer, connection closed: %v", err)
				}
				p.checkOneLine(t, "/bkt/hangup")
			})
		}
	}
}

// h2Conn is a raw HTTP/2 client connection (x/net/http2's Framer) to a TLS
// server that negotiates h2 by ALPN.
type h2Conn struct {
	conn net.Conn
	fr   *http2.Framer
	hbuf bytes.Buffer
	enc  *hpack.Encoder
}

func dialH2(t *testing.T, srv *httptest.Server) *h2Conn {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	conn, err := tls.Dial("tcp", srv.Listener.Addr().String(), &tls.Config{RootCAs: pool, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if p := conn.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("negotiated %q, want h2", p)
	}
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	c := &h2Conn{conn: conn, fr: http2.NewFramer(conn, conn)}
	c.enc = hpack.NewEncoder(&c.hbuf)
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := c.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return c
}

// headers sends a HEADERS frame on stream id with the pseudo-headers and
// fields given as name, value pairs.
func (c *h2Conn) headers(t *testing.T, id uint32, endStream bool, kv ...string) {
	t.Helper()
	c.hbuf.Reset()
	for i := 0; i < len(kv); i += 2 {
		c.enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.hbuf.Bytes(),
		EndStream: endStream, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
}

// h2Answer is what came back on one stream.
type h2Answer struct {
	status string
	header http.Header
	body   []byte
	reset  http2.ErrCode // set when the stream was reset
	resetB bool
}

// read reads frames until stream id ends (or is reset, or the connection goes away).
func (c *h2Conn) read(t *testing.T, id uint32) h2Answer {
	t.Helper()
	a := h2Answer{header: http.Header{}}
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading frames: %v (so far %+v)", err, a)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				c.fr.WriteSettingsAck()
			}
		case *http2.MetaHeadersFrame:
			if f.StreamID != id {
				continue
			}
			if a.status == "" {
				a.status = f.PseudoValue("status")
			}
			for _, hf := range f.RegularFields() {
				a.header.Add(hf.Name, hf.Value)
			}
			if f.StreamEnded() {
				return a
			}
		case *http2.DataFrame:
			if f.StreamID != id {
				continue
			}
			a.body = append(a.body, f.Data()...)
			if f.StreamEnded() {
				return a
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				a.reset, a.resetB = f.ErrCode, true
				return a
			}
		case *http2.GoAwayFrame:
			if f.LastStreamID < id {
				t.Fatalf("GOAWAY before stream %d: %v", id, f.ErrCode)
			}
		}
	}
}

// TestBrokenBodyHTTP2: an HTTP/2 stream that declares content-length: 3 and
// ends after 2 bytes gets the proxy's 400 bad_body on the same stream, on
// every path and with the fast path on and off; one that sends more than it
// declared is reset (by net/http's server) and gets no answer at all. The
// backend applies nothing; one log line; the connection serves other streams.
func TestBrokenBodyHTTP2(t *testing.T) {
	backend := newBodyBackend(t)
	for _, mode := range bodyModes {
		for _, fast := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/fast=%v", mode.name, fast), func(t *testing.T) {
				p := newBodyProxy(t, backend.URL, mode.options(fast), true)
				c := dialH2(t, p.srv)
				for i, data := range []string{"ab", "abcde"} {
					id := uint32(4*i + 1)
					target := fmt.Sprintf("/bkt/h2-%d", len(data))
					kv := []string{":method", mode.method, ":scheme", "https", ":authority", "h", ":path", target, "content-length", "3"}
					if mode.token != "" {
						kv = append(kv, "x-fencing-token", mode.token)
					}
					c.headers(t, id, false, kv...)
					if err := c.fr.WriteData(id, true, []byte(data)); err != nil {
						t.Fatal(err)
					}
					a := c.read(t, id)
					line := p.checkOneLine(t, target)
					if got := backend.applied(target); len(got) != 0 {
						t.Errorf("the backend applied %v", got)
					}
					if len(data) > 3 {
						if !a.resetB {
							t.Errorf("%d bytes for content-length 3: answer %s %v %s, want the stream reset", len(data), a.status, a.header, a.body)
						}
						continue
					}
					if a.resetB {
						t.Fatalf("stream reset (%v), want a 400 the client can read", a.reset)
					}
					if a.status != "400" || a.header.Get(wire.HeaderRefused) != wire.ReasonBadBody ||
						a.header.Get("Content-Type") != "application/problem+json" {
						t.Fatalf("answer %s %v %s, want 400 bad_body", a.status, a.header, a.body)
					}
					var pb wire.Problem
					if err := json.Unmarshal(a.body, &pb); err != nil || pb.Reason != wire.ReasonBadBody {
						t.Fatalf("problem %s: %v", a.body, err)
					}
					if line["status"] != float64(http.StatusBadRequest) || line["reason"] != wire.ReasonBadBody {
						t.Errorf("log line %v, want status 400 and reason bad_body", line)
					}
				}
				// The connection still serves other streams.
				c.headers(t, 9, true, ":method", http.MethodGet, ":scheme", "https", ":authority", "h", ":path", "/bkt/after")
				if a := c.read(t, 9); a.status != "200" {
					t.Errorf("next stream: %s %s, want 200", a.status, a.body)
				}
			})
		}
	}
}

// trailerRaw is a chunked HTTP/1.1 PUT of "hello" whose trailer section
// carries trailers, announced in a Trailer header (with token as the header
// token, none if "").
func trailerRaw(target, token, announce, trailers string) string {
	raw := "PUT " + target + " HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTrailer: " + announce + "\r\n"
	if token != "" {
		raw += "X-Fencing-Token: " + token + "\r\n"
	}
	return raw + "\r\n5\r\nhello\r\n0\r\n" + trailers + "\r\n"
}

// TestRequestTrailersHTTP1: trailers of a chunked request reach the backend
// with their values, as they do sent to it directly; a trailer is never the
// write's token.
func TestRequestTrailersHTTP1(t *testing.T) {
	backend := newBodyBackend(t)
	backendSrv := &httptest.Server{Listener: backend.Listener}
	raw := trailerRaw("/bkt/direct", "7", "X-Checksum", "X-Checksum: c0ffee\r\n")
	resp, _ := fwdRoundTrip(t, backendSrv, http.MethodPut, raw)
	if got := backend.applied("/bkt/direct"); resp.StatusCode != 200 || len(got) != 1 || got[0].Trailer.Get("X-Checksum") != "c0ffee" {
		t.Fatalf("sent directly: %d %+v; the test backend does not see trailers", resp.StatusCode, got)
	}
	for _, fast := range []bool{true, false} {
		t.Run(fmt.Sprintf("fast=%v", fast), func(t *testing.T) {
			opts := fwdOptions()
			opts.UpstreamFastPath = fast
			p := newBodyProxy(t, backend.URL, opts, false)
			target := fmt.Sprintf("/bkt/trailer-%v", fast)

			t.Run("values forwarded", func(t *testing.T) {
				raw := trailerRaw(target, "7", "X-Checksum, X-Amz-Checksum-Crc32", "X-Checksum: c0ffee\r\nX-Amz-Checksum-Crc32: AAAAAA==\r\n")
				resp, body := fwdRoundTrip(t, p.srv, http.MethodPut, raw)
				got := backend.applied(target)
				if resp.StatusCode != 200 || len(got) != 1 {
					t.Fatalf("%d %s, backend %+v", resp.StatusCode, body, got)
				}
				want := http.Header{"X-Checksum": {"c0ffee"}, "X-Amz-Checksum-Crc32": {"AAAAAA=="}}
				if fmt.Sprint(got[0].Trailer) != fmt.Sprint(want) || got[0].Body != "hello" {
					t.Fatalf("backend got trailers %v and body %q, want %v and hello", got[0].Trailer, got[0].Body, want)
				}
			})
			t.Run("token in a trailer is not the write's token", func(t *testing.T) {
				before := len(backend.applied(target))
				raw := trailerRaw(target, "8", "X-Checksum, X-Fencing-Token", "X-Checksum: beef\r\nX-Fencing-Token: 99\r\n")
				resp, body := fwdRoundTrip(t, p.srv, http.MethodPut, raw)
				got := backend.applied(target)
				if resp.StatusCode != 200 || len(got) != before+1 {
					t.Fatalf("%d %s, backend %+v", resp.StatusCode, body, got)
				}
				last := got[len(got)-1]
				if last.Token != "8" || last.Trailer.Get("X-Checksum") != "beef" {
					t.Errorf("backend got token %q, trailers %v; want token 8 and X-Checksum beef", last.Token, last.Trailer)
				}
				if _, ok := last.Trailer["X-Fencing-Token"]; ok {
					t.Errorf("the backend got a token trailer: %v", last.Trailer)
				}
				if m, _ := p.barrier.Max(strings.TrimPrefix(target, "/")); m != 8 {
					t.Errorf("maximum %d, want 8 (the header's token)", m)
				}
			})
			t.Run("token only in a trailer", func(t *testing.T) {
				before := len(backend.applied(target))
				raw := trailerRaw(target, "", "X-Fencing-Token", "X-Fencing-Token: 99\r\n")
				resp, body := fwdRoundTrip(t, p.srv, http.MethodPut, raw)
				fwdProblem(t, resp, body, http.StatusPreconditionRequired, wire.ReasonMissing)
				if got := backend.applied(target); len(got) != before {
					t.Errorf("the backend got %+v", got[before:])
				}
			})
		})
	}
}

// TestRequestTrailersHTTP2: an HTTP/2 request's trailers reach the backend
// with their values, whether the request declares its length or not (the
// backend then gets it chunked: HTTP/1.1 carries trailers only so).
func TestRequestTrailersHTTP2(t *testing.T) {
	backend := newBodyBackend(t)
	for _, fast := range []bool{true, false} {
		for _, known := range []bool{true, false} {
			t.Run(fmt.Sprintf("fast=%v/known length=%v", fast, known), func(t *testing.T) {
				opts := fwdOptions()
				opts.UpstreamFastPath = fast
				p := newBodyProxy(t, backend.URL, opts, true)
				target := fmt.Sprintf("/bkt/h2trailer-%v-%v", fast, known)
				var body io.Reader = strings.NewReader("hello")
				if !known {
					body = io.NopCloser(body) // no length: sent without content-length
				}
				req, err := http.NewRequest(http.MethodPut, p.srv.URL+target, body)
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("X-Fencing-Token", "7")
				req.Trailer = http.Header{"X-Checksum": {"c0ffee"}, "X-Fencing-Token": {"99"}}
				resp, err := p.srv.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				got := backend.applied(target)
				if resp.ProtoMajor != 2 || resp.StatusCode != 200 || len(got) != 1 {
					t.Fatalf("HTTP/%d %d, backend %+v", resp.ProtoMajor, resp.StatusCode, got)
				}
				if got[0].Trailer.Get("X-Checksum") != "c0ffee" || got[0].Body != "hello" || got[0].Token != "7" {
					t.Errorf("backend got %+v; want X-Checksum c0ffee, body hello, token 7", got[0])
				}
				if _, ok := got[0].Trailer["X-Fencing-Token"]; ok {
					t.Errorf("the backend got a token trailer: %v", got[0].Trailer)
				}
			})
		}
	}
}

// TestHTTP2LengthContradicted: an HTTP/2 stream that ends with its headers
// although it declares a content-length above 0, or that declares 0 and
// sends DATA, is malformed (RFC 9113 section 8.1.1): nothing is forwarded,
// and a client that can still read gets 400 bad_body. net/http's server
// handed both over as empty writes, which the backend applied.
func TestHTTP2LengthContradicted(t *testing.T) {
	backend := newBodyBackend(t)
	for m, mode := range bodyModes {
		t.Run(mode.name, func(t *testing.T) {
			nodata, zero, empty := fmt.Sprintf("/bkt/h2-nodata-%d", m), fmt.Sprintf("/bkt/h2-zero-%d", m), fmt.Sprintf("/bkt/h2-empty-%d", m)
			p := newBodyProxy(t, backend.URL, mode.options(true), true)
			c := dialH2(t, p.srv)
			hdr := func(target, cl string) []string {
				kv := []string{":method", mode.method, ":scheme", "https", ":authority", "h", ":path", target, "content-length", cl}
				if mode.token != "" {
					kv = append(kv, "x-fencing-token", mode.token)
				}
				return kv
			}
			// Declared 3, no DATA at all.
			c.headers(t, 1, true, hdr(nodata, "3")...)
			if a := c.read(t, 1); a.status != "400" || a.header.Get(wire.HeaderRefused) != wire.ReasonBadBody {
				t.Errorf("content-length 3, stream ended with its headers: answer %s %v %s, want 400 bad_body", a.status, a.header, a.body)
			}
			// Declared 0, then two bytes of DATA.
			c.headers(t, 3, false, hdr(zero, "0")...)
			if err := c.fr.WriteData(3, true, []byte("ab")); err != nil {
				t.Fatal(err)
			}
			if a := c.read(t, 3); !a.resetB && a.status != "400" {
				t.Errorf("content-length 0 and 2 bytes of DATA: answer %s %v %s, want the stream reset or 400", a.status, a.header, a.body)
			}
			for _, target := range []string{nodata, zero} {
				if got := backend.applied(target); len(got) != 0 {
					t.Errorf("the backend applied %s: %v", target, got)
				}
			}
			// Declared 0 and no DATA is an empty write like any other.
			c.headers(t, 5, true, hdr(empty, "0")...)
			if a := c.read(t, 5); a.status != "200" || len(backend.applied(empty)) != 1 {
				t.Errorf("an empty write: answer %s %s, applied %v", a.status, a.body, backend.applied(empty))
			}
		})
	}
}
