// Command worker is the lease loop a fenceproxy client runs: acquire a lease
// from the control API, renew it every TTL/3, write through the proxy with the
// lease's fencing token, and stop all writing the moment the lease is lost.
// When the proxy runs in signed-token mode (FENCEPROXY_TOKEN_KEY), each write
// also carries the token's signature from the latest acquire or renew answer.
//
// Exit codes: 0 done (or stopped by SIGINT/SIGTERM), 1 error, 2 lease lost or
// fenced out (another holder has taken over: do not retry with this token).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

var (
	errLost    = errors.New("lease lost: renew refused (409)")
	errExpired = errors.New("lease expired: no successful renew within the TTL")
	errFenced  = errors.New("fenced out: the proxy refused our token as stale")
)

// headerSignature carries the token's signature in signed-token mode.
const headerSignature = "X-Fencing-Token-Signature"

type worker struct {
	control, proxy, lease, holder, leaseToken string
	ttl, interval                             time.Duration
	writes                                    int
	log                                       *slog.Logger
	client                                    http.Client
	// signature is the token's signature from the latest acquire or renew
	// answer ("" when the proxy does not sign tokens). A renew after a key
	// rotation signs with the new key, so writes always send the latest.
	signature atomic.Pointer[string]
}

func env(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

func main() {
	host, _ := os.Hostname()
	w := &worker{log: slog.New(slog.NewJSONHandler(os.Stderr, nil))}
	flag.StringVar(&w.control, "control", env("WORKER_CONTROL_URL", "http://localhost:9090"), "fenceproxy control URL [WORKER_CONTROL_URL]")
	flag.StringVar(&w.proxy, "proxy", env("WORKER_PROXY_URL", "http://localhost:8080"), "fenceproxy proxy URL [WORKER_PROXY_URL]")
	flag.StringVar(&w.lease, "lease", env("WORKER_LEASE", "demo/report.txt"), "lease name = resource key written to [WORKER_LEASE]")
	flag.StringVar(&w.holder, "holder", env("WORKER_HOLDER", fmt.Sprintf("%s-%d", host, os.Getpid())), "holder id [WORKER_HOLDER]")
	flag.StringVar(&w.leaseToken, "lease-token", env("WORKER_LEASE_TOKEN", ""), "bearer for lease calls [WORKER_LEASE_TOKEN]")
	ttl, _ := time.ParseDuration(env("WORKER_TTL", "10s"))
	flag.DurationVar(&w.ttl, "ttl", ttl, "lease TTL [WORKER_TTL]")
	flag.DurationVar(&w.interval, "interval", time.Second, "pause between writes")
	flag.IntVar(&w.writes, "writes", 5, "writes to make, 0 = until stopped")
	flag.Parse()
	if w.ttl < time.Millisecond || w.lease == "" || w.holder == "" {
		fmt.Fprintln(os.Stderr, "worker: need -lease, -holder and a -ttl of at least 1ms")
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := w.run(ctx)
	switch {
	case err == nil:
	case errors.Is(err, errLost), errors.Is(err, errExpired), errors.Is(err, errFenced):
		w.log.Warn("stopped writing", "reason", err.Error())
		os.Exit(2)
	default:
		w.log.Error("worker failed", "error", err.Error())
		os.Exit(1)
	}
}

// withError returns a log line's attributes with "error" added when err is
// not nil: a line without an error carries none, not "error":null.
func withError(err error, attrs ...any) []any {
	if err != nil {
		attrs = append(attrs, "error", err.Error())
	}
	return attrs
}

// callTimeout bounds one lease call (see call).
const callTimeout = 35 * time.Second

// escape turns a resource key into a URL path that decodes back to it.
func escape(key string) string { return (&url.URL{Path: "/" + key}).EscapedPath() }

// call sends a JSON lease call and decodes the JSON answer into out. A hung
// control listener must not hang the worker: each call gets at most
// callTimeout, which is above the proxy's default DRAIN_TIMEOUT (30s), as an
// acquire waits until the previous holder's writes are no longer in flight.
func (w *worker) call(ctx context.Context, method string, body, out any) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(w.control, "/")+"/v1/leases"+escape(w.lease), bytes.NewReader(b))
	if err != nil {
		return 0, err
	}
	if w.leaseToken != "" {
		req.Header.Set("Authorization", "Bearer "+w.leaseToken)
	}
	resp, err := w.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	return resp.StatusCode, json.NewDecoder(resp.Body).Decode(out)
}

