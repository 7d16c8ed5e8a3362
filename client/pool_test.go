package client

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/wire"
)

// fakePoolServer is a control API with one pool: claims get the shards of
// grants in turn, then no_shard with all_done; releases and dones succeed.
type fakePoolServer struct {
	mu     sync.Mutex
	grants []string
	calls  []string
}

func (f *fakePoolServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, r.Method+" "+r.URL.Path)
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/claim"):
		if len(f.grants) == 0 {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusConflict)
			zero := 0
			_ = json.NewEncoder(w).Encode(wire.Problem{Status: 409, Title: "No shard to claim", Reason: wire.ReasonNoShard,
				Detail: "every shard of the pool is done", AllDone: true, Share: &zero, Held: &zero})
			return
		}
		sh := f.grants[0]
		f.grants = f.grants[1:]
		now := time.Now()
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(wire.Lease{Name: "p/" + sh, Holder: "w1", Token: 1, State: "held", TTL: "10s",
			AcquiredAt: now, RenewedAt: now, ExpiresAt: now.Add(10 * time.Second), Pool: "p", Shard: sh})
	case r.Method == http.MethodDelete:
		_ = json.NewEncoder(w).Encode(wire.Lease{Name: strings.TrimPrefix(r.URL.Path, "/v1/leases/"), Holder: "w1", Token: 1, State: "released", TTL: "10s"})
	case strings.HasSuffix(r.URL.Path, "/done"):
		_ = json.NewEncoder(w).Encode(wire.PoolShard{State: "done"})
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

func runPool(t *testing.T, f *fakePoolServer, work func(context.Context, Shard) error) []PoolEvent {
	t.Helper()
	srv := newControlStandIn(f)
	defer srv.Close()
	var mu sync.Mutex
	var events []PoolEvent
	p := &Pool{Leases: &Leases{BaseURL: srv.URL}, Name: "p", Holder: "w1", TTL: 10 * time.Second, OneShot: true,
		Events: func(ev PoolEvent) { mu.Lock(); events = append(events, ev); mu.Unlock() }}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.Run(ctx, work); err != nil {
		t.Fatalf("Run on a pool whose shards are all done: %v, want nil", err)
	}
	mu.Lock()
	defer mu.Unlock()
	return events
}

// One-shot: Run ends with nil once the server says every shard is done.
func TestPoolRunEndsWhenAllDone(t *testing.T) {
	runPool(t, &fakePoolServer{}, func(context.Context, Shard) error { return nil })
}

// A released shard's event carries the work function's error.
func TestPoolReleasedCarriesWorkError(t *testing.T) {
	boom := errors.New("boom")
	events := runPool(t, &fakePoolServer{grants: []string{"0"}}, func(context.Context, Shard) error { return boom })
	for _, ev := range events {
		if ev.Kind == "released" {
			if !errors.Is(ev.WorkErr, boom) || ev.Err != nil {
				t.Fatalf("released event: WorkErr %v, Err %v; want WorkErr boom", ev.WorkErr, ev.Err)
			}
			return
		}
	}
	t.Fatalf("no released event in %+v", events)
}
