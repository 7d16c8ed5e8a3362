package main

import (
	"bytes"
	"context"
	"maps"
	"sync"
	"testing"
	"time"
)

// syncBuffer collects a server's JSON log lines for assertions.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// instance is a fenceproxy started in-process with run.
type instance struct {
	addrs
	Logs *syncBuffer
	stop func() error
	once sync.Once
	err  error
}

// Stop shuts the instance down (as SIGTERM would) and returns run's error.
func (in *instance) Stop() error {
	in.once.Do(func() { in.err = in.stop() })
	return in.err
}

// startFenceproxy runs `fenceproxy serve` in-process with env (FENCEPROXY_*
// names to values) on loopback ports chosen by the kernel, unless env sets
// them. It fails the test if start-up fails; cleanup stops it.
func startFenceproxy(t testing.TB, env map[string]string) *instance {
	t.Helper()
	env = maps.Clone(env)
	if _, ok := env["FENCEPROXY_LISTEN"]; !ok {
		env["FENCEPROXY_LISTEN"] = "127.0.0.1:0"
	}
	if _, ok := env["FENCEPROXY_CONTROL_LISTEN"]; !ok {
		env["FENCEPROXY_CONTROL_LISTEN"] = "127.0.0.1:0"
	}
	if _, ok := env["FENCEPROXY_SHUTDOWN_TIMEOUT"]; !ok {
		env["FENCEPROXY_SHUTDOWN_TIMEOUT"] = "5s"
	}
	ctx, cancel := context.WithCancel(context.Background())
	in := &instance{Logs: &syncBuffer{}}
	ready := make(chan addrs, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, nil, env, in.Logs, in.Logs, func(a addrs) { ready <- a })
	}()
	select {
	case a := <-ready:
		in.addrs = a
	case err := <-done:
		cancel()
		t.Fatalf("fenceproxy did not start: %v\nlogs:\n%s", err, in.Logs)
	case <-time.After(20 * time.Second):
		cancel()
		t.Fatalf("fenceproxy did not start within 20s\nlogs:\n%s", in.Logs)
	}
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

// proxyURL and controlURL are the instance's base URLs.
func (in *instance) proxyURL() string   { return "http://" + in.Proxy }
func (in *instance) controlURL() string { return "http://" + in.Control }
