package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/config"
	"github.com/fenceproxy/fenceproxy/internal/servertest"
	"github.com/fenceproxy/fenceproxy/server"
)

// TestMain removes the fenceproxy binary that the process tests build (once
// per test run, lazily) after all tests have run. It is the package's only
// TestMain.
func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

var (
	buildOnce sync.Once
	binDir    string // temporary directory holding the built binary
	binPath   string
	buildErr  error
)

// fenceproxyBinary builds cmd/fenceproxy once per test run and returns the
// binary's path. It skips the test under -short or when no go command is found.
func fenceproxyBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the fenceproxy binary; skipped with -short")
	}
	buildOnce.Do(func() {
		gobin, err := exec.LookPath("go")
		if err != nil {
			buildErr = fmt.Errorf("no go command: %w", err)
			return
		}
		if binDir, err = os.MkdirTemp("", "fenceproxy-bin-"); err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(binDir, "fenceproxy")
		args := []string{"build", "-o", binPath}
		if replicaBuildTags != "" {
			args = append(args, "-tags", replicaBuildTags) // the teeth of the cut-off tests (cutoff_test.go)
		}
		cmd := exec.Command(gobin, append(args, ".")...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		if errors.Is(buildErr, exec.ErrNotFound) {
			t.Skip(buildErr)
		}
		t.Fatal(buildErr)
	}
	return binPath
}

// childEnv is this process's environment without FENCEPROXY_* variables,
// plus env.
func childEnv(env map[string]string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, config.Prefix) {
			out = append(out, kv)
		}
	}
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out
}

// fpProcess is a fenceproxy binary running as a child process.
type fpProcess struct {
	cmd            *exec.Cmd
	Stdout, Stderr *servertest.Buffer
	started        chan server.Addrs // receives the addresses of the "fenceproxy started" log line
	exited         chan struct{}     // closed when the process has exited
	waitErr        error             // cmd.Wait's result, valid after exited is closed
	Proxy, Control string            // set by waitServing
}

// startLogWriter scans a child's stderr for the "fenceproxy started" log line.
type startLogWriter struct {
	buf     *servertest.Buffer
	mu      sync.Mutex
	partial []byte
	seen    bool
	started chan server.Addrs
}

func (w *startLogWriter) Write(p []byte) (int, error) {
	w.buf.Write(p)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.partial = append(w.partial, p...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		line := w.partial[:i]
		w.partial = w.partial[i+1:]
		var rec struct {
			Msg           string `json:"msg"`
			Listen        string `json:"listen"`
			ControlListen string `json:"control_listen"`
		}
		if !w.seen && json.Unmarshal(line, &rec) == nil && rec.Msg == "fenceproxy started" {
			w.seen = true
			w.started <- server.Addrs{Proxy: rec.Listen, Control: rec.ControlListen}
		}
	}
	return len(p), nil
}

// startProcess starts the binary with args and env (FENCEPROXY_* variables;
// the test's own FENCEPROXY_* variables are not passed on). Cleanup kills it.
func startProcess(t *testing.T, env map[string]string, args ...string) *fpProcess {
	t.Helper()
	return startProcessIn(t, "", env, args...)
}

