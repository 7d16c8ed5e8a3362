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
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/tokenstore"
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
	time.Sleep(d) // the proxy may have answered 504 already; the write still lands
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
			proxy := newTestProxy(t, newMemStore(), srv.URL, func(o *Options) {
				o.ResponseTimeout = 200 * time.Millisecond
				o.AbandonGrace = tc.grace
				o.DrainTimeout = 5 * time.Second
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
	proxy := newTestProxy(t, newMemStore(), srv.URL, func(o *Options) {
		o.ResponseTimeout = 150 * time.Millisecond
		o.AbandonGrace = 3 * time.Second
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
			proxy := newTestProxy(t, newMemStore(), srv.URL, func(o *Options) {
				o.DrainTimeout = 10 * time.Second
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
			if resp.StatusCode != http.StatusConflict || resp.Header.Get(HeaderRefused) != ReasonStale ||
				resp.Header.Get(HeaderCurrentToken) != "6" || !strings.Contains(string(body), "cut off") {
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
	u, _ := url.Parse(srv.URL)
	p, err := New(newMemStore(), Options{Upstream: u, UploadIdleTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
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
	waitFor(t, func() bool { return p.Fence().InFlight("bkt/obj") == 0 })
	if r := put(context.Background(), proxy.URL, "/bkt/obj", "6", "B"); r.status != http.StatusNoContent {
		t.Fatalf("token 6 after the cut: %d", r.status)
	}
}

// After start-up, a token above the maximum the store held at open waits out
// the abandon grace (the previous process may have left writes in flight);
// the maximum at open itself, and any token on a resource whose maximum was 0
// then, are admitted at once. A raise made since open (here directly on the
// store, as a lease acquire does) does not count.
func TestStartupGrace(t *testing.T) {
	dir := t.TempDir()
	s, err := tokenstore.Open(dir, tokenstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{"bkt/a", "bkt/b", "bkt/c"} {
		if _, err := s.Raise(r, 5); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	s, err = tokenstore.Open(dir, tokenstore.Options{})
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
	proxy := newTestProxy(t, s, srv.URL, func(o *Options) { o.AbandonGrace = grace })

	six := putAsync(proxy.URL, "/bkt/a", "6", "raise")
	seven := putAsync(proxy.URL, "/bkt/b", "7", "raised since open")
	if r := put(context.Background(), proxy.URL, "/bkt/c", "5", "current"); r.status != http.StatusNoContent {
		t.Fatalf("token 5 (the maximum at open): %d", r.status)
	}
	if got := backend.next(t, time.Second); got != "5" {
		t.Fatalf("first to arrive: %q, want 5", got)
	}
	// No write was ever forwarded on a resource whose maximum was 0 at open.
	if r := put(context.Background(), proxy.URL, "/bkt/fresh", "3", "fresh"); r.status != http.StatusNoContent {
		t.Fatalf("token 3 on a fresh resource: %d", r.status)
	}
	if got := backend.next(t, time.Second); got != "3" {
		t.Fatalf("second to arrive: %q, want 3 (a fresh resource does not wait)", got)
	}
	for _, ch := range []<-chan result{six, seven} {
		if r := recv(t, ch); r.status != http.StatusNoContent {
			t.Fatalf("%d %s", r.status, r.body)
		}
	}
	// A lower bound, not a speed claim: admitting early would break the barrier.
	if elapsed := time.Since(start); elapsed < grace {
		t.Fatalf("tokens above the maximum at open were admitted after %s, before the %s grace", elapsed, grace)
	}
	s.ReleaseOpenSnapshot()
}

// FENCEPROXY_MAX_TOKEN_JUMP refuses a token too far above the maximum (403
// jump) without raising it or forwarding anything.
func TestMaxTokenJump(t *testing.T) {
	store := newMemStore()
	store.set(func(s *memStore) { s.max["bkt/obj"] = 5 })
	backend, srv := newLateBackend(t)
	proxy := newTestProxy(t, store, srv.URL, func(o *Options) { o.MaxTokenJump = 10 })
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
				if r.header.Get(HeaderRefused) != ReasonJump {
					t.Fatalf("Fencing-Refused %q", r.header.Get(HeaderRefused))
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

// A write on two resources (a MOVE) waits DRAIN_TIMEOUT in all, not per
// resource: here the first resource's blocker leaves late and the second's
// never does, so the write times out once the one shared timer fires.
func TestAdmitAllSharesDrainTimeout(t *testing.T) {
	const drain = time.Second
	f := NewFence(newMemStore(), drain)
	ctx := context.Background()
	relA, err := f.Admit(ctx, "a", 5)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Admit(ctx, "b", 5); err != nil { // never released
		t.Fatal(err)
	}
	time.AfterFunc(800*time.Millisecond, relA)
	start := time.Now()
	_, err = f.AdmitAll(ctx, []string{"b", "a"}, 6)
	if !errors.Is(err, ErrDrainTimeout) {
		t.Fatalf("AdmitAll: %v, want ErrDrainTimeout", err)
	}
	// Per-resource timers would give up only after about 1.8 s.
	if waited := time.Since(start); waited > drain+600*time.Millisecond {
		t.Fatalf("waited %s for a %s drain timeout", waited, drain)
	}
}
