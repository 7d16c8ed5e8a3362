package main

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// backendRequest is one request as the backend received it.
type backendRequest struct {
	Method, Path, Token, RequestID, Body string
}

// recordingBackend is an httptest backend that records every request and
// answers 200 once it has read the body.
type recordingBackend struct {
	srv  *httptest.Server
	mu   sync.Mutex
	reqs []backendRequest
}

func newRecordingBackend(t *testing.T) *recordingBackend {
	t.Helper()
	b := &recordingBackend{}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		b.mu.Lock()
		b.reqs = append(b.reqs, backendRequest{
			Method: r.Method, Path: r.URL.EscapedPath(), Token: r.Header.Get("X-Fencing-Token"),
			RequestID: r.Header.Get("X-Request-Id"), Body: string(body),
		})
		b.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(b.srv.Close)
	return b
}

func (b *recordingBackend) URL() string { return b.srv.URL }

func (b *recordingBackend) requests() []backendRequest {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]backendRequest(nil), b.reqs...)
}

// saw reports whether the backend received the request with this X-Request-Id.
func (b *recordingBackend) saw(requestID string) bool {
	for _, r := range b.requests() {
		if r.RequestID == requestID {
			return true
		}
	}
	return false
}

// checkOrder asserts the invariant of the brief: per resource (path), the
// backend received writes in non-decreasing token order.
func (b *recordingBackend) checkOrder(t *testing.T) {
	t.Helper()
	last := map[string]uint64{}
	bad := 0
	for i, r := range b.requests() {
		if bad >= 5 {
			t.Error("... (more out-of-order writes omitted)")
			return
		}
		tok, err := strconv.ParseUint(r.Token, 10, 64)
		if err != nil {
			t.Errorf("backend request %d (%s %s) has token %q", i, r.Method, r.Path, r.Token)
			continue
		}
		if tok < last[r.Path] {
			bad++
			t.Errorf("backend received token %d on %s after %d", tok, r.Path, last[r.Path])
		}
		last[r.Path] = max(last[r.Path], tok)
	}
}

// newTestClient is an HTTP client with its own transport; cleanup closes its
// idle connections.
func newTestClient(t *testing.T) *http.Client {
	t.Helper()
	tr := &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 16}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

// doPut sends PUT base+path with the fencing token and an X-Request-Id that
// the backend records.
func doPut(client *http.Client, base, path, token, requestID string) (*http.Response, string, error) {
	req, err := http.NewRequest(http.MethodPut, base+path, strings.NewReader("body of "+requestID))
	if err != nil {
		return nil, "", err
	}
	req.Header.Set("X-Fencing-Token", token)
	req.Header.Set("X-Request-Id", requestID)
	resp, err := client.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp, string(body), err
}

// putToken is doPut that fails the test on a transport error; it returns the
// status and the response headers.
func putToken(t *testing.T, client *http.Client, base, path, token, requestID string) (int, http.Header) {
	t.Helper()
	resp, _, err := doPut(client, base, path, token, requestID)
	if err != nil {
		t.Fatalf("PUT %s%s token %s: %v", base, path, token, err)
	}
	return resp.StatusCode, resp.Header
}

// assertStale sends a PUT with a stale token and asserts the proxy's own 409
// naming current, and that the backend never received it.
func assertStale(t *testing.T, client *http.Client, backend *recordingBackend, base, path string, token, current uint64, requestID string) {
	t.Helper()
	resp, body, err := doPut(client, base, path, strconv.FormatUint(token, 10), requestID)
	if err != nil {
		t.Fatalf("PUT %s token %d: %v", path, token, err)
	}
	if resp.StatusCode != http.StatusConflict {
		t.Errorf("PUT %s with stale token %d: status %d, want 409\n%s", path, token, resp.StatusCode, body)
	}
	if got := resp.Header.Get("Fencing-Current-Token"); got != strconv.FormatUint(current, 10) {
		t.Errorf("PUT %s with stale token %d: Fencing-Current-Token %q, want %d", path, token, got, current)
	}
	if got := resp.Header.Get("Fencing-Refused"); got != "stale" {
		t.Errorf("PUT %s with stale token %d: Fencing-Refused %q, want stale", path, token, got)
	}
	if backend.saw(requestID) {
		t.Errorf("the backend received the stale write %s (token %d)", requestID, token)
	}
}

