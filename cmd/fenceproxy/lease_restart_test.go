package main

import (
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/servertest"
)

// Lease tokens and lease records survive SIGKILL of the real binary: a token
// once issued is never issued again, and a lease is still held after a restart.

// lrRestart SIGKILLs p (when given) and starts the binary again on env's DATA_DIR.
func lrRestart(t *testing.T, p *fpProcess, env map[string]string, client *http.Client) *fpProcess {
	t.Helper()
	if p != nil {
		if err := p.cmd.Process.Kill(); err != nil {
			t.Fatalf("kill -9: %v", err)
		}
		if _, err := p.wait(10 * time.Second); err != nil {
			t.Fatalf("after kill -9: %v", err)
		}
		client.CloseIdleConnections()
		http.DefaultClient.CloseIdleConnections()
	}
	p = startProcess(t, env)
	p.waitServing(t)
	return p
}

func lrEnv(t *testing.T, backend *servertest.RecordingBackend) map[string]string {
	env := serveEnv(backend.URL(), t.TempDir())
	env["FENCEPROXY_LEASE_MIN_TTL"] = "50ms"
	return env
}

// lrAcquire is POST /v1/leases/bkt/job for holder; it returns the status and the body.
func lrAcquire(t *testing.T, p *fpProcess, holder string, ttl time.Duration) (int, map[string]any) {
	t.Helper()
	return servertest.Call(t, "POST", "http://"+p.Control+"/v1/leases/bkt/job", fmt.Sprintf(`{"holder":%q,"ttl":%q}`, holder, ttl), "")
}

// TestLeaseTokensSurviveSIGKILL: acquire, kill -9, restart on the same
// DATA_DIR: the fence and the lease record are as before the kill; another
// holder is kept out until TTL+grace have passed, then gets a larger token,
// and the fence equals it at once (fence-ahead). Three cycles.
func TestLeaseTokensSurviveSIGKILL(t *testing.T) {
	const ttl = 400 * time.Millisecond
	const grace = ttl * 2 / 3 // the default grace
	backend := servertest.NewRecordingBackend(t)
	env := lrEnv(t, backend)
	client := servertest.NewClient(t)

	p := lrRestart(t, nil, env, client)
	prevSent := time.Now()
	status, l := lrAcquire(t, p, "h0", ttl)
	if status != http.StatusCreated {
		t.Fatalf("h0 acquire: %d %v", status, l)
	}
	prevHolder, prevTok := "h0", servertest.MustUint(t, l["token"].(string))
	if st, _ := servertest.PutToken(t, client, "http://"+p.Proxy, "/bkt/job", strconv.FormatUint(prevTok, 10), "h0-1"); st != http.StatusOK {
		t.Fatalf("h0's write: %d", st)
	}

	for cycle := 1; cycle <= 3; cycle++ {
		p = lrRestart(t, p, env, client)
		ctrl := "http://" + p.Control
		if m := servertest.FenceMax(t, client, p.Control, "bkt/job"); m != prevTok {
			t.Fatalf("cycle %d: fence after kill -9 and restart = %d, want %d", cycle, m, prevTok)
		}
		if status, l := servertest.Call(t, "GET", ctrl+"/v1/leases/bkt/job", "", ""); status != 200 || l["holder"] != prevHolder || l["token"] != strconv.FormatUint(prevTok, 10) {
			t.Fatalf("cycle %d: lease after restart: %d %v, want %s with token %d", cycle, status, l, prevHolder, prevTok)
		}

		holder := fmt.Sprintf("h%d", cycle)
		conflicts := 0
		var sent time.Time
		// The lease ends on another process's clock, which signals no event: retry.
		if !servertest.Within(10*time.Second, func() bool {
			sent = time.Now()
			status, l = lrAcquire(t, p, holder, ttl)
			if status == http.StatusCreated {
				return true
			}
			if status != http.StatusConflict || l["holder"] != prevHolder {
				t.Fatalf("cycle %d: %s acquire: %d %v, want 409 naming %s", cycle, holder, status, l, prevHolder)
			}
			conflicts++
			return false
		}) {
			t.Fatalf("cycle %d: %s still refused after 10s", cycle, holder)
		}
		if waited := time.Since(prevSent); waited < ttl+grace {
			t.Errorf("cycle %d: %s acquired %v after %s's acquire, before TTL+grace (%v)", cycle, holder, waited, prevHolder, ttl+grace)
		}
		tok := servertest.MustUint(t, l["token"].(string))
		t.Logf("cycle %d: %s got token %d after %d conflicts", cycle, holder, tok, conflicts)
		if tok <= prevTok {
			t.Fatalf("cycle %d: %s's token %d is not above %s's %d", cycle, holder, tok, prevHolder, prevTok)
		}
		if m := servertest.FenceMax(t, client, p.Control, "bkt/job"); m != tok {
			t.Errorf("cycle %d: fence = %d, want the new token %d", cycle, m, tok)
		}
		servertest.AssertStale(t, client, backend, "http://"+p.Proxy, "/bkt/job", prevTok, tok, fmt.Sprintf("%s-late-%d", prevHolder, cycle))
		if st, _ := servertest.PutToken(t, client, "http://"+p.Proxy, "/bkt/job", strconv.FormatUint(tok, 10), holder+"-1"); st != http.StatusOK {
			t.Errorf("cycle %d: %s's write: %d", cycle, holder, st)
		}
		prevHolder, prevTok, prevSent = holder, tok, sent
	}
	backend.CheckOrder(t)
}

