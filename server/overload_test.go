package server_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/servertest"
)

// Issue 29: slow bodies must not exhaust the proxy. Each test below runs
// its scenario with the protection on and, as its teeth, with the
// protection switched off by its variable, where the same scenario must
// find the problem.

// lenientBackend is a backend as lenient as real stores are: it applies a
// body cut short by an orderly close (FIN) as if it were whole, and only a
// reset makes it give the write up. It records every request whose headers
// arrived and every body it applied, by path.
type lenientBackend struct {
	ln      net.Listener
	mu      sync.Mutex
	seen    map[string]int
	applied map[string]string
}

func startLenientBackend(t *testing.T) *lenientBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &lenientBackend{ln: ln, seen: map[string]int{}, applied: map[string]string{}}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go b.serve(c)
		}
	}()
	return b
}

func (b *lenientBackend) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		b.mu.Lock()
		b.seen[req.URL.Path]++
		b.mu.Unlock()
		body, err := io.ReadAll(req.Body)
		if err == nil || errors.Is(err, io.ErrUnexpectedEOF) { // whole, or cut by a FIN: applied
			b.mu.Lock()
			b.applied[req.URL.Path] = string(body)
			b.mu.Unlock()
		}
		if err != nil {
			return
		}
		if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"); err != nil {
			return
		}
	}
}

func (b *lenientBackend) URL() string { return "http://" + b.ln.Addr().String() }

func (b *lenientBackend) state(path string) (seen int, applied string, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	applied, ok = b.applied[path]
	return b.seen[path], applied, ok
}

// startOverload starts a fenceproxy in front of backend with env on top of
// the defaults of these tests.
func startOverload(t *testing.T, backend string, env map[string]string) *servertest.Instance {
	t.Helper()
	return servertest.Start(t, servertest.Env(map[string]string{
		"FENCEPROXY_UPSTREAM": backend, "FENCEPROXY_DATA_DIR": t.TempDir(), "FENCEPROXY_LOG_LEVEL": "debug",
	}, env))
}

// slowUpload is a raw HTTP/1.1 PUT whose body the test sends by hand.
type slowUpload struct {
	c  net.Conn
	br *bufio.Reader
}

// startUpload sends a PUT of path with token and a Content-Length of size,
// and the first sent bytes of its body.
func startUpload(t *testing.T, addr, path, token string, size, sent int) *slowUpload {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := fmt.Fprintf(c, "PUT %s HTTP/1.1\r\nHost: test\r\nX-Fencing-Token: %s\r\nContent-Length: %d\r\n\r\n%s",
		path, token, size, strings.Repeat("a", sent)); err != nil {
		t.Fatal(err)
	}
	return &slowUpload{c: c, br: bufio.NewReader(c)}
}

