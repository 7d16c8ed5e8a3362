package main

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/servertest"
)

// settingLine returns the row of variable in check's configuration table.
func settingLine(t *testing.T, out, variable string) string {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == variable {
			return l
		}
	}
	t.Errorf("the configuration table has no row for %s:\n%s", variable, out)
	return ""
}

// fields of a table row: variable, value, source.
var rowRE = regexp.MustCompile(`^(\S+)\s+(.*?)\s{2,}(\S.*)$`)

func row(t *testing.T, out, variable string) (value, source string) {
	t.Helper()
	m := rowRE.FindStringSubmatch(settingLine(t, out, variable))
	if m == nil {
		return "", ""
	}
	return m[2], m[3]
}

// On a good environment the binary's check exits 0, prints every variable
// with its value and source, secrets redacted, and passes its checks.
func TestBinaryCheckGood(t *testing.T) {
	backend := servertest.NewRecordingBackend(t)
	dataDir := filepath.Join(t.TempDir(), "data")
	env := map[string]string{
		"FENCEPROXY_UPSTREAM":       backend.URL(),
		"FENCEPROXY_DATA_DIR":       dataDir,
		"FENCEPROXY_CONTROL_LISTEN": ":9090",
		"FENCEPROXY_LEASE_TOKEN":    "lease-s3cret-value",
		"FENCEPROXY_ADMIN_TOKEN":    "admin-s3cret-value",
		"FENCEPROXY_TOKEN_KEY":      "c2VjcmV0LWtleS1vZi1hdC1sZWFzdC0zMi1ieXRlcyE=",
		"FENCEPROXY_DRAIN_TIMEOUT":  "10s",
		"FENCEPROXY_CONTROL_URL":    "http://127.0.0.1:9090", // the operator commands': no warning
	}
	code, stdout, stderr := runProcess(t, 30*time.Second, env, "check")
	if code != 0 {
		t.Fatalf("exit code %d, want 0\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, v := range configVariables(t) {
		settingLine(t, stdout, v)
	}
	for variable, want := range map[string][2]string{
		"FENCEPROXY_UPSTREAM":         {backend.URL(), "set"},
		"FENCEPROXY_CONTROL_LISTEN":   {":9090", "set"},
		"FENCEPROXY_DRAIN_TIMEOUT":    {"10s", "set"},
		"FENCEPROXY_ABANDON_GRACE":    {"5s", "default"},
		"FENCEPROXY_LISTEN":           {":8080", "default"},
		"FENCEPROXY_LEASE_TOKEN":      {"<redacted>", "set"},
		"FENCEPROXY_ADMIN_TOKEN":      {"<redacted>", "set"},
		"FENCEPROXY_TOKEN_KEY":        {"<redacted>", "set"},
		"FENCEPROXY_PEER_SECRET":      {"(unset)", "default"},
		"FENCEPROXY_LEASE_OPEN":       {"false", "default"},
		"FENCEPROXY_UNFENCED_METHODS": {"GET,HEAD,OPTIONS", "default"},
	} {
		if value, source := row(t, stdout, variable); value != want[0] || source != want[1] {
			t.Errorf("%s: value %q, source %q; want %q, %q", variable, value, source, want[0], want[1])
		}
	}
	for _, secret := range []string{"lease-s3cret-value", "admin-s3cret-value", "c2VjcmV0LWtleS1vZi1hdC1sZWFzdC0zMi1ieXRlcyE="} {
		if strings.Contains(stdout+stderr, secret) {
			t.Errorf("check printed the secret %q", secret)
		}
	}
	for _, want := range []string{
		"ok       configuration: every variable is valid",
		"ok       FENCEPROXY_DATA_DIR: " + dataDir + " does not exist yet",
		"ok       FENCEPROXY_UPSTREAM: " + strings.TrimPrefix(backend.URL(), "http://") + " takes TCP connections",
		"Result: 0 errors, 0 warnings",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	if _, err := os.Stat(dataDir); err == nil {
		t.Errorf("check created %s", dataDir)
	}
}

// On a bad environment check exits 1 and names every bad variable, in the
// checks and in the table, and points a misspelt name at the right one.
func TestBinaryCheckBad(t *testing.T) {
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"FENCEPROXY_UPSTREAM":         "ftp://user:hunter2@backend",
		"FENCEPROXY_DATA_DIR":         filepath.Join(notDir, "data"),
		"FENCEPROXY_DRAIN_TIMEOUT":    "10",
		"FENCEPROXY_UNFENCED_METHODS": "get",
		"FENCEPROXY_CONTROL_LISTEN":   "0.0.0.0:9090",
		"FENCEPROXY_LOG_LEVEL":        "loud",
		"FENCEPROXY_SHUTDOWN_TIMOUT":  "5s",
	}
	code, stdout, stderr := runProcess(t, 30*time.Second, env, "check")
	if code != 1 {
		t.Fatalf("exit code %d, want 1\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, name := range []string{"FENCEPROXY_UPSTREAM", "FENCEPROXY_DRAIN_TIMEOUT", "FENCEPROXY_UNFENCED_METHODS", "FENCEPROXY_CONTROL_LISTEN", "FENCEPROXY_LOG_LEVEL"} {
		if !regexp.MustCompile(`(?m)^  error    ` + name + `\b`).MatchString(stdout) {
			t.Errorf("no error line naming %s:\n%s", name, stdout)
		}
		if _, source := row(t, stdout, name); source != "set, invalid" {
			t.Errorf("%s's row says %q, want set, invalid", name, source)
		}
	}
	for _, want := range []string{
		"error    FENCEPROXY_DATA_DIR: " + filepath.Join(notDir, "data") + " does not exist and cannot be created: " + notDir + " is not a directory",
		"warning  unknown variable FENCEPROXY_SHUTDOWN_TIMOUT is ignored (did you mean FENCEPROXY_SHUTDOWN_TIMEOUT?)",
		"Result: 6 errors, 1 warning",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	if value, _ := row(t, stdout, "FENCEPROXY_DRAIN_TIMEOUT"); value != "10" {
		t.Errorf("DRAIN_TIMEOUT shown as %q, want the value given, 10", value)
	}
	if strings.Contains(stdout, "hunter2") {
		t.Errorf("check printed the upstream's password:\n%s", stdout)
	}
	if !strings.Contains(stderr, "check: 6 errors") {
		t.Errorf("stderr: %q", stderr)
	}
}

// An upstream that takes no connection is a warning (exit 0), and an error
// with --require-upstream (exit 1).
func TestCheckUpstream(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	env := map[string]string{"FENCEPROXY_UPSTREAM": "http://" + addr, "FENCEPROXY_DATA_DIR": t.TempDir()}
	var stdout, stderr bytes.Buffer
	if err := runBounded(t, []string{"check"}, env, &stdout, &stderr, nil); err != nil || exitCode(err) != 0 {
		t.Fatalf("check with a dead upstream: %v, want nil\n%s", err, stdout.String())
	}
	want := "warning  FENCEPROXY_UPSTREAM: no TCP connection to " + addr
	if out := stdout.String(); !strings.Contains(out, want) || !strings.Contains(out, "connection refused") ||
		!strings.Contains(out, "Result: 0 errors, 1 warning") || !strings.Contains(out, "ok       FENCEPROXY_DATA_DIR: ") {
		t.Errorf("stdout lacks %q and connection refused:\n%s", want, out)
	}
	stdout.Reset()
	err = runBounded(t, []string{"check", "--require-upstream"}, env, &stdout, &stderr, nil)
	if exitCode(err) != 1 || !strings.Contains(stdout.String(), "error    FENCEPROXY_UPSTREAM: no TCP connection to "+addr) {
		t.Errorf("check --require-upstream with a dead upstream: %v (exit %d)\n%s", err, exitCode(err), stdout.String())
	}
}

// check's command line: -h prints its help, arguments and unknown flags
// are usage errors (exit 2).
func TestCheckCommandLine(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := runBounded(t, []string{"check", "-h"}, nil, &stdout, &stderr, nil); err != nil ||
		!strings.Contains(stdout.String(), "Usage: fenceproxy check") || !strings.Contains(stdout.String(), "-require-upstream") {
		t.Errorf("check -h: %v\n%s", err, stdout.String())
	}
	for _, args := range [][]string{{"check", "extra"}, {"check", "--nope"}} {
		if err := runBounded(t, args, nil, &stdout, &stderr, nil); exitCode(err) != 2 {
			t.Errorf("%q: %v (exit %d), want exit 2", args, err, exitCode(err))
		}
	}
	stdout.Reset()
	if err := runBounded(t, []string{"-h"}, nil, &stdout, &stderr, nil); err != nil || !strings.Contains(stdout.String(), "fenceproxy check") {
		t.Errorf("fenceproxy -h does not list check: %v", err)
	}
}

// With FENCEPROXY_TRACING=true check shows it set and says where spans go;
// a bad OTEL_* variable is an error, named.
func TestCheckTracing(t *testing.T) {
	backend := servertest.NewRecordingBackend(t)
	env := map[string]string{"FENCEPROXY_UPSTREAM": backend.URL(), "FENCEPROXY_DATA_DIR": t.TempDir(), "FENCEPROXY_TRACING": "true",
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}
	var stdout, stderr bytes.Buffer
	if err := runBounded(t, []string{"check"}, env, &stdout, &stderr, nil); err != nil {
		t.Fatalf("check: %v\n%s", err, stdout.String())
	}
	out := stdout.String()
	if value, source := row(t, out, "FENCEPROXY_TRACING"); value != "true" || source != "set" {
		t.Errorf("FENCEPROXY_TRACING row: %q, %q; want true, set", value, source)
	}
	if want := "ok       FENCEPROXY_TRACING: a span per request, exported by OTLP (http/protobuf) to http://collector:4318"; !strings.Contains(out, want) {
		t.Errorf("stdout lacks %q:\n%s", want, out)
	}
	stdout.Reset()
	env["OTEL_EXPORTER_OTLP_PROTOCOL"] = "http/json"
	err := runBounded(t, []string{"check"}, env, &stdout, &stderr, nil)
	if exitCode(err) != 1 || !strings.Contains(stdout.String(), `error    OTEL_EXPORTER_OTLP_PROTOCOL: "http/json" is neither`) {
		t.Errorf("check with OTEL_EXPORTER_OTLP_PROTOCOL=http/json: %v (exit %d)\n%s", err, exitCode(err), stdout.String())
	}
}
