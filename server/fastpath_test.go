package server_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/config"
	"github.com/fenceproxy/fenceproxy/fence"
	"github.com/fenceproxy/fenceproxy/proxy"
	"github.com/fenceproxy/fenceproxy/server"

	"github.com/fenceproxy/fenceproxy/internal/rawbackend"
	"github.com/fenceproxy/fenceproxy/internal/servertest"
	"github.com/fenceproxy/fenceproxy/store/mem"
)

// fpReference is the proxy as it was before the fast path: the same
// proxy.New, with every request through an http.Transport configured as
// proxy.New configures its fallback.
func fpReference(t *testing.T, upstream string, timeout time.Duration) string {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	std := &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          512,
		MaxIdleConnsPerHost:   512,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
		ResponseHeaderTimeout: timeout,
		DisableCompression:    true,
		TLSClientConfig:       &tls.Config{MinVersion: tls.VersionTLS12},
	}
	t.Cleanup(std.CloseIdleConnections)
	store, err := mem.Open(mem.NewDisk())
	if err != nil {
		t.Fatal(err)
	}
	b, err := fence.New(store, fence.Options{DrainTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	opts := server.ProxyOptionsFrom(config.Default())
	opts.Upstream, opts.Transport, opts.ResponseTimeout = u, std, timeout
	p, err := proxy.New(b, opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// fpStart starts fenceproxy in front of upstream, with the fast path, and
// returns its proxy address.
func fpStart(t *testing.T, upstream string, env map[string]string) string {
	t.Helper()
	return fpStartInstance(t, upstream, env).Proxy
}

// fpStartInstance is fpStart returning the whole instance.
func fpStartInstance(t *testing.T, upstream string, env map[string]string) *servertest.Instance {
	t.Helper()
	e := map[string]string{"FENCEPROXY_UPSTREAM": upstream, "FENCEPROXY_DATA_DIR": t.TempDir(), "FENCEPROXY_ABANDON_GRACE": "0s",
		"FENCEPROXY_UPSTREAM_FAST_PATH": "true"}
	for k, v := range env {
		e[k] = v
	}
	return servertest.Start(t, e)
}

// fpScript answers with raw bytes (package rawbackend).
type fpScript = rawbackend.Backend

func newFPScript(t *testing.T, answer rawbackend.Answer) *fpScript {
	t.Helper()
	return rawbackend.New(t, "127.0.0.1:0", answer)
}

// newFPScriptOn is newFPScript listening on addr.
func newFPScriptOn(t *testing.T, addr string, answer rawbackend.Answer) *fpScript {
	t.Helper()
	return rawbackend.New(t, addr, answer)
}

// fpAnswer is what a client of the proxy got, as comparable text.
type fpAnswer struct {
	Err     string
	Status  int
	Header  string
	Body    string
	BodyErr string
	Trailer string
	Interim []int
}

func fpHeader(h http.Header) string {
	var lines []string
	for k, vs := range h {
		if k == "Date" {
			continue
		}
		lines = append(lines, fmt.Sprintf("%s=%q", k, vs))
	}
	sort.Strings(lines)
	return strings.Join(lines, " ")
}

// fpRaw sends raw request bytes to addr on a new connection and reads one
// answer (1xx responses recorded apart).
func fpRaw(t *testing.T, addr, raw string) fpAnswer {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		return fpAnswer{Err: err.Error()}
	}
	br := bufio.NewReader(c)
	method := strings.SplitN(raw, " ", 2)[0]
	var a fpAnswer
	for {
		resp, err := http.ReadResponse(br, &http.Request{Method: method})
		if err != nil {
			a.Err = err.Error()
			return a
		}
		if resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != 101 {
			a.Interim = append(a.Interim, resp.StatusCode)
			continue
		}
		b, err := io.ReadAll(resp.Body)
		a.Status, a.Header, a.Body, a.Trailer = resp.StatusCode, fpHeader(resp.Header), string(b), fpHeader(resp.Trailer)
		if err != nil {
			a.BodyErr = err.Error()
		}
		return a
	}
}

// fpResponses are backend answers the whole proxy relays the same with the
// fast path as with the Transport.
var fpResponses = []struct{ name, req, resp string }{
	{"duplicate header lines", "GET /x HTTP/1.1\r\nHost: h\r\n\r\n", "HTTP/1.1 200 OK\r\nX-A: 1\r\nx-a: 2\r\nContent-Length: 2\r\n\r\nok"},
	{"odd-case names", "GET /x HTTP/1.1\r\nHost: h\r\n\r\n", "HTTP/1.1 200 OK\r\ncontent-length: 2\r\nCONTENT-TYPE: text/x\r\nx-foo-BAR: v\r\n\r\nok"},
	{"no Content-Type (no sniffing)", "GET /x HTTP/1.1\r\nHost: h\r\n\r\n", "HTTP/1.1 200 OK\r\nContent-Length: 14\r\n\r\n<html><b>x</b>"},
	{"chunked with announced trailer", "GET /x HTTP/1.1\r\nHost: h\r\n\r\n", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n5\r\nhello\r\n0\r\nX-Sum: 1\r\n\r\n"},
	{"Content-Length and chunked", "GET /x HTTP/1.1\r\nHost: h\r\n\r\n", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"},
	{"100 before the answer to a PUT", "PUT /x HTTP/1.1\r\nHost: h\r\nX-Fencing-Token: 1\r\nContent-Length: 1\r\n\r\nx", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok"},
	{"204 with Content-Length", "PUT /x HTTP/1.1\r\nHost: h\r\nX-Fencing-Token: 1\r\nContent-Length: 1\r\n\r\nx", "HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n"},
	{"304 with Content-Length", "GET /x HTTP/1.1\r\nHost: h\r\n\r\n", "HTTP/1.1 304 Not Modified\r\nContent-Length: 1234\r\nEtag: \"x\"\r\n\r\n"},
	{"HEAD with Content-Length", "HEAD /x HTTP/1.1\r\nHost: h\r\n\r\n", "HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n"},
	{"HTTP/1.0 body to EOF", "GET /x HTTP/1.1\r\nHost: h\r\n\r\n", "HTTP/1.0 200 OK\r\n\r\nhello eof"},
	{"101 nobody asked for", "GET /x HTTP/1.1\r\nHost: h\r\n\r\n", "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"},
	{"status 599", "GET /x HTTP/1.1\r\nHost: h\r\n\r\n", "HTTP/1.1 599 Weird\r\nContent-Length: 2\r\n\r\nok"},
	{"name with a space", "GET /x HTTP/1.1\r\nHost: h\r\n\r\n", "HTTP/1.1 200 OK\r\nX Foo: bar\r\nContent-Length: 2\r\n\r\nok"},
	{"bare CR in a value (splitting)", "GET /x HTTP/1.1\r\nHost: h\r\n\r\n", "HTTP/1.1 200 OK\r\nX-Foo: a\rSet-Cookie: evil=1\r\nContent-Length: 2\r\n\r\nok"},
	{"obs-text value", "GET /x HTTP/1.1\r\nHost: h\r\n\r\n", "HTTP/1.1 200 OK\r\nX-Foo: caf\xe9\r\nContent-Length: 2\r\n\r\nok"},
	{"body shorter than Content-Length", "GET /x HTTP/1.1\r\nHost: h\r\n\r\n", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nok"},
	{"two different Content-Lengths", "PUT /x HTTP/1.1\r\nHost: h\r\nX-Fencing-Token: 1\r\nContent-Length: 1\r\n\r\nx", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok!"},
	{"closed before any byte", "PUT /x HTTP/1.1\r\nHost: h\r\nX-Fencing-Token: 1\r\nContent-Length: 1\r\n\r\nx", ""},
	{"Set-Cookie lines", "GET /x HTTP/1.1\r\nHost: h\r\n\r\n", "HTTP/1.1 200 OK\r\nSet-Cookie: a=1; Path=/x\r\nSet-Cookie: a=2; Path=/y\r\nContent-Length: 2\r\n\r\nok"},
}

// fpCompareAll answers each request to /case/N with resps[N] and returns
// what a client of the fast path and of the reference got for req(N).
func fpCompareAll(t *testing.T, resps []string) func(n int, req string) (fast, ref fpAnswer) {
	t.Helper()
	b := newFPScript(t, func(c net.Conn, br *bufio.Reader, r *http.Request, body []byte) bool {
		var n int
		fmt.Sscanf(r.URL.Path, "/case/%d", &n)
		io.WriteString(c, resps[n])
		// Close only where the answer needs it: the fast path would send the
		// next write into a connection closed unannounced (see
		// TestAttackProxyBackendClosedIdleConnection).
		return !fpCloses(resps[n])
	})
	f := fpStart(t, b.URL(), map[string]string{"FENCEPROXY_UPSTREAM_RESPONSE_TIMEOUT": "500ms"})
	r := fpReference(t, b.URL(), 500*time.Millisecond)
	return func(n int, req string) (fast, ref fpAnswer) {
		req = strings.Replace(req, " /x ", fmt.Sprintf(" /case/%d ", n), 1)
		return fpRaw(t, f, req), fpRaw(t, r, req)
	}
}

// fpCloses reports an answer that ends only when the connection closes.
func fpCloses(resp string) bool {
	return resp == "" || strings.HasPrefix(resp, "HTTP/1.0") || strings.Contains(resp, "Content-Length: 10\r\n\r\nok")
}

func TestFastPathProxyOddResponsesMatchReference(t *testing.T) {
	var resps []string
	for _, tc := range fpResponses {
		resps = append(resps, tc.resp)
	}
	send := fpCompareAll(t, resps)
	for i, tc := range fpResponses {
		t.Run(tc.name, func(t *testing.T) {
			f, r := send(i, tc.req)
			if fmt.Sprint(f) != fmt.Sprint(r) {
				t.Errorf("\nfast path: %+v\nreference: %+v", f, r)
			}
		})
	}
}

// Known differences of the fast path (docs/PERFORMANCE.md, "The upstream
// client"; FENCEPROXY_UPSTREAM_FAST_PATH=false avoids them): answers a
// client gets otherwise than through net/http's Transport. fast is the
// status the fast path gives; 0: the same answer as the reference. A case
// whose difference disappears (a fasthttp release) fails here, so that the
// documentation follows.
func TestFastPathProxyKnownDifferences(t *testing.T) {
	cases := []struct {
		name, req, resp string
		fast            int
	}{
		{"two equal Content-Lengths: 502 for an applied write", "PUT /x HTTP/1.1\r\nHost: h\r\nX-Fencing-Token: 1\r\nContent-Length: 1\r\n\r\nx",
			"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok", 502},
		{"lower-case trailer: empty", "GET /x HTTP/1.1\r\nHost: h\r\n\r\n",
			"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: x-sum\r\n\r\n5\r\nhello\r\n0\r\nx-sum: 1\r\n\r\n", 0},
		{"unannounced trailer: dropped", "GET /x HTTP/1.1\r\nHost: h\r\n\r\n",
			"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-Sum: 1\r\n\r\n", 0},
		{"announced X-Forwarded-For trailer: 502", "GET /x HTTP/1.1\r\nHost: h\r\n\r\n",
			"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Forwarded-For\r\n\r\n5\r\nhello\r\n0\r\nX-Forwarded-For: 10.0.0.1\r\n\r\n", 502},
		{"103 Early Hints: not relayed", "GET /x HTTP/1.1\r\nHost: h\r\n\r\n",
			"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 200},
		{"bare-LF lines: 504 after the response timeout", "GET /x HTTP/1.1\r\nHost: h\r\n\r\n",
			"HTTP/1.1 200 OK\nContent-Length: 2\n\nok", 504},
		{"two Server lines: one", "GET /x HTTP/1.1\r\nHost: h\r\n\r\n",
			"HTTP/1.1 200 OK\r\nServer: a\r\nServer: b\r\nContent-Length: 2\r\n\r\nok", 200},
		{"empty Content-Type: dropped", "GET /x HTTP/1.1\r\nHost: h\r\n\r\n",
			"HTTP/1.1 200 OK\r\nContent-Type:\r\nContent-Length: 2\r\n\r\nok", 200},
	}
	var resps []string
	for _, tc := range cases {
		resps = append(resps, tc.resp)
	}
	send := fpCompareAll(t, resps)
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, r := send(i, tc.req)
			same := fmt.Sprint(f) == fmt.Sprint(r)
			switch {
			case tc.fast == 0 && !same:
				t.Errorf("\nfast path: %+v\nreference: %+v", f, r)
			case tc.fast != 0 && same:
				t.Errorf("the documented difference is gone (update docs/PERFORMANCE.md): both %+v", f)
			case tc.fast != 0 && !strings.Contains(fmt.Sprintf("%+v", f), fmt.Sprintf("Status:%d", tc.fast)):
				t.Errorf("fast path: %+v, want status %d", f, tc.fast)
			}
		})
	}
}

// Was a bug of the first fast path, fixed: a backend whose keep-alive timeout is shorter than the fast path's
// idle timeout (10 s; gunicorn 2 s, Apache, Node and uvicorn 5 s): every
// write that comes after such a pause meets the closed connection and gets a
// 502, counted as possibly applied (larger tokens then wait the abandon
// grace), although the backend never got it. The reference takes a new
// connection and the write succeeds.
func TestAttackProxyBackendClosedIdleConnection(t *testing.T) {
	var arrived atomic.Int32
	backend := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		arrived.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	backend.Config.IdleTimeout = 100 * time.Millisecond
	backend.Start()
	t.Cleanup(backend.Close)
	for _, name := range []string{"reference", "fast path"} {
		addr := fpReference(t, backend.URL, 5*time.Second)
		if name == "fast path" {
			addr = fpStart(t, backend.URL, nil)
		}
		arrived.Store(0)
		for i := range 3 {
			a := fpRaw(t, addr, "PUT /bkt/obj HTTP/1.1\r\nHost: h\r\nX-Fencing-Token: 1\r\nContent-Length: 1\r\n\r\nx")
			if a.Status != http.StatusNoContent {
				t.Fatalf("%s: PUT %d after a pause longer than the backend's idle timeout: %d %s (backend got %d of %d)",
					name, i, a.Status, a.Body, arrived.Load(), i+1)
			}
			// The pause the scenario is about: past the backend's 100ms
			// idle timeout, so it has closed the kept connection.
			time.Sleep(300 * time.Millisecond)
		}
	}
}

// Was a bug of the first fast path (fixed for the body; before the headers, bounded by the response timeout): a client that goes away from a read (unfenced, so its exchange
// follows the client) frees its backend connection at once with the
// reference; with the fast path the proxy keeps waiting for the answer (up
// to the response timeout) and, once the headers came, for the rest of a
// stalled body without any limit: a goroutine and a backend connection held
// per gone client.
func TestFastPathProxyClientGoneEndsExchange(t *testing.T) {
	for _, phase := range []string{"before the headers", "during the body"} {
		for _, name := range []string{"reference", "fast path"} {
			t.Run(phase+"/"+name, func(t *testing.T) {
				gone := make(chan struct{}, 1)
				release := make(chan struct{})
				backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if phase == "during the body" {
						w.Header().Set("Content-Length", "100")
						w.WriteHeader(http.StatusOK)
						io.WriteString(w, "abc")
						w.(http.Flusher).Flush()
					}
					select {
					case <-r.Context().Done():
						select { // once is enough
						case gone <- struct{}{}:
						default:
						}
					case <-release:
					}
				}))
				t.Cleanup(backend.Close)
				addr := fpReference(t, backend.URL, time.Minute)
				if name == "fast path" {
					// Known difference: before the headers, a gone client
					// ends the exchange only at the response timeout.
					addr = fpStart(t, backend.URL, map[string]string{"FENCEPROXY_UPSTREAM_RESPONSE_TIMEOUT": "300ms"})
				}
				t.Cleanup(func() { close(release) }) // before the proxy stops: it waits for the exchange
				ctx, cancel := context.WithCancel(context.Background())
				req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/bkt/stream", nil)
				time.AfterFunc(200*time.Millisecond, cancel)
				if resp, err := http.DefaultClient.Do(req); err == nil {
					io.ReadAll(resp.Body)
					resp.Body.Close()
				}
				select {
				case <-gone:
				case <-time.After(time.Second):
					t.Fatal("the backend still serves the exchange 1s after its client went away")
				}
			})
		}
	}
}

// Was a bug of the first fast path, fixed (cross-talk): a backend that answers a HEAD with a body written after
// the headers (a common backend bug) leaves bytes on the keep-alive
// connection; with the fast path they become the answer to the next request
// on it, another client's write, whose real answer is then lost or handed to
// the request after. The reference drops such a connection.
func TestAttackProxyStrayBytesGoToAnotherClient(t *testing.T) {
	for _, name := range []string{"reference", "fast path"} {
		t.Run(name, func(t *testing.T) {
			stray := make(chan struct{}, 1)
			b := newFPScript(t, func(c net.Conn, br *bufio.Reader, r *http.Request, body []byte) bool {
				if r.Method == http.MethodHead {
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 44\r\n\r\n")
					// Pacing: the stray bytes come after the proxy took the headers.
					time.Sleep(20 * time.Millisecond)
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nnot-yours!")
					select { // once is enough
					case stray <- struct{}{}:
					default:
					}
					return true
				}
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nyours")
				return true
			})
			addr := fpReference(t, b.URL(), 5*time.Second)
			if name == "fast path" {
				addr = fpStart(t, b.URL(), nil)
			}
			if a := fpRaw(t, addr, "HEAD /bkt/a HTTP/1.1\r\nHost: h\r\n\r\n"); a.Status != http.StatusOK {
				t.Fatalf("HEAD: %+v", a)
			}
			<-stray
			// The reference's Transport sees the stray bytes on the idle
			// connection and closes it; the fast path looks when it reuses
			// it, and on loopback the bytes are in its socket once the
			// backend's write returned.
			if name == "reference" && !b.WaitOpen(0, 5*time.Second) {
				t.Fatal("the reference kept the connection with stray bytes")
			}
			if a := fpRaw(t, addr, "PUT /bkt/b HTTP/1.1\r\nHost: h\r\nX-Fencing-Token: 1\r\nContent-Length: 1\r\n\r\nx"); a.Body != "yours" {
				t.Fatalf("another client's write got %+v", a)
			}
		})
	}
}

// Was a bug of the first fast path, fixed: a raw "#" in the query (net/http's server keeps it in the query) is
// cut off with what follows on the fast path; the reference sends the query
// as received, as the brief asks (signatures cover it).
func TestAttackProxyQueryWithHash(t *testing.T) {
	var mu sync.Mutex
	var got []string
	b := newFPScript(t, func(c net.Conn, br *bufio.Reader, r *http.Request, body []byte) bool {
		mu.Lock()
		got = append(got, r.RequestURI)
		mu.Unlock()
		io.WriteString(c, "HTTP/1.1 204 No Content\r\n\r\n")
		return true
	})
	for _, addr := range []string{fpReference(t, b.URL(), 5*time.Second), fpStart(t, b.URL(), nil)} {
		if a := fpRaw(t, addr, "PUT /bkt/obj?partNumber=1#x&uploadId=2 HTTP/1.1\r\nHost: h\r\nX-Fencing-Token: 1\r\nContent-Length: 1\r\n\r\nx"); a.Status != http.StatusNoContent {
			t.Fatalf("%+v", a)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 || got[0] != got[1] {
		t.Fatalf("request targets at the backend: reference then fast path: %q", got)
	}
}

// Was a bug of the first fast path, fixed: a backend that refuses an upload early (413) and closes without
// reading the body resets the connection; when the client is still
// uploading, the reference relays the 413, the fast path answers 502 (and
// counts the refused write as possibly applied).
func TestAttackProxyEarlyRefusalThenReset(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	refused := make(chan struct{}, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
					c.Close()
					return
				}
				io.WriteString(c, "HTTP/1.1 413 Request Entity Too Large\r\nContent-Length: 3\r\nConnection: close\r\n\r\nbig")
				// Pacing: the proxy reads the 413 before the reset would
				// discard it; the backend cannot see that read.
				time.Sleep(20 * time.Millisecond)
				// Unread body bytes: the close resets the connection.
				c.Close()
				select { // once is enough
				case refused <- struct{}{}:
				default:
				}
			}()
		}
	}()
	upstream := "http://" + ln.Addr().String()
	for _, name := range []string{"reference", "fast path"} {
		addr := fpReference(t, upstream, 5*time.Second)
		if name == "fast path" {
			addr = fpStart(t, upstream, nil)
		}
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		half := strings.Repeat("z", 32<<10)
		io.WriteString(c, "PUT /bkt/obj HTTP/1.1\r\nHost: h\r\nX-Fencing-Token: 1\r\nContent-Length: 65536\r\n\r\n"+half)
		select {
		case <-refused: // the backend has reset the connection
		case <-time.After(time.Second): // a proxy that reads the body before it sends
		}
		io.WriteString(c, half) // the client still uploading
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		c.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Fatalf("%s: status %d, want the backend's 413", name, resp.StatusCode)
		}
	}
}