// startProcessIn is startProcess with the process placed, before it runs
// anything, in the cgroup whose cgroup.procs file is procs ("": this one's).
func startProcessIn(t *testing.T, procs string, env map[string]string, args ...string) *fpProcess {
	t.Helper()
	bin := fenceproxyBinary(t)
	p := &fpProcess{
		Stdout: &servertest.Buffer{}, Stderr: &servertest.Buffer{},
		started: make(chan server.Addrs, 1), exited: make(chan struct{}),
	}
	p.cmd = exec.Command(bin, args...)
	if procs != "" {
		// The shell moves itself, then execs the binary under its pid.
		p.cmd = exec.Command("/bin/sh", append([]string{"-c", `procs=$1; shift; echo $$ > "$procs" && exec "$0" "$@"`, bin, procs}, args...)...)
	}
	p.cmd.Env = childEnv(env)
	p.cmd.Stdout = p.Stdout
	p.cmd.Stderr = &startLogWriter{buf: p.Stderr, started: p.started}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			p.cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

// runProcess runs the binary to completion (bounded by timeout) and returns
// its exit code, stdout and stderr.
func runProcess(t *testing.T, timeout time.Duration, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	p := startProcess(t, env, args...)
	code, err := p.wait(timeout)
	if err != nil {
		t.Fatalf("fenceproxy %q: %v\nstderr:\n%s", args, err, p.Stderr)
	}
	return code, p.Stdout.String(), p.Stderr.String()
}

// wait waits up to timeout for the process to exit and returns its exit code.
func (p *fpProcess) wait(timeout time.Duration) (int, error) {
	select {
	case <-p.exited:
	case <-time.After(timeout):
		return -1, fmt.Errorf("still running after %v", timeout)
	}
	var ee *exec.ExitError
	switch {
	case p.waitErr == nil:
		return 0, nil
	case errors.As(p.waitErr, &ee):
		return ee.ExitCode(), nil
	default:
		return -1, p.waitErr
	}
}

// waitServing waits for the "fenceproxy started" log line, takes the bound
// addresses from it and polls /healthz on the control listener until it is 200.
func (p *fpProcess) waitServing(t *testing.T) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	select {
	case a := <-p.started:
		p.Proxy, p.Control = a.Proxy, a.Control
	case <-p.exited:
		t.Fatalf("fenceproxy exited before it started: %v\nstderr:\n%s", p.waitErr, p.Stderr)
	case <-deadline:
		t.Fatalf("no \"fenceproxy started\" log line within 20s\nstderr:\n%s", p.Stderr)
	}
	if p.Proxy == "" || p.Control == "" {
		t.Fatalf("start log line lacks listen/control_listen (%q, %q)\nstderr:\n%s", p.Proxy, p.Control, p.Stderr)
	}
	client := &http.Client{Timeout: 2 * time.Second}
	defer client.CloseIdleConnections()
	for {
		resp, err := client.Get("http://" + p.Control + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-p.exited:
			t.Fatalf("fenceproxy exited while waiting for /healthz: %v\nstderr:\n%s", p.waitErr, p.Stderr)
		case <-deadline:
			t.Fatalf("/healthz on %s not 200 within 20s (last error %v)\nstderr:\n%s", p.Control, err, p.Stderr)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Loopback addresses on ports chosen by the kernel.
const (
	testListen        = "127.0.0.1:0"
	testControlListen = "127.0.0.1:0"
)

// serveEnv is an environment for a process on loopback ports chosen by the kernel.
func serveEnv(upstream, dataDir string) map[string]string {
	return map[string]string{
		"FENCEPROXY_UPSTREAM":         upstream,
		"FENCEPROXY_DATA_DIR":         dataDir,
		"FENCEPROXY_LISTEN":           testListen,
		"FENCEPROXY_CONTROL_LISTEN":   testControlListen,
		"FENCEPROXY_SHUTDOWN_TIMEOUT": "5s",
	}
}

// configVariables lists every FENCEPROXY_ variable from Config's env tags.
func configVariables(t *testing.T) []string {
	t.Helper()
	var vars []string
	typ := reflect.TypeOf(config.Config{})
	for i := 0; i < typ.NumField(); i++ {
		tag, ok := typ.Field(i).Tag.Lookup("env")
		if !ok {
			t.Fatalf("config.Config field %s has no env tag", typ.Field(i).Name)
		}
		name, _, _ := strings.Cut(tag, ",")
		vars = append(vars, config.Prefix+name)
	}
	if len(vars) < 10 {
		t.Fatalf("only %d variables found in config.Config: %q", len(vars), vars)
	}
	return vars
}

func TestRunHelpListsEveryVariable(t *testing.T) {
	for _, arg := range []string{"-h", "--help", "help"} {
		t.Run(arg, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			// No environment at all: help needs no configuration.
			if err := Run(context.Background(), []string{arg}, nil, &stdout, &stderr); err != nil {
				t.Fatalf("Run(%q) = %v, want nil", arg, err)
			}
			out := stdout.String()
			for _, v := range configVariables(t) {
				if !strings.Contains(out, v) {
					t.Errorf("help does not list %s:\n%s", v, out)
				}
			}
			for _, cmd := range []string{"serve", "demo"} {
				if !strings.Contains(out, cmd) {
					t.Errorf("help does not mention the %q command", cmd)
				}
			}
			if stderr.Len() != 0 {
				t.Errorf("help wrote to stderr: %q", stderr.String())
			}
		})
	}
}

func TestRunUnknownCommand(t *testing.T) {
	for _, args := range [][]string{{"frobnicate"}, {"serve", "extra"}, {"-x"}} {
		var stdout, stderr bytes.Buffer
		err := runBounded(t, args, map[string]string{}, &stdout, &stderr, nil)
		if err == nil {
			t.Errorf("Run(%q) = nil, want an error", args)
			continue
		}
		if !strings.Contains(err.Error(), args[0]) {
			t.Errorf("Run(%q) error %q does not name %q", args, err, args[0])
		}
	}
}

// runBounded calls run and fails the test if it has not returned within 10s
// (a configuration error must stop start-up at once).
func runBounded(t *testing.T, args []string, env map[string]string, stdout, stderr *bytes.Buffer, started func(server.Addrs)) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	var so, se servertest.Buffer
	go func() { done <- run(ctx, args, env, &so, &se, started) }()
	select {
	case err := <-done:
		stdout.WriteString(so.String())
		stderr.WriteString(se.String())
		return err
	case <-time.After(10 * time.Second):
		cancel()
		<-done
		t.Fatalf("run(%q) did not return within 10s\nstderr:\n%s", args, se.String())
		return nil
	}
}

// TestRunRejectsBadConfig: a bad configuration stops start-up with an error
// naming the variable, before anything is opened or bound.
func TestRunRejectsBadConfig(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		wantVar string
	}{
		{"UPSTREAM missing", map[string]string{}, "FENCEPROXY_UPSTREAM"},
		{"UPSTREAM empty", map[string]string{"FENCEPROXY_UPSTREAM": ""}, "FENCEPROXY_UPSTREAM"},
		{"DRAIN_TIMEOUT without unit", map[string]string{"FENCEPROXY_UPSTREAM": "http://127.0.0.1:1", "FENCEPROXY_DRAIN_TIMEOUT": "10"}, "FENCEPROXY_DRAIN_TIMEOUT"},
		{"DATA_DIR missing", map[string]string{"FENCEPROXY_UPSTREAM": "http://127.0.0.1:1", "FENCEPROXY_DATA_DIR": "\x00unset"}, "FENCEPROXY_DATA_DIR"},
	}
	for _, tt := range tests {
		for _, how := range []string{"Run", "run"} {
			t.Run(tt.name+"/"+how, func(t *testing.T) {
				dataDir := filepath.Join(t.TempDir(), "data")
				env := map[string]string{
					"FENCEPROXY_DATA_DIR":       dataDir,
					"FENCEPROXY_LISTEN":         "127.0.0.1:0",
					"FENCEPROXY_CONTROL_LISTEN": "127.0.0.1:0",
				}
				for k, v := range tt.env {
					env[k] = v
					if v == "\x00unset" {
						delete(env, k)
					}
				}
				var stdout, stderr bytes.Buffer
				var err error
				started := false
				if how == "Run" {
					var environ []string
					for k, v := range env {
						environ = append(environ, k+"="+v)
					}
					done := make(chan error, 1)
					go func() { done <- Run(context.Background(), nil, environ, &servertest.Buffer{}, &servertest.Buffer{}) }()
					select {
					case err = <-done:
					case <-time.After(10 * time.Second):
						t.Fatal("Run did not return within 10s: it started despite the bad configuration")
					}
				} else {
					err = runBounded(t, nil, env, &stdout, &stderr, func(server.Addrs) { started = true })
				}
				if err == nil {
					t.Fatal("start-up succeeded, want an error")
				}
				if !strings.Contains(err.Error(), tt.wantVar) {
					t.Errorf("error does not name %s: %v", tt.wantVar, err)
				}
				if started {
					t.Error("the started callback was called: the listeners were bound")
				}
				if _, serr := os.Stat(dataDir); !errors.Is(serr, os.ErrNotExist) {
					t.Errorf("data directory %s was created (stat: %v); nothing should start", dataDir, serr)
				}
				if strings.Contains(stderr.String(), "fenceproxy started") {
					t.Errorf("logged a start:\n%s", stderr.String())
				}
			})
		}
	}
}

