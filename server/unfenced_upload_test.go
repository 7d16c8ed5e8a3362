package server_test

import (
	"bufio"
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

// Every request body holds an upload slot (MAX_UPLOADS) while it comes, so
// every one is cut by UPLOAD_IDLE_TIMEOUT and UPLOAD_MIN_RATE, not only a
// fenced write's: an unfenced request with a body (a GET, an OPTIONS), and
// a DeleteObjects body, which S3 mode reads before the barrier. Each test
// below runs with the protection on and, as its teeth, off by its variable.

// startRequest sends a raw HTTP/1.1 request of method and path (Host:
// host, with headers, each "Name: value") with a Content-Length of size,
// and the first sent bytes of its body (from body, padded with "a").
func startRequest(t *testing.T, addr, method, path, host string, headers []string, body string, size, sent int) *slowUpload {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	body += strings.Repeat("a", max(0, size-len(body)))
	head := ""
	for _, h := range headers {
		head += h + "\r\n"
	}
	if _, err := fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: %s\r\n%sContent-Length: %d\r\n\r\n%s",
		method, path, host, head, size, body[:sent]); err != nil {
		t.Fatal(err)
	}
	return &slowUpload{c: c, br: bufio.NewReader(c)}
}

// trickleUntil writes a byte to u every every until stop is closed.
func trickleUntil(u *slowUpload, every time.Duration, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-time.After(every):
			if _, err := u.c.Write([]byte("b")); err != nil {
				return
			}
		}
	}
}

// TestUnfencedBodyMinRate: unfenced requests whose bodies trickle a byte
// every 200 ms (never idle for UPLOAD_IDLE_TIMEOUT) are cut within the rate
// window with 408, on both upstream paths (a small GET body the fast path
// reads whole first, a large OPTIONS body the backend has started to
// receive and then gets a reset for), never reach the backend whole, and
// give their upload slots back: with MAX_UPLOADS=2 taken by them, another
// request with a body passes once they are cut.
func TestUnfencedBodyMinRate(t *testing.T) {
	run := func(t *testing.T, minRate string) (problem string) {
		backend := startLenientBackend(t)
		in := startOverload(t, backend.URL(), map[string]string{"FENCEPROXY_UPLOAD_MIN_RATE": minRate,
			"FENCEPROXY_UPLOAD_RATE_WINDOW": "1s", "FENCEPROXY_UPLOAD_IDLE_TIMEOUT": "30s", "FENCEPROXY_MAX_UPLOADS": "2"})
		shapes := []struct {
			method, path string
			size, sent   int
		}{{http.MethodGet, "/trickle/small", 1000, 10}, {http.MethodOptions, "/trickle/large", 300 << 10, 100 << 10}}
		var wg sync.WaitGroup
		problems := make(chan string, len(shapes))
		for _, shape := range shapes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				u := startRequest(t, in.Proxy, shape.method, shape.path, "test", nil, "", shape.size, shape.sent)
				start := time.Now()
				stop := make(chan struct{})
				go trickleUntil(u, 200*time.Millisecond, stop) // 5 bytes/s, far below 1 KiB/s
				res := u.answer(4 * time.Second)               // window 1s: cut after about 1s of trickling
				close(stop)
				switch {
				case res == nil:
					problems <- fmt.Sprintf("%s %s: trickling for %s and not cut", shape.method, shape.path, time.Since(start).Round(time.Millisecond))
				case res.StatusCode != http.StatusRequestTimeout:
					problems <- fmt.Sprintf("%s %s: answered %d, want 408", shape.method, shape.path, res.StatusCode)
				case !res.Close: // "Connection: close", which net/http reads into Close
					problems <- fmt.Sprintf("%s %s: 408 without Connection: close", shape.method, shape.path)
				}
			}()
		}
		wg.Wait()
		close(problems)
		for p := range problems {
			problem += p + "; "
		}
		if problem != "" {
			return problem
		}
		for _, shape := range shapes {
			// The lenient backend reads until the connection's end: a reset
			// arrives at once, a FIN would be applied.
			time.Sleep(200 * time.Millisecond)
			if _, body, ok := backend.state(shape.path); ok {
				t.Errorf("%s: the backend applied %d bytes of a cut body", shape.path, len(body))
			}
		}
		if seen, _, _ := backend.state("/trickle/large"); seen != 1 {
			t.Errorf("the backend saw the large body %d times, want 1 (it got part of it, then a reset)", seen)
		}
		if got := scrape(t, in, `fenceproxy_upstream_errors_total{kind="upload_too_slow"}`); got != 2 {
			t.Errorf(`fenceproxy_upstream_errors_total{kind="upload_too_slow"} = %v, want 2`, got)
		}
		if !in.Logs.Contains("slower than the minimum upload rate") {
			t.Errorf("no log line for the cut:\n%s", in.Logs)
		}
		// Their slots are free again: a request with a body passes.
		servertest.Eventually(t, 10*time.Second, "no upload in flight (the gauge is the only signal)", func() bool {
			return scrape(t, in, "fenceproxy_uploads_in_flight") == 0
		})
		res, err := http.DefaultClient.Do(mustRequest(t, http.MethodGet, in.ProxyURL()+"/after", strings.NewReader("query")))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if _, body, ok := backend.state("/after"); res.StatusCode != http.StatusOK || !ok || body != "query" {
			t.Errorf("a GET with a body after the cuts: %d, the backend applied %q", res.StatusCode, body)
		}
		return ""
	}
	// Teeth: no minimum: the trickle goes on, holding both slots.
	withTeeth(t, "1KiB", "0", "with FENCEPROXY_UPLOAD_MIN_RATE=0 the trickling bodies were cut too; the test has no teeth", run)
}

