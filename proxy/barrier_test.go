package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/fence"
	"github.com/fenceproxy/fenceproxy/store/badger"
	"github.com/fenceproxy/fenceproxy/wire"
)

// lateBackend applies each write after a per-token delay, long after the
// proxy gave up waiting for it, and records the order of application. Bodies
// that do not arrive whole are never applied.
type lateBackend struct {
	mu         sync.Mutex
	delay      map[string]time.Duration // by token
	arrived    []string                 // tokens whose whole request arrived
	applied    []string                 // tokens in the order they were applied
	incomplete []string                 // tokens whose body did not arrive whole
	arrivals   chan string
}

func newLateBackend(t *testing.T) (*lateBackend, *httptest.Server) {
	b := &lateBackend{delay: map[string]time.Duration{}, arrivals: make(chan string, 64)}
	srv := httptest.NewServer(b)
	t.Cleanup(srv.Close)
	return b, srv
}

func (b *lateBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tok := r.Header.Get("X-Fencing-Token")
	if _, err := io.Copy(io.Discard, r.Body); err != nil {
		b.mu.Lock()
		b.incomplete = append(b.incomplete, tok)
		b.mu.Unlock()
		b.arrivals <- "incomplete " + tok
		return
	}
	b.mu.Lock()
	b.arrived = append(b.arrived, tok)
	d := b.delay[tok]
	b.mu.Unlock()
	b.arrivals <- tok
	time.Sleep(d) // not a wait: the scenario's late apply; the proxy may have answered 504 already
	b.mu.Lock()
	b.applied = append(b.applied, tok)
	b.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (b *lateBackend) state() (arrived, applied, incomplete string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return fmt.Sprint(b.arrived), fmt.Sprint(b.applied), fmt.Sprint(b.incomplete)
}

func (b *lateBackend) next(t *testing.T, within time.Duration) string {
	t.Helper()
	select {
	case got := <-b.arrivals:
		return got
	case <-time.After(within):
		t.Fatalf("nothing reached the backend within %s", within)
		return ""
	}
}

func (b *lateBackend) quiet(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case got := <-b.arrivals:
		t.Fatalf("%q reached the backend; nothing should have", got)
	case <-time.After(d):
	}
}

// A write the proxy gave up on (504) is applied late by the backend. With the
// abandon grace the successor's write waits, so the backend applies 5 then 6;
// without it, 6 lands first and 5 overwrites it.
func TestAbandonGraceHoldsBarrier(t *testing.T) {
	for _, tc := range []struct {
		name  string
		grace time.Duration
		want  string
	}{
		{"with the grace the late write stays first", 1500 * time.Millisecond, "[5 6]"},
		{"without it the late write lands after its successor", 0, "[6 5]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			backend, srv := newLateBackend(t)
			backend.delay["5"] = 700 * time.Millisecond
			proxy := newTestProxy(t, newMemStore(), srv.URL, func(o *Options, f *fence.Options) {
				o.ResponseTimeout = 200 * time.Millisecond
				f.AbandonGrace = tc.grace
				f.DrainTimeout = 5 * time.Second
			})
			if r := put(context.Background(), proxy.URL, "/bkt/obj", "5", "A"); r.status != http.StatusGatewayTimeout {
				t.Fatalf("token 5: %d %s, want 504", r.status, r.body)
			}
			if got := backend.next(t, time.Second); got != "5" {
				t.Fatalf("arrived %q", got)
			}
			b := putAsync(proxy.URL, "/bkt/obj", "6", "B")
			if r := recv(t, b); r.status != http.StatusNoContent {
				t.Fatalf("token 6: %d %s", r.status, r.body)
			}
			waitFor(t, func() bool { _, applied, _ := backend.state(); return strings.Count(applied, " ") == 1 })
			if _, applied, _ := backend.state(); applied != tc.want {
				t.Fatalf("backend applied %s, want %s", applied, tc.want)
			}
		})
	}
}

