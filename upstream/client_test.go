package upstream

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/rawbackend"
)

// rawBackend answers every request with 204 and records each request's raw
// head (request line and header lines, sorted after the first) and body.
type rawBackend struct {
	ln    net.Listener
	mu    sync.Mutex
	heads []string
	conns atomic.Int32
}

func newRawBackend(t *testing.T) *rawBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return newRawBackendOn(t, ln)
}

// newRawBackendOn is newRawBackend on ln (a TLS listener, say).
func newRawBackendOn(t *testing.T, ln net.Listener) *rawBackend {
	b := &rawBackend{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b.conns.Add(1)
			go b.serve(c)
		}
	}()
	return b
}

func (b *rawBackend) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		var lines []string
		n := int64(0)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			line = strings.TrimRight(line, "\r\n")
			if line == "" {
				break
			}
			lines = append(lines, line)
			if k, v, ok := strings.Cut(line, ": "); ok && strings.EqualFold(k, "Content-Length") {
				for _, d := range v {
					n = n*10 + int64(d-'0')
				}
			}
		}
		body, _ := io.ReadAll(io.LimitReader(br, n))
		if int64(len(body)) != n {
			return // cut short: no request
		}
		slices.Sort(lines[1:])
		b.mu.Lock()
		b.heads = append(b.heads, strings.Join(lines, "\n")+"\n\n"+string(body))
		b.mu.Unlock()
		if _, err := io.WriteString(c, "HTTP/1.1 204 No Content\r\nX-Seen: 1\r\n\r\n"); err != nil {
			return
		}
	}
}

func (b *rawBackend) last() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.heads[len(b.heads)-1]
}