// TestUnfencedBodyIdle: an unfenced GET whose body stops after 10 bytes is
// cut at UPLOAD_IDLE_TIMEOUT with 408, and the backend never applies it.
func TestUnfencedBodyIdle(t *testing.T) {
	run := func(t *testing.T, idle string) (problem string) {
		backend := startLenientBackend(t)
		in := startOverload(t, backend.URL(), map[string]string{"FENCEPROXY_UPLOAD_IDLE_TIMEOUT": idle, "FENCEPROXY_UPLOAD_MIN_RATE": "0"})
		u := startRequest(t, in.Proxy, http.MethodGet, "/paused", "test", nil, "", 1000, 10)
		start := time.Now()
		switch res := u.answer(3 * time.Second); {
		case res == nil:
			return fmt.Sprintf("paused for %s and not cut", time.Since(start).Round(time.Millisecond))
		case res.StatusCode != http.StatusRequestTimeout:
			return fmt.Sprintf("answered %d, want 408", res.StatusCode)
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("cut after %v, want about the idle timeout (500ms)", took)
		}
		if _, _, ok := backend.state("/paused"); ok {
			t.Error("the backend applied the cut body")
		}
		if got := scrape(t, in, `fenceproxy_upstream_errors_total{kind="upload_timeout"}`); got != 1 {
			t.Errorf(`fenceproxy_upstream_errors_total{kind="upload_timeout"} = %v, want 1`, got)
		}
		return ""
	}
	withTeeth(t, "500ms", "30s", "with FENCEPROXY_UPLOAD_IDLE_TIMEOUT=30s the paused body was cut within 3s too; the test has no teeth", run)
}

// TestDeleteObjectsBodyMinRate: S3 mode reads a DeleteObjects body before
// the barrier, to fence its keys; a body trickling below UPLOAD_MIN_RATE
// is cut there within the rate window (408), and nothing is forwarded.
func TestDeleteObjectsBodyMinRate(t *testing.T) {
	run := func(t *testing.T, minRate string) (problem string) {
		backend := startLenientBackend(t)
		in := startOverload(t, backend.URL(), map[string]string{"FENCEPROXY_UPLOAD_MIN_RATE": minRate,
			"FENCEPROXY_UPLOAD_RATE_WINDOW": "1s", "FENCEPROXY_UPLOAD_IDLE_TIMEOUT": "30s",
			"FENCEPROXY_S3": "pass", "FENCEPROXY_S3_DOMAINS": "localhost"})
		u := startRequest(t, in.Proxy, http.MethodPost, "/bkt?delete", "localhost", []string{"X-Fencing-Token: 3"},
			"<Delete><Object><Key>k</Key></Object></Delete>", 1000, 10)
		stop := make(chan struct{})
		go trickleUntil(u, 200*time.Millisecond, stop)
		start := time.Now()
		res := u.answer(4 * time.Second)
		close(stop)
		switch {
		case res == nil:
			return fmt.Sprintf("trickling for %s and not cut", time.Since(start).Round(time.Millisecond))
		case res.StatusCode != http.StatusRequestTimeout:
			return fmt.Sprintf("answered %d, want 408", res.StatusCode)
		}
		if seen, _, _ := backend.state("/bkt"); seen != 0 {
			t.Errorf("the backend saw the DeleteObjects %d times, want 0", seen)
		}
		if got := scrape(t, in, `fenceproxy_upstream_errors_total{kind="upload_too_slow"}`); got != 1 {
			t.Errorf(`fenceproxy_upstream_errors_total{kind="upload_too_slow"} = %v, want 1`, got)
		}
		return ""
	}
	withTeeth(t, "1KiB", "0", "with FENCEPROXY_UPLOAD_MIN_RATE=0 the trickling DeleteObjects body was cut too; the test has no teeth", run)
}

// TestUnfencedBodyDefaults: with the default settings, unfenced requests
// with small bodies, of a length or chunked, pass whole.
func TestUnfencedBodyDefaults(t *testing.T) {
	backend := startLenientBackend(t)
	in := startOverload(t, backend.URL(), nil)
	for _, c := range []struct {
		method, path string
		body         io.Reader
	}{
		{http.MethodGet, "/get/length", strings.NewReader("a small query")},
		{http.MethodGet, "/get/chunked", io.MultiReader(strings.NewReader("a small "), strings.NewReader("query"))},
		{http.MethodOptions, "/options/length", strings.NewReader("a small query")},
	} {
		req := mustRequest(t, c.method, in.ProxyURL()+c.path, c.body)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", c.method, c.path, err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if _, body, ok := backend.state(c.path); res.StatusCode != http.StatusOK || !ok || body != "a small query" {
			t.Errorf("%s %s (Content-Length %d): %d, the backend applied %q", c.method, c.path, req.ContentLength, res.StatusCode, body)
		}
	}
}

func mustRequest(t *testing.T, method, url string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	return req
}
