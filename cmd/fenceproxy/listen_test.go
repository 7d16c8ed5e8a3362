package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/servertest"
)

// startRecord returns the fields of the process's "fenceproxy started" log line.
func startRecord(t *testing.T, p *fpProcess) map[string]any {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(p.Stderr.String()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var rec map[string]any
		if json.Unmarshal(sc.Bytes(), &rec) == nil && rec["msg"] == "fenceproxy started" {
			return rec
		}
	}
	t.Fatalf("no \"fenceproxy started\" line:\n%s", p.Stderr)
	return nil
}

// outsideIP is an address of this host that is not loopback, "" when it
// has none.
func outsideIP(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	return ""
}

// A control listener beyond loopback with no lease token refuses to start,
// naming the settings; nothing is bound or created.
func TestBinaryControlListenBeyondLoopbackRefused(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0"} {
		t.Run(addr, func(t *testing.T) {
			dataDir := filepath.Join(t.TempDir(), "data")
			env := serveEnv("http://127.0.0.1:1", dataDir)
			env["FENCEPROXY_CONTROL_LISTEN"] = addr
			code, _, stderr := runProcess(t, 30*time.Second, env)
			if code == 0 {
				t.Fatalf("exit code 0, want non-zero\nstderr:\n%s", stderr)
			}
			for _, want := range []string{`FENCEPROXY_CONTROL_LISTEN: "` + addr + `" listens beyond loopback`, "FENCEPROXY_LEASE_TOKEN",
				"FENCEPROXY_LEASE_OPEN=true", "127.0.0.1:0"} {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr)
				}
			}
			if strings.Contains(stderr, "fenceproxy started") {
				t.Errorf("it started:\n%s", stderr)
			}
			if _, err := os.Stat(dataDir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("data directory was created (stat: %v)", err)
			}
		})
	}
}

// With FENCEPROXY_LEASE_OPEN=true the same listener starts, on every
// interface, its lease API open, and the start line says so.
func TestBinaryControlListenLeaseOpen(t *testing.T) {
	backend := servertest.NewRecordingBackend(t)
	env := serveEnv(backend.URL(), t.TempDir())
	env["FENCEPROXY_CONTROL_LISTEN"] = "0.0.0.0:0"
	env["FENCEPROXY_LEASE_OPEN"] = "true"
	p := startProcess(t, env)
	p.waitServing(t)
	rec := startRecord(t, p)
	if rec["control_listen_reach"] != "all interfaces" || rec["lease_api_guarded"] != false ||
		!strings.Contains(rec["lease_api"].(string), "FENCEPROXY_LEASE_OPEN=true") || rec["listen_reach"] != "loopback only" {
		t.Errorf("start line: control_listen_reach %v, lease_api %v, lease_api_guarded %v, listen_reach %v",
			rec["control_listen_reach"], rec["lease_api"], rec["lease_api_guarded"], rec["listen_reach"])
	}
	_, port, _ := net.SplitHostPort(p.Control)
	host := "127.0.0.1"
	if ip := outsideIP(t); ip != "" {
		host = ip // reached from beyond loopback
	}
	if st, body := servertest.Call(t, http.MethodPost, "http://"+net.JoinHostPort(host, port)+"/v1/leases/jobs/a", `{"holder":"w1","ttl":"10s"}`, ""); st != http.StatusCreated {
		t.Errorf("acquire without a credential on %s: %d %v, want 201", host, st, body)
	}
}

// With a lease token the listener starts beyond loopback and lease calls
// need the token.
func TestBinaryControlListenLeaseToken(t *testing.T) {
	backend := servertest.NewRecordingBackend(t)
	env := serveEnv(backend.URL(), t.TempDir())
	env["FENCEPROXY_CONTROL_LISTEN"] = ":0"
	env["FENCEPROXY_LEASE_TOKEN"] = "lease-s3cret"
	p := startProcess(t, env)
	p.waitServing(t)
	rec := startRecord(t, p)
	if rec["control_listen_reach"] != "all interfaces" || rec["lease_api_guarded"] != true || strings.Contains(p.Stderr.String(), "lease-s3cret") {
		t.Errorf("start line: control_listen_reach %v, lease_api %v, lease_api_guarded %v (or the token logged)",
			rec["control_listen_reach"], rec["lease_api"], rec["lease_api_guarded"])
	}
	url := "http://" + p.Control + "/v1/leases/jobs/a"
	if st, _ := servertest.Call(t, http.MethodPost, url, `{"holder":"w1","ttl":"10s"}`, ""); st != http.StatusUnauthorized {
		t.Errorf("acquire without the token: %d, want 401", st)
	}
	if st, body := servertest.Call(t, http.MethodPost, url, `{"holder":"w1","ttl":"10s"}`, "lease-s3cret"); st != http.StatusCreated {
		t.Errorf("acquire with the token: %d %v, want 201", st, body)
	}
}

// Unset, the control listener is on 127.0.0.1:9090: loopback only, and the
// lease API runs without a credential there. Skipped when that port is taken.
func TestBinaryControlListenDefaultLoopback(t *testing.T) {
	probe, err := net.Listen("tcp", "127.0.0.1:9090")
	if err != nil {
		t.Skipf("127.0.0.1:9090, the default control address, is in use: %v", err)
	}
	probe.Close()
	backend := servertest.NewRecordingBackend(t)
	env := serveEnv(backend.URL(), t.TempDir())
	delete(env, "FENCEPROXY_CONTROL_LISTEN")
	p := startProcess(t, env)
	p.waitServing(t)
	rec := startRecord(t, p)
	if p.Control != "127.0.0.1:9090" || rec["control_listen_reach"] != "loopback only" || rec["lease_api_guarded"] != false ||
		!strings.Contains(rec["lease_api"].(string), "loopback only") {
		t.Errorf("start line: control_listen %s, control_listen_reach %v, lease_api %v, lease_api_guarded %v",
			p.Control, rec["control_listen_reach"], rec["lease_api"], rec["lease_api_guarded"])
	}
	if st, body := servertest.Call(t, http.MethodPost, "http://127.0.0.1:9090/v1/leases/jobs/a", `{"holder":"w1","ttl":"10s"}`, ""); st != http.StatusCreated {
		t.Errorf("acquire on loopback: %d %v, want 201", st, body)
	}
	if ip := outsideIP(t); ip != "" {
		c, err := net.DialTimeout("tcp", net.JoinHostPort(ip, "9090"), 2*time.Second)
		if err == nil {
			c.Close()
			t.Errorf("the control port answers on %s, beyond loopback", ip)
		}
	}
}
