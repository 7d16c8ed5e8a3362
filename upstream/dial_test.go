package upstream

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/rawbackend"
)

// testCert returns a self-signed certificate for the given names (IP
// addresses or DNS names), valid for the next hour, and a pool that trusts it.
func testCert(t *testing.T, names ...string) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	return newCert(t, time.Now().Add(time.Hour), names...)
}

// newCert is testCert with the certificate valid until notAfter.
func newCert(t *testing.T, notAfter time.Time, names ...string) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "fenceproxy test backend"},
		NotBefore:             notAfter.Add(-2 * time.Hour),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

// tlsServer is an https backend that counts the requests its handler saw.
type tlsServer struct {
	*httptest.Server
	handled atomic.Int32
}

// newTLSServer starts an https backend with cfg (its certificate for
// 127.0.0.1 unless cfg has one) whose handler answers 204, or runs h.
func newTLSServer(t *testing.T, cfg *tls.Config, h http.HandlerFunc) *tlsServer {
	t.Helper()
	s := &tlsServer{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.handled.Add(1)
		io.Copy(io.Discard, r.Body)
		if h != nil {
			h(w, r)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	if cfg == nil {
		cfg = &tls.Config{}
	}
	if len(cfg.Certificates) == 0 {
		cert, _ := testCert(t, "127.0.0.1")
		cfg.Certificates = []tls.Certificate{cert}
	}
	s.TLS = cfg
	s.Config.ErrorLog = log.New(io.Discard, "", 0) // the failed handshakes are the point
	s.StartTLS()
	t.Cleanup(s.Close)
	return s
}

// path is one way a request reaches the backend.
type path struct {
	name string
	rt   func(base *url.URL, opts Options) http.RoundTripper
}

// httpPaths are the two paths of a Client to an http upstream (a small PUT
// takes the fast path when it is on).
var httpPaths = []path{
	{"fast path", func(base *url.URL, opts Options) http.RoundTripper {
		opts.FastPath = true
		return New(base, opts)
	}},
	{"transport", func(base *url.URL, opts Options) http.RoundTripper {
		opts.FastPath = false
		return New(base, opts)
	}},
}

// httpsPaths are a Client to an https upstream and, to show that net/http's
// Transport hands the dialer's error back as it is, the bare Transport.
var httpsPaths = []path{
	{"client", func(base *url.URL, opts Options) http.RoundTripper {
		opts.FastPath = true
		return New(base, opts)
	}},
	{"bare transport", func(base *url.URL, opts Options) http.RoundTripper { return newTransport(opts) }},
}

// putThrough sends a small PUT to base through rt and returns its error.
func putThrough(t *testing.T, rt http.RoundTripper, base string) error {
	t.Helper()
	if ci, ok := rt.(interface{ CloseIdleConnections() }); ok {
		t.Cleanup(ci.CloseIdleConnections)
	}
	resp, err := rt.RoundTrip(outbound(t, base, "PUT", "/bkt/obj", []byte("body"), http.Header{"X-Fencing-Token": {"7"}}))
	if err == nil {
		resp.Body.Close()
	}
	return err
}

// wantDialError fails unless err is a *DialError over a dial *net.OpError
// (what callers looked for before DialError) whose Timeout is timeout.
func wantDialError(t *testing.T, err error, timeout bool) {
	t.Helper()
	var de *DialError
	if !errors.As(err, &de) {
		t.Fatalf("err %v (%T), want a *DialError", err, err)
	}
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "dial" {
		t.Fatalf("err %v: no dial *net.OpError in it", err)
	}
	if de.Timeout() != timeout {
		t.Fatalf("err %v: Timeout() = %v, want %v", err, de.Timeout(), timeout)
	}
	var ne net.Error // what the proxy maps to 504
	if got := errors.As(err, &ne) && ne.Timeout(); got != timeout {
		t.Fatalf("err %v: a net.Error with Timeout() %v, want %v", err, got, timeout)
	}
}

// wantNoDialError fails unless err is an error that is neither a *DialError
// nor a dial *net.OpError: the request may have reached the backend.
func wantNoDialError(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		t.Fatal("no error")
	}
	var de *DialError
	var op *net.OpError
	if errors.As(err, &de) || (errors.As(err, &op) && op.Op == "dial") {
		t.Fatalf("err %v (%T) is a dial error, yet the request may have been sent", err, err)
	}
}

// refusedAddr is a loopback address where nothing listens.
func refusedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestDialErrorConnectRefused(t *testing.T) {
	addr := refusedAddr(t)
	for _, p := range httpPaths {
		t.Run(p.name, func(t *testing.T) {
			u, _ := url.Parse("http://" + addr)
			err := putThrough(t, p.rt(u, Options{}), u.String())
			wantDialError(t, err, false)
			if !errors.Is(err, syscall.ECONNREFUSED) {
				t.Fatalf("err %v: the cause is lost", err)
			}
		})
	}
	for _, p := range httpsPaths {
		t.Run("https "+p.name, func(t *testing.T) {
			u, _ := url.Parse("https://" + addr)
			err := putThrough(t, p.rt(u, Options{}), u.String())
			wantDialError(t, err, false)
			if !errors.Is(err, syscall.ECONNREFUSED) {
				t.Fatalf("err %v: the cause is lost", err)
			}
		})
	}
}

func TestDialErrorUnknownHost(t *testing.T) {
	for _, p := range httpPaths {
		t.Run(p.name, func(t *testing.T) {
			u, _ := url.Parse("http://backend.invalid:9000") // RFC 6761: never resolves
			err := putThrough(t, p.rt(u, Options{DialTimeout: 2 * time.Second}), u.String())
			var de *DialError
			if !errors.As(err, &de) {
				t.Fatalf("err %v (%T), want a *DialError", err, err)
			}
			var dns *net.DNSError
			if !errors.As(err, &dns) && !de.Timeout() { // a resolver out of reach times out instead
				t.Fatalf("err %v: no *net.DNSError in it", err)
			}
		})
	}
}

// Each way a TLS handshake with an https upstream can fail is a DialError:
// nothing of the request was sent, and the backend's handler never ran.
func TestTLSHandshakeFailuresAreDialErrors(t *testing.T) {
	trustedCert, trusted := testCert(t, "127.0.0.1")
	expiredCert, expired := newCert(t, time.Now().Add(-time.Hour), "127.0.0.1")
	cases := []struct {
		name    string
		backend func(t *testing.T) (addr string, handled func() int32)
		opts    Options
		cause   func(err error) bool
		timeout bool
	}{
		{
			name: "certificate from an unknown authority",
			backend: func(t *testing.T) (string, func() int32) {
				s := newTLSServer(t, nil, nil)
				return s.Listener.Addr().String(), s.handled.Load
			},
			opts: Options{RootCAs: trusted}, // trusts another certificate
			cause: func(err error) bool {
				var ua x509.UnknownAuthorityError
				var cv *tls.CertificateVerificationError
				return errors.As(err, &ua) && errors.As(err, &cv)
			},
		},
		{
			name: "certificate for another name",
			backend: func(t *testing.T) (string, func() int32) {
				cert, _ := testCert(t, "backend.example")
				s := newTLSServer(t, &tls.Config{Certificates: []tls.Certificate{cert}}, nil)
				return s.Listener.Addr().String(), s.handled.Load
			},
			cause: func(err error) bool { var he x509.HostnameError; return errors.As(err, &he) },
		},
		{
			name: "expired certificate",
			backend: func(t *testing.T) (string, func() int32) {
				s := newTLSServer(t, &tls.Config{Certificates: []tls.Certificate{expiredCert}}, nil)
				return s.Listener.Addr().String(), s.handled.Load
			},
			opts:  Options{RootCAs: expired},
			cause: func(err error) bool { var ci x509.CertificateInvalidError; return errors.As(err, &ci) },
		},
		{
			name: "server speaks only TLS 1.0 and 1.1",
			backend: func(t *testing.T) (string, func() int32) {
				s := newTLSServer(t, &tls.Config{Certificates: []tls.Certificate{trustedCert},
					MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11}, nil)
				return s.Listener.Addr().String(), s.handled.Load
			},
			opts: Options{RootCAs: trusted},
			// The server's alert; crypto/tls has no exported type for one it received.
			cause: func(err error) bool { return strings.Contains(err.Error(), "protocol version not supported") },
		},
		{
			name: "plain HTTP server answers the ClientHello",
			backend: func(t *testing.T) (string, func() int32) {
				ln := listen(t)
				go serveGarbage(ln)
				return ln.Addr().String(), func() int32 { return 0 }
			},
			opts:  Options{RootCAs: trusted},
			cause: func(err error) bool { var rh tls.RecordHeaderError; return errors.As(err, &rh) },
		},
		{
			name: "server never answers the ClientHello",
			backend: func(t *testing.T) (string, func() int32) {
				ln := listen(t)
				accepted := make(chan net.Conn, 8)
				t.Cleanup(func() {
					ln.Close()
					for c := range accepted {
						c.Close()
					}
				})
				go func() {
					defer close(accepted)
					for {
						c, err := ln.Accept()
						if err != nil {
							return
						}
						accepted <- c // held open, silent
					}
				}()
				return ln.Addr().String(), func() int32 { return 0 }
			},
			opts:    Options{RootCAs: trusted, DialTimeout: 300 * time.Millisecond},
			cause:   func(err error) bool { return strings.Contains(err.Error(), "TLS handshake timeout") },
			timeout: true,
		},
	}
	for _, tc := range cases {
		for _, p := range httpsPaths {
			t.Run(tc.name+"/"+p.name, func(t *testing.T) {
				addr, handled := tc.backend(t)
				u, _ := url.Parse("https://" + addr)
				start := time.Now()
				err := putThrough(t, p.rt(u, tc.opts), u.String())
				wantDialError(t, err, tc.timeout)
				if !tc.cause(err) {
					t.Fatalf("err %v: not the expected cause", err)
				}
				if tc.timeout && time.Since(start) > 3*time.Second {
					t.Fatalf("the handshake timed out after %s, want about %s", time.Since(start), tc.opts.DialTimeout)
				}
				time.Sleep(20 * time.Millisecond) // asserting nothing happens: the backend handles no request
				if n := handled(); n != 0 {
					t.Fatalf("the backend handled %d requests", n)
				}
			})
		}
	}
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// serveGarbage answers whatever arrives with an HTTP/1.1 400, as a plain
// HTTP server does when it gets a TLS ClientHello.
func serveGarbage(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			bufio.NewReader(c).Peek(1)
			io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\nClient sent an HTTP request to an HTTPS server.\n")
		}()
	}
}

