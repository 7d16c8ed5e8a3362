package server_test

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/config"
	"github.com/fenceproxy/fenceproxy/internal/servertest"
	"github.com/fenceproxy/fenceproxy/server"
)

// deadAddr is a loopback address where nothing listens (a port the kernel
// gave and took back).
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// backendOn serves 204 on addr until the returned stop is called.
func backendOn(t *testing.T, addr string) (stop func()) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on %s again: %v", addr, err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })}
	go srv.Serve(ln)
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			srv.Close()
		}
	}
	t.Cleanup(stop)
	return stop
}

func readyz(t *testing.T, in *servertest.Instance) int {
	t.Helper()
	resp, err := http.Get(in.ControlURL() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// A dead upstream is noticed: a warning naming its address and the error,
// fenceproxy_upstream_up 0, and, with READY_NEEDS_UPSTREAM, /readyz 503.
// Once a backend listens there, the gauge is 1, an info line says so, and
// /readyz is 200; when it dies again, all of it comes back.
func TestUpstreamProbe(t *testing.T) {
	for _, needs := range []bool{false, true} {
		name := "readiness own"
		if needs {
			name = "READY_NEEDS_UPSTREAM"
		}
		t.Run(name, func(t *testing.T) {
			addr := deadAddr(t)
			env := map[string]string{
				"FENCEPROXY_UPSTREAM": "http://" + addr, "FENCEPROXY_DATA_DIR": t.TempDir(),
				"FENCEPROXY_UPSTREAM_PROBE_INTERVAL": "200ms",
			}
			if needs {
				env["FENCEPROXY_READY_NEEDS_UPSTREAM"] = "true"
			}
			in := servertest.Start(t, env)
			deadReady := http.StatusOK
			if needs {
				deadReady = http.StatusServiceUnavailable
			}

			if !in.Logs.WaitFor(`"msg":"upstream unreachable`, 10*time.Second) {
				t.Fatalf("no warning about the dead upstream:\n%s", in.Logs)
			}
			logs := in.Logs.String()
			if !strings.Contains(logs, `"level":"WARN","msg":"upstream unreachable`) || !strings.Contains(logs, `"address":"`+addr+`"`) ||
				!strings.Contains(logs, "connection refused") {
				t.Errorf("the warning does not name the address %s and the error:\n%s", addr, logs)
			}
			if got := scrape(t, in, "fenceproxy_upstream_up"); got != 0 {
				t.Errorf("fenceproxy_upstream_up = %v with the upstream dead, want 0", got)
			}
			if got := readyz(t, in); got != deadReady {
				t.Errorf("/readyz = %d with the upstream dead, want %d", got, deadReady)
			}
			if st, _ := servertest.PutToken(t, servertest.NewClient(t), in.ProxyURL(), "/bkt/a", "1", "dead"); st != http.StatusBadGateway {
				t.Errorf("PUT with the upstream dead: %d, want 502", st)
			}

			stop := backendOn(t, addr)
			servertest.Eventually(t, 10*time.Second, "fenceproxy_upstream_up is 1", func() bool { return scrape(t, in, "fenceproxy_upstream_up") == 1 })
			if !in.Logs.WaitFor(`"msg":"upstream reachable again"`, 5*time.Second) {
				t.Errorf("no line saying the upstream is back:\n%s", in.Logs)
			}
			if got := readyz(t, in); got != http.StatusOK {
				t.Errorf("/readyz = %d with the upstream back, want 200", got)
			}
			if st, _ := servertest.PutToken(t, servertest.NewClient(t), in.ProxyURL(), "/bkt/a", "2", "back"); st != http.StatusNoContent {
				t.Errorf("PUT with the upstream back: %d, want 204", st)
			}

			stop()
			servertest.Eventually(t, 10*time.Second, "fenceproxy_upstream_up is 0 again", func() bool { return scrape(t, in, "fenceproxy_upstream_up") == 0 })
			if got := readyz(t, in); got != deadReady {
				t.Errorf("/readyz = %d with the upstream dead again, want %d", got, deadReady)
			}
			servertest.Eventually(t, 5*time.Second, "a second warning", func() bool {
				return strings.Count(in.Logs.String(), `"msg":"upstream unreachable`) == 2
			})
			// One warning per change, not one per probe.
			time.Sleep(600 * time.Millisecond)
			if n := strings.Count(in.Logs.String(), `"msg":"upstream unreachable`); n != 2 {
				t.Errorf("%d warnings after two losses, want 2 (one per change)", n)
			}
		})
	}
}

// ProbeUpstream dials the upstream's host and port and says whether it
// connected.
func TestProbeUpstream(t *testing.T) {
	addr := deadAddr(t)
	cfg, _, err := config.Parse(map[string]string{"FENCEPROXY_UPSTREAM": "http://" + addr, "FENCEPROXY_DATA_DIR": "unused"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := server.ProbeUpstream(context.Background(), cfg)
	if got != addr || err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("ProbeUpstream of a dead address: %q, %v; want %s and connection refused", got, err, addr)
	}
	backendOn(t, addr)
	if got, err := server.ProbeUpstream(context.Background(), cfg); got != addr || err != nil {
		t.Errorf("ProbeUpstream of a live address: %q, %v", got, err)
	}
}