// outbound builds a request as ReverseProxy hands it to its Transport.
func outbound(t *testing.T, base, method, target string, body []byte, h http.Header) *http.Request {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	r := &http.Request{Method: method, URL: u, Host: "bucket.example:9000", Header: h.Clone(), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
	if r.Header == nil {
		r.Header = make(http.Header)
	}
	if _, ok := r.Header["User-Agent"]; !ok {
		r.Header.Set("User-Agent", "") // as ReverseProxy does: net/http then sends none
	}
	ref, err := url.ParseRequestURI(target)
	if err != nil {
		t.Fatal(err)
	}
	r.URL.Path, r.URL.RawPath, r.URL.RawQuery = ref.Path, ref.RawPath, ref.RawQuery
	if body != nil {
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
	}
	return r.WithContext(context.Background())
}

func stdTransport() *http.Transport {
	return &http.Transport{Proxy: nil, DisableCompression: true}
}

// withFallback is New with the fast path on and fallback in place of
// its Transport.
func withFallback(base *url.URL, fallback http.RoundTripper, opts Options) *Client {
	opts.FastPath = true
	c := New(base, opts)
	c.fallback = fallback
	return c
}

// The fast path sends the same request line, header lines and body as
// net/http's Transport (sorted: the order of header fields is not kept by
// either), so S3 SigV4 signatures and every other header survive.
func TestFastPathSendsWhatTheTransportSends(t *testing.T) {
	backend := newRawBackend(t)
	base := "http://" + backend.ln.Addr().String()
	u, _ := url.Parse(base)
	fast := withFallback(u, stdTransport(), Options{})
	std := stdTransport()
	t.Cleanup(fast.CloseIdleConnections)
	t.Cleanup(std.CloseIdleConnections)
	kib := bytes.Repeat([]byte("x"), 1024)
	cases := []struct {
		name, method, target string
		body                 []byte
		header               http.Header
	}{
		{"put 1 KiB", "PUT", "/bkt/obj-1", kib, http.Header{"X-Fencing-Token": {"42"}, "Content-Type": {"application/octet-stream"}}},
		{"put empty", "PUT", "/bkt/empty", nil, http.Header{"X-Fencing-Token": {"7"}}},
		{"get", "GET", "/bkt/obj-1?versionId=3&x", nil, http.Header{"Range": {"bytes=0-9"}}},
		{"delete with a body", "DELETE", "/bkt/obj-1", []byte("b"), http.Header{"X-Fencing-Token": {"7"}}},
		{"patch empty", "PATCH", "/bkt/obj-1", nil, http.Header{"X-Fencing-Token": {"7"}}},
		{"move with a body", "MOVE", "/bkt/obj-1", []byte("b"), http.Header{"Destination": {"/bkt/obj-2"}}},
		{"head", "HEAD", "/bkt/obj-1", nil, nil},
		{"post", "POST", "/bkt/obj?uploads", nil, http.Header{"X-Fencing-Token": {"7"}}},
		{"escaped path", "PUT", "/bkt/a%2Fb%20c/%7Euser/%E2%82%AC", []byte("e"), http.Header{"X-Fencing-Token": {"1"}}},
		{"double slash", "PUT", "//bkt//obj", []byte("d"), http.Header{"X-Fencing-Token": {"1"}}},
		{"query bytes", "GET", "/bkt/?list-type=2&prefix=a%2Fb&delimiter=%2F&x=a+b", nil, nil},
		{"sigv4", "PUT", "/bkt/signed", kib, http.Header{
			"Authorization":        {"AWS4-HMAC-SHA256 Credential=AKIA/20261201/us-east-1/s3/aws4_request, SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature=abc"},
			"X-Amz-Content-Sha256": {"UNSIGNED-PAYLOAD"},
			"X-Amz-Date":           {"20261201T000000Z"},
			"X-Amz-Meta-Odd":       {"  spaced\tvalue  "},
		}},
		{"many values", "PUT", "/bkt/multi", []byte("m"), http.Header{"X-Multi": {"a", "b", "a"}, "Cookie": {"a=1;b=2", "c=3"}}},
		{"empty user agent", "GET", "/bkt/ua", nil, http.Header{"User-Agent": {""}}},
		{"user agent", "GET", "/bkt/ua", nil, http.Header{"User-Agent": {"aws-sdk-go-v2/1.0"}}},
		{"empty value", "PUT", "/bkt/ev", []byte("v"), http.Header{"X-Empty": {""}}},
		{"64 KiB", "PUT", "/bkt/big", bytes.Repeat([]byte("b"), SmallBodyMax), nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if !fast.Fast(outbound(t, base, tc.method, tc.target, tc.body, tc.header)) {
				t.Fatal("not on the fast path")
			}
			var got [2]string
			for i, rt := range []http.RoundTripper{fast, std} {
				resp, err := rt.RoundTrip(outbound(t, base, tc.method, tc.target, tc.body, tc.header))
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusNoContent || resp.Header.Get("X-Seen") != "1" {
					t.Fatalf("response %d %v", resp.StatusCode, resp.Header)
				}
				got[i] = backend.last()
			}
			if got[0] != got[1] {
				t.Fatalf("fast path sent\n%q\nthe Transport sent\n%q", got[0], got[1])
			}
		})
	}
}

// recorder is a fallback that records what reached it.
type recorder struct {
	mu   sync.Mutex
	seen int
	next http.RoundTripper
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	r.seen++
	r.mu.Unlock()
	return r.next.RoundTrip(req)
}