func TestBinaryHelp(t *testing.T) {
	code, stdout, stderr := runProcess(t, 30*time.Second, nil, "-h")
	if code != 0 {
		t.Fatalf("fenceproxy -h exit code %d, want 0\nstderr:\n%s", code, stderr)
	}
	for _, v := range configVariables(t) {
		if !strings.Contains(stdout, v) {
			t.Errorf("fenceproxy -h does not list %s:\n%s", v, stdout)
		}
	}
}

func TestBinaryUnknownCommand(t *testing.T) {
	code, _, stderr := runProcess(t, 30*time.Second, nil, "frobnicate")
	if code == 0 {
		t.Fatal("fenceproxy frobnicate exited 0, want non-zero")
	}
	if !strings.Contains(stderr, "frobnicate") {
		t.Errorf("stderr does not name the command:\n%s", stderr)
	}
}

func TestBinaryBadConfig(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		wantVar string
	}{
		{"UPSTREAM empty", map[string]string{"FENCEPROXY_UPSTREAM": ""}, "FENCEPROXY_UPSTREAM"},
		{"UPSTREAM unset", map[string]string{}, "FENCEPROXY_UPSTREAM"},
		{"DRAIN_TIMEOUT without unit", map[string]string{"FENCEPROXY_UPSTREAM": "http://127.0.0.1:1", "FENCEPROXY_DRAIN_TIMEOUT": "10"}, "FENCEPROXY_DRAIN_TIMEOUT"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dataDir := filepath.Join(t.TempDir(), "data")
			env := map[string]string{
				"FENCEPROXY_DATA_DIR":       dataDir,
				"FENCEPROXY_LISTEN":         "127.0.0.1:0",
				"FENCEPROXY_CONTROL_LISTEN": "127.0.0.1:0",
			}
			for k, v := range tt.env {
				env[k] = v
			}
			code, _, stderr := runProcess(t, 30*time.Second, env)
			if code == 0 {
				t.Fatalf("exit code 0, want non-zero\nstderr:\n%s", stderr)
			}
			if !strings.Contains(stderr, tt.wantVar) {
				t.Errorf("stderr does not name %s:\n%s", tt.wantVar, stderr)
			}
			if strings.Contains(stderr, "fenceproxy started") {
				t.Errorf("it started despite the bad configuration:\n%s", stderr)
			}
			if _, err := os.Stat(dataDir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("data directory was created (stat: %v)", err)
			}
		})
	}
}