// Equal tokens are not held back by an abandoned write: they may run
// concurrently with it anyway.
func TestAbandonGraceLetsEqualTokens(t *testing.T) {
	backend, srv := newLateBackend(t)
	backend.delay["5"] = 400 * time.Millisecond
	proxy := newTestProxy(t, newMemStore(), srv.URL, func(o *Options, f *fence.Options) {
		o.ResponseTimeout = 150 * time.Millisecond
		f.AbandonGrace = 3 * time.Second
	})
	if r := put(context.Background(), proxy.URL, "/bkt/obj", "5", "A"); r.status != http.StatusGatewayTimeout {
		t.Fatalf("first 5: %d, want 504", r.status)
	}
	backend.next(t, time.Second)
	delete(backend.delay, "5")
	done := make(chan result, 1)
	go func() { done <- put(context.Background(), proxy.URL, "/bkt/obj", "5", "A2") }()
	select {
	case r := <-done:
		if r.status != http.StatusNoContent && r.status != http.StatusGatewayTimeout {
			t.Fatalf("second 5: %d %s", r.status, r.body)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("an equal token waited for the abandon grace")
	}
}

// slowUpload sends a write's headers and the first bytes of its body, then
// stalls. It returns the connection (to read the answer) and a func that
// sends the rest.
func slowUpload(t *testing.T, proxyURL, path, token string, chunked bool) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(proxyURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	head := fmt.Sprintf("PUT %s HTTP/1.1\r\nHost: bkt.example\r\nX-Fencing-Token: %s\r\n", path, token)
	if chunked {
		head += "Transfer-Encoding: chunked\r\n\r\n10\r\n0123456789abcdef\r\n"
	} else {
		head += "Content-Length: 1048576\r\n\r\n0123456789abcdef"
	}
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatal(err)
	}
	return conn, bufio.NewReader(conn)
}

// A worker that stalls mid-upload cannot block its successor: the larger
// token cuts the smaller one's upload off before its end (the backend never
// gets it whole, so never applies it) and is forwarded at once, well within
// the drain timeout.
func TestRaiseCutsStalledUpload(t *testing.T) {
	for _, chunked := range []bool{false, true} {
		t.Run(fmt.Sprintf("chunked=%v", chunked), func(t *testing.T) {
			backend, srv := newLateBackend(t)
			proxy := newTestProxy(t, newMemStore(), srv.URL, func(o *Options, f *fence.Options) {
				f.DrainTimeout = 10 * time.Second
				o.UploadIdleTimeout = time.Minute
			})
			conn, br := slowUpload(t, proxy.URL, "/bkt/obj", "5", chunked)
			backend.quiet(t, 200*time.Millisecond) // 5 is forwarded but not whole

			start := time.Now()
			if r := put(context.Background(), proxy.URL, "/bkt/obj", "6", "B"); r.status != http.StatusNoContent {
				t.Fatalf("token 6: %d %s", r.status, r.body)
			}
			if waited := time.Since(start); waited > 5*time.Second {
				t.Fatalf("token 6 waited %s for a stalled upload", waited)
			}
			conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("the cut-off writer got no answer: %v", err)
			}
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusConflict || resp.Header.Get(wire.HeaderRefused) != wire.ReasonStale ||
				resp.Header.Get(wire.HeaderCurrentToken) != "6" || !strings.Contains(string(body), "cut off") {
				t.Fatalf("cut-off writer: %d %v %s", resp.StatusCode, resp.Header, body)
			}
			waitFor(t, func() bool { _, applied, _ := backend.state(); return applied == "[6]" })
			if _, applied, incomplete := backend.state(); applied != "[6]" || strings.Contains(incomplete, "6") {
				t.Fatalf("applied %s, incomplete %s; want only 6 applied", applied, incomplete)
			}
		})
	}
}