func TestFallbackCarriesWhatTheFastPathDoesNot(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(backend.Close)
	u, _ := url.Parse(backend.URL)
	traced := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) {}})
	only1xx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{Got1xxResponse: func(int, textproto.MIMEHeader) error { return nil }})
	cases := []struct {
		name string
		fast bool
		edit func(r *http.Request) *http.Request
	}{
		{"small put", true, func(r *http.Request) *http.Request { return r }},
		{"1xx trace only", true, func(r *http.Request) *http.Request { return r.WithContext(only1xx) }},
		{"expect 100-continue", false, func(r *http.Request) *http.Request { r.Header.Set("Expect", "100-continue"); return r }},
		{"chunked body", false, func(r *http.Request) *http.Request { r.ContentLength = -1; return r }},
		{"body over SmallBodyMax", false, func(r *http.Request) *http.Request {
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(make([]byte, SmallBodyMax+1))), SmallBodyMax+1
			return r
		}},
		{"request trailer", false, func(r *http.Request) *http.Request { r.Trailer = http.Header{"X-Sum": nil}; return r }},
		{"upgrade", false, func(r *http.Request) *http.Request {
			r.Header.Set("Connection", "Upgrade")
			r.Header.Set("Upgrade", "websocket")
			return r
		}},
		{"connection trace", false, func(r *http.Request) *http.Request { return r.WithContext(traced) }},
		{"other host", false, func(r *http.Request) *http.Request { r.URL.Host = "127.0.0.1:1"; return r }},
		{"close", false, func(r *http.Request) *http.Request { r.Close = true; return r }},
		{"bodyless delete", false, func(r *http.Request) *http.Request {
			r.Method, r.Body, r.ContentLength = http.MethodDelete, nil, 0
			return r
		}},
		{"bodyless put", true, func(r *http.Request) *http.Request { r.Body, r.ContentLength = nil, 0; return r }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{next: stdTransport()}
			c := withFallback(u, rec, Options{})
			t.Cleanup(c.CloseIdleConnections)
			r := tc.edit(outbound(t, backend.URL, "PUT", "/bkt/obj", []byte("body"), nil))
			if got := c.Fast(r); got != tc.fast {
				t.Fatalf("Fast = %v, want %v", got, tc.fast)
			}
			if tc.name == "other host" {
				return // nothing listens there
			}
			resp, err := c.RoundTrip(r)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if want := map[bool]int{true: 0, false: 1}[tc.fast]; rec.seen != want {
				t.Fatalf("fallback carried %d requests, want %d", rec.seen, want)
			}
		})
	}
	t.Run("https upstream", func(t *testing.T) {
		c := withFallback(&url.URL{Scheme: "https", Host: "backend.example"}, stdTransport(), Options{})
		r := outbound(t, "https://backend.example", "PUT", "/bkt/obj", []byte("b"), nil)
		if c.Fast(r) {
			t.Fatal("an https upstream took the fast path")
		}
	})
}

// Responses come back as net/http's Transport gives them: canonical keys,
// every Set-Cookie, no Content-Type the backend did not send, chunked bodies
// streamed, and trailers filled at the end of the body.
func TestFastPathResponses(t *testing.T) {
	release := make(chan struct{})
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/cookies":
			w.Header()["set-cookie"] = []string{"a=1; Path=/x", "a=2; Path=/y"}
			w.Header()["x-lower"] = []string{"v"}
			w.Header()["Content-Type"] = nil
			w.WriteHeader(http.StatusOK)
			io.WriteString(w, "ok")
		case "/trailers":
			w.Header().Set("Trailer", "X-Checksum")
			w.WriteHeader(http.StatusOK)
			io.WriteString(w, "part1")
			w.(http.Flusher).Flush()
			<-release // the client reads part1 while the backend is still writing
			io.WriteString(w, "part2")
			w.Header().Set("X-Checksum", "c0ffee")
		case "/head":
			w.Header().Set("Content-Length", "12345")
			w.WriteHeader(http.StatusOK)
		}
	}))
	t.Cleanup(backend.Close)
	u, _ := url.Parse(backend.URL)
	c := withFallback(u, stdTransport(), Options{})
	t.Cleanup(c.CloseIdleConnections)

	t.Run("headers", func(t *testing.T) {
		resp, err := c.RoundTrip(outbound(t, backend.URL, "GET", "/cookies", nil, nil))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if string(b) != "ok" || resp.ContentLength != 2 {
			t.Fatalf("body %q length %d", b, resp.ContentLength)
		}
		if got := resp.Header["Set-Cookie"]; !slices.Equal(got, []string{"a=1; Path=/x", "a=2; Path=/y"}) {
			t.Fatalf("Set-Cookie %q", got)
		}
		if resp.Header.Get("X-Lower") != "v" {
			t.Fatalf("header keys not canonical: %v", resp.Header)
		}
		if _, ok := resp.Header["Content-Type"]; ok {
			t.Fatalf("a Content-Type was added: %v", resp.Header)
		}
	})
	t.Run("streamed chunked body and trailers", func(t *testing.T) {
		resp, err := c.RoundTrip(outbound(t, backend.URL, "GET", "/trailers", nil, nil))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.ContentLength != -1 || !slices.Equal(resp.TransferEncoding, []string{"chunked"}) {
			t.Fatalf("length %d, transfer encoding %v", resp.ContentLength, resp.TransferEncoding)
		}
		if _, ok := resp.Trailer["X-Checksum"]; !ok {
			t.Fatalf("announced trailer missing: %v", resp.Trailer)
		}
		buf := make([]byte, 5)
		if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != "part1" {
			t.Fatalf("first part %q %v", buf, err)
		}
		close(release)
		rest, err := io.ReadAll(resp.Body)
		if err != nil || string(rest) != "part2" {
			t.Fatalf("rest %q %v", rest, err)
		}
		if got := resp.Trailer.Get("X-Checksum"); got != "c0ffee" {
			t.Fatalf("trailer %q", got)
		}
	})
	t.Run("head", func(t *testing.T) {
		resp, err := c.RoundTrip(outbound(t, backend.URL, "HEAD", "/head", nil, nil))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.Header.Get("Content-Length") != "12345" || resp.Body != http.NoBody {
			t.Fatalf("HEAD: %v %T", resp.Header, resp.Body)
		}
	})
}

