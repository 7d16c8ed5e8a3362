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

	var started map[string]any
	sc := bufio.NewScanner(strings.NewReader(in.Logs.String()))
	for sc.Scan() {
		var rec map[string]any
		if json.Unmarshal(sc.Bytes(), &rec) == nil && rec["msg"] == "fenceproxy started" {
			started = rec
		}
	}
	if started == nil {
		t.Fatalf("no start-up log line:\n%s", in.Logs)
	}
	for k, want := range map[string]any{"version": b.Version, "revision": b.RevisionOrUnknown(), "modified": b.Modified, "go_version": b.GoVersion} {
		if started[k] != want {
			t.Errorf("start-up log line: %s = %v, want %v", k, started[k], want)
		}
	}
}