// Request bytes at a raw backend are the same with the fast path as with the
// reference, for odd but accepted inbound requests.
func TestFastPathProxyRequestBytesMatchReference(t *testing.T) {
	var mu sync.Mutex
	var last string
	b := newFPScript(t, func(c net.Conn, br *bufio.Reader, r *http.Request, body []byte) bool {
		var buf strings.Builder
		r.Header.Write(&buf)
		mu.Lock()
		last = fmt.Sprintf("%s %s %s host=%q\n%s\n%q", r.Method, r.RequestURI, r.Proto, r.Host, buf.String(), body)
		mu.Unlock()
		io.WriteString(c, "HTTP/1.1 204 No Content\r\n\r\n")
		return true
	})
	fast := fpStart(t, b.URL(), nil)
	ref := fpReference(t, b.URL(), 5*time.Second)
	for _, raw := range []string{
		"GET /b/o HTTP/1.1\r\nHost: [::1]:9000\r\n\r\n",
		"GET /b/o HTTP/1.1\r\nHost: bucket.example:9000\r\nX-A:   lead and trail   \r\nX-B: caf\xe9 \xff\r\n\r\n",
		"GET /b/o?q=\xe9\xff&x=%zz&y=a;b HTTP/1.1\r\nHost: h\r\n\r\n",
		"GET //b//o HTTP/1.1\r\nHost: h\r\n\r\n",
		"GET /b/%2F%25/o%2e HTTP/1.1\r\nHost: h\r\n\r\n",
		"GET /b/./x/../o HTTP/1.1\r\nHost: h\r\n\r\n",
		"GET /" + strings.Repeat("p", 30000) + " HTTP/1.1\r\nHost: h\r\n\r\n",
		"GET /b/o HTTP/1.0\r\nHost: h\r\n\r\n",
		"GET /b/o HTTP/1.1\r\nHost: h\r\nTE: trailers\r\n\r\n",
		"GET /b/o HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, X-Drop\r\nX-Drop: 1\r\nX-Keep: 2\r\n\r\n",
		"GET /b/o HTTP/1.1\r\nHost: h\r\nUser-Agent: a\r\nUser-Agent: b\r\n\r\n",
		"GET /b/o HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 9.9.9.9\r\nForwarded: for=1.2.3.4\r\n\r\n",
		"GET /b/o HTTP/1.1\r\nhost: h\r\ncontent-length: 0\r\n\r\n",
		"HEAD /b/o HTTP/1.1\r\nHost: h\r\n\r\n",
		"PUT /b/o HTTP/1.1\r\nHost: h\r\nX-Fencing-Token: 2\r\nContent-Length: 0\r\n\r\n",
		"POST /b/o?uploads HTTP/1.1\r\nHost: h\r\nX-Fencing-Token: 2\r\n\r\n",
		"PUT /b/%E2%82%AC HTTP/1.1\r\nHost: h\r\nX-Fencing-Token: 2\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello",
		"MOVE /b/o HTTP/1.1\r\nHost: h\r\nX-Fencing-Token: 2\r\nDestination: /b/p\r\nContent-Length: 1\r\n\r\nm",
		"PUT /b/o HTTP/1.1\r\nHost: h\r\nX-Fencing-Token: 2\r\nX-Amz-Meta-A: 1\r\nX-Amz-Meta-A: 2\r\nAuthorization: AWS4-HMAC-SHA256 Credential=a/b, SignedHeaders=host, Signature=c\r\nContent-Length: 1\r\n\r\nx",
	} {
		var res [2]string
		var status [2]int
		for i, addr := range []string{fast, ref} {
			mu.Lock()
			last = ""
			mu.Unlock()
			status[i] = fpRaw(t, addr, raw).Status
			mu.Lock()
			res[i] = last
			mu.Unlock()
		}
		if res[0] != res[1] || status[0] != status[1] {
			t.Errorf("%.80q\nfast path %d %.400q\nreference %d %.400q", raw, status[0], res[0], status[1], res[1])
		}
	}
}