// Keep-alive connections are reused, and a response body read to its end
// gives its connection back.
func TestFastPathReusesConnections(t *testing.T) {
	backend := newRawBackend(t)
	u, _ := url.Parse("http://" + backend.ln.Addr().String())
	c := withFallback(u, stdTransport(), Options{})
	t.Cleanup(c.CloseIdleConnections)
	for i := range 20 {
		resp, err := c.RoundTrip(outbound(t, u.String(), "PUT", "/bkt/obj", []byte{byte('a' + i)}, nil))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if n := backend.conns.Load(); n != 1 {
		t.Fatalf("20 sequential requests used %d connections, want 1", n)
	}
}

func TestFastPathErrors(t *testing.T) {
	t.Run("dial error is a DialError", func(t *testing.T) {
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		addr := ln.Addr().String()
		ln.Close()
		u, _ := url.Parse("http://" + addr)
		c := withFallback(u, stdTransport(), Options{DialTimeout: time.Second})
		_, err := c.RoundTrip(outbound(t, u.String(), "PUT", "/bkt/obj", []byte("x"), nil))
		var de *DialError
		var op *net.OpError
		if !errors.As(err, &de) || !errors.As(err, &op) || op.Op != "dial" {
			t.Fatalf("err %v (%T), want a *DialError over a dial *net.OpError", err, err)
		}
	})
	t.Run("response header timeout is a timeout; a slow body after it is not", func(t *testing.T) {
		backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/slow-headers" {
				<-r.Context().Done() // no headers until the client gives up
				return
			}
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			time.Sleep(600 * time.Millisecond) // not a wait: the body comes later than the header timeout
			io.WriteString(w, "late body")
		}))
		t.Cleanup(backend.Close)
		u, _ := url.Parse(backend.URL)
		c := withFallback(u, stdTransport(), Options{ResponseTimeout: 200 * time.Millisecond})
		t.Cleanup(c.CloseIdleConnections)
		_, err := c.RoundTrip(outbound(t, backend.URL, "GET", "/slow-headers", nil, nil))
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("err %v, want a net.Error with Timeout()", err)
		}
		resp, err := c.RoundTrip(outbound(t, backend.URL, "GET", "/slow-body", nil, nil))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || string(b) != "late body" {
			t.Fatalf("body %q err %v", b, err)
		}
	})
	t.Run("backend answers before reading the body", func(t *testing.T) {
		backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Connection", "close")
			w.WriteHeader(http.StatusForbidden)
		}))
		t.Cleanup(backend.Close)
		u, _ := url.Parse(backend.URL)
		c := withFallback(u, stdTransport(), Options{})
		t.Cleanup(c.CloseIdleConnections)
		resp, err := c.RoundTrip(outbound(t, backend.URL, "PUT", "/bkt/obj", bytes.Repeat([]byte("z"), SmallBodyMax), nil))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("status %d", resp.StatusCode)
		}
	})
	t.Run("a body that fails midway never arrives whole", func(t *testing.T) {
		backend := newRawBackend(t)
		u, _ := url.Parse("http://" + backend.ln.Addr().String())
		c := withFallback(u, stdTransport(), Options{})
		t.Cleanup(c.CloseIdleConnections)
		r := outbound(t, u.String(), "PUT", "/bkt/obj", nil, nil)
		r.Body = io.NopCloser(io.MultiReader(strings.NewReader("half"), iotestErr{}))
		r.ContentLength = 8
		if _, err := c.RoundTrip(r); err == nil {
			t.Fatal("no error for a failed body")
		}
		time.Sleep(50 * time.Millisecond) // asserting nothing happens: no whole request arrives
		backend.mu.Lock()
		defer backend.mu.Unlock()
		if len(backend.heads) != 0 {
			t.Fatalf("backend got a whole request: %q", backend.heads)
		}
	})
}