// referenceTransport is the Transport proxy.New built before this package
// built its own: what an https upstream received until then.
func referenceTransport(roots *x509.CertPool) *http.Transport {
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          512,
		MaxIdleConnsPerHost:   512,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   5 * time.Second,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
		TLSClientConfig:       &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
	}
}

// An https upstream gets the same ClientHello (no ALPN: HTTP/1.1 only, even
// from a server that would speak HTTP/2) and the same request bytes as from
// the Transport proxy.New used to build: Host as the client sent it, headers
// as given, nothing added.
func TestHTTPSUpstreamGetsWhatItGotBefore(t *testing.T) {
	cert, roots := testCert(t, "127.0.0.1")
	var mu sync.Mutex
	var hellos []string
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{cert},
		NextProtos:   []string{"h2", "http/1.1"},
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			mu.Lock()
			defer mu.Unlock()
			hellos = append(hellos, fmt.Sprintf("alpn=%q sni=%q", h.SupportedProtos, h.ServerName))
			return nil, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	backend := newRawBackendOn(t, ln)
	t.Cleanup(func() { ln.Close() })
	base := "https://" + ln.Addr().String()
	u, _ := url.Parse(base)
	c := New(u, Options{FastPath: true, RootCAs: roots})
	ref := referenceTransport(roots)
	t.Cleanup(c.CloseIdleConnections)
	t.Cleanup(ref.CloseIdleConnections)
	sigv4 := http.Header{
		"Authorization":        {"AWS4-HMAC-SHA256 Credential=AKIA/20261201/us-east-1/s3/aws4_request, SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature=abc"},
		"X-Amz-Content-Sha256": {"UNSIGNED-PAYLOAD"},
		"X-Amz-Date":           {"20261201T000000Z"},
		"X-Fencing-Token":      {"42"},
	}
	cases := []struct {
		name, method, target string
		body                 []byte
		header               http.Header
	}{
		{"signed put", "PUT", "/bkt/signed", bytes.Repeat([]byte("x"), 1024), sigv4},
		{"large put", "PUT", "/bkt/large", bytes.Repeat([]byte("l"), SmallBodyMax+1), http.Header{"X-Fencing-Token": {"42"}}},
		{"get", "GET", "/bkt/?list-type=2&prefix=a%2Fb", nil, http.Header{"Range": {"bytes=0-9"}}},
		{"escaped path", "DELETE", "/bkt/a%2Fb%20c", nil, http.Header{"X-Fencing-Token": {"42"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got [2]string
			for i, rt := range []http.RoundTripper{c, ref} {
				resp, err := rt.RoundTrip(outbound(t, base, tc.method, tc.target, tc.body, tc.header))
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusNoContent || resp.ProtoMajor != 1 || resp.TLS == nil ||
					resp.TLS.Version < tls.VersionTLS12 || resp.TLS.NegotiatedProtocol != "" {
					t.Fatalf("response %d %s, TLS %+v", resp.StatusCode, resp.Proto, resp.TLS)
				}
				got[i] = backend.last()
			}
			if got[0] != got[1] {
				t.Fatalf("the client sent\n%q\nthe former Transport sent\n%q", got[0], got[1])
			}
			if !strings.Contains(got[0], "\nHost: bucket.example:9000\n") || strings.Contains(got[0], "Accept-Encoding") ||
				strings.Contains(got[0], "User-Agent") {
				t.Fatalf("sent %q", got[0])
			}
		})
	}
	mu.Lock()
	defer mu.Unlock()
	if len(hellos) < 2 {
		t.Fatalf("ClientHellos: %q", hellos)
	}
	for _, h := range hellos {
		if h != hellos[0] || !strings.HasPrefix(h, "alpn=[]") {
			t.Fatalf("ClientHellos differ or offer a protocol: %q", hellos)
		}
	}
}

// A failure after the connection was made is not a DialError: the backend
// got the request.
func TestErrorAfterConnectIsNotDialError(t *testing.T) {
	for _, p := range httpPaths {
		t.Run(p.name, func(t *testing.T) {
			b := rawbackend.New(t, "127.0.0.1:0", rawbackend.CloseAfter("")) // reads the request, then closes
			u, _ := url.Parse(b.URL())
			wantNoDialError(t, putThrough(t, p.rt(u, Options{}), b.URL()))
			if got := b.Requests(); len(got) != 1 {
				t.Fatalf("the backend got %q", got)
			}
		})
	}
	for _, p := range httpsPaths {
		t.Run("https "+p.name, func(t *testing.T) {
			cert, roots := testCert(t, "127.0.0.1")
			s := newTLSServer(t, &tls.Config{Certificates: []tls.Certificate{cert}}, func(w http.ResponseWriter, r *http.Request) {
				if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
					c.Close()
				}
			})
			u, _ := url.Parse(s.URL)
			wantNoDialError(t, putThrough(t, p.rt(u, Options{RootCAs: roots}), s.URL))
			if n := s.handled.Load(); n != 1 {
				t.Fatalf("the backend handled %d requests", n)
			}
		})
	}
}

