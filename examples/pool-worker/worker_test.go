package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/client"
)

// A write the proxy refuses with anything but 409 is logged, not only
// returned; a released shard's work error shows in its event's line.
func TestWriteFailuresLogged(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "NoSuchBucket", http.StatusNotFound)
	}))
	defer srv.Close()
	var buf bytes.Buffer
	w := &worker{proxy: srv.URL, holder: "w1", log: slog.New(slog.NewJSONHandler(&buf, nil))}
	s := client.Shard{Pool: "jobs", Shard: "2", Lease: client.Lease{Name: "jobs/2", Token: 1}}
	if err := w.write(context.Background(), s, "1", "x"); err == nil {
		t.Fatal("a 404 write succeeded")
	}
	if out := buf.String(); !strings.Contains(out, `"msg":"write failed"`) || !strings.Contains(out, `"status":404`) {
		t.Errorf("log after a 404 write: %s", out)
	}
	buf.Reset()
	w.event(client.PoolEvent{Kind: "released", Shard: s, WorkErr: errors.New("write: status 404")})
	if out := buf.String(); !strings.Contains(out, `"work_error":"write: status 404"`) {
		t.Errorf("released event's log: %s", out)
	}
}

// A shard whose lease name is a prefix (a pool with a prefix) is written
// below it, a new key each write ({lease name}<seq>; one-shot: start and
// result); a "{pool}/{shard}" lease is written at its name.
func TestWorkerWritesBelowPrefix(t *testing.T) {
	var mu sync.Mutex
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.Method+" "+r.URL.Path+" "+r.Header.Get(client.DefaultHeader))
		mu.Unlock()
	}))
	defer srv.Close()
	w := &worker{proxy: srv.URL, holder: "w1", interval: time.Millisecond, log: slog.New(slog.NewJSONHandler(&bytes.Buffer{}, nil))}
	got := func() []string { mu.Lock(); defer mu.Unlock(); out := slices.Clone(paths); paths = nil; return out }

	pre := client.Shard{Pool: "daily", Shard: "3", Lease: client.Lease{Name: "reports/daily/3/", Token: 7}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.continuous(ctx, pre) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := len(paths)
		mu.Unlock()
		if n >= 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	ps := got()
	if len(ps) < 3 {
		t.Fatalf("writes: %q, want at least 3", ps)
	}
	for i, p := range ps[:3] {
		if want := fmt.Sprintf("PUT /reports/daily/3/w1-7-%d 7", i+1); p != want { // holder, token, seq: never a key twice
			t.Errorf("write %d: %q, want %q", i+1, p, want)
		}
	}
	if err := w.task(context.Background(), pre); err != nil {
		t.Fatal(err)
	}
	if ps := got(); !slices.Equal(ps, []string{"PUT /reports/daily/3/start 7", "PUT /reports/daily/3/result 7"}) {
		t.Errorf("one-shot task's writes: %q", ps)
	}
	plain := client.Shard{Pool: "jobs", Shard: "2", Lease: client.Lease{Name: "jobs/2", Token: 4}}
	if err := w.task(context.Background(), plain); err != nil {
		t.Fatal(err)
	}
	if ps := got(); !slices.Equal(ps, []string{"PUT /jobs/2 4", "PUT /jobs/2 4"}) {
		t.Errorf("writes to a {pool}/{shard} lease: %q", ps)
	}
}

// A write the proxy admits is logged with its key, token and status.
func TestWritesLogged(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	var buf bytes.Buffer
	w := &worker{proxy: srv.URL, holder: "w1", log: slog.New(slog.NewJSONHandler(&buf, nil))}
	s := client.Shard{Pool: "jobs", Shard: "2", Lease: client.Lease{Name: "reports/2/", Token: 9}}
	if err := w.write(context.Background(), s, "1", "x"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"msg":"wrote"`, `"key":"reports/2/1"`, `"token":9`, `"status":200`} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("log after an admitted write lacks %s: %s", want, buf.String())
		}
	}
}