type iotestErr struct{}

func (iotestErr) Read([]byte) (int, error) { return 0, errors.New("client went away") }

// Concurrent requests with streamed bodies each get their own answer.
func TestFastPathConcurrent(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Path", r.URL.Path)
		w.Write(b)
	}))
	t.Cleanup(backend.Close)
	u, _ := url.Parse(backend.URL)
	c := withFallback(u, stdTransport(), Options{})
	t.Cleanup(c.CloseIdleConnections)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 64 {
		wg.Go(func() {
			for j := range 20 {
				path := "/bkt/obj-" + string(rune('a'+i%26)) + string(rune('a'+j%26))
				body := bytes.Repeat([]byte{byte(i)}, 100+i*37)
				resp, err := c.RoundTrip(outbound(t, backend.URL, "PUT", path, body, nil))
				if err != nil {
					errs <- err
					return
				}
				got, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.Header.Get("X-Path") != path || !bytes.Equal(got, body) {
					errs <- errors.New("answer for another request: " + resp.Header.Get("X-Path") + " for " + path)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// A backend that drops a keep-alive connection after answering: the next
// request finds the pooled connection closed before writing anything on it,
// and goes out on a new one, once, whatever its method (nothing was sent).
func TestFastPathSkipsDroppedConnections(t *testing.T) {
	// After one answer the backend closes, without saying so.
	backend := rawbackend.New(t, "127.0.0.1:0", rawbackend.CloseAfter("HTTP/1.1 204 No Content\r\n\r\n"))
	u, _ := url.Parse(backend.URL())
	c := withFallback(u, stdTransport(), Options{})
	t.Cleanup(c.CloseIdleConnections)
	var want []string
	for i, m := range []string{"GET", "PUT", "PUT", "POST", "GET"} {
		var body []byte
		if m != "GET" {
			body = []byte(fmt.Sprint("b", i))
		}
		resp, err := c.RoundTrip(outbound(t, u.String(), m, "/bkt/obj", body, nil))
		if err != nil {
			t.Fatalf("%s %d after the backend dropped the previous connection: %v", m, i, err)
		}
		resp.Body.Close()
		want = append(want, m+" /bkt/obj "+string(body))
		if !backend.WaitOpen(0, 5*time.Second) { // the backend's close is sent to the pooled connection
			t.Fatalf("%s %d: the backend did not close after its answer", m, i)
		}
	}
	if got := backend.Requests(); !slices.Equal(got, want) {
		t.Fatalf("backend saw %q, want %q (each request once)", got, want)
	}
}

// A backend that sends bytes nobody asked for after a response: the next
// request must not read them as its answer (net/http's Transport closes such
// a connection as an "unsolicited response").
func TestFastPathDropsConnectionsWithStrayBytes(t *testing.T) {
	backend := rawbackend.New(t, "127.0.0.1:0", rawbackend.KeepAfter("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"+
		"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nnot-yours!")) // the second answer is unasked
	u, _ := url.Parse(backend.URL())
	c := withFallback(u, stdTransport(), Options{})
	t.Cleanup(c.CloseIdleConnections)
	for i := range 5 {
		resp, err := c.RoundTrip(outbound(t, u.String(), "PUT", "/bkt/obj", []byte("x"), nil))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "ok" {
			t.Fatalf("request %d got %q: another request's bytes", i, b)
		}
	}
}

// A request with a validity (WithValidUntil) on the fast path: past it,
// nothing is written (ErrPastValidity, no connection opened); within it, the
// exchange ends when the validity's context is done, with a reset the
// backend's read sees, however long the backend takes to answer; a validity
// renewed while the backend works does not end it.
func TestFastPathEndsAtValidity(t *testing.T) {
	t.Run("past", func(t *testing.T) {
		backend := newRawBackend(t)
		u, _ := url.Parse("http://" + backend.ln.Addr().String())
		c := withFallback(u, stdTransport(), Options{})
		t.Cleanup(c.CloseIdleConnections)
		r := outbound(t, u.String(), "PUT", "/bkt/obj", []byte("stale"), nil)
		r = r.WithContext(WithValidUntil(r.Context(), func() time.Time { return time.Now().Add(-time.Millisecond) }))
		if !c.Fast(r) {
			t.Fatal("not on the fast path")
		}
		if _, err := c.RoundTrip(r); !errors.Is(err, ErrPastValidity) {
			t.Fatalf("RoundTrip: %v, want ErrPastValidity", err)
		}
		if n := backend.conns.Load(); n != 0 {
			t.Fatalf("a request past its validity opened %d connections to the backend", n)
		}
	})
	t.Run("bodiless", func(t *testing.T) {
		u, _ := url.Parse("http://127.0.0.1:1")
		c := withFallback(u, stdTransport(), Options{})
		r := outbound(t, u.String(), "PUT", "/bkt/copy", nil, nil)
		if !c.Fast(r) {
			t.Fatal("a bodiless PUT without a validity is not on the fast path")
		}
		if r = r.WithContext(WithValidUntil(r.Context(), time.Now)); c.Fast(r) {
			t.Fatal("a bodiless PUT with a validity is on the fast path, which has no body to watch it by")
		}
	})
	t.Run("renewed", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			time.Sleep(time.Second) // not a wait: the backend works past the first validity, within the renewed one
			w.WriteHeader(http.StatusNoContent)
		}))
		t.Cleanup(srv.Close)
		u, _ := url.Parse(srv.URL)
		c := New(u, Options{FastPath: true, ResponseTimeout: time.Minute})
		t.Cleanup(c.CloseIdleConnections)
		var until atomic.Int64
		until.Store(time.Now().Add(300 * time.Millisecond).UnixNano())
		renew := time.AfterFunc(150*time.Millisecond, func() { until.Store(time.Now().Add(time.Hour).UnixNano()) })
		defer renew.Stop()
		r := outbound(t, u.String(), "PUT", "/bkt/obj", []byte("body"), nil)
		r = r.WithContext(WithValidUntil(r.Context(), func() time.Time { return time.Unix(0, until.Load()) }))
		resp, err := c.RoundTrip(r)
		if err != nil {
			t.Fatalf("a write whose validity was renewed while the backend worked: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("status %d", resp.StatusCode)
		}
	})
	t.Run("dead pooled connection", func(t *testing.T) {
		var n atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			n.Add(1)
			w.WriteHeader(http.StatusNoContent)
		}))
		t.Cleanup(srv.Close)
		u, _ := url.Parse(srv.URL)
		c := New(u, Options{FastPath: true})
		t.Cleanup(c.CloseIdleConnections)
		for i := range 2 {
			r := outbound(t, u.String(), "PUT", "/bkt/obj", []byte("body"), nil)
			r = r.WithContext(WithValidUntil(context.Background(), func() time.Time { return time.Now().Add(time.Hour) }))
			resp, err := c.RoundTrip(r)
			if err != nil {
				t.Fatalf("write %d: %v", i, err)
			}
			resp.Body.Close()
			// The backend drops the pooled connection: the next write must
			// find it dead before writing and go out on another.
			srv.CloseClientConnections() // returns once closed: the FIN is sent
		}
		if n.Load() != 2 {
			t.Fatalf("the backend got %d writes, want 2", n.Load())
		}
	})
	t.Run("ends", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		got := make(chan error, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				got <- err
				return
			}
			defer c.Close()
			if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
				got <- err
				return
			}
			// Never answer; wait for the connection's end.
			_, err = c.Read(make([]byte, 1))
			got <- err
		}()
		u, _ := url.Parse("http://" + ln.Addr().String())
		c := New(u, Options{FastPath: true, ResponseTimeout: time.Minute})
		t.Cleanup(c.CloseIdleConnections)
		const validity = 300 * time.Millisecond
		until := time.Now().Add(validity)
		ctx, cancel := context.WithDeadline(context.Background(), until)
		defer cancel()
		r := outbound(t, u.String(), "PUT", "/bkt/obj", []byte("body"), nil)
		r = r.WithContext(WithValidUntil(ctx, func() time.Time { return until }))
		if !c.Fast(r) {
			t.Fatal("not on the fast path")
		}
		_, err = c.RoundTrip(r)
		if err == nil || !strings.Contains(err.Error(), "validity ended") || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("RoundTrip: %v, want the end of the validity", err)
		}
		if late := time.Since(until); late < 0 || late > 2*time.Second {
			t.Fatalf("RoundTrip returned %v after the validity ended, want at it", late)
		}
		select {
		case berr := <-got:
			if !errors.Is(berr, syscall.ECONNRESET) {
				t.Fatalf("the backend's read ended with %v, want ECONNRESET", berr)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the backend's connection did not end")
		}
	})
}

