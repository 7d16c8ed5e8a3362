package server_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/client"
	"github.com/fenceproxy/fenceproxy/internal/servertest"
)

// client.Pool against a real server: a lone holder takes every shard; a
// second holder joins and the first hands back half within a few renew
// periods (contexts of the handed-back shards cancelled, never a shard
// held by both); the leaving holder's shards go to the one staying; a
// one-shot pool ends with every task done once.
func TestPoolClient(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) }))
	defer backend.Close()
	in := servertest.Start(t, map[string]string{"FENCEPROXY_UPSTREAM": backend.URL, "FENCEPROXY_DATA_DIR": t.TempDir(),
		"FENCEPROXY_LEASE_TOKEN": "lease", "FENCEPROXY_LEASE_MIN_TTL": "100ms", "FENCEPROXY_LOG_LEVEL": "warn"})
	leases := &client.Leases{BaseURL: in.ControlURL(), Bearer: "lease"}
	if _, err := (&client.Control{BaseURL: in.ControlURL()}).GetFence(context.Background(), "x/y"); err == nil {
		t.Fatal("unexpected fence")
	}
	define := func(name, body string) {
		req, _ := http.NewRequest(http.MethodPut, in.ControlURL()+"/v1/pools/"+name, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer lease")
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("define %s: %v %v", name, resp, err)
		}
		resp.Body.Close()
	}
	define("jobs", `{"shards":8}`)

	var mu sync.Mutex
	holding := map[string]string{} // shard -> holder running work on it
	counts := map[string]int{}
	var changed servertest.Signal // notified when counts change
	work := func(holder string) func(ctx context.Context, s client.Shard) error {
		return func(ctx context.Context, s client.Shard) error {
			mu.Lock()
			if h, ok := holding[s.Shard]; ok {
				t.Errorf("shard %s run by %s and %s", s.Shard, h, holder)
			}
			holding[s.Shard] = holder
			counts[holder]++
			mu.Unlock()
			changed.Notify()
			<-ctx.Done()
			mu.Lock()
			delete(holding, s.Shard)
			counts[holder]--
			mu.Unlock()
			changed.Notify()
			return ctx.Err()
		}
	}
	count := func(h string) int { mu.Lock(); defer mu.Unlock(); return counts[h] }
	waitFor := func(what string, d time.Duration, ok func() bool) time.Duration {
		t.Helper()
		start := time.Now()
		if !changed.Wait(d, ok) {
			t.Fatalf("%s: not within %s (w1 %d, w2 %d)", what, d, count("w1"), count("w2"))
		}
		return time.Since(start)
	}
	const ttl = time.Second
	ctx1, stop1 := context.WithCancel(context.Background())
	defer stop1()
	p1 := &client.Pool{Leases: leases, Name: "jobs", Holder: "w1", TTL: ttl}
	done1 := make(chan error, 1)
	go func() { done1 <- p1.Run(ctx1, work("w1")) }()
	waitFor("w1 takes all 8", 5*time.Second, func() bool { return count("w1") == 8 })

	ctx2, stop2 := context.WithCancel(context.Background())
	defer stop2()
	p2 := &client.Pool{Leases: leases, Name: "jobs", Holder: "w2", TTL: ttl}
	done2 := make(chan error, 1)
	go func() { done2 <- p2.Run(ctx2, work("w2")) }()
	took := waitFor("rebalanced 4/4", 5*ttl, func() bool { return count("w1") == 4 && count("w2") == 4 })
	t.Logf("rebalanced after a join in %s (TTL %s)", took.Round(time.Millisecond), ttl)
	if took > 2*ttl {
		t.Errorf("rebalance took %s, more than 2 TTLs: a planned handover must not wait for expiry", took)
	}

	stop1() // w1 leaves: releases its shards; w2 takes them up to the new share
	if err := <-done1; !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v, want context.Canceled", err)
	}
	took = waitFor("w2 takes all 8", 3*ttl, func() bool { return count("w2") == 8 })
	t.Logf("w2 took over a leaving holder's shards in %s", took.Round(time.Millisecond))
	stop2()
	<-done2

	// One-shot: 6 tasks over two holders, each done once.
	define("tasks", `{"names":["a","b","c","d","e","f"]}`)
	var dmu sync.Mutex
	doneBy := map[string]int{}
	task := func(ctx context.Context, s client.Shard) error {
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
		return nil
	}
	var wg sync.WaitGroup
	for _, h := range []string{"t1", "t2"} {
		p := &client.Pool{Leases: leases, Name: "tasks", Holder: h, TTL: ttl, OneShot: true, Events: func(ev client.PoolEvent) {
			if ev.Kind == "done" && ev.Err == nil {
				dmu.Lock()
				doneBy[ev.Shard.Shard]++
				dmu.Unlock()
			}
		}}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := p.Run(ctx, task); err != nil {
				t.Errorf("one-shot Run of %s: %v", h, err)
			}
		})
	}
	wg.Wait()
	if len(doneBy) != 6 {
		t.Errorf("done %v, want all 6 tasks", doneBy)
	}
	for s, n := range doneBy {
		if n != 1 {
			t.Errorf("task %s done %d times", s, n)
		}
	}
}
