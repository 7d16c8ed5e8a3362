package server_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/servertest"
)

// scrape returns the value of the sample named exactly series (name and
// labels as Prometheus prints them), -1 when absent.
func scrape(t *testing.T, in *servertest.Instance, series string) float64 {
	t.Helper()
	resp, err := http.Get(in.ControlURL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return v
		}
	}
	return -1
}

func metricsPut(t *testing.T, in *servertest.Instance, path, token string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, in.ProxyURL()+path, strings.NewReader("x"))
	if token != "" {
		req.Header.Set("X-Fencing-Token", token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// After traffic, /metrics shows the counters moved, by decision.
func TestMetricsAfterTraffic(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if strings.HasSuffix(r.URL.Path, "/fail") {
			hj, _ := w.(http.Hijacker)
			conn, _, _ := hj.Hijack()
			conn.Close() // the backend dies mid-exchange: 502
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer backend.Close()
	in := servertest.Start(t, map[string]string{"FENCEPROXY_UPSTREAM": backend.URL, "FENCEPROXY_DATA_DIR": t.TempDir()})

	for _, tc := range []struct {
		path, token string
		status      int
	}{
		{"/bkt/a", "5", 204}, {"/bkt/a", "6", 204}, {"/bkt/a", "6", 204}, {"/bkt/b", "1", 204},
		{"/bkt/a", "5", 409}, {"/bkt/a", "", 428}, {"/bkt/a", "x", 400}, {"/bkt/fail", "1", 502},
	} {
		if got := metricsPut(t, in, tc.path, tc.token); got != tc.status {
			t.Fatalf("PUT %s token %q: %d, want %d", tc.path, tc.token, got, tc.status)
		}
	}
	if resp, err := http.Get(in.ProxyURL() + "/bkt/a"); err == nil {
		resp.Body.Close()
	}
	for series, want := range map[string]float64{
		`fenceproxy_requests_total{decision="forwarded"}`:           5,
		`fenceproxy_requests_total{decision="stale"}`:               1,
		`fenceproxy_requests_total{decision="missing"}`:             1,
		`fenceproxy_requests_total{decision="malformed"}`:           1,
		`fenceproxy_requests_total{decision="unfenced"}`:            1,
		`fenceproxy_upstream_errors_total{kind="other"}`:            1,
		`fenceproxy_raise_duration_seconds_count`:                   4, // 5, 6, 1 (b), 1 (fail)
		`fenceproxy_upstream_duration_seconds_count{fenced="true"}`: 5,
		`fenceproxy_inflight_requests`:                              0,
		`fenceproxy_fenced_resources`:                               3,
	} {
		if got := scrape(t, in, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	if got := scrape(t, in, `fenceproxy_leases{state="held"}`); got != 0 {
		t.Errorf("leases held = %v, want 0", got)
	}
}

// Observe mode forwards what it would refuse, and says so loudly.
func TestObserveMode(t *testing.T) {
	backend := &leaseBackend{}
	srv := httptest.NewServer(backend)
	defer srv.Close()
	in := servertest.Start(t, map[string]string{"FENCEPROXY_UPSTREAM": srv.URL, "FENCEPROXY_DATA_DIR": t.TempDir(), "FENCEPROXY_MODE": "observe"})
	for _, tok := range []string{"5", "6", "5", ""} {
		if got := metricsPut(t, in, "/bkt/obj", tok); got != 204 {
			t.Fatalf("observe mode, token %q: %d, want 204 (forwarded)", tok, got)
		}
	}
	if got := backend.got(); got != "5,6,5," {
		t.Fatalf("backend got %q, want every write", got)
	}
	if got := scrape(t, in, `fenceproxy_requests_total{decision="observe_stale"}`); got != 1 {
		t.Errorf("observe_stale = %v, want 1", got)
	}
	if got := scrape(t, in, `fenceproxy_requests_total{decision="observe_missing"}`); got != 1 {
		t.Errorf("observe_missing = %v, want 1", got)
	}
	resp, err := http.Get(in.ControlURL() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "OBSERVE MODE") {
		t.Fatalf("/readyz in observe mode: %d %s", resp.StatusCode, body)
	}
	logs := in.Logs.String()
	if !strings.Contains(logs, `"level":"WARN","msg":"OBSERVE MODE`) || !strings.Contains(logs, "would refuse this write") {
		t.Fatalf("no loud warning in the logs:\n%s", logs)
	}
	// The maxima were still raised: enforcing later keeps them.
	if m := scrape(t, in, "fenceproxy_fenced_resources"); m != 1 {
		t.Errorf("fenced resources %v, want 1", m)
	}
}

// Every metric the Grafana dashboard queries exists on /metrics.
func TestDashboardMetricsExist(t *testing.T) {
	raw, err := os.ReadFile("../deploy/grafana/fenceproxy.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("dashboard is not JSON: %v", err)
	}
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) }))
	defer backend.Close()
	in := servertest.Start(t, map[string]string{"FENCEPROXY_UPSTREAM": backend.URL, "FENCEPROXY_DATA_DIR": t.TempDir()})
	metricsPut(t, in, "/bkt/a", "1") // so that the histograms and labelled counters have samples
	resp, err := http.Get(in.ControlURL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	exposed, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	name := regexp.MustCompile(`fenceproxy_[a-z_]+`)
	seen := 0
	for _, p := range dash.Panels {
		for _, target := range p.Targets {
			for _, m := range name.FindAllString(target.Expr, -1) {
				seen++
				if !strings.Contains(string(exposed), "\n"+m) && !strings.HasPrefix(string(exposed), m) {
					t.Errorf("panel %q queries %s, which /metrics does not expose", p.Title, m)
				}
			}
		}
	}
	if seen < 8 {
		t.Fatalf("only %d metric references found in the dashboard", seen)
	}
}