// A streamed request with a validity whose last bytes wait for room in the
// socket (the backend reads slowly) when the validity ends: the wait ends
// with a check of the validity right before the write system call, so the
// rest of the body is never sent and the backend never gets it whole, even
// when nothing cancelled the request's context (as when the process was
// stopped and its validity watch has not run yet). With the guard off
// (teeth), the backend gets the whole body once it reads on.
func TestTransportWriteGuardedByValidity(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	const size = 4 << 20
	resume := make(chan struct{})
	got := make(chan int64, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- -1
			return
		}
		defer c.Close()
		c.(*net.TCPConn).SetReadBuffer(32 << 10)
		br := bufio.NewReader(c)
		req, err := http.ReadRequest(br)
		if err != nil {
			got <- -1
			return
		}
		n, _ := io.CopyN(io.Discard, req.Body, 64<<10)
		<-resume // stall: the proxy's writes wait for room
		m, _ := io.Copy(io.Discard, req.Body)
		got <- n + m
	}()
	u, _ := url.Parse("http://" + ln.Addr().String())
	c := New(u, Options{FastPath: true, UnsentMax: 16 << 10})
	t.Cleanup(c.CloseIdleConnections)
	until := time.Now().Add(300 * time.Millisecond)
	// No cancellation: only the validity's end, as a stopped process sees it.
	ctx := WithValidUntil(context.Background(), func() time.Time { return until })
	r := outbound(t, u.String(), "PUT", "/bkt/obj", bytes.Repeat([]byte("x"), size), nil).WithContext(ctx)
	if c.Fast(r) {
		t.Fatal("a 4 MiB body on the fast path")
	}
	go func() {
		time.Sleep(time.Until(until) + 300*time.Millisecond) // not a wait: the backend stalls until the validity is over
		close(resume)
	}()
	_, rerr := c.RoundTrip(r)
	var n int64
	select {
	case n = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the backend's read did not end")
	}
	if !protected("validity") {
		if n != size {
			t.Fatalf("teeth: the backend got %d of %d bytes, want all (the guard is off)", n, size)
		}
		return
	}
	if n >= size || rerr == nil {
		t.Fatalf("the backend got %d of %d bytes (RoundTrip: %v), want the body cut at the validity", n, size, rerr)
	}
	t.Logf("the backend got %d of %d bytes; RoundTrip: %v", n, size, rerr)
}