// TestBinarySecondProcessSameDataDir: a second fenceproxy on a data directory
// in use exits at once, non-zero, saying so; the first keeps serving, stops
// cleanly on SIGTERM and releases the directory for a successor.
func TestBinarySecondProcessSameDataDir(t *testing.T) {
	dataDir := t.TempDir()
	backend := servertest.NewRecordingBackend(t)

	first := startProcess(t, serveEnv(backend.URL(), dataDir))
	first.waitServing(t)

	second := startProcess(t, serveEnv(backend.URL(), dataDir))
	code, err := second.wait(5 * time.Second)
	if err != nil {
		t.Fatalf("second process on the same DATA_DIR: %v (want it to exit at once)\nstderr:\n%s", err, second.Stderr)
	}
	if code == 0 {
		t.Errorf("second process exited 0, want non-zero\nstderr:\n%s", second.Stderr)
	}
	stderr := second.Stderr.String()
	if !strings.Contains(stderr, "in use") || !strings.Contains(stderr, dataDir) {
		t.Errorf("second process's message does not say that %s is in use:\n%s", dataDir, stderr)
	}
	if !strings.Contains(stderr, "FENCEPROXY_DATA_DIR") {
		t.Errorf("second process's message does not name FENCEPROXY_DATA_DIR:\n%s", stderr)
	}
	if strings.Contains(stderr, "fenceproxy started") {
		t.Errorf("second process logged a start:\n%s", stderr)
	}

	// The first one is unaffected: it still fences writes.
	client := servertest.NewClient(t)
	if st, _ := servertest.PutToken(t, client, "http://"+first.Proxy, "/bkt/obj", "7", "first-7"); st != http.StatusOK {
		t.Errorf("PUT through the first process: status %d, want 200", st)
	}

	// SIGTERM: clean exit 0, and the directory is free again.
	if err := first.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code, err := first.wait(15 * time.Second); err != nil || code != 0 {
		t.Fatalf("first process after SIGTERM: exit code %d, %v; want 0\nstderr:\n%s", code, err, first.Stderr)
	}
	if !strings.Contains(first.Stderr.String(), "fenceproxy stopped") {
		t.Errorf("first process did not log its stop:\n%s", first.Stderr)
	}
	third := startProcess(t, serveEnv(backend.URL(), dataDir))
	third.waitServing(t)
	if m := servertest.FenceMax(t, client, third.Control, "bkt/obj"); m != 7 {
		t.Errorf("fence of bkt/obj after restart = %d, want 7", m)
	}
}
