package proxy

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/tokenstore"
)

// applyLog is a backend that applies each write after a random delay and
// records, per resource, the tokens in the order their whole request reached
// it and in the order it applied them.
type applyLog struct {
	mu        sync.Mutex
	forwarded map[string][]uint64
	applied   map[string][]uint64
	hold      map[uint64]chan struct{} // writes with these tokens wait before applying
	arrivals  chan uint64
	maxDelay  time.Duration

	incomplete int // requests whose body did not arrive whole (not applied)
}

func newApplyLog(maxDelay time.Duration) *applyLog {
	return &applyLog{forwarded: map[string][]uint64{}, applied: map[string][]uint64{},
		hold: map[uint64]chan struct{}{}, arrivals: make(chan uint64, 16), maxDelay: maxDelay}
}

func (l *applyLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	t, err := strconv.ParseUint(r.Header.Get("X-Fencing-Token"), 10, 64)
	if err != nil {
		http.Error(w, "backend got no token", 500)
		return
	}
	key := strings.TrimPrefix(r.URL.Path, "/")
	if _, err := io.Copy(io.Discard, r.Body); err != nil {
		// Like any real backend, never apply a body that did not arrive whole
		// (the proxy cuts off stale uploads before their end).
		l.mu.Lock()
		l.incomplete++
		l.mu.Unlock()
		http.Error(w, "incomplete body", http.StatusBadRequest)
		return
	}
	l.mu.Lock()
	l.forwarded[key] = append(l.forwarded[key], t)
	gate := l.hold[t]
	l.mu.Unlock()
	select {
	case l.arrivals <- t:
	default:
	}
	if gate != nil {
		<-gate
	}
	if l.maxDelay > 0 {
		time.Sleep(rand.N(l.maxDelay))
	}
	l.mu.Lock()
	l.applied[key] = append(l.applied[key], t)
	l.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// violations counts, per resource, places where a sequence decreases.
func violations(seqs map[string][]uint64) (n int, first string) {
	for key, seq := range seqs {
		for i := 1; i < len(seq); i++ {
			if seq[i] < seq[i-1] {
				if n == 0 {
					first = fmt.Sprintf("%s: %d after %d (at %d of %d)", key, seq[i], seq[i-1], i, len(seq))
				}
				n++
			}
		}
	}
	return n, first
}

func (l *applyLog) check(t *testing.T) (applied int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if n, first := violations(l.forwarded); n > 0 {
		t.Errorf("%d forwarded writes below an earlier forwarded token; first: %s", n, first)
	}
	if n, first := violations(l.applied); n > 0 {
		t.Errorf("%d applied writes below an earlier applied token; first: %s", n, first)
	}
	for _, seq := range l.applied {
		applied += len(seq)
	}
	return applied
}

// The first background document's timeline: A gets 41 and stalls, B takes
// over with 42, A's late write is refused; the backend never applies 41 after 42.
func TestStalledWorkerTimeline(t *testing.T) {
	t.Run("A stalls while its write is in flight", func(t *testing.T) {
		log := newApplyLog(0)
		gate := make(chan struct{})
		log.hold[41] = gate
		backend := httptest.NewServer(log)
		defer backend.Close()
		srv := newTestProxy(t, newMemStore(), backend.URL, nil)

		a := putAsync(srv.URL, "/bkt/report", "41", "A")
		if got := <-log.arrivals; got != 41 {
			t.Fatalf("arrived %d", got)
		}
		b := putAsync(srv.URL, "/bkt/report", "42", "B")
		time.Sleep(100 * time.Millisecond) // B waits for A's write to finish upstream
		if got := log.check(t); got != 0 {
			t.Fatalf("%d writes applied while A is held", got)
		}
		close(gate)
		if r := recv(t, a); r.status != 204 {
			t.Fatalf("A(41): %d", r.status)
		}
		if r := recv(t, b); r.status != 204 {
			t.Fatalf("B(42): %d", r.status)
		}
		if r := put(context.Background(), srv.URL, "/bkt/report", "41", "A-late"); r.status != 409 {
			t.Fatalf("A's late write: %d, want 409", r.status)
		}
		log.check(t)
		if got := fmt.Sprint(log.applied["bkt/report"]); got != "[41 42]" {
			t.Fatalf("applied %s, want [41 42]", got)
		}
	})
	t.Run("A stalls before writing", func(t *testing.T) {
		log := newApplyLog(0)
		backend := httptest.NewServer(log)
		defer backend.Close()
		srv := newTestProxy(t, newMemStore(), backend.URL, nil)
		if r := put(context.Background(), srv.URL, "/bkt/report", "41", "A"); r.status != 204 {
			t.Fatalf("A(41): %d", r.status)
		}
		if r := put(context.Background(), srv.URL, "/bkt/report", "42", "B"); r.status != 204 {
			t.Fatalf("B(42): %d", r.status)
		}
		r := put(context.Background(), srv.URL, "/bkt/report", "41", "A-late")
		if r.status != 409 || r.header.Get(HeaderCurrentToken) != "42" {
			t.Fatalf("A's late write: %d %v", r.status, r.header)
		}
		if got := fmt.Sprint(log.applied["bkt/report"]); got != "[41 42]" {
			t.Fatalf("applied %s, want [41 42]", got)
		}
	})
}

// Workers with random pauses take resources over with rising tokens while old
// holders keep writing. Per resource, the backend must see and apply tokens in
// non-decreasing order, and every refusal must name a larger current token.
func TestRandomizedTakeovers(t *testing.T) {
	stores := map[string]func(t *testing.T) Store{
		"memstore": func(t *testing.T) Store { return newMemStore() },
		"tokenstore": func(t *testing.T) Store {
			s, err := tokenstore.Open(t.TempDir(), tokenstore.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			const (
				workers   = 12
				perWorker = 450 // 5,400 requests
				resources = 4
			)
			log := newApplyLog(300 * time.Microsecond)
			backend := httptest.NewServer(log)
			defer backend.Close()
			store := open(t)
			srv := newTestProxy(t, store, backend.URL, nil)
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers}}

			var coordinator [resources]atomic.Uint64 // the lease service: last token granted per resource
			var ok, stale, other, takeovers atomic.Int64
			var wg sync.WaitGroup
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(w), 7))
					var held [resources]uint64 // the token this worker believes it holds
					for range perWorker {
						res := rng.IntN(resources)
						if held[res] == 0 || rng.IntN(10) == 0 {
							held[res] = coordinator[res].Add(1) // takeover
							takeovers.Add(1)
						}
						if rng.IntN(20) == 0 {
							time.Sleep(time.Duration(rng.Int64N(int64(2 * time.Millisecond)))) // a stall between grant and write
						}
						req, _ := http.NewRequest(http.MethodPut, fmt.Sprintf("%s/r%d/obj", srv.URL, res), strings.NewReader("data"))
						req.Header.Set("X-Fencing-Token", strconv.FormatUint(held[res], 10))
						resp, err := client.Do(req)
						if err != nil {
							t.Errorf("request: %v", err)
							return
						}
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						switch resp.StatusCode {
						case http.StatusNoContent:
							ok.Add(1)
						case http.StatusConflict:
							stale.Add(1)
							cur, _ := strconv.ParseUint(resp.Header.Get(HeaderCurrentToken), 10, 64)
							if cur <= held[res] {
								t.Errorf("409 for token %d with current %d", held[res], cur)
							}
							if rng.IntN(2) == 0 {
								held[res] = 0 // fenced out: go back to the coordinator
							}
						default:
							other.Add(1)
							t.Errorf("unexpected status %d", resp.StatusCode)
						}
					}
				}()
			}
			wg.Wait()
			applied := log.check(t)
			total := ok.Load() + stale.Load() + other.Load()
			log.mu.Lock()
			incomplete := log.incomplete
			log.mu.Unlock()
			t.Logf("%d requests: %d admitted, %d stale (%d of them cut off mid-upload), %d other; %d takeovers; %d applied",
				total, ok.Load(), stale.Load(), incomplete, other.Load(), takeovers.Load(), applied)
			if total != workers*perWorker || int64(applied) != ok.Load() {
				t.Fatalf("requests %d, applied %d, admitted %d", total, applied, ok.Load())
			}
			if stale.Load() == 0 || ok.Load() == 0 {
				t.Fatalf("the run exercised nothing: %d admitted, %d stale", ok.Load(), stale.Load())
			}
			for res := range resources {
				m, err := store.Max(fmt.Sprintf("r%d/obj", res))
				if err != nil {
					t.Fatal(err)
				}
				seq := log.applied[fmt.Sprintf("r%d/obj", res)]
				if len(seq) > 0 && seq[len(seq)-1] != m {
					t.Errorf("r%d: last applied %d, stored max %d", res, seq[len(seq)-1], m)
				}
			}
		})
	}
}