// A watch (WithValidUntil) cuts only its own exchange: many writes share the
// pooled connections while the contexts of some end at any moment (before,
// during and after their exchange), and every write whose context did not
// end is answered, none failed by another's watch, none sent a second time
// after it may have been written. Answers with and without a body (a 204
// returns its connection to the pool inside fasthttp's Do) alternate.
func TestFastPathWatchCutsOnlyItsOwnExchange(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		time.Sleep(time.Duration(rand.IntN(1500)) * time.Microsecond)
		if rand.IntN(2) == 0 {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		io.WriteString(w, "ok")
	}))
	t.Cleanup(backend.Close)
	u, _ := url.Parse(backend.URL)
	c := withFallback(u, stdTransport(), Options{ResponseTimeout: 10 * time.Second})
	t.Cleanup(c.CloseIdleConnections)
	noEnd := func() time.Time { return time.Time{} }
	var failed atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 150 {
				ctx, cancel := context.WithCancel(context.Background())
				if i%3 == 0 {
					time.AfterFunc(time.Duration(rand.IntN(2000))*time.Microsecond, cancel)
				}
				r := outbound(t, backend.URL, "PUT", "/bkt/obj", bytes.Repeat([]byte("b"), 1024), nil)
				r = r.WithContext(WithValidUntil(ctx, noEnd))
				resp, err := c.RoundTrip(r)
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				if err != nil && ctx.Err() == nil {
					failed.Add(1)
					t.Errorf("a write whose context did not end failed: %v", err)
				}
				cancel()
			}
		}()
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d writes failed by other exchanges' watches", n)
	}
}