// answer reads the response, waiting at most d; nil when none came.
func (u *slowUpload) answer(d time.Duration) *http.Response {
	u.c.SetReadDeadline(time.Now().Add(d))
	res, err := http.ReadResponse(u.br, nil)
	if err != nil {
		return nil
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res
}

// TestMaxUploads: past FENCEPROXY_MAX_UPLOADS uploads in flight, one more
// gets 503 overloaded with Retry-After before anything of it reaches the
// backend or any maximum moves, while a bodyless write still goes through,
// and a write with a body goes through again once a slot is free.
func TestMaxUploads(t *testing.T) {
	run := func(t *testing.T, maxUploads string) (problem string) {
		backend := startLenientBackend(t)
		in := startOverload(t, backend.URL(), map[string]string{"FENCEPROXY_MAX_UPLOADS": maxUploads, "FENCEPROXY_UPLOAD_MIN_RATE": "0"})
		client := servertest.NewClient(t)
		var held []*slowUpload
		for i := range 3 {
			held = append(held, startUpload(t, in.Proxy, fmt.Sprintf("/hold/%d", i), "1", 100000, 10))
		}
		servertest.Eventually(t, 10*time.Second, "3 uploads in flight (the gauge is the only signal)", func() bool {
			return scrape(t, in, "fenceproxy_uploads_in_flight") == 3
		})
		// One upload too many: refused whole.
		req, _ := http.NewRequest(http.MethodPut, in.ProxyURL()+"/over", strings.NewReader("one too many"))
		req.Header.Set("X-Fencing-Token", "7")
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Fencing-Refused") != "overloaded" || res.Header.Get("Retry-After") == "" {
			problem = fmt.Sprintf("the upload past the cap got %d Fencing-Refused %q Retry-After %q, want 503 overloaded with Retry-After",
				res.StatusCode, res.Header.Get("Fencing-Refused"), res.Header.Get("Retry-After"))
		}
		if seen, _, _ := backend.state("/over"); seen > 0 && problem == "" {
			problem = "the backend got the upload past the cap"
		}
		if m := servertest.FenceMax(t, client, in.Control, "over"); m != 0 && problem == "" {
			problem = fmt.Sprintf("the upload past the cap raised the maximum to %d", m)
		}
		if problem != "" {
			return problem
		}
		if got := scrape(t, in, `fenceproxy_overload_total{limit="uploads"}`); got != 1 {
			t.Errorf(`fenceproxy_overload_total{limit="uploads"} = %v, want 1`, got)
		}
		if !in.Logs.Contains("uploads in flight reached FENCEPROXY_MAX_UPLOADS") {
			t.Errorf("no warning logged for the cap reached:\n%s", in.Logs)
		}
		// Meanwhile: a bodyless write and a read pass.
		req, _ = http.NewRequest(http.MethodDelete, in.ProxyURL()+"/legit", nil)
		req.Header.Set("X-Fencing-Token", "1")
		if res, err := client.Do(req); err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("a bodyless write during the overload: %v %v", res, err)
		} else {
			res.Body.Close()
		}
		// A slot freed: a write with a body passes again.
		held[0].c.Close()
		servertest.Eventually(t, 10*time.Second, "a slot free (the gauge is the only signal)", func() bool {
			return scrape(t, in, "fenceproxy_uploads_in_flight") == 2
		})
		if code, _ := servertest.PutToken(t, client, in.ProxyURL(), "/legit", "2", "legit"); code != http.StatusOK {
			t.Fatalf("a write once a slot was free: %d", code)
		}
		if _, body, ok := backend.state("/legit"); !ok || body != "body of legit" {
			t.Errorf("the backend applied %q for /legit", body)
		}
		return ""
	}
	// Teeth: no cap: the upload past 3 goes through.
	withTeeth(t, "3", "0", "with FENCEPROXY_MAX_UPLOADS=0 the fourth upload was refused too; the test has no teeth", run)
}

// TestUploadMinRate: a body trickling a byte every 200 ms (never idle for
// UPLOAD_IDLE_TIMEOUT) is cut within the rate window with 408 and never
// applied, on both upstream paths: a large body the backend has started to
// receive (it gets a reset, and this lenient backend would apply a body cut
// by a FIN), and a small one the fast path reads whole first (the backend
// gets nothing).
func TestUploadMinRate(t *testing.T) {
	run := func(t *testing.T, minRate string) (problem string) {
		backend := startLenientBackend(t)
		in := startOverload(t, backend.URL(), map[string]string{"FENCEPROXY_UPLOAD_MIN_RATE": minRate,
			"FENCEPROXY_UPLOAD_RATE_WINDOW": "1s", "FENCEPROXY_UPLOAD_IDLE_TIMEOUT": "30s"})
		var wg sync.WaitGroup
		problems := make(chan string, 2)
		for _, shape := range []struct {
			path       string
			size, sent int
		}{{"/trickle/large", 300 << 10, 100 << 10}, {"/trickle/small", 1000, 10}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				u := startUpload(t, in.Proxy, shape.path, "1", shape.size, shape.sent)
				start := time.Now()
				stop := make(chan struct{})
				go func() { // 5 bytes/s, far below 1 KiB/s
					for {
						select {
						case <-stop:
							return
						case <-time.After(200 * time.Millisecond):
							if _, err := u.c.Write([]byte("b")); err != nil {
								return
							}
						}
					}
				}()
				res := u.answer(4 * time.Second) // window 1s: cut after about 1s of trickling
				close(stop)
				switch {
				case res == nil:
					problems <- fmt.Sprintf("%s: trickling for %s and not cut", shape.path, time.Since(start).Round(time.Millisecond))
					return
				case res.StatusCode != http.StatusRequestTimeout:
					problems <- fmt.Sprintf("%s: answered %d, want 408", shape.path, res.StatusCode)
					return
				}
				u.c.Close()
			}()
		}
		wg.Wait()
		close(problems)
		for p := range problems {
			problem += p + "; "
		}
		for _, path := range []string{"/trickle/large", "/trickle/small"} {
			// The lenient backend reads until the connection's end: a reset
			// arrives at once, a FIN would be applied.
			time.Sleep(200 * time.Millisecond)
			if _, body, ok := backend.state(path); ok {
				problem += fmt.Sprintf("%s: the backend applied %d bytes of a cut body; ", path, len(body))
			}
		}
		if problem == "" {
			if got := scrape(t, in, `fenceproxy_upstream_errors_total{kind="upload_too_slow"}`); got != 2 {
				t.Errorf(`fenceproxy_upstream_errors_total{kind="upload_too_slow"} = %v, want 2`, got)
			}
			if !in.Logs.Contains("slower than the minimum upload rate") {
				t.Errorf("no log line for the cut:\n%s", in.Logs)
			}
			if seen, _, _ := backend.state("/trickle/large"); seen != 1 {
				t.Errorf("the backend saw the large upload %d times, want 1 (it got part of the body, then a reset)", seen)
			}
		}
		return problem
	}
	// Teeth: no minimum: the trickle goes on.
	withTeeth(t, "1KiB", "0", "with FENCEPROXY_UPLOAD_MIN_RATE=0 the trickling bodies were cut too; the test has no teeth", run)
}