// fpWholeWrites is a backend that records whole writes (by token) and
// answers 204; a write cut before its end is never recorded.
func fpWholeWrites(t *testing.T) *fpScript {
	return newFPScript(t, func(c net.Conn, br *bufio.Reader, r *http.Request, body []byte) bool {
		io.WriteString(c, "HTTP/1.1 204 No Content\r\n\r\n")
		return true
	})
}

// fpStalledUpload starts a small (fast-path) upload with token and sends
// sent of its 1000 body bytes.
func fpStalledUpload(t *testing.T, addr, token string, sent int) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	io.WriteString(c, "PUT /bkt/obj HTTP/1.1\r\nHost: h\r\nX-Fencing-Token: "+token+"\r\nContent-Length: 1000\r\n\r\n"+strings.Repeat("s", sent))
	return c, bufio.NewReader(c)
}

func fpWaitNoWhole(t *testing.T, b *fpScript, prefix string) {
	t.Helper()
	for _, r := range b.Requests() {
		if strings.HasPrefix(r, prefix) {
			t.Fatalf("the backend got a whole %q: %.60q", prefix, r)
		}
	}
}

// A small fenced write whose client stalls mid-body is cut off when a larger
// token arrives: 409 to it, never whole at the backend, and the larger token
// forwarded without waiting for the drain timeout.
func TestFastPathProxyStalledUploadCutByLargerToken(t *testing.T) {
	b := fpWholeWrites(t)
	in := servertest.Start(t, map[string]string{"FENCEPROXY_UPSTREAM": b.URL(), "FENCEPROXY_DATA_DIR": t.TempDir(),
		"FENCEPROXY_ABANDON_GRACE": "0s", "FENCEPROXY_UPSTREAM_FAST_PATH": "true", "FENCEPROXY_DRAIN_TIMEOUT": "10s"})
	addr := in.Proxy
	c, br := fpStalledUpload(t, addr, "5", 16)
	// Admitted (the gauge counts admitted writes): the fast path reads its
	// body whole before it sends anything, so the backend has seen nothing.
	// Only the gauge shows it: the admission signals no event.
	servertest.Eventually(t, 10*time.Second, "the stalled upload is admitted", func() bool {
		return metric(t, http.DefaultClient, in.Control, "fenceproxy_inflight_requests") >= 1
	})
	start := time.Now()
	if a := fpRaw(t, addr, "PUT /bkt/obj HTTP/1.1\r\nHost: h\r\nX-Fencing-Token: 6\r\nContent-Length: 1\r\n\r\nB"); a.Status != http.StatusNoContent {
		t.Fatalf("token 6: %+v", a)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("token 6 waited %s for a stalled upload", d)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("the cut-off writer got no answer: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict {
		t.Fatalf("cut-off writer: %d", resp.StatusCode)
	}
	io.WriteString(c, strings.Repeat("s", 984)) // the rest, too late
	time.Sleep(50 * time.Millisecond)           // asserts nothing happens: the late rest makes no whole write
	if got := b.Requests(); len(got) != 1 || got[0] != "PUT /bkt/obj B" {
		t.Fatalf("backend got %.100q, want only token 6's write", got)
	}
}

// A client that goes away mid-body, or pauses past the upload idle timeout:
// the backend never gets the write whole, and the barrier opens at once.
func TestFastPathProxyUploadCutShort(t *testing.T) {
	for _, how := range []string{"client closes", "client pauses"} {
		t.Run(how, func(t *testing.T) {
			b := fpWholeWrites(t)
			in := fpStartInstance(t, b.URL(), map[string]string{"FENCEPROXY_UPLOAD_IDLE_TIMEOUT": "300ms", "FENCEPROXY_ABANDON_GRACE": "5s"})
			addr := in.Proxy
			c, br := fpStalledUpload(t, addr, "5", 999)
			if how == "client closes" {
				// Mid-body: once admitted, which only the gauge shows (the
				// fast path sends nothing before the body is whole).
				servertest.Eventually(t, 10*time.Second, "the upload is admitted", func() bool {
					return metric(t, http.DefaultClient, in.Control, "fenceproxy_inflight_requests") >= 1
				})
				c.Close()
			} else {
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				resp, err := http.ReadResponse(br, nil)
				if err != nil || resp.StatusCode != http.StatusRequestTimeout {
					t.Fatalf("paused upload: %v %v", resp, err)
				}
			}
			start := time.Now()
			if a := fpRaw(t, addr, "PUT /bkt/obj HTTP/1.1\r\nHost: h\r\nX-Fencing-Token: 6\r\nContent-Length: 1\r\n\r\nB"); a.Status != http.StatusNoContent {
				t.Fatalf("token 6: %+v", a)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Fatalf("token 6 waited %s: the cut write was counted as sent", d)
			}
			fpWaitNoWhole(t, b, "PUT /bkt/obj s")
		})
	}
}

// Upstream failures on the fast path keep their classes: a backend that
// takes the write and hangs gives 504 within the response timeout, one that
// takes it and closes gives 502, both with the write counted as possibly
// applied and sent once; a backend that cannot be reached gives 502 with
// nothing sent.
func TestFastPathProxyUpstreamFailures(t *testing.T) {
	for _, tc := range []struct {
		name      string
		answer    func(c net.Conn, br *bufio.Reader, r *http.Request, body []byte) bool
		status    int
		abandoned bool
	}{
		{"hangs", func(c net.Conn, br *bufio.Reader, r *http.Request, body []byte) bool {
			br.ReadByte() // until the proxy gives up and closes
			return false
		}, http.StatusGatewayTimeout, true},
		{"closes", func(c net.Conn, br *bufio.Reader, r *http.Request, body []byte) bool { return false }, http.StatusBadGateway, true},
		{"half an answer", func(c net.Conn, br *bufio.Reader, r *http.Request, body []byte) bool {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-")
			return false
		}, http.StatusBadGateway, true},
		{"unreachable", nil, http.StatusBadGateway, false},
	} {
		for _, req := range []string{
			"PUT /bkt/obj HTTP/1.1\r\nHost: h\r\nX-Fencing-Token: 5\r\nContent-Length: 3\r\n\r\nabc",
			"POST /bkt/obj HTTP/1.1\r\nHost: h\r\nX-Fencing-Token: 5\r\nContent-Length: 0\r\n\r\n",
		} {
			method := strings.Fields(req)[0]
			t.Run(tc.name+"/"+method, func(t *testing.T) {
				upstream := "http://127.0.0.1:1"
				var b *fpScript
				if tc.answer != nil {
					b = newFPScript(t, tc.answer)
					upstream = b.URL()
				}
				in := servertest.Start(t, map[string]string{"FENCEPROXY_UPSTREAM": upstream, "FENCEPROXY_DATA_DIR": t.TempDir(),
					"FENCEPROXY_UPSTREAM_FAST_PATH":        "true",
					"FENCEPROXY_UPSTREAM_RESPONSE_TIMEOUT": "300ms", "FENCEPROXY_ABANDON_GRACE": "100ms", "FENCEPROXY_DRAIN_TIMEOUT": "5s"})
				start := time.Now()
				a := fpRaw(t, in.Proxy, req)
				if a.Status != tc.status {
					t.Fatalf("status %d, want %d: %s", a.Status, tc.status, a.Body)
				}
				if d := time.Since(start); d > 2*time.Second {
					t.Fatalf("answered after %s", d)
				}
				if tc.abandoned && !in.Logs.WaitFor("after the whole write was sent", 5*time.Second) {
					t.Fatalf("not counted as possibly applied\n%s", in.Logs)
				}
				// Asserts nothing happens: no second copy reaches the
				// backend, and no line counts a write that was not sent.
				time.Sleep(50 * time.Millisecond)
				if b != nil {
					if got := b.Requests(); len(got) != 1 {
						t.Fatalf("backend got %d copies: %q", len(got), got)
					}
				}
				logged := strings.Contains(in.Logs.String(), "after the whole write was sent")
				if logged != tc.abandoned {
					t.Fatalf("counted as possibly applied: %v, want %v\n%s", logged, tc.abandoned, in.Logs)
				}
			})
		}
	}
}

// A body that streams slower than the response timeout still arrives whole:
// the timeout bounds the wait for the headers only.
func TestFastPathProxySlowBodyOutlivesResponseTimeout(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		for i := range 4 {
			fmt.Fprintf(w, "part%d;", i)
			w.(http.Flusher).Flush()
			time.Sleep(200 * time.Millisecond) // pacing: the body streams slower than the response timeout
		}
	}))
	t.Cleanup(backend.Close)
	addr := fpStart(t, backend.URL, map[string]string{"FENCEPROXY_UPSTREAM_RESPONSE_TIMEOUT": "300ms"})
	a := fpRaw(t, addr, "GET /bkt/slow HTTP/1.1\r\nHost: h\r\n\r\n")
	if a.Status != http.StatusOK || a.Body != "part0;part1;part2;part3;" || a.BodyErr != "" {
		t.Fatalf("%+v", a)
	}
}