// A backend that restarted leaves every pooled connection dead, however
// many: a write (with a validity or without) is still sent once, on a new
// connection, and not failed after a few dead ones.
func TestFastPathGetsThroughAPoolOfDeadConnections(t *testing.T) {
	const n = 24
	arrived := make(chan struct{}, n)
	release := make(chan struct{})
	var mu sync.Mutex
	var seen []string
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, string(b))
		mu.Unlock()
		if string(b) == "fill" {
			arrived <- struct{}{}
			<-release
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(backend.Close)
	u, _ := url.Parse(backend.URL)
	c := withFallback(u, stdTransport(), Options{})
	t.Cleanup(c.CloseIdleConnections)
	noEnd := func() time.Time { return time.Time{} }
	for _, watched := range []bool{false, true} {
		// n writes at once: n pooled connections.
		var wg sync.WaitGroup
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := c.RoundTrip(outbound(t, backend.URL, "PUT", "/bkt/fill", []byte("fill"), nil))
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
			}()
		}
		for range n {
			<-arrived
		}
		release <- struct{}{}
		for range n - 1 {
			release <- struct{}{}
		}
		wg.Wait()
		backend.CloseClientConnections() // the restart
		mu.Lock()
		seen = nil
		mu.Unlock()
		r := outbound(t, backend.URL, "PUT", "/bkt/obj", []byte("after"), nil)
		if watched {
			r = r.WithContext(WithValidUntil(context.Background(), noEnd))
		}
		resp, err := c.RoundTrip(r)
		if err != nil {
			t.Fatalf("watched %v: a write after the backend closed %d pooled connections: %v", watched, n, err)
		}
		resp.Body.Close()
		mu.Lock()
		if !slices.Equal(seen, []string{"after"}) {
			t.Fatalf("watched %v: the backend saw %q, want the write once", watched, seen)
		}
		mu.Unlock()
	}
}