// A write whose whole body reached the backend is not cut: the successor
// waits for its answer (the barrier), whatever it costs.
func TestRaiseDoesNotCutSentWrite(t *testing.T) {
	backend, srv := newLateBackend(t)
	backend.delay["5"] = 500 * time.Millisecond
	proxy := newTestProxy(t, newMemStore(), srv.URL, nil)
	a := putAsync(proxy.URL, "/bkt/obj", "5", "A")
	if got := backend.next(t, time.Second); got != "5" {
		t.Fatalf("arrived %q", got)
	}
	if r := put(context.Background(), proxy.URL, "/bkt/obj", "6", "B"); r.status != http.StatusNoContent {
		t.Fatalf("token 6: %d", r.status)
	}
	if r := recv(t, a); r.status != http.StatusNoContent {
		t.Fatalf("token 5: %d, want 204 (its body was sent whole)", r.status)
	}
	if _, applied, _ := backend.state(); applied != "[5 6]" {
		t.Fatalf("applied %s, want [5 6]", applied)
	}
}

// A client that pauses its upload longer than the idle timeout is cut off
// with 408; the backend never gets the body whole and the barrier opens.
func TestUploadIdleTimeout(t *testing.T) {
	backend, srv := newLateBackend(t)
	opts := testOptions(t, srv.URL)
	opts.UploadIdleTimeout = 300 * time.Millisecond
	p, b := newProxy(t, newMemStore(), opts, fence.Options{DrainTimeout: 5 * time.Second})
	proxy := httptest.NewServer(p)
	t.Cleanup(proxy.Close)
	conn, br := slowUpload(t, proxy.URL, "/bkt/obj", "5", false)
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("status %d, want 408", resp.StatusCode)
	}
	if got := backend.next(t, 2*time.Second); got != "incomplete 5" {
		t.Fatalf("backend saw %q, want an incomplete body", got)
	}
	waitFor(t, func() bool { return b.InFlight("bkt/obj") == 0 })
	if r := put(context.Background(), proxy.URL, "/bkt/obj", "6", "B"); r.status != http.StatusNoContent {
		t.Fatalf("token 6 after the cut: %d", r.status)
	}
}