// 200 clients at once, mixing fast-path and fallback requests, each get
// their own answer (under -race: no pooled response shared).
func TestFastPathProxyConcurrentMix(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		id := r.Header.Get("X-Id")
		w.Header().Set("X-Id", id)
		w.Header().Set("Trailer", "X-Id-Trailer")
		io.WriteString(w, r.Method+":"+id+":")
		w.Write(body)
		w.Header().Set("X-Id-Trailer", id)
	}))
	t.Cleanup(backend.Close)
	addr := fpStart(t, backend.URL, nil)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 200, DisableCompression: true}}
	t.Cleanup(client.CloseIdleConnections)
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for g := range 200 {
		wg.Go(func() {
			for j := range 2 {
				id := fmt.Sprintf("%d-%d", g, j)
				body := strings.Repeat(id, 1+(g*7+j)%40)
				var req *http.Request
				switch (g + j) % 6 {
				case 0: // fast
					req, _ = http.NewRequest("PUT", "http://"+addr+"/bkt/"+id, strings.NewReader(body))
				case 1: // fast
					req, _ = http.NewRequest("GET", "http://"+addr+"/bkt/"+id, nil)
					body = ""
				case 2: // fallback: chunked
					req, _ = http.NewRequest("PUT", "http://"+addr+"/bkt/"+id, io.NopCloser(strings.NewReader(body)))
				case 3: // fallback: over 64 KiB (one client in ten; fast path otherwise)
					if g%10 == 0 {
						body = strings.Repeat(id, 70000/len(id))
					}
					req, _ = http.NewRequest("PUT", "http://"+addr+"/bkt/"+id, strings.NewReader(body))
				case 4: // fallback: bodyless DELETE
					req, _ = http.NewRequest("DELETE", "http://"+addr+"/bkt/"+id, nil)
					body = ""
				case 5: // fast
					req, _ = http.NewRequest("POST", "http://"+addr+"/bkt/"+id, strings.NewReader(body))
				}
				req.Header.Set("X-Id", id)
				req.Header.Set("X-Fencing-Token", "1")
				resp, err := client.Do(req)
				if err != nil {
					errs <- err
					return
				}
				got, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				want := req.Method + ":" + id + ":" + body
				if err != nil || resp.StatusCode != http.StatusOK || resp.Header.Get("X-Id") != id || string(got) != want ||
					resp.Trailer.Get("X-Id-Trailer") != id {
					errs <- fmt.Errorf("%s %s: %d header %q trailer %q body %.50q (%v)", req.Method, id, resp.StatusCode,
						resp.Header.Get("X-Id"), resp.Trailer.Get("X-Id-Trailer"), got, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// Clients that hang up in the middle of large responses: the proxy's backend
// connections and goroutines settle, and reads that complete reuse one
// connection.
func TestFastPathProxyConnectionsSettle(t *testing.T) {
	big := []byte(fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", 16<<20) + strings.Repeat("b", 16<<20))
	b := newFPScript(t, func(c net.Conn, br *bufio.Reader, r *http.Request, body []byte) bool {
		if r.URL.Path == "/bkt/big" {
			_, err := c.Write(big)
			return err == nil
		}
		_, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		return err == nil
	})
	addr := fpStart(t, b.URL(), nil)
	for range 3 { // warm up: the proxy's own goroutines
		fpRaw(t, addr, "GET /bkt/small HTTP/1.1\r\nHost: h\r\n\r\n")
	}
	before := runtime.NumGoroutine()
	for range 20 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.(*net.TCPConn).SetReadBuffer(4 << 10) // the proxy cannot hand it the whole body
		io.WriteString(c, "GET /bkt/big HTTP/1.1\r\nHost: h\r\n\r\n")
		buf := make([]byte, 1000)
		io.ReadFull(c, buf)
		c.Close()
	}
	for range 20 {
		if a := fpRaw(t, addr, "GET /bkt/small HTTP/1.1\r\nHost: h\r\n\r\n"); a.Body != "ok" {
			t.Fatalf("%+v", a)
		}
	}
	b.WaitOpen(1, 2*time.Second)
	// The goroutine count signals no event: polled.
	servertest.Within(2*time.Second, func() bool { return runtime.NumGoroutine() <= before+5 })
	if n := b.Open.Load(); n > 1 {
		t.Fatalf("%d backend connections open after the clients left, want at most 1", n)
	}
	if n := runtime.NumGoroutine(); n > before+5 {
		t.Fatalf("%d goroutines, %d before", n, before)
	}
	if n := b.Conns.Load(); n < 20 {
		t.Fatalf("%d backend connections: the clients did not hang up before the ends of the bodies", n)
	}
}

// An upstream URL with a base path, or an IPv6 literal: the same request
// lines as the reference.
func TestFastPathProxyUpstreamShapes(t *testing.T) {
	var mu sync.Mutex
	var last string
	answer := func(c net.Conn, br *bufio.Reader, r *http.Request, body []byte) bool {
		mu.Lock()
		last = r.Method + " " + r.RequestURI + " host=" + r.Host + " " + string(body)
		mu.Unlock()
		io.WriteString(c, "HTTP/1.1 204 No Content\r\n\r\n")
		return true
	}
	b := newFPScript(t, answer)
	upstreams := []string{b.URL() + "/base", b.URL() + "/base/", b.URL() + "/a%2Fb"}
	if ln, err := net.Listen("tcp", "[::1]:0"); err == nil {
		ln.Close()
		upstreams = append(upstreams, newFPScriptOn(t, "[::1]:0", answer).URL())
	} else {
		t.Logf("no IPv6 loopback: %v", err)
	}
	for _, upstream := range upstreams {
		fast := fpStart(t, upstream, nil)
		ref := fpReference(t, upstream, 5*time.Second)
		for _, raw := range []string{
			"GET /b/o?x=1 HTTP/1.1\r\nHost: h\r\n\r\n",
			"PUT //b//o HTTP/1.1\r\nHost: h\r\nX-Fencing-Token: 1\r\nContent-Length: 1\r\n\r\nx",
			"PUT /b/%2F%25 HTTP/1.1\r\nHost: h\r\nX-Fencing-Token: 1\r\nContent-Length: 1\r\n\r\nx",
			"GET / HTTP/1.1\r\nHost: h\r\n\r\n",
		} {
			var res [2]string
			for i, addr := range []string{fast, ref} {
				if a := fpRaw(t, addr, raw); a.Status != http.StatusNoContent {
					t.Fatalf("%s %q: %+v", upstream, raw, a)
				}
				mu.Lock()
				res[i] = last
				mu.Unlock()
			}
			if res[0] != res[1] {
				t.Errorf("upstream %s, %.40q:\nfast path %q\nreference %q", upstream, raw, res[0], res[1])
			}
		}
	}
}