// fenceMax reads GET /v1/fences/<key> on the control listener: the persisted
// maximum, 0 when the resource is unknown (404).
func fenceMax(t *testing.T, client *http.Client, control, key string) uint64 {
	t.Helper()
	resp, err := client.Get("http://" + control + "/v1/fences/" + key)
	if err != nil {
		t.Fatalf("GET /v1/fences/%s: %v", key, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusNotFound {
		return 0
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/fences/%s: status %d\n%s", key, resp.StatusCode, body)
	}
	var f struct{ Resource, Token string }
	if err := json.Unmarshal(body, &f); err != nil {
		t.Fatalf("GET /v1/fences/%s: %v\n%s", key, err, body)
	}
	if f.Resource != key {
		t.Errorf("GET /v1/fences/%s: resource %q", key, f.Resource)
	}
	m, err := strconv.ParseUint(f.Token, 10, 64)
	if err != nil {
		t.Fatalf("GET /v1/fences/%s: token %q is not a decimal string: %s", key, f.Token, body)
	}
	return m
}

// TestRestartKeepsMaximum: a maximum raised before a clean stop refuses stale
// writes after a restart on the same DATA_DIR.
func TestRestartKeepsMaximum(t *testing.T) {
	backend := newRecordingBackend(t)
	env := map[string]string{
		"FENCEPROXY_UPSTREAM":       backend.URL(),
		"FENCEPROXY_DATA_DIR":       t.TempDir(),
		"FENCEPROXY_LISTEN":         testListen,
		"FENCEPROXY_CONTROL_LISTEN": testControlListen,
	}
	client := newTestClient(t)

	in := startFenceproxy(t, env)
	if st, _ := putToken(t, client, in.proxyURL(), "/bkt/obj", "20", "a-20"); st != http.StatusOK {
		t.Fatalf("PUT token 20: status %d, want 200", st)
	}
	if !backend.saw("a-20") {
		t.Fatal("the backend did not receive the write with token 20")
	}
	oldProxy, oldControl := in.Proxy, in.Control
	if err := in.Stop(); err != nil {
		t.Fatalf("Stop() = %v", err)
	}
	client.CloseIdleConnections()

	in = startFenceproxy(t, env)
	if in.Proxy == oldProxy && in.Control == oldControl {
		t.Logf("restarted on the same ports %s, %s", in.Proxy, in.Control)
	}
	assertStale(t, client, backend, in.proxyURL(), "/bkt/obj", 19, 20, "b-19")
	if st, _ := putToken(t, client, in.proxyURL(), "/bkt/obj", "20", "b-20"); st != http.StatusOK {
		t.Errorf("PUT token 20 (the holder again) after restart: status %d, want 200", st)
	}
	if !backend.saw("b-20") {
		t.Error("the backend did not receive the second write with token 20")
	}
	if m := fenceMax(t, client, in.Control, "bkt/obj"); m != 20 {
		t.Errorf("GET /v1/fences/bkt/obj = %d, want 20", m)
	}
	// An unrelated resource starts fresh.
	if st, _ := putToken(t, client, in.proxyURL(), "/bkt/other", "1", "b-other-1"); st != http.StatusOK {
		t.Errorf("PUT token 1 on another resource: status %d, want 200", st)
	}
	if err := in.Stop(); err != nil {
		t.Errorf("Stop() = %v", err)
	}
	backend.checkOrder(t)
}

// heldBackend holds every PUT until release is closed.
type heldBackend struct {
	srv      *httptest.Server
	arrived  chan string // X-Request-Id of each PUT, when it arrives
	release  chan struct{}
	released sync.Once
}

func newHeldBackend(t *testing.T) *heldBackend {
	t.Helper()
	b := &heldBackend{arrived: make(chan string, 16), release: make(chan struct{})}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.Method == http.MethodPut {
			b.arrived <- r.Header.Get("X-Request-Id")
			<-b.release
		}
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(func() { b.Release(); b.srv.Close() })
	return b
}

func (b *heldBackend) Release() { b.released.Do(func() { close(b.release) }) }

// TestGracefulShutdownDrains: on stop, the proxy stops accepting connections
// at once but lets the in-flight write finish; /readyz answers 503 meanwhile;
// Stop returns nil after the write completed.
func TestGracefulShutdownDrains(t *testing.T) {
	backend := newHeldBackend(t)
	in := startFenceproxy(t, map[string]string{
		"FENCEPROXY_UPSTREAM":         backend.srv.URL,
		"FENCEPROXY_DATA_DIR":         t.TempDir(),
		"FENCEPROXY_SHUTDOWN_TIMEOUT": "20s",
		"FENCEPROXY_LISTEN":           testListen,
		"FENCEPROXY_CONTROL_LISTEN":   testControlListen,
	})
	client := newTestClient(t)

	// Ready before the stop.
	if resp, err := client.Get(in.controlURL() + "/readyz"); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz before stop: %v %v, want 200", resp, err)
	} else {
		resp.Body.Close()
	}

	type result struct {
		status int
		err    error
	}
	held := make(chan result, 1)
	go func() {
		resp, _, err := doPut(client, in.proxyURL(), "/bkt/obj", "5", "held-5")
		if err != nil {
			held <- result{err: err}
			return
		}
		held <- result{status: resp.StatusCode}
	}()
	select {
	case id := <-backend.arrived:
		if id != "held-5" {
			t.Fatalf("backend got %q, want held-5", id)
		}
	case r := <-held:
		t.Fatalf("the PUT finished before reaching the backend: status %d, error %v", r.status, r.err)
	case <-time.After(10 * time.Second):
		t.Fatal("the PUT did not reach the backend within 10s")
	}

	stopped := make(chan error, 1)
	go func() { stopped <- in.Stop() }()

	// New connections are refused while the held write is in flight.
	deadline := time.Now().Add(5 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", in.Proxy, time.Second)
		if err != nil {
			t.Logf("new connection to the proxy listener during the drain: %v", err)
			break
		}
		conn.Close()
		if time.Now().After(deadline) {
			t.Fatal("the proxy listener still accepts connections 5s after the stop began")
		}
		time.Sleep(10 * time.Millisecond)
	}
	nc := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}, Timeout: 2 * time.Second}
	if resp, _, err := doPut(nc, in.proxyURL(), "/bkt/obj", "6", "new-6"); err == nil {
		t.Errorf("a new request during the drain got status %d, want a connection error", resp.StatusCode)
	}

	// Readiness: the control listener stays up while the proxy drains and
	// reports not ready, so load balancers stop sending traffic.
	resp, err := nc.Get(in.controlURL() + "/readyz")
	if err != nil {
		t.Fatalf("/readyz during the drain: %v; want 503 (the control listener closes last)", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/readyz during the drain: status %d, want 503", resp.StatusCode)
	}

	select {
	case r := <-held:
		t.Fatalf("the held PUT finished before the backend released it: status %d, error %v", r.status, r.err)
	case err := <-stopped:
		t.Fatalf("Stop returned %v while a write was in flight", err)
	case <-time.After(200 * time.Millisecond):
	}

	backend.Release()
	select {
	case r := <-held:
		if r.err != nil || r.status != http.StatusCreated {
			t.Errorf("held PUT after release: status %d, error %v; want 201 from the backend", r.status, r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the held PUT did not complete within 10s of its release")
	}
	select {
	case err := <-stopped:
		if err != nil {
			t.Errorf("Stop() = %v, want nil", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Stop did not return within 15s of the held write completing")
	}
	logs := in.Logs.String()
	for _, want := range []string{"shutting down", "fenceproxy stopped"} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %q:\n%s", want, logs)
		}
	}
	if strings.Contains(logs, "shutdown timeout passed") {
		t.Errorf("the drain hit the shutdown timeout:\n%s", logs)
	}
	select {
	case id := <-backend.arrived:
		t.Errorf("the backend received %q after the stop began", id)
	default:
	}
}

// With DATA_DIR removed under it, fenceproxy fails closed and still exits on
// SIGTERM: Badger would retry its final flush forever, so the close is
// bounded (every maximum is fsynced already).
func TestSIGTERMAfterDataDirRemoved(t *testing.T) {
	backend := newRecordingBackend(t)
	dataDir := filepath.Join(t.TempDir(), "data")
	p := startProcess(t, serveEnv(backend.URL(), dataDir))
	p.waitServing(t)
	client := newTestClient(t)
	if st, _ := putToken(t, client, "http://"+p.Proxy, "/bkt/obj", "3", "before"); st != http.StatusOK {
		t.Fatalf("PUT before removal: %d", st)
	}
	if err := os.RemoveAll(dataDir); err != nil {
		t.Fatal(err)
	}
	if st, _ := putToken(t, client, "http://"+p.Proxy, "/bkt/obj", "4", "after"); st != http.StatusServiceUnavailable {
		t.Errorf("raise after removal: %d, want 503", st)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if _, err := p.wait(storeCloseTimeout + 10*time.Second); err != nil {
		t.Fatalf("no exit after SIGTERM: %v\nstderr:\n%s", err, p.Stderr)
	}
	if !strings.Contains(p.Stderr.String(), "fenceproxy stopped") {
		t.Errorf("no stop logged:\n%s", p.Stderr)
	}
}

// A clean stop (SIGTERM, every forwarded write finished) lets the next start
// skip the start-up grace; a stop that left an abandoned write in its grace
// does not.
func TestCleanStopSkipsStartupGrace(t *testing.T) {
	const grace = 3 * time.Second
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.Header.Get("X-Request-Id") == "slow" {
			time.Sleep(400 * time.Millisecond) // past the response timeout: abandoned
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(slow.Close)
	client := newTestClient(t)
	for _, tc := range []struct {
		name      string
		abandoned bool
		fast      bool
	}{
		{"clean stop", false, true},
		{"stop with an abandoned write in its grace", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{
				"FENCEPROXY_UPSTREAM": slow.URL, "FENCEPROXY_DATA_DIR": t.TempDir(),
				"FENCEPROXY_ABANDON_GRACE": grace.String(), "FENCEPROXY_DRAIN_TIMEOUT": "10s",
				"FENCEPROXY_UPSTREAM_RESPONSE_TIMEOUT": "200ms", "FENCEPROXY_SHUTDOWN_TIMEOUT": "500ms",
			}
			first := startFenceproxy(t, env)
			if st, _ := putToken(t, client, first.proxyURL(), "/bkt/a", "5", "a"); st != http.StatusOK {
				t.Fatalf("first write: %d", st)
			}
			if tc.abandoned {
				if st, _ := putToken(t, client, first.proxyURL(), "/bkt/b", "5", "slow"); st != http.StatusGatewayTimeout {
					t.Fatalf("slow write: %d, want 504", st)
				}
			}
			if err := first.Stop(); err != nil {
				t.Fatal(err)
			}
			if got := strings.Contains(first.Logs.String(), `"clean_stop":true`); got == tc.abandoned {
				t.Fatalf("clean_stop logged %v, want %v:\n%s", got, !tc.abandoned, first.Logs)
			}
			second := startFenceproxy(t, env)
			start := time.Now()
			if st, _ := putToken(t, client, second.proxyURL(), "/bkt/a", "5", "again"); st != http.StatusOK {
				t.Fatalf("write after restart: %d", st)
			}
			took := time.Since(start)
			if tc.fast && took > time.Second {
				t.Fatalf("after a clean stop the write waited %s (start-up grace %s)", took, grace)
			}
			if !tc.fast && took < grace-time.Second {
				t.Fatalf("after an unclean stop the write waited only %s, want about the %s start-up grace", took, grace)
			}
			if got := strings.Contains(second.Logs.String(), `"clean_start":true`); got != tc.fast {
				t.Fatalf("clean_start logged %v, want %v", got, tc.fast)
			}
		})
	}
}