// After start-up, on a resource that had a record at open, every token above 0
// waits out the abandon grace: the previous process may have forwarded writes
// with smaller tokens that a backend is still applying, even when the token
// equals the maximum (raised before its own write went out) or was raised
// since open (as a lease acquire does). Token 0, and any token on a resource
// without a record at open (nothing was forwarded on it), go at once.
func TestStartupGrace(t *testing.T) {
	dir := t.TempDir()
	s, err := badger.Open(dir, badger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{"bkt/a", "bkt/b"} {
		if _, err := s.Raise(r, 5); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range []string{"bkt/zero", "bkt/zero1"} { // token-0 writes went out
		if err := s.MarkWritten(r); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	s, err = badger.Open(dir, badger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.Raise("bkt/b", 7); err != nil { // a lease acquired after start
		t.Fatal(err)
	}
	backend, srv := newLateBackend(t)
	const grace = 2 * time.Second
	start := time.Now() // the grace runs from New
	proxy := newTestProxy(t, s, srv.URL, func(o *Options, f *fence.Options) { f.AbandonGrace, f.StartGrace = grace, grace })

	waiting := []<-chan result{
		putAsync(proxy.URL, "/bkt/a", "5", "the maximum at open"),
		putAsync(proxy.URL, "/bkt/b", "7", "raised since open"),
		putAsync(proxy.URL, "/bkt/zero1", "1", "above a token-0 write"),
	}
	for _, tc := range []struct{ path, token string }{
		{"/bkt/zero", "0"},  // nothing smaller can be in flight
		{"/bkt/fresh", "3"}, // no record at open: nothing was forwarded
	} {
		if r := put(context.Background(), proxy.URL, tc.path, tc.token, "at once"); r.status != http.StatusNoContent {
			t.Fatalf("%s with %s: %d", tc.path, tc.token, r.status)
		}
		if got := backend.next(t, time.Second); got != tc.token {
			t.Fatalf("arrived %q, want %s first", got, tc.token)
		}
	}
	for _, ch := range waiting {
		if r := recv(t, ch); r.status != http.StatusNoContent {
			t.Fatalf("%d %s", r.status, r.body)
		}
	}
	// A lower bound, not a speed claim: admitting early would break the barrier.
	if elapsed := time.Since(start); elapsed < grace {
		t.Fatalf("writes on resources with a record were admitted after %s, before the %s grace", elapsed, grace)
	}
	s.ReleaseOpenSnapshot()
}

// A token-0 write gives its resource a durable record before it is
// forwarded, so a restarted proxy knows a write may be in flight there.
func TestTokenZeroLeavesRecord(t *testing.T) {
	for _, observe := range []bool{false, true} {
		t.Run(fmt.Sprintf("observe=%v", observe), func(t *testing.T) { testTokenZeroLeavesRecord(t, observe) })
	}
}

func testTokenZeroLeavesRecord(t *testing.T, observe bool) {
	dir := t.TempDir()
	s, err := badger.Open(dir, badger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	backend, srv := newLateBackend(t)
	proxy := newTestProxy(t, s, srv.URL, func(o *Options, f *fence.Options) {
		if observe {
			o.Mode = "observe"
		}
	})
	if r := put(context.Background(), proxy.URL, "/bkt/z", "0", "zero"); r.status != http.StatusNoContent {
		t.Fatalf("token 0: %d", r.status)
	}
	backend.next(t, time.Second)
	proxy.Close()
	s.Close()
	s, err = badger.Open(dir, badger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if m, found, err := s.MaxAtOpen("bkt/z"); err != nil || !found || m != 0 {
		t.Fatalf("MaxAtOpen after a token-0 write: %d, %v, %v; want a record with 0", m, found, err)
	}
	if _, found, _ := s.MaxAtOpen("bkt/never"); found {
		t.Fatal("a resource never written has a record")
	}
}

// FENCEPROXY_MAX_TOKEN_JUMP refuses a token too far above the maximum (403
// jump) without raising it or forwarding anything.
func TestMaxTokenJump(t *testing.T) {
	store := newMemStore()
	store.seed(t, "bkt/obj", 5)
	backend, srv := newLateBackend(t)
	proxy := newTestProxy(t, store, srv.URL, func(o *Options, f *fence.Options) { f.MaxTokenJump = 10 })
	for _, tc := range []struct {
		path, token string
		status      int
	}{
		{"/bkt/obj", "16", http.StatusForbidden},
		{"/bkt/obj", "9223372036854775807", http.StatusForbidden},
		{"/bkt/new", "11", http.StatusForbidden}, // from 0
		{"/bkt/obj", "15", http.StatusNoContent},
		{"/bkt/new", "10", http.StatusNoContent},
	} {
		t.Run(tc.path+"="+tc.token, func(t *testing.T) {
			r := put(context.Background(), proxy.URL, tc.path, tc.token, "w")
			if r.status != tc.status {
				t.Fatalf("status %d, want %d: %s", r.status, tc.status, r.body)
			}
			if tc.status == http.StatusForbidden {
				if r.header.Get(wire.HeaderRefused) != wire.ReasonJump {
					t.Fatalf("Fencing-Refused %q", r.header.Get(wire.HeaderRefused))
				}
				backend.quiet(t, 50*time.Millisecond)
			} else {
				backend.next(t, time.Second)
			}
		})
	}
	if m := store.get("bkt/obj"); m != 15 {
		t.Fatalf("maximum %d, want 15", m)
	}
}

// net/http's Transport sends a bodyless request with an Idempotency-Key again
// on its own when a reused connection fails after the request went out. The
// first copy may still be applied, so the write counts as abandoned: a larger
// token waits the abandon grace after it.
func TestTransportResendCountsAsAbandoned(t *testing.T) {
	var mu sync.Mutex
	var deletes int
	var sixAt time.Time
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodDelete && r.URL.Path == "/bkt/obj":
			mu.Lock()
			deletes++
			first := deletes == 1
			mu.Unlock()
			if first { // took the request, then the connection dies unanswered
				conn, _, err := http.NewResponseController(w).Hijack()
				if err == nil {
					conn.Close()
				}
				return
			}
		case r.Header.Get("X-Fencing-Token") == "6":
			mu.Lock()
			sixAt = time.Now()
			mu.Unlock()
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(backend.Close)
	const grace = 1500 * time.Millisecond
	proxy := newTestProxy(t, newMemStore(), backend.URL, func(o *Options, f *fence.Options) { f.AbandonGrace = grace })
	if status := replayableDelete(t, proxy.URL); status != http.StatusNoContent {
		t.Fatalf("DELETE: %d", status)
	}
	done := time.Now()
	mu.Lock()
	n := deletes
	mu.Unlock()
	if n != 2 {
		t.Fatalf("backend got %d DELETEs, want 2 (the Transport resends)", n)
	}
	if r := put(context.Background(), proxy.URL, "/bkt/obj", "6", "B"); r.status != http.StatusNoContent {
		t.Fatalf("token 6: %d", r.status)
	}
	mu.Lock()
	defer mu.Unlock()
	if gap := sixAt.Sub(done); gap < grace-100*time.Millisecond {
		t.Fatalf("token 6 reached the backend %s after the resent DELETE, before the %s grace", gap, grace)
	}
}

// The same resend whose own connect fails ends with a dial error, yet the
// first copy went out: the write still counts as abandoned.
func TestTransportResendThatCannotConnectCountsAsAbandoned(t *testing.T) {
	var backend *httptest.Server
	backend = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete && r.URL.Path == "/bkt/obj" { // taken; then the backend goes away
			backend.Listener.Close()
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				conn.Close()
			}
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(backend.Close)
	const grace = 1500 * time.Millisecond
	proxy := newTestProxy(t, newMemStore(), backend.URL, func(o *Options, f *fence.Options) { f.AbandonGrace = grace })
	if status := replayableDelete(t, proxy.URL); status != http.StatusBadGateway {
		t.Fatalf("DELETE: %d, want 502 (the resend could not connect)", status)
	}
	start := time.Now()
	put(context.Background(), proxy.URL, "/bkt/obj", "6", "B") // 502 too: the backend is gone
	if waited := time.Since(start); waited < grace-100*time.Millisecond {
		t.Fatalf("token 6 went upstream %s after the abandoned DELETE, before the %s grace", waited, grace)
	}
}

// replayableDelete leaves an idle upstream connection to reuse, then sends a
// bodyless DELETE with token 5 and an Idempotency-Key, which the upstream
// Transport may send twice; it returns the DELETE's status. The warm-up is a
// replayable write too: the proxy sends those through net/http's Transport
// (whose resends it counts), and the fast client keeps its own connections.
func replayableDelete(t *testing.T, proxyURL string) int {
	t.Helper()
	if status := idempotentDelete(t, proxyURL+"/bkt/warm", "1"); status != http.StatusNoContent {
		t.Fatalf("warm-up: %d", status)
	}
	return idempotentDelete(t, proxyURL+"/bkt/obj", "5")
}

func idempotentDelete(t *testing.T, url, token string) int {
	t.Helper()
	del, _ := http.NewRequest(http.MethodDelete, url, nil) // no body: replayable
	del.Header.Set("X-Fencing-Token", token)
	del.Header.Set("Idempotency-Key", "abc-"+token)
	resp, err := http.DefaultClient.Do(del)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// WaitIdle returns once no admitted write is unfinished, counting an
// abandoned write until its grace is over: a clean shutdown may then tell the
// next process that nothing is in flight.
func TestWaitIdle(t *testing.T) {
	backend, srv := newLateBackend(t)
	backend.delay["5"] = 600 * time.Millisecond
	const grace = 800 * time.Millisecond
	opts := testOptions(t, srv.URL)
	opts.ResponseTimeout = 200 * time.Millisecond
	p, b := newProxy(t, newMemStore(), opts, fence.Options{DrainTimeout: 5 * time.Second, AbandonGrace: grace})
	front := httptest.NewServer(p)
	t.Cleanup(front.Close)
	if err := b.WaitIdle(context.Background()); err != nil {
		t.Fatalf("idle fence: %v", err)
	}
	start := time.Now()
	if r := put(context.Background(), front.URL, "/bkt/obj", "5", "A"); r.status != http.StatusGatewayTimeout {
		t.Fatalf("token 5: %d, want 504 (abandoned)", r.status)
	}
	short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := b.WaitIdle(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitIdle during the abandon grace: %v, want the context's deadline", err)
	}
	if err := b.WaitIdle(context.Background()); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < grace {
		t.Fatalf("WaitIdle returned %s after the abandoned write, before its %s grace", waited, grace)
	}
}

// After a clean stop (CleanStart) a resource with a record at open does not
// wait out the start-up grace: nothing of the previous process is in flight.
func TestCleanStartSkipsStartupGrace(t *testing.T) {
	dir := t.TempDir()
	s, err := badger.Open(dir, badger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Raise("bkt/a", 5); err != nil {
		t.Fatal(err)
	}
	s.Close()
	for _, tc := range []struct {
		clean bool
		min   time.Duration
		max   time.Duration
	}{{false, time.Second, time.Hour}, {true, 0, 500 * time.Millisecond}} {
		s, err := badger.Open(dir, badger.Options{})
		if err != nil {
			t.Fatal(err)
		}
		_, srv := newLateBackend(t)
		start := time.Now()
		proxy := newTestProxy(t, s, srv.URL, func(o *Options, f *fence.Options) {
			f.AbandonGrace = time.Second
			if !tc.clean {
				f.StartGrace = f.AbandonGrace
			}
		})
		if r := put(context.Background(), proxy.URL, "/bkt/a", "5", "x"); r.status != http.StatusNoContent {
			t.Fatalf("clean=%v: %d", tc.clean, r.status)
		}
		if took := time.Since(start); took < tc.min || took > tc.max {
			t.Fatalf("clean=%v: the write took %s, want between %s and %s", tc.clean, took, tc.min, tc.max)
		}
		proxy.Close()
		s.Close()
	}
}

// A write the proxy could not connect for (a refused connection, a TLS
// handshake the backend's certificate fails) never reached the backend: 502,
// and it does not hold its resource's barrier for the abandon grace.
func TestDialFailureIsNotAbandoned(t *testing.T) {
	untrusted := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the backend got %s %s through a handshake that should fail", r.Method, r.URL)
	}))
	defer untrusted.Close()
	refused := httptest.NewServer(http.NotFoundHandler())
	refused.Close()
	for name, backend := range map[string]string{"tls handshake": untrusted.URL, "connection refused": refused.URL} {
		t.Run(name, func(t *testing.T) {
			opts := testOptions(t, backend)
			p, b := newProxy(t, newMemStore(), opts, fence.Options{DrainTimeout: 5 * time.Second, AbandonGrace: time.Hour})
			srv := httptest.NewServer(p)
			defer srv.Close()
			for _, method := range []string{http.MethodDelete, http.MethodPut} {
				if r := send(context.Background(), method, srv.URL+"/bkt/obj", "5", "A"); r.status != http.StatusBadGateway {
					t.Fatalf("%s: %d %s, want 502", method, r.status, r.body)
				}
				if n := b.InFlight("bkt/obj"); n != 0 {
					t.Fatalf("%s: %d writes still hold the barrier after a dial failure (abandoned)", method, n)
				}
			}
		})
	}
}
