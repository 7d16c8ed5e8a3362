package server_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/servertest"
)

// TestRestartKeepsMaximum: a maximum raised before a clean stop refuses stale
// writes after a restart on the same DATA_DIR.
func TestRestartKeepsMaximum(t *testing.T) {
	backend := servertest.NewRecordingBackend(t)
	env := map[string]string{
		"FENCEPROXY_UPSTREAM":       backend.URL(),
		"FENCEPROXY_DATA_DIR":       t.TempDir(),
		"FENCEPROXY_LISTEN":         "127.0.0.1:0",
		"FENCEPROXY_CONTROL_LISTEN": "127.0.0.1:0",
	}
	client := servertest.NewClient(t)

	in := servertest.Start(t, env)
	if st, _ := servertest.PutToken(t, client, in.ProxyURL(), "/bkt/obj", "20", "a-20"); st != http.StatusOK {
		t.Fatalf("PUT token 20: status %d, want 200", st)
	}
	if !backend.Saw("a-20") {
		t.Fatal("the backend did not receive the write with token 20")
	}
	oldProxy, oldControl := in.Proxy, in.Control
	if err := in.Stop(); err != nil {
		t.Fatalf("Stop() = %v", err)
	}
	client.CloseIdleConnections()

	in = servertest.Start(t, env)
	if in.Proxy == oldProxy && in.Control == oldControl {
		t.Logf("restarted on the same ports %s, %s", in.Proxy, in.Control)
	}
	servertest.AssertStale(t, client, backend, in.ProxyURL(), "/bkt/obj", 19, 20, "b-19")
	if st, _ := servertest.PutToken(t, client, in.ProxyURL(), "/bkt/obj", "20", "b-20"); st != http.StatusOK {
		t.Errorf("PUT token 20 (the holder again) after restart: status %d, want 200", st)
	}
	if !backend.Saw("b-20") {
		t.Error("the backend did not receive the second write with token 20")
	}
	if m := servertest.FenceMax(t, client, in.Control, "bkt/obj"); m != 20 {
		t.Errorf("GET /v1/fences/bkt/obj = %d, want 20", m)
	}
	// An unrelated resource starts fresh.
	if st, _ := servertest.PutToken(t, client, in.ProxyURL(), "/bkt/other", "1", "b-other-1"); st != http.StatusOK {
		t.Errorf("PUT token 1 on another resource: status %d, want 200", st)
	}
	if err := in.Stop(); err != nil {
		t.Errorf("Stop() = %v", err)
	}
	backend.CheckOrder(t)
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
	in := servertest.Start(t, map[string]string{
		"FENCEPROXY_UPSTREAM":         backend.srv.URL,
		"FENCEPROXY_DATA_DIR":         t.TempDir(),
		"FENCEPROXY_SHUTDOWN_TIMEOUT": "20s",
		"FENCEPROXY_LISTEN":           "127.0.0.1:0",
		"FENCEPROXY_CONTROL_LISTEN":   "127.0.0.1:0",
	})
	client := servertest.NewClient(t)

	// Ready before the stop.
	if resp, err := client.Get(in.ControlURL() + "/readyz"); err != nil || resp.StatusCode != http.StatusOK {
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
		resp, _, err := servertest.DoPut(client, in.ProxyURL(), "/bkt/obj", "5", "held-5")
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
	// The listener closes in Stop's goroutine; only a dial shows it.
	servertest.Eventually(t, 5*time.Second, "the proxy listener refuses connections after the stop began", func() bool {
		conn, err := net.DialTimeout("tcp", in.Proxy, time.Second)
		if err != nil {
			t.Logf("new connection to the proxy listener during the drain: %v", err)
			return true
		}
		conn.Close()
		return false
	})
	nc := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}, Timeout: 2 * time.Second}
	if resp, _, err := servertest.DoPut(nc, in.ProxyURL(), "/bkt/obj", "6", "new-6"); err == nil {
		t.Errorf("a new request during the drain got status %d, want a connection error", resp.StatusCode)
	}

	// Readiness: the control listener stays up while the proxy drains and
	// reports not ready, so load balancers stop sending traffic.
	resp, err := nc.Get(in.ControlURL() + "/readyz")
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