// TestMaxConnections: at FENCEPROXY_MAX_CONNECTIONS open connections the
// proxy listener stops accepting: a further connection waits in the
// backlog, unanswered, until one closes, and is then served.
func TestMaxConnections(t *testing.T) {
	run := func(t *testing.T, maxConns string) (problem string) {
		backend := startLenientBackend(t)
		in := startOverload(t, backend.URL(), map[string]string{"FENCEPROXY_MAX_CONNECTIONS": maxConns, "FENCEPROXY_UPLOAD_MIN_RATE": "0"})
		a := startUpload(t, in.Proxy, "/conn/a", "1", 100000, 10)
		startUpload(t, in.Proxy, "/conn/b", "1", 100000, 10)
		servertest.Eventually(t, 10*time.Second, "2 uploads in flight (the gauge is the only signal)", func() bool {
			return scrape(t, in, "fenceproxy_uploads_in_flight") == 2
		})
		c, err := net.Dial("tcp", in.Proxy) // completes: the kernel's backlog takes it
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		third := &slowUpload{c: c, br: bufio.NewReader(c)}
		fmt.Fprintf(c, "GET /conn/c HTTP/1.1\r\nHost: test\r\n\r\n")
		if res := third.answer(3 * time.Second); res != nil { // 3s: time enough for an answer on a loaded machine
			return fmt.Sprintf("a third connection was served at once (%d)", res.StatusCode)
		}
		if got := scrape(t, in, `fenceproxy_overload_total{limit="connections"}`); got < 1 {
			t.Errorf(`fenceproxy_overload_total{limit="connections"} = %v, want at least 1`, got)
		}
		if got := scrape(t, in, "fenceproxy_connections_open"); got != 2 {
			t.Errorf("fenceproxy_connections_open = %v, want 2", got)
		}
		if !in.Logs.Contains("holds FENCEPROXY_MAX_CONNECTIONS connections") {
			t.Errorf("no warning logged for the cap reached:\n%s", in.Logs)
		}
		a.c.Close() // a slot frees: the waiting connection is served
		if res := third.answer(10 * time.Second); res == nil || res.StatusCode != http.StatusOK {
			t.Fatalf("the waiting connection, once a slot was free: %v", res)
		}
		return ""
	}
	withTeeth(t, "2", "0", "with FENCEPROXY_MAX_CONNECTIONS=0 the third connection waited too; the test has no teeth", run)
}

// TestControlMaxHeaderBytes: the control listener refuses a header block
// of 1 MB with 431, as the proxy listener does past 64 KiB (net/http's
// default would take up to 1 MiB).
func TestControlMaxHeaderBytes(t *testing.T) {
	in := startOverload(t, "http://127.0.0.1:9", nil)
	for _, size := range []int{100 << 10, 1000000} {
		req, _ := http.NewRequest(http.MethodGet, in.ControlURL()+"/healthz", nil)
		req.Header.Set("X-Big", strings.Repeat("x", size))
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%d-byte header: %v", size, err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("%d-byte header on the control listener: %d, want 431", size, res.StatusCode)
		}
	}
	// A normal request still passes.
	res, err := http.Get(in.ControlURL() + "/healthz")
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("/healthz: %v %v", res, err)
	}
	res.Body.Close()
}

// withTeeth runs a protection's test twice: with on (FENCEPROXY_... as the
// test sets it) run must find no problem; with off, the protection
// switched off, it must find one, or the test has no teeth (noTeeth says
// what then went unseen).
func withTeeth(t *testing.T, on, off, noTeeth string, run func(t *testing.T, value string) (problem string)) {
	t.Helper()
	t.Run("on", func(t *testing.T) {
		if problem := run(t, on); problem != "" {
			t.Fatal(problem)
		}
	})
	t.Run("teeth", func(t *testing.T) {
		if problem := run(t, off); problem == "" {
			t.Fatal(noTeeth)
		} else {
			t.Logf("protection off, found: %s", problem)
		}
	})
}
