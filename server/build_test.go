package server_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/buildinfo"
	"github.com/fenceproxy/fenceproxy/internal/servertest"
)

// The control listener's /metrics carries fenceproxy_build_info with the
// running build's version, revision and Go version, and the start-up log
// line names the same build.
func TestBuildInfoMetricAndStartLog(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) }))
	defer backend.Close()
	in := servertest.Start(t, map[string]string{"FENCEPROXY_UPSTREAM": backend.URL, "FENCEPROXY_DATA_DIR": t.TempDir()})
	b := buildinfo.Read()
	if b.Version == "" || b.GoVersion == "" {
		t.Fatalf("build info without version or Go version: %+v", b)
	}

	// Prometheus writes the labels sorted by name.
	series := fmt.Sprintf(`fenceproxy_build_info{goversion=%q,revision=%q,version=%q}`, b.GoVersion, b.RevisionOrUnknown(), b.Version)
	if got := scrape(t, in, series); got != 1 {
		t.Errorf("%s = %v, want 1", series, got)
	}

	started := startLine(t, in)
	for k, want := range map[string]any{"version": b.Version, "revision": b.RevisionOrUnknown(), "modified": b.Modified, "go_version": b.GoVersion} {
		if started[k] != want {
			t.Errorf("start-up log line: %s = %v, want %v", k, started[k], want)
		}
	}
}

// The start-up log line names the path-parameter and lease settings in
// effect, the defaults that depend on each lease's TTL in words, and whether
// a lease token is set (never the token), and where the listeners take
// connections from.
func TestStartLogSettings(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) }))
	defer backend.Close()
	base := map[string]string{"FENCEPROXY_UPSTREAM": backend.URL}
	for _, tc := range []struct {
		name string
		env  map[string]string
		want map[string]any
	}{
		{"defaults", nil, map[string]any{
			"allow_path_params": false, "lease_grace": "2/3 of the TTL", "lease_revoke_after": "half the TTL",
			"lease_min_ttl": "1s", "lease_max_ttl": "1h0m0s", "lease_token_set": false,
			"listen_reach": "loopback only", "control_listen_reach": "loopback only", "lease_api_guarded": false,
		}},
		{"set", map[string]string{
			"FENCEPROXY_ALLOW_PATH_PARAMS": "true", "FENCEPROXY_LEASE_GRACE": "0s", "FENCEPROXY_LEASE_REVOKE_AFTER": "4s",
			"FENCEPROXY_LEASE_MIN_TTL": "2s", "FENCEPROXY_LEASE_MAX_TTL": "5m", "FENCEPROXY_LEASE_TOKEN": "lease-secret-token",
		}, map[string]any{
			"allow_path_params": true, "lease_grace": "0s", "lease_revoke_after": "4s",
			"lease_min_ttl": "2s", "lease_max_ttl": "5m0s", "lease_token_set": true, "lease_api_guarded": true,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := servertest.Env(base, tc.env)
			env["FENCEPROXY_DATA_DIR"] = t.TempDir()
			in := servertest.Start(t, env)
			started := startLine(t, in)
			for k, want := range tc.want {
				if got, ok := started[k]; !ok || got != want {
					t.Errorf("start-up log line: %s = %v (present: %v), want %v", k, got, ok, want)
				}
			}
			if strings.Contains(in.Logs.String(), "lease-secret-token") {
				t.Errorf("the logs carry the lease token:\n%s", in.Logs)
			}
		})
	}
}

// startLine returns the fields of in's "fenceproxy started" log line.
func startLine(t *testing.T, in *servertest.Instance) map[string]any {
	t.Helper()
	var started map[string]any
	sc := bufio.NewScanner(strings.NewReader(in.Logs.String()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var rec map[string]any
		if json.Unmarshal(sc.Bytes(), &rec) == nil && rec["msg"] == "fenceproxy started" {
			started = rec
		}
	}
	if started == nil {
		t.Fatalf("no start-up log line:\n%s", in.Logs)
	}
	return started
}