// TestLeaseSameHolderReacquiresAfterSIGKILL: the same holder acquiring right
// after a restart (a restarted worker) gets a new, larger token, which fences
// its previous incarnation; others are still kept out.
func TestLeaseSameHolderReacquiresAfterSIGKILL(t *testing.T) {
	backend := servertest.NewRecordingBackend(t)
	env := lrEnv(t, backend)
	client := servertest.NewClient(t)
	p := lrRestart(t, nil, env, client)
	status, l := lrAcquire(t, p, "X", 10*time.Second)
	if status != http.StatusCreated {
		t.Fatalf("X acquire: %d %v", status, l)
	}
	prev := servertest.MustUint(t, l["token"].(string))
	for cycle := 1; cycle <= 2; cycle++ {
		p = lrRestart(t, p, env, client)
		status, l := lrAcquire(t, p, "X", 10*time.Second)
		if status != http.StatusCreated {
			t.Fatalf("cycle %d: X re-acquire right after restart: %d %v", cycle, status, l)
		}
		tok := servertest.MustUint(t, l["token"].(string))
		if tok <= prev {
			t.Fatalf("cycle %d: X's new token %d is not above its previous %d", cycle, tok, prev)
		}
		if m := servertest.FenceMax(t, client, p.Control, "bkt/job"); m != tok {
			t.Errorf("cycle %d: fence = %d, want %d", cycle, m, tok)
		}
		leases := "http://" + p.Control + "/v1/leases/bkt/job"
		if status, _ := servertest.Call(t, "PUT", leases, fmt.Sprintf(`{"holder":"X","token":"%d"}`, prev), ""); status != http.StatusConflict {
			t.Errorf("cycle %d: renew with the previous incarnation's token %d: %d, want 409", cycle, prev, status)
		}
		if status, _ := servertest.Call(t, "PUT", leases, fmt.Sprintf(`{"holder":"X","token":"%d"}`, tok), ""); status != http.StatusOK {
			t.Errorf("cycle %d: renew with the new token %d: %d, want 200", cycle, tok, status)
		}
		servertest.AssertStale(t, client, backend, "http://"+p.Proxy, "/bkt/job", prev, tok, fmt.Sprintf("X-old-%d", cycle))
		if st, _ := servertest.PutToken(t, client, "http://"+p.Proxy, "/bkt/job", strconv.FormatUint(tok, 10), fmt.Sprintf("X-new-%d", cycle)); st != http.StatusOK {
			t.Errorf("cycle %d: write with the new token: %d", cycle, st)
		}
		if status, body := lrAcquire(t, p, "Y", 10*time.Second); status != http.StatusConflict || body["holder"] != "X" {
			t.Errorf("cycle %d: Y acquire while X holds: %d %v, want 409 naming X", cycle, status, body)
		}
		prev = tok
	}
	backend.CheckOrder(t)
}