func (w *worker) run(ctx context.Context) error {
	// Acquire, backing off while another holder has the lease (or its grace).
	var l struct {
		Token, Holder string
		Signature     string `json:"token_signature"`
	}
	var deadline time.Time
	for backoff := max(w.ttl/10, 10*time.Millisecond); ; backoff = min(2*backoff, w.ttl) {
		sent := time.Now()
		status, err := w.call(ctx, http.MethodPost, map[string]string{"holder": w.holder, "ttl": w.ttl.String()}, &l)
		if err == nil && status == http.StatusCreated {
			// The server's expiry is at least sent+TTL; counting from our own
			// send time keeps our deadline on the safe side of it.
			deadline = sent.Add(w.ttl)
			break
		}
		if status != 0 && status != http.StatusConflict && status < 500 {
			return fmt.Errorf("acquire: status %d", status) // bad request or auth: retrying will not help
		}
		w.log.Info("lease not acquired, retrying", withError(err, "status", status, "held_by", l.Holder, "backoff", backoff.String())...)
		select { // jitter, so competing workers do not retry in lockstep
		case <-time.After(backoff/2 + rand.N(backoff/2+1)):
		case <-ctx.Done():
			return nil
		}
	}
	w.signature.Store(&l.Signature)
	w.log.Info("lease acquired", "lease", w.lease, "holder", w.holder, "token", l.Token, "signed", l.Signature != "")

	// leaseCtx ends the moment we may no longer hold the lease. Every write
	// runs under it, so cancelling it stops all writing at once.
	leaseCtx, cancel := context.WithCancelCause(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { w.renew(leaseCtx, cancel, l.Token, deadline) })
	err := w.write(leaseCtx, l.Token)
	cancel(nil)
	wg.Wait()
	if errors.Is(err, context.Canceled) {
		err = nil // SIGINT/SIGTERM: stop and release
	}
	if errors.Is(err, errLost) || errors.Is(err, errFenced) {
		return err // someone else holds it: nothing to release
	}
	// Release so the next holder need not wait for TTL and grace.
	var out struct{ State string }
	status, rerr := w.call(context.Background(), http.MethodDelete, map[string]string{"holder": w.holder, "token": l.Token}, &out)
	w.log.Info("lease released", withError(rerr, "status", status, "state", out.State)...)
	return err
}

// renew extends the lease every TTL/3 (three chances per TTL) until ctx ends.
// A 409 means another holder has it; no successful renew before the local
// deadline means it may have expired. Either way, stop writing.
func (w *worker) renew(ctx context.Context, stop context.CancelCauseFunc, token string, deadline time.Time) {
	// The watchdog fires even if we were paused (GC, SIGSTOP) past the deadline.
	watchdog := time.AfterFunc(time.Until(deadline), func() { stop(errExpired) })
	defer watchdog.Stop()
	tick := time.NewTicker(w.ttl / 3)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		sent := time.Now()
		rctx, rcancel := context.WithDeadline(ctx, deadline) // a late answer is no use
		var out struct {
			Signature string `json:"token_signature"`
		}
		status, err := w.call(rctx, http.MethodPut, map[string]string{"holder": w.holder, "token": token}, &out)
		rcancel()
		switch {
		case err == nil && status == http.StatusOK:
			w.signature.Store(&out.Signature)
			deadline = sent.Add(w.ttl)
			watchdog.Reset(time.Until(deadline))
		case err == nil && status == http.StatusConflict:
			stop(errLost)
			return
		default: // transient: try again next tick; the watchdog bounds how long
			w.log.Warn("renew failed", withError(err, "status", status)...)
		}
	}
}

// write PUTs the report through the proxy with the lease's fencing token. The
// ctx check before each write is a courtesy, not the safety: a pause can fall
// between check and write, and then the proxy refuses the stale token.
// Failed writes are retried with the same token: the proxy admits equal tokens.
func (w *worker) write(ctx context.Context, token string) error {
	target := strings.TrimSuffix(w.proxy, "/") + escape(w.lease) // the lease name is the resource key
	for i := 1; w.writes == 0 || i <= w.writes; {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		body := fmt.Sprintf("report from %s, token %s, write %d\n", w.holder, token, i)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPut, target, strings.NewReader(body))
		req.Header.Set("X-Fencing-Token", token)
		if sig := *w.signature.Load(); sig != "" {
			req.Header.Set(headerSignature, sig)
		}
		req.Header.Set("X-Request-Id", w.holder+"-"+strconv.Itoa(i))
		resp, err := w.client.Do(req)
		switch {
		case err != nil && ctx.Err() != nil:
			// The lease ended (or a signal came) and cut the write off: that
			// is the reason to stop, logged once by the caller, not a
			// failure to retry.
			return context.Cause(ctx)
		case err != nil:
			w.log.Warn("write failed, will retry", "write", i, "error", err.Error())
		default:
			resp.Body.Close()
			switch {
			case resp.StatusCode == http.StatusConflict && resp.Header.Get("Fencing-Refused") == "stale":
				w.log.Warn("write refused", "write", i, "current_token", resp.Header.Get("Fencing-Current-Token"))
				return errFenced // a 409 without the header is the backend's own
			case resp.StatusCode < 500 && resp.Header.Get("Fencing-Refused") != "":
				// missing, malformed, signature, jump, ...: the same write would be refused again
				return fmt.Errorf("write %d refused by the proxy: %d %s", i, resp.StatusCode, resp.Header.Get("Fencing-Refused"))
			case resp.StatusCode >= 500:
				w.log.Warn("write failed, will retry", "write", i, "status", resp.StatusCode)
			default:
				w.log.Info("write", "write", i, "token", token, "status", resp.StatusCode)
				i++
			}
		}
		select {
		case <-time.After(w.interval):
		case <-ctx.Done():
		}
	}
	return nil
}
