package main

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/servertest"
)

// metricLine returns the line of series on the process's /metrics, "" when
// there is none.
func metricLine(t *testing.T, p *fpProcess, series string) string {
	t.Helper()
	resp, err := http.Get("http://" + p.Control + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, series+" ") {
			return line
		}
	}
	return ""
}

// A fenceproxy whose upstream is dead warns at start, naming the address
// and the error, and shows fenceproxy_upstream_up 0; /readyz stays 200 (the
// default); once a backend listens there, the gauge is 1 and a write passes.
func TestBinaryDeadUpstream(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	env := serveEnv("http://"+addr, t.TempDir())
	env["FENCEPROXY_UPSTREAM_PROBE_INTERVAL"] = "200ms"
	p := startProcess(t, env)
	p.waitServing(t)
	if !p.Stderr.WaitFor(`"msg":"upstream unreachable`, 10*time.Second) {
		t.Fatalf("no warning about the dead upstream:\n%s", p.Stderr)
	}
	if s := p.Stderr.String(); !strings.Contains(s, `"level":"WARN"`) || !strings.Contains(s, `"address":"`+addr+`"`) || !strings.Contains(s, "connection refused") {
		t.Errorf("the warning does not name %s and the error:\n%s", addr, s)
	}
	if got := metricLine(t, p, "fenceproxy_upstream_up"); got != "fenceproxy_upstream_up 0" {
		t.Errorf("with the upstream dead: %q, want fenceproxy_upstream_up 0", got)
	}
	if st, _ := servertest.Call(t, http.MethodGet, "http://"+p.Control+"/readyz", "", ""); st != http.StatusOK {
		t.Errorf("/readyz with the upstream dead: %d, want 200 (READY_NEEDS_UPSTREAM is off)", st)
	}

	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on %s again: %v", addr, err)
	}
	backend := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })}
	go backend.Serve(ln)
	defer backend.Close()
	servertest.Eventually(t, 10*time.Second, "fenceproxy_upstream_up 1", func() bool {
		return metricLine(t, p, "fenceproxy_upstream_up") == "fenceproxy_upstream_up 1"
	})
	if !p.Stderr.WaitFor(`"msg":"upstream reachable again"`, 5*time.Second) {
		t.Errorf("no line saying the upstream is back:\n%s", p.Stderr)
	}
	if st, _ := servertest.PutToken(t, servertest.NewClient(t), "http://"+p.Proxy, "/bkt/a", "1", "back"); st != http.StatusNoContent {
		t.Errorf("PUT with the upstream back: %d, want 204", st)
	}
}