// Both paths send some requests a second time on a new connection when a
// reused one closed without an answer (a bodyless read; net/http also a
// request with an Idempotency-Key). When that second connection cannot be
// made, the first copy may still have reached the backend: not a DialError.
func TestResendThatCannotConnectIsNotDialError(t *testing.T) {
	cases := []struct {
		name     string
		rt       func(u *url.URL) http.RoundTripper
		method   string
		header   http.Header
		wantDial bool
	}{
		{"fast path GET", func(u *url.URL) http.RoundTripper { return New(u, Options{FastPath: true}) }, "GET", nil, false},
		{"transport GET", func(u *url.URL) http.RoundTripper { return New(u, Options{}) }, "GET", nil, false},
		{"transport DELETE with an Idempotency-Key", func(u *url.URL) http.RoundTripper { return New(u, Options{FastPath: true}) },
			"DELETE", http.Header{"Idempotency-Key": {"k-1"}}, false},
		// The bare Transport cannot tell; the Client watches its writes.
		{"bare transport", func(u *url.URL) http.RoundTripper { return newTransport(Options{}) }, "GET", nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var srv *httptest.Server
			var taken atomic.Int32
			srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/bkt/obj" { // taken; then the backend goes away
					taken.Add(1)
					srv.Listener.Close()
					if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
						c.Close()
					}
					return
				}
				w.WriteHeader(http.StatusNoContent)
			}))
			t.Cleanup(srv.Close)
			u, _ := url.Parse(srv.URL)
			rt := tc.rt(u)
			t.Cleanup(rt.(interface{ CloseIdleConnections() }).CloseIdleConnections)
			for _, target := range []string{"/bkt/warm", "/bkt/obj"} { // the first leaves an idle connection
				resp, err := rt.RoundTrip(outbound(t, srv.URL, tc.method, target, nil, tc.header))
				if target == "/bkt/warm" {
					if err != nil {
						t.Fatal(err)
					}
					resp.Body.Close()
					continue
				}
				if tc.wantDial {
					wantDialError(t, err, false)
				} else {
					wantNoDialError(t, err)
				}
			}
			if n := taken.Load(); n != 1 {
				t.Fatalf("the backend took the request %d times, want once", n)
			}
		})
	}
}

