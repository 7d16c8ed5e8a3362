// Package servertest starts a server.Server in-process for tests, and holds
// the backend, client calls and TLS files that the server's and the
// command's tests share.
package servertest

import (
	"bytes"
	"context"
	"log/slog"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/config"
	"github.com/fenceproxy/fenceproxy/server"
)

// Buffer collects a server's JSON log lines for assertions; it is safe for
// concurrent use.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Instance is a server.Server running in-process (Start).
type Instance struct {
	server.Addrs
	Logs *Buffer // its JSON log lines
	stop func() error
	once sync.Once
	err  error
}

// Stop stops the instance as SIGTERM stops the command (its Run's context
// ends) and returns Run's error; later calls return the same.
func (in *Instance) Stop() error {
	in.once.Do(func() { in.err = in.stop() })
	return in.err
}

// ProxyURL and ControlURL are the instance's base URLs (http://host:port).
func (in *Instance) ProxyURL() string   { return "http://" + in.Proxy }
func (in *Instance) ControlURL() string { return "http://" + in.Control }

// Env returns base with overlay applied: a value in overlay replaces base's,
// and an empty one removes the variable (to test its default).
func Env(base, overlay map[string]string) map[string]string {
	env := maps.Clone(base)
	for k, v := range overlay {
		if v == "" {
			delete(env, k)
		} else {
			env[k] = v
		}
	}
	return env
}

// Start runs a server.Server in-process, configured by env (FENCEPROXY_*
// names to values, read with config.Parse as the command reads its
// environment) and logging JSON lines at its LOG_LEVEL to Instance.Logs. The
// listeners are on loopback ports chosen by the kernel and SHUTDOWN_TIMEOUT
// is 5s, unless env sets them. It fails the test if the configuration is bad
// or the server does not start; cleanup stops it, failing the test if Run
// has not returned 30s after.
func Start(t testing.TB, env map[string]string) *Instance {
	t.Helper()
	env = maps.Clone(env)
	for name, value := range map[string]string{
		"FENCEPROXY_LISTEN":           "127.0.0.1:0",
		"FENCEPROXY_CONTROL_LISTEN":   "127.0.0.1:0",
		"FENCEPROXY_SHUTDOWN_TIMEOUT": "5s",
	} {
		if _, ok := env[name]; !ok {
			env[name] = value
		}
	}
	in := &Instance{Logs: &Buffer{}}
	cfg, warnings, err := config.Parse(env)
	if err != nil {
		t.Fatalf("fenceproxy configuration: %v", err)
	}
	log := slog.New(slog.NewJSONHandler(in.Logs, &slog.HandlerOptions{Level: cfg.LogLevel}))
	for _, w := range warnings {
		log.Warn(w)
	}
	srv, err := server.New(cfg, server.Options{Logger: log})
	if err != nil {
		t.Fatalf("fenceproxy did not start: %v\nlogs:\n%s", err, in.Logs)
	}
	in.Addrs = srv.Addrs()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	in.stop = func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			t.Errorf("fenceproxy did not stop within 30s")
			return nil
		}
	}
	t.Cleanup(func() { in.Stop() })
	return in
}
