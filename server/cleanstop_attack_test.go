package server_test

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/servertest"
)

// The clean-stop mark lets the next start skip the start-up grace. These
// tests try to get a mark written, or taken, while a write of an earlier
// process may still reach the backend.

// lateBackend answers the write with X-Request-Id "late" only after delay
// (past the proxy's response timeout, so the proxy abandons it) and records
// the token of every write when it applies it, per path.
type lateBackend struct {
	srv   *httptest.Server
	delay time.Duration
	mu    sync.Mutex
	log   []servertest.BackendRequest // in the order applied
	sig   servertest.Signal           // notified after each write is applied
}

func newLateBackend(t *testing.T, delay time.Duration) *lateBackend {
	t.Helper()
	b := &lateBackend{delay: delay}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.Header.Get("X-Request-Id") == "late" {
			time.Sleep(b.delay) // not a wait: the scenario's backend applies the write this late
		}
		b.mu.Lock()
		b.log = append(b.log, servertest.BackendRequest{Method: r.Method, Path: r.URL.EscapedPath(),
			Token: r.Header.Get("X-Fencing-Token"), RequestID: r.Header.Get("X-Request-Id")})
		b.mu.Unlock()
		b.sig.Notify()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(b.srv.Close)
	return b
}

// applied waits up to timeout for the write with requestID to be applied.
func (b *lateBackend) applied(requestID string, timeout time.Duration) bool {
	return b.sig.Wait(timeout, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, r := range b.log {
			if r.RequestID == requestID {
				return true
			}
		}
		return false
	})
}

// checkOrder: per path, tokens applied in non-decreasing order.
func (b *lateBackend) checkOrder(t *testing.T) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	last := map[string]uint64{}
	for _, r := range b.log {
		tok, _ := strconv.ParseUint(r.Token, 10, 64)
		if tok < last[r.Path] {
			t.Errorf("the backend applied token %d (%s) on %s after token %d: a stale write landed after its successor's",
				tok, r.RequestID, r.Path, last[r.Path])
		}
		last[r.Path] = max(last[r.Path], tok)
	}
}

func cleanStopLogged(logs string) bool  { return strings.Contains(logs, `"clean_stop":true`) }
func cleanStartLogged(logs string) bool { return strings.Contains(logs, `"clean_start":true`) }

// TestAttackObserveModeAbandonedWriteMarkedClean: in observe mode a write
// the proxy gave up on (504) is not tracked by the fence, so a SIGTERM right
// after it writes the clean-stop mark at once. The next (enforce-mode) start
// then skips the start-up grace and forwards a larger token while the
// backend is still applying the abandoned write: the stale write lands after
// its successor's. Observe mode records resources (raise, MarkWritten)
// precisely so that a later enforce-mode start waits; the mark defeats that.
func TestAttackObserveModeAbandonedWriteMarkedClean(t *testing.T) {
	const grace = 2 * time.Second
	backend := newLateBackend(t, 800*time.Millisecond)
	client := servertest.NewClient(t)
	dir := t.TempDir()
	env := map[string]string{
		"FENCEPROXY_UPSTREAM": backend.srv.URL, "FENCEPROXY_DATA_DIR": dir,
		"FENCEPROXY_ABANDON_GRACE": grace.String(), "FENCEPROXY_DRAIN_TIMEOUT": "10s",
		"FENCEPROXY_UPSTREAM_RESPONSE_TIMEOUT": "100ms", "FENCEPROXY_SHUTDOWN_TIMEOUT": "5s",
		"FENCEPROXY_MODE": "observe",
	}
	first := servertest.Start(t, env)
	if st, _ := servertest.PutToken(t, client, first.ProxyURL(), "/bkt/obj", "5", "late"); st != http.StatusGatewayTimeout {
		t.Fatalf("slow write in observe mode: %d, want 504", st)
	}
	if err := first.Stop(); err != nil {
		t.Fatal(err)
	}
	env["FENCEPROXY_MODE"] = "enforce"
	second := servertest.Start(t, env)
	if st, _ := servertest.PutToken(t, client, second.ProxyURL(), "/bkt/obj", "6", "successor"); st != http.StatusOK {
		t.Fatalf("successor write: %d", st)
	}
	if !backend.applied("late", 5*time.Second) {
		t.Fatal("the backend never applied the slow write")
	}
	backend.checkOrder(t)
	if cleanStopLogged(first.Logs.String()) {
		t.Errorf("an observe-mode process with an abandoned write still in its grace logged clean_stop=true")
	}
	if cleanStartLogged(second.Logs.String()) {
		t.Errorf("the next start skipped the start-up grace (clean_start=true)")
	}
}

