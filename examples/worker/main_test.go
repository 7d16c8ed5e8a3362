package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// buildWorker builds this command into a temporary directory.
func buildWorker(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the worker; skipped with -short")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	bin := filepath.Join(t.TempDir(), "worker")
	if out, err := exec.Command(gobin, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// A lease that ends while a write is in flight (no renew succeeded within the
// TTL, or a renew answered 409) is the reason the worker stops, logged once as
// "stopped writing"; the write it cut off is no failure to retry.
func TestLeaseEndDuringWriteIsNoRetry(t *testing.T) {
	bin := buildWorker(t)
	for _, tc := range []struct {
		name   string
		renew  int // the control API's answer to every renew
		reason string
	}{
		{"expired", http.StatusServiceUnavailable, "lease expired"},
		{"lost", http.StatusConflict, "lease lost"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			control := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "application/json")
				switch r.Method {
				case http.MethodPost:
					w.WriteHeader(http.StatusCreated)
					io.WriteString(w, `{"holder":"A","token":"7"}`)
				case http.MethodPut:
					w.WriteHeader(tc.renew)
					io.WriteString(w, `{}`)
				default:
					io.WriteString(w, `{"state":"released"}`)
				}
			}))
			t.Cleanup(control.Close)
			entered := make(chan struct{}, 1)
			proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				select {
				case entered <- struct{}{}:
				default:
				}
				<-r.Context().Done() // the write hangs until the worker gives it up
			}))
			t.Cleanup(proxy.Close)

			var stderr bytes.Buffer
			cmd := exec.Command(bin, "-control", control.URL, "-proxy", proxy.URL, "-lease", "bkt/obj", "-holder", "A",
				"-ttl", "600ms", "-writes", "0", "-interval", "10ms")
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case <-entered:
			case <-time.After(10 * time.Second):
				cmd.Process.Kill()
				t.Fatalf("no write reached the proxy\n%s", stderr.String())
			}
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				cmd.Process.Kill()
				<-done
				t.Fatalf("the worker did not stop within 10s\n%s", stderr.String())
			}
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 2 {
				t.Errorf("exit: %v, want status 2", err)
			}
			logs := stderr.String()
			if strings.Contains(logs, "write failed") {
				t.Errorf("the write cut off by the lease's end was logged as a failure:\n%s", logs)
			}
			if n := strings.Count(logs, `"msg":"stopped writing"`); n != 1 || !strings.Contains(logs, `"reason":"`+tc.reason) {
				t.Errorf("want one \"stopped writing\" with reason %q, got %d:\n%s", tc.reason, n, logs)
			}
		})
	}
}

// A log line carries "error" only when there is one: a clean release and an
// acquire answered 409 (another holder) log none, not "error":null.
func TestLogsNoNullError(t *testing.T) {
	bin := buildWorker(t)
	var acquires atomic.Int32
	control := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		switch r.Method {
		case http.MethodPost:
			if acquires.Add(1) == 1 {
				w.WriteHeader(http.StatusConflict)
				io.WriteString(w, `{"holder":"B"}`)
				return
			}
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `{"holder":"A","token":"7"}`)
		case http.MethodPut:
			io.WriteString(w, `{}`)
		default:
			io.WriteString(w, `{"state":"released"}`)
		}
	}))
	t.Cleanup(control.Close)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) }))
	t.Cleanup(proxy.Close)

	var stderr bytes.Buffer
	cmd := exec.Command(bin, "-control", control.URL, "-proxy", proxy.URL, "-lease", "bkt/obj", "-holder", "A",
		"-ttl", "1s", "-writes", "1", "-interval", "10ms")
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("worker: %v\n%s", err, stderr.String())
	}
	var released map[string]any
	for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if v, ok := rec["error"]; ok && v == nil {
			t.Errorf("log line with \"error\":null: %s", line)
		}
		if rec["msg"] == "lease released" {
			released = rec
		}
	}
	if released == nil || released["state"] != "released" {
		t.Errorf("no \"lease released\" line with state released:\n%s", stderr.String())
	}
	if acquires.Load() != 2 {
		t.Errorf("%d acquires, want 2 (one refused, one granted)", acquires.Load())
	}
}
