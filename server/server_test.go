package server_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/config"
	"github.com/fenceproxy/fenceproxy/internal/servertest"
	"github.com/fenceproxy/fenceproxy/server"
)

// newConfig is the default configuration on loopback ports chosen by the
// kernel, in front of upstream, with its store in dataDir.
func newConfig(t *testing.T, upstream, dataDir string) config.Config {
	t.Helper()
	cfg := config.Default()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Upstream, cfg.DataDir = u, dataDir
	cfg.Listen, cfg.ControlListen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.ShutdownTimeout = 5 * time.Second
	return cfg
}

// newServer builds a server logging to logs; cleanup closes it.
func newServer(t *testing.T, cfg config.Config, logs *servertest.Buffer) *server.Server {
	t.Helper()
	srv, err := server.New(cfg, server.Options{Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	if err != nil {
		t.Fatalf("server.New: %v\nlogs:\n%s", err, logs)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

// A Config built in code is validated as the environment is: every bad
// field is named by its variable, and nothing is bound or created.
func TestNewValidates(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "data")
	cfg := config.Default()
	cfg.DrainTimeout = 0
	cfg.Mode = "loud"
	_, err := server.New(cfg, server.Options{Logger: slog.New(slog.DiscardHandler)})
	if err == nil {
		t.Fatal("server.New with a bad Config = nil error")
	}
	for _, name := range []string{"FENCEPROXY_UPSTREAM", "FENCEPROXY_DATA_DIR", "FENCEPROXY_DRAIN_TIMEOUT", "FENCEPROXY_MODE"} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("error does not name %s:\n%v", name, err)
		}
	}
	cfg = newConfig(t, "http://127.0.0.1:1", dataDir)
	cfg.Mode = "loud"
	if _, err := server.New(cfg, server.Options{Logger: slog.New(slog.DiscardHandler)}); err == nil || !strings.Contains(err.Error(), "FENCEPROXY_MODE") {
		t.Errorf("server.New with a bad mode = %v, want an error naming FENCEPROXY_MODE", err)
	}
	if _, err := os.Stat(dataDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("data directory created by a server.New that failed (stat: %v)", err)
	}
}

// A port clash fails New naming the listener's variable, before the store
// directory is created.
func TestNewPortClashLeavesNoDataDir(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for _, variable := range []string{"FENCEPROXY_LISTEN", "FENCEPROXY_CONTROL_LISTEN"} {
		dataDir := filepath.Join(t.TempDir(), "data")
		cfg := newConfig(t, "http://127.0.0.1:1", dataDir)
		if variable == "FENCEPROXY_LISTEN" {
			cfg.Listen = taken.Addr().String()
		} else {
			cfg.ControlListen = taken.Addr().String()
		}
		_, err := server.New(cfg, server.Options{Logger: slog.New(slog.DiscardHandler)})
		if err == nil || !strings.Contains(err.Error(), variable) {
			t.Errorf("%s on a port in use: server.New = %v, want an error naming it", variable, err)
		}
		if _, err := os.Stat(dataDir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s on a port in use: data directory created (stat: %v)", variable, err)
		}
	}
}

// New binds both listeners (connections queue until Run serves); Close
// without Run stops an idle server cleanly and frees its ports and its data
// directory; a second Close returns the first one's result; Run after Close
// returns ErrClosed.
func TestCloseWithoutRun(t *testing.T) {
	dataDir := t.TempDir()
	logs := &servertest.Buffer{}
	cfg := newConfig(t, "http://127.0.0.1:1", dataDir)
	srv := newServer(t, cfg, logs)
	addrs := srv.Addrs()
	for _, a := range []string{addrs.Proxy, addrs.Control} {
		if _, port, err := net.SplitHostPort(a); err != nil || port == "0" {
			t.Fatalf("Addrs() = %+v: want bound host:port addresses", addrs)
		}
		c, err := net.Dial("tcp", a)
		if err != nil {
			t.Fatalf("%s is not listening before Run: %v", a, err)
		}
		c.Close()
	}
	if !strings.Contains(logs.String(), `"msg":"fenceproxy started"`) {
		t.Errorf("New did not log its start:\n%s", logs)
	}
	if err := srv.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
	if err := srv.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	if n := strings.Count(logs.String(), `"msg":"fenceproxy stopped"`); n != 1 {
		t.Errorf("%d stop lines after two Closes, want 1:\n%s", n, logs)
	}
	if !strings.Contains(logs.String(), `"clean_stop":true`) {
		t.Errorf("an idle server's Close did not stop cleanly:\n%s", logs)
	}
	if _, err := os.Stat(filepath.Join(dataDir, "CLEAN_STOP")); err != nil {
		t.Errorf("no clean-stop mark after an idle Close: %v", err)
	}
	if err := srv.Run(context.Background()); !errors.Is(err, server.ErrClosed) {
		t.Errorf("Run after Close = %v, want ErrClosed", err)
	}
	// The ports and the directory are free again.
	cfg.Listen, cfg.ControlListen = addrs.Proxy, addrs.Control
	again := newServer(t, cfg, &servertest.Buffer{})
	if err := again.Close(); err != nil {
		t.Fatal(err)
	}
}

// Close while Run serves stops it at once: Run returns nil. A request still
// running when Close comes is cut off, and the stop is not clean.
func TestCloseWhileRunning(t *testing.T) {
	backend := newHeldBackend(t)
	dataDir := t.TempDir()
	logs := &servertest.Buffer{}
	srv := newServer(t, newConfig(t, backend.srv.URL, dataDir), logs)
	done := make(chan error, 1)
	go func() { done <- srv.Run(context.Background()) }()
	proxyURL := "http://" + srv.Addrs().Proxy
	client := servertest.NewClient(t)
	go servertest.DoPut(client, proxyURL, "/bkt/obj", "5", "held")
	select {
	case <-backend.arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the write did not reach the backend")
	}
	if err := srv.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run after Close = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after Close")
	}
	backend.Release()
	if strings.Contains(logs.String(), `"clean_stop":true`) {
		t.Errorf("a Close that cut off a running write stopped cleanly:\n%s", logs)
	}
	if _, err := os.Stat(filepath.Join(dataDir, "CLEAN_STOP")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("clean-stop mark after a Close that cut off a write: %v", err)
	}
	if err := srv.Run(context.Background()); !errors.Is(err, server.ErrClosed) {
		t.Errorf("Run after Close = %v, want ErrClosed", err)
	}
}

// Run stops gracefully when its context ends and returns nil; a second Run
// is refused.
func TestRunStopsOnContext(t *testing.T) {
	backend := servertest.NewRecordingBackend(t)
	logs := &servertest.Buffer{}
	srv := newServer(t, newConfig(t, backend.URL(), t.TempDir()), logs)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	client := servertest.NewClient(t)
	if st, _ := servertest.PutToken(t, client, "http://"+srv.Addrs().Proxy, "/bkt/obj", "1", "a"); st != http.StatusOK {
		t.Fatalf("write: %d", st)
	}
	if err := srv.Run(ctx); err == nil {
		t.Error("a second Run while the first serves = nil, want an error")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if !strings.Contains(logs.String(), `"clean_stop":true`) {
		t.Errorf("an idle graceful stop was not clean:\n%s", logs)
	}
}