func TestNewPaths(t *testing.T) {
	httpBase, _ := url.Parse("http://backend.example:9000")
	httpsBase, _ := url.Parse("https://backend.example")
	put := func(base *url.URL) *http.Request {
		return outbound(t, base.String(), "PUT", "/bkt/obj", []byte("b"), nil)
	}
	if !New(httpBase, Options{FastPath: true}).Fast(put(httpBase)) {
		t.Fatal("FastPath: true, no fast path")
	}
	if New(httpBase, Options{}).Fast(put(httpBase)) {
		t.Fatal("FastPath: false, yet a fast path")
	}
	if New(httpsBase, Options{FastPath: true}).Fast(put(httpsBase)) {
		t.Fatal("an https upstream took the fast path")
	}
}

// The Transport keeps the settings proxy.New gave it, and speaks HTTP/1.1 only.
func TestTransportSettings(t *testing.T) {
	_, roots := testCert(t, "127.0.0.1")
	tr := newTransport(Options{DialTimeout: 3 * time.Second, ResponseTimeout: 7 * time.Second, RootCAs: roots})
	p := tr.Protocols
	switch {
	case tr.Proxy != nil:
		t.Fatal("Proxy set: requests could go through HTTP_PROXY")
	case tr.MaxIdleConns != 512 || tr.MaxIdleConnsPerHost != 512 || tr.IdleConnTimeout != 90*time.Second:
		t.Fatalf("pool %d %d %s", tr.MaxIdleConns, tr.MaxIdleConnsPerHost, tr.IdleConnTimeout)
	case tr.TLSHandshakeTimeout != 3*time.Second || tr.ResponseHeaderTimeout != 7*time.Second || tr.ExpectContinueTimeout != time.Second:
		t.Fatalf("timeouts %s %s %s", tr.TLSHandshakeTimeout, tr.ResponseHeaderTimeout, tr.ExpectContinueTimeout)
	case !tr.DisableCompression:
		t.Fatal("compression on: Accept-Encoding would be added")
	case tr.ForceAttemptHTTP2 || p == nil || !p.HTTP1() || p.HTTP2() || p.UnencryptedHTTP2():
		t.Fatalf("protocols %v, force HTTP/2 %v: want HTTP/1.1 only", p, tr.ForceAttemptHTTP2)
	case tr.TLSClientConfig.RootCAs != roots || tr.TLSClientConfig.MinVersion != tls.VersionTLS12 || len(tr.TLSClientConfig.NextProtos) != 0:
		t.Fatalf("TLS config %+v", tr.TLSClientConfig)
	}
	if tr := newTransport(Options{}); tr.TLSHandshakeTimeout != 0 || tr.ResponseHeaderTimeout != 0 {
		t.Fatalf("defaults: handshake %s, response %s", tr.TLSHandshakeTimeout, tr.ResponseHeaderTimeout)
	}
}
