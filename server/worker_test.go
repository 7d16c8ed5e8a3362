package server_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/config"
	"github.com/fenceproxy/fenceproxy/internal/servertest"
)

// The example worker (examples/worker) as a built binary against an
// in-process fenceproxy: the lease loop of the background documents, end to end.

const wkAdminToken = "worker-test-admin"

// wkBuild builds examples/worker into dir and returns the binary's path.
func wkBuild(t *testing.T, dir string) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command: %v", err)
	}
	bin := filepath.Join(dir, "worker")
	cmd := exec.Command(gobin, "build", "-o", bin, "./examples/worker")
	cmd.Dir = ".." // the module root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./examples/worker: %v\n%s", err, out)
	}
	return bin
}

// wkProcess is a worker binary running as a child process.
type wkProcess struct {
	cmd            *exec.Cmd
	Stdout, Stderr *servertest.Buffer
	exited         chan struct{} // closed when the process has exited
	waitErr        error         // cmd.Wait's result, valid after exited is closed
}

// wait waits up to timeout for the process to exit and returns its exit code.
func (p *wkProcess) wait(timeout time.Duration) (int, error) {
	select {
	case <-p.exited:
	case <-time.After(timeout):
		return -1, fmt.Errorf("still running after %v", timeout)
	}
	var ee *exec.ExitError
	switch {
	case p.waitErr == nil:
		return 0, nil
	case errors.As(p.waitErr, &ee):
		return ee.ExitCode(), nil
	default:
		return -1, p.waitErr
	}
}

// wkStart runs the worker binary for holder on lease bkt/report against in,
// without this process's FENCEPROXY_* variables; cleanup kills it.
func wkStart(t *testing.T, bin string, in *servertest.Instance, holder string, args ...string) *wkProcess {
	t.Helper()
	p := &wkProcess{Stdout: &servertest.Buffer{}, Stderr: &servertest.Buffer{}, exited: make(chan struct{})}
	args = append([]string{"-control", in.ControlURL(), "-proxy", in.ProxyURL(), "-lease", "bkt/report", "-holder", holder}, args...)
	p.cmd = exec.Command(bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, config.Prefix) {
			p.cmd.Env = append(p.cmd.Env, kv)
		}
	}
	p.cmd.Stdout, p.cmd.Stderr = p.Stdout, p.Stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start worker: %v", err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			p.cmd.Process.Kill() // also ends a SIGSTOPped process
			<-p.exited
		}
	})
	return p
}

// wkExit waits (bounded) for the worker to exit and returns its exit code.
func wkExit(t *testing.T, p *wkProcess, name string, timeout time.Duration) int {
	t.Helper()
	code, err := p.wait(timeout)
	if err != nil {
		t.Fatalf("worker %s: %v\nstderr:\n%s", name, err, p.Stderr)
	}
	return code
}

// wkStopReason returns the reason of the worker's "stopped writing" log line, "" if none.
func wkStopReason(p *wkProcess) string {
	for line := range strings.SplitSeq(p.Stderr.String(), "\n") {
		var rec struct{ Msg, Reason string }
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "stopped writing" {
			return rec.Reason
		}
	}
	return ""
}

// wkWrites counts the backend's requests from holder (X-Request-Id holder-N).
func wkWrites(b *servertest.RecordingBackend, holder string) int {
	n := 0
	for _, r := range b.Requests() {
		if strings.HasPrefix(r.RequestID, holder+"-") {
			n++
		}
	}
	return n
}

// wkWaitUntil waits until cond holds, checking it at each request the
// backend records, and fails the test after timeout.
func wkWaitUntil(t *testing.T, b *servertest.RecordingBackend, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if !b.Wait(timeout, cond) {
		t.Fatalf("timed out after %v waiting for %s", timeout, what)
	}
}

// wkLease reads GET /v1/leases/bkt/report.
func wkLease(t *testing.T, in *servertest.Instance) map[string]any {
	t.Helper()
	status, l := servertest.Call(t, "GET", in.ControlURL()+"/v1/leases/bkt/report", "", "")
	if status != 200 {
		t.Fatalf("GET lease: %d %v", status, l)
	}
	return l
}

func wkTime(t *testing.T, l map[string]any, field string) time.Time {
	t.Helper()
	s, _ := l[field].(string)
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("lease %s %q: %v", field, s, err)
	}
	return v
}

func TestWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs examples/worker; skipped with -short")
	}
	bin := wkBuild(t, t.TempDir())
	start := func(t *testing.T) (*servertest.Instance, *servertest.RecordingBackend) {
		backend := servertest.NewRecordingBackend(t)
		return servertest.Start(t, map[string]string{
			"FENCEPROXY_UPSTREAM": backend.URL(), "FENCEPROXY_DATA_DIR": t.TempDir(),
			"FENCEPROXY_LEASE_MIN_TTL": "50ms", "FENCEPROXY_ADMIN_TOKEN": wkAdminToken,
		}), backend
	}

	// A worker paused (SIGSTOP, as a long GC pause) past its TTL and grace
	// loses the lease to B and, woken, stops without any write applied after B's.
	t.Run("PausedPastTTL", func(t *testing.T) {
		const ttl, grace = 300 * time.Millisecond, 200 * time.Millisecond // grace: 2/3 TTL by default
		in, backend := start(t)
		a := wkStart(t, bin, in, "A", "-ttl", ttl.String(), "-writes", "0", "-interval", "20ms")
		wkWaitUntil(t, backend, 10*time.Second, "A's first writes", func() bool { return wkWrites(backend, "A") >= 3 })

		// B competes while A renews: it backs off and gets nothing for longer than TTL+grace.
		b := wkStart(t, bin, in, "B", "-ttl", ttl.String(), "-writes", "10", "-interval", "20ms")
		time.Sleep(ttl + grace + 200*time.Millisecond) // asserting nothing happens: B gets no write in
		if n := wkWrites(backend, "B"); n != 0 {
			t.Fatalf("B wrote %d times while A was renewing", n)
		}
		l := wkLease(t, in)
		if l["holder"] != "A" || !wkTime(t, l, "renewed_at").After(wkTime(t, l, "acquired_at")) {
			t.Fatalf("lease while A runs: %v, want holder A, renewed since acquired", l)
		}
		aTok := l["token"].(string)

		if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		// asserting nothing happens: no renew of A's lands after this (one in
		// flight at the stop lands within 50ms; the check of B's acquire needs it).
		time.Sleep(50 * time.Millisecond)
		aExpires := wkTime(t, wkLease(t, in), "expires_at")
		wkWaitUntil(t, backend, 10*time.Second, "B's first write after A's lease ran out", func() bool { return wkWrites(backend, "B") >= 1 })
		l = wkLease(t, in)
		bTok := l["token"].(string)
		if l["holder"] != "B" || servertest.MustUint(t, bTok) <= servertest.MustUint(t, aTok) {
			t.Fatalf("lease after takeover: %v, want holder B with a token above A's %s", l, aTok)
		}
		if acq := wkTime(t, l, "acquired_at"); acq.Before(aExpires.Add(grace)) {
			t.Errorf("B acquired at %v, before A's expiry %v + grace %v", acq, aExpires, grace)
		}

		if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		if code := wkExit(t, a, "A", 10*time.Second); code != 2 {
			t.Fatalf("A after SIGCONT: exit %d, want 2 (lease lost)\nstderr:\n%s", code, a.Stderr)
		}
		reason := wkStopReason(a)
		if !strings.Contains(reason, "lease lost") && !strings.Contains(reason, "lease expired") && !strings.Contains(reason, "fenced out") {
			t.Errorf("A's stop reason %q\nstderr:\n%s", reason, a.Stderr)
		}
		t.Logf("A stopped: %s", reason)
		if strings.Contains(reason, "lease expired") && !strings.Contains(a.Stderr.String(), `"msg":"lease released","status":409`) {
			// Expired locally: A's release (a holder call, checked like a renew) must be refused.
			t.Errorf("A's release after its lease expired was not refused 409\nstderr:\n%s", a.Stderr)
		}
		if code := wkExit(t, b, "B", 10*time.Second); code != 0 {
			t.Fatalf("B: exit %d, want 0\nstderr:\n%s", code, b.Stderr)
		}
		if l := wkLease(t, in); l["state"] != "released" || l["holder"] != "B" {
			t.Errorf("lease after B finished: %v, want released by B", l)
		}

		// The backend: tokens never decrease, nothing of A's after B's first write,
		// and a late write with A's token is refused by the proxy, not forwarded.
		backend.CheckOrder(t)
		firstB := -1
		for i, r := range backend.Requests() {
			switch {
			case strings.HasPrefix(r.RequestID, "B-"):
				if firstB < 0 {
					firstB = i
				}
				if r.Token != bTok {
					t.Errorf("B's write %s with token %s, want %s", r.RequestID, r.Token, bTok)
				}
			case strings.HasPrefix(r.RequestID, "A-"):
				if firstB >= 0 {
					t.Errorf("A's write %s (token %s) reached the backend after B's first write", r.RequestID, r.Token)
				}
				if r.Token != aTok {
					t.Errorf("A's write %s with token %s, want %s", r.RequestID, r.Token, aTok)
				}
			default:
				t.Errorf("unexpected backend request %+v", r)
			}
		}
		if n := wkWrites(backend, "B"); n != 10 {
			t.Errorf("B's writes at the backend: %d, want 10", n)
		}
		if strings.Contains(a.Stderr.String(), `"msg":"write refused"`) &&
			!strings.Contains(in.Logs.String(), `"token":"`+aTok+`","current_token":"`+bTok+`"`) {
			t.Errorf("A logged a refused write, but the proxy logged no refusal of token %s\nproxy logs:\n%s", aTok, in.Logs)
		}
		servertest.AssertStale(t, servertest.NewClient(t), backend, in.ProxyURL(), "/bkt/report", servertest.MustUint(t, aTok), servertest.MustUint(t, bTok), "A-late")
	})

	// An operator force-releases A's lease and B acquires: A's next renew gets
	// 409 and A stops before its next write.
	t.Run("RenewRefused", func(t *testing.T) {
		in, backend := start(t)
		a := wkStart(t, bin, in, "A", "-ttl", "300ms", "-writes", "0", "-interval", "3s")
		wkWaitUntil(t, backend, 10*time.Second, "A's first write", func() bool { return wkWrites(backend, "A") == 1 })
		leases := in.ControlURL() + "/v1/leases/bkt/report"
		if status, body := servertest.Call(t, "DELETE", leases+"?force=true", "", wkAdminToken); status != 200 {
			t.Fatalf("force release: %d %v", status, body)
		}
		if status, body := servertest.Call(t, "POST", leases, `{"holder":"B","ttl":"10s"}`, ""); status != 201 {
			t.Fatalf("B acquire after force release: %d %v", status, body)
		}
		if code := wkExit(t, a, "A", 2*time.Second); code != 2 {
			t.Fatalf("A: exit %d, want 2\nstderr:\n%s", code, a.Stderr)
		}
		if reason := wkStopReason(a); !strings.Contains(reason, "lease lost") {
			t.Errorf("A's stop reason %q, want lease lost\nstderr:\n%s", reason, a.Stderr)
		}
		if n := wkWrites(backend, "A"); n != 1 {
			t.Errorf("A's writes at the backend: %d, want 1 (it stopped on the renew)", n)
		}
		if l := wkLease(t, in); l["holder"] != "B" || l["state"] != "held" {
			t.Errorf("lease: %v, want held by B (A must not release what it lost)", l)
		}
	})

	// The fence is raised past A's token (an operator or another coordinator):
	// A's next write is refused stale and A stops at once.
	t.Run("FencedOut", func(t *testing.T) {
		in, backend := start(t)
		a := wkStart(t, bin, in, "A", "-ttl", "30s", "-writes", "0", "-interval", "20ms") // renews only every 10s
		wkWaitUntil(t, backend, 10*time.Second, "A's first writes", func() bool { return wkWrites(backend, "A") >= 3 })
		aTok := servertest.MustUint(t, wkLease(t, in)["token"].(string))
		raised := strconv.FormatUint(aTok+10, 10)
		if status, body := servertest.Call(t, "PUT", in.ControlURL()+"/v1/fences/bkt/report", `{"token":"`+raised+`"}`, wkAdminToken); status != 200 {
			t.Fatalf("raise: %d %v", status, body)
		}
		if code := wkExit(t, a, "A", 5*time.Second); code != 2 {
			t.Fatalf("A: exit %d, want 2\nstderr:\n%s", code, a.Stderr)
		}
		if reason := wkStopReason(a); !strings.Contains(reason, "fenced out") {
			t.Errorf("A's stop reason %q, want fenced out\nstderr:\n%s", reason, a.Stderr)
		}
		if !strings.Contains(in.Logs.String(), `"token":"`+strconv.FormatUint(aTok, 10)+`","current_token":"`+raised+`"`) {
			t.Errorf("no proxy refusal of token %d logged\n%s", aTok, in.Logs)
		}
		n := wkWrites(backend, "A")
		time.Sleep(100 * time.Millisecond) // asserting nothing happens: A writes no more
		if m := wkWrites(backend, "A"); m != n {
			t.Errorf("A's writes grew from %d to %d after it exited", n, m)
		}
		backend.CheckOrder(t)
	})

	// SIGTERM: the worker stops writing, releases, exits 0; B may acquire at once.
	t.Run("SIGTERMReleases", func(t *testing.T) {
		in, backend := start(t)
		a := wkStart(t, bin, in, "A", "-ttl", "10s", "-writes", "0", "-interval", "20ms")
		wkWaitUntil(t, backend, 10*time.Second, "A's first writes", func() bool { return wkWrites(backend, "A") >= 2 })
		if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code := wkExit(t, a, "A", 5*time.Second); code != 0 {
			t.Fatalf("A after SIGTERM: exit %d, want 0\nstderr:\n%s", code, a.Stderr)
		}
		if l := wkLease(t, in); l["state"] != "released" {
			t.Fatalf("lease after SIGTERM: %v, want released", l)
		}
		if status, body := servertest.Call(t, "POST", in.ControlURL()+"/v1/leases/bkt/report", `{"holder":"B","ttl":"10s"}`, ""); status != 201 {
			t.Fatalf("B acquire right after A's release: %d %v", status, body)
		}
	})

	// An acquire refused as invalid (TTL below the minimum) is not retried: exit 1.
	t.Run("BadTTL", func(t *testing.T) {
		in, backend := start(t)
		a := wkStart(t, bin, in, "A", "-ttl", "10ms")
		if code := wkExit(t, a, "A", 5*time.Second); code != 1 {
			t.Fatalf("A with a 10ms TTL: exit %d, want 1\nstderr:\n%s", code, a.Stderr)
		}
		if !strings.Contains(a.Stderr.String(), "status 400") {
			t.Errorf("A's log does not name the 400:\n%s", a.Stderr)
		}
		if n := len(backend.Requests()); n != 0 {
			t.Errorf("backend got %d requests", n)
		}
	})
}