// TestAttackMarkWrittenIntoReplacedDataDir: a process whose DATA_DIR was
// removed and created anew by a second process (which serves from it now)
// writes its clean-stop mark into the second process's directory on SIGTERM.
// MarkCleanStop checks nothing (Raise and MarkWritten check the lock file
// with checkDir). If the second process then crashes with writes in flight,
// the third start takes the stranger's mark and skips the start-up grace.
func TestAttackMarkWrittenIntoReplacedDataDir(t *testing.T) {
	backend := servertest.NewRecordingBackend(t)
	client := servertest.NewClient(t)
	dir := filepath.Join(t.TempDir(), "data")
	env := map[string]string{"FENCEPROXY_UPSTREAM": backend.URL(), "FENCEPROXY_DATA_DIR": dir}
	first := servertest.Start(t, env)
	if st, _ := servertest.PutToken(t, client, first.ProxyURL(), "/bkt/obj", "3", "first"); st != http.StatusOK {
		t.Fatalf("first write: %d", st)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	second := servertest.Start(t, env) // opens a new store at the same path
	if st, _ := servertest.PutToken(t, client, second.ProxyURL(), "/bkt/obj", "4", "second"); st != http.StatusOK {
		t.Fatalf("second process's write: %d", st)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- first.Stop() }()
	// The mark is written before the store's bounded close; wait for the log.
	first.Logs.WaitFor("fenceproxy stopped", 20*time.Second)
	if _, err := os.Stat(filepath.Join(dir, "CLEAN_STOP")); err == nil {
		t.Errorf("while the second process serves from %s, the first one's SIGTERM left a clean-stop mark in it: "+
			"a crash of the second process would be taken for a clean stop", dir)
	} else if !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	if cleanStopLogged(first.Logs.String()) {
		t.Errorf("a process whose DATA_DIR was replaced logged clean_stop=true")
	}
	second.Stop()
	<-stopped
}

// TestCleanStopNotMarkedWhenShutdownTimesOut: a write still held by the
// backend when SHUTDOWN_TIMEOUT passes leaves no mark.
func TestCleanStopNotMarkedWhenShutdownTimesOut(t *testing.T) {
	backend := newHeldBackend(t)
	client := servertest.NewClient(t)
	dir := t.TempDir()
	env := map[string]string{
		"FENCEPROXY_UPSTREAM": backend.srv.URL, "FENCEPROXY_DATA_DIR": dir,
		"FENCEPROXY_SHUTDOWN_TIMEOUT": "300ms",
	}
	first := servertest.Start(t, env)
	done := make(chan struct{})
	go func() {
		defer close(done)
		servertest.DoPut(client, first.ProxyURL(), "/bkt/obj", "5", "held")
	}()
	select {
	case <-backend.arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the write did not reach the backend")
	}
	if err := first.Stop(); err != nil {
		t.Fatal(err)
	}
	backend.Release()
	<-done
	if cleanStopLogged(first.Logs.String()) {
		t.Fatalf("a stop with a write in flight logged clean_stop=true:\n%s", first.Logs)
	}
	if _, err := os.Stat(filepath.Join(dir, "CLEAN_STOP")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("mark after a timed-out shutdown: %v", err)
	}
}

// TestCleanStopNotMarkedWithUploadHangingAtStop: a client that stopped
// sending its body mid-upload when SIGTERM came keeps the write unfinished
// (its bytes so far are upstream) past SHUTDOWN_TIMEOUT: no mark.
func TestCleanStopNotMarkedWithUploadHangingAtStop(t *testing.T) {
	backend := servertest.NewRecordingBackend(t)
	dir := t.TempDir()
	first := servertest.Start(t, map[string]string{
		"FENCEPROXY_UPSTREAM": backend.URL(), "FENCEPROXY_DATA_DIR": dir,
		"FENCEPROXY_SHUTDOWN_TIMEOUT": "300ms", "FENCEPROXY_UPLOAD_IDLE_TIMEOUT": "30s",
	})
	conn, err := net.Dial("tcp", first.Proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "PUT /bkt/obj HTTP/1.1\r\nHost: x\r\nX-Fencing-Token: 5\r\n"+
		"Content-Length: 100\r\n\r\nhalf of the body"); err != nil {
		t.Fatal(err)
	}
	// Wait until the write is admitted (its raise is durable) before the stop.
	// The admission shows only in the fence (the backend sees nothing yet).
	hc := servertest.NewClient(t)
	servertest.Eventually(t, 5*time.Second, "the write is admitted", func() bool {
		return servertest.FenceMax(t, hc, first.Control, "bkt/obj") == 5
	})
	if err := first.Stop(); err != nil {
		t.Fatal(err)
	}
	if cleanStopLogged(first.Logs.String()) {
		t.Fatalf("a stop with an upload hanging logged clean_stop=true:\n%s", first.Logs)
	}
}

// TestCleanStopAbandonedCopyHoldsBothResources: a WebDAV COPY abandoned
// (504) just before SIGTERM, with a shutdown timeout shorter than the
// abandon grace, leaves no mark (both its resources are in their grace).
func TestCleanStopAbandonedCopyHoldsBothResources(t *testing.T) {
	backend := newLateBackend(t, 600*time.Millisecond)
	dir := t.TempDir()
	first := servertest.Start(t, map[string]string{
		"FENCEPROXY_UPSTREAM": backend.srv.URL, "FENCEPROXY_DATA_DIR": dir,
		"FENCEPROXY_ABANDON_GRACE": "3s", "FENCEPROXY_DRAIN_TIMEOUT": "10s",
		"FENCEPROXY_UPSTREAM_RESPONSE_TIMEOUT": "100ms", "FENCEPROXY_SHUTDOWN_TIMEOUT": "300ms",
	})
	req, _ := http.NewRequest("COPY", first.ProxyURL()+"/bkt/src", nil)
	req.Header.Set("Destination", first.ProxyURL()+"/bkt/dst")
	req.Header.Set("X-Fencing-Token", "5")
	req.Header.Set("X-Request-Id", "late")
	resp, err := servertest.NewClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusGatewayTimeout {
		t.Fatalf("slow COPY: %d, want 504", resp.StatusCode)
	}
	if err := first.Stop(); err != nil {
		t.Fatal(err)
	}
	if cleanStopLogged(first.Logs.String()) {
		t.Fatalf("a stop with an abandoned COPY in its grace logged clean_stop=true:\n%s", first.Logs)
	}
	backend.applied("late", 5*time.Second)
}