// A client that hangs up after its whole write was forwarded must not open
// the barrier early: the backend may still be applying it.
func TestClientHangUpKeepsBarrier(t *testing.T) {
	log := newApplyLog(0)
	gate := make(chan struct{})
	log.hold[5] = gate
	backend := httptest.NewServer(log)
	defer backend.Close()
	var once sync.Once
	open := func() { once.Do(func() { close(gate) }) }
	defer open() // before backend.Close, also when the test fails early
	srv := newTestProxy(t, newMemStore(), backend.URL, nil)

	ctx, cancel := context.WithCancel(context.Background())
	a := make(chan result, 1)
	go func() { a <- put(ctx, srv.URL, "/bkt/obj", "5", "A") }()
	if got := <-log.arrivals; got != 5 {
		t.Fatalf("arrived %d", got)
	}
	cancel() // A's client dies while the backend applies its write
	if r := <-a; r.err == nil {
		t.Fatalf("A got %d after cancelling", r.status)
	}
	b := putAsync(srv.URL, "/bkt/obj", "6", "B")
	time.Sleep(200 * time.Millisecond)
	if got := fmt.Sprint(log.forwarded["bkt/obj"]); got != "[5]" {
		t.Fatalf("forwarded %s while A's write is still being applied, want [5]", got)
	}
	open()
	if r := recv(t, b); r.status != 204 {
		t.Fatalf("B: %d", r.status)
	}
	log.check(t)
	if got := fmt.Sprint(log.applied["bkt/obj"]); got != "[5 6]" {
		t.Fatalf("applied %s, want [5 6]", got)
	}
}