// A clean stop (SIGTERM, every forwarded write finished) lets the next start
// skip the start-up grace; a stop that left an abandoned write in its grace
// does not.
func TestCleanStopSkipsStartupGrace(t *testing.T) {
	const grace = 3 * time.Second
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.Header.Get("X-Request-Id") == "slow" {
			<-r.Context().Done() // held past the response timeout: abandoned
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(slow.Close)
	client := servertest.NewClient(t)
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
			first := servertest.Start(t, env)
			if st, _ := servertest.PutToken(t, client, first.ProxyURL(), "/bkt/a", "5", "a"); st != http.StatusOK {
				t.Fatalf("first write: %d", st)
			}
			if tc.abandoned {
				if st, _ := servertest.PutToken(t, client, first.ProxyURL(), "/bkt/b", "5", "slow"); st != http.StatusGatewayTimeout {
					t.Fatalf("slow write: %d, want 504", st)
				}
			}
			if err := first.Stop(); err != nil {
				t.Fatal(err)
			}
			if got := strings.Contains(first.Logs.String(), `"clean_stop":true`); got == tc.abandoned {
				t.Fatalf("clean_stop logged %v, want %v:\n%s", got, !tc.abandoned, first.Logs)
			}
			second := servertest.Start(t, env)
			start := time.Now()
			if st, _ := servertest.PutToken(t, client, second.ProxyURL(), "/bkt/a", "5", "again"); st != http.StatusOK {
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

// startupGraceLine is the log line of a start that waits its start-up grace.
const startupGraceLine = "start-up grace: no clean-stop mark (a crash, a kill"

// A new data directory holds no record, so no write of an earlier process can
// be in flight: its start is no crash, logs no start-up grace and makes no
// write wait. A directory holding records without a clean-stop mark (a
// crash, here faked by removing the mark) still does, as before.
func TestNewDataDirIsNoCrash(t *testing.T) {
	const grace = 2 * time.Second
	backend := servertest.NewRecordingBackend(t)
	client := servertest.NewClient(t)
	dir := filepath.Join(t.TempDir(), "new") // created by the start
	env := map[string]string{
		"FENCEPROXY_UPSTREAM": backend.URL(), "FENCEPROXY_DATA_DIR": dir,
		"FENCEPROXY_ABANDON_GRACE": grace.String(), "FENCEPROXY_DRAIN_TIMEOUT": "10s",
	}
	crash := func(in *servertest.Instance) {
		t.Helper()
		if err := in.Stop(); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(filepath.Join(dir, "CLEAN_STOP")); err != nil {
			t.Fatalf("remove the clean-stop mark: %v", err)
		}
	}

	first := servertest.Start(t, env)
	if logs := first.Logs.String(); strings.Contains(logs, "start-up grace") || !strings.Contains(logs, `"new_store":true`) {
		t.Fatalf("the start on a new directory: want no start-up grace and new_store=true:\n%s", logs)
	}
	crash(first) // nothing was written: the directory still holds no record

	second := servertest.Start(t, env)
	if logs := second.Logs.String(); strings.Contains(logs, "start-up grace") || !strings.Contains(logs, `"new_store":true`) {
		t.Fatalf("the start on a directory without records: want no start-up grace and new_store=true:\n%s", logs)
	}
	start := time.Now()
	if st, _ := servertest.PutToken(t, client, second.ProxyURL(), "/bkt/a", "5", "a"); st != http.StatusOK {
		t.Fatalf("write: %d", st)
	}
	if took := time.Since(start); took > grace/2 {
		t.Fatalf("the first write on a new store waited %s", took)
	}
	crash(second) // now it holds bkt/a

	third := servertest.Start(t, env)
	if logs := third.Logs.String(); !strings.Contains(logs, startupGraceLine) || !strings.Contains(logs, `"new_store":false`) {
		t.Fatalf("the start after a crash with records: want the start-up grace and new_store=false:\n%s", logs)
	}
	start = time.Now()
	if st, _ := servertest.PutToken(t, client, third.ProxyURL(), "/bkt/a", "5", "a-again"); st != http.StatusOK {
		t.Fatalf("write after the crash: %d", st)
	}
	if took := time.Since(start); took < grace/2 {
		t.Fatalf("the write after a crash waited only %s, want about the %s start-up grace", took, grace)
	}
}
