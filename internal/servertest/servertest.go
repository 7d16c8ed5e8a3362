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
	mu      sync.Mutex
	buf     bytes.Buffer
	written chan struct{} // closed and replaced by each Write
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.written != nil {
		close(b.written)
		b.written = nil
	}
	return b.buf.Write(p)
}

// WaitFor waits until the buffer holds s, for at most d; it reports whether
// it does. Each Write wakes it: no polling.
func (b *Buffer) WaitFor(s string, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		b.mu.Lock()
		if bytes.Contains(b.buf.Bytes(), []byte(s)) {
			b.mu.Unlock()
			return true
		}
		if b.written == nil {
			b.written = make(chan struct{})
		}
		written := b.written
		b.mu.Unlock()
		select {
		case <-written:
		case <-timer.C:
			return b.Contains(s)
		}
	}
}

// Contains reports whether the buffer holds s.
func (b *Buffer) Contains(s string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Contains(b.buf.Bytes(), []byte(s))
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

// Eventually polls cond every 10 ms until it holds, failing the test with
// what after timeout. It is for state that signals no event a test can wait
// on (a server's answer over HTTP, another process's effect); say at the
// call why there is none.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Within(timeout, cond) {
		t.Fatalf("timed out after %v waiting until %s", timeout, what)
	}
}

// Within polls cond every 10 ms until it holds, for at most timeout, and
// reports whether it holds: Eventually for a caller that reports the
// failure itself.
func Within(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// Signal wakes those waiting on a condition that its owner changes: the
// owner calls Notify after each change, Wait re-checks the condition then.
// The zero Signal is ready for use.
type Signal struct {
	mu sync.Mutex
	ch chan struct{}
}

// Notify wakes every Wait so that it checks its condition again.
func (s *Signal) Notify() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
}

// Wait waits until cond holds, checking it at each Notify, for at most d; it
// reports whether cond holds.
func (s *Signal) Wait(d time.Duration, cond func() bool) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		s.mu.Lock()
		if s.ch == nil {
			s.ch = make(chan struct{})
		}
		ch := s.ch
		s.mu.Unlock()
		if cond() { // after taking ch: a Notify from now on is seen
			return true
		}
		select {
		case <-ch:
		case <-timer.C:
			return cond()
		}
	}
}
