package proxy

import (
	"bytes"
	"context"
	"errors"
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

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fenceproxy/fenceproxy/fence"
	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/store/badger"
	"github.com/fenceproxy/fenceproxy/wire"
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
	raises     map[string][]raiseMark
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
		time.Sleep(rand.N(l.maxDelay)) // paces the load: a backend of random speed
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
		time.Sleep(100 * time.Millisecond) // asserting nothing happens: B waits for A's write to finish upstream
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
		if r.status != 409 || r.header.Get(wire.HeaderCurrentToken) != "42" {
			t.Fatalf("A's late write: %d %v", r.status, r.header)
		}
		if got := fmt.Sprint(log.applied["bkt/report"]); got != "[41 42]" {
			t.Fatalf("applied %s, want [41 42]", got)
		}
	})
}

// raiseMark is a raise (a lease acquire's or an operator's) that returned
// with maximum m when the resource's applied sequence had at entries.
type raiseMark struct {
	m  uint64
	at int
}

// markRaise records that a raise to m on key returned.
func (l *applyLog) markRaise(key string, m uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.raises == nil {
		l.raises = map[string][]raiseMark{}
	}
	l.raises[key] = append(l.raises[key], raiseMark{m: m, at: len(l.applied[key])})
}

// appliedAfterRaise counts writes applied below a raise's maximum after that
// raise returned.
func (l *applyLog) appliedAfterRaise() (n int, first string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for key, marks := range l.raises {
		seq := l.applied[key]
		for _, mk := range marks {
			for _, tok := range seq[mk.at:] {
				if tok < mk.m {
					if n == 0 {
						first = fmt.Sprintf("%s: %d applied after a raise to %d returned", key, tok, mk.m)
					}
					n++
				}
			}
		}
	}
	return n, first
}

// stallingBody sends half its bytes, pauses, then the rest: a worker paused
// mid-upload. Without a Len method, net/http sends it chunked.
type stallingBody struct {
	data  []byte
	pause time.Duration
	sent  int
}

func (b *stallingBody) Read(p []byte) (int, error) {
	if b.sent == len(b.data) {
		return 0, io.EOF
	}
	half := len(b.data) / 2
	if b.sent == half && b.pause > 0 {
		time.Sleep(b.pause) // paces the body: a pause in its middle
		b.pause = 0
	}
	end := len(b.data)
	if b.sent < half {
		end = half
	}
	n := copy(p, b.data[b.sent:end])
	b.sent += n
	return n, nil
}

// Workers with random pauses take resources over with rising tokens while old
// holders keep writing and uploading, some of them stalling mid-upload. A
// takeover is a write with a larger token, an operator's raise through the
// barrier, or (over Badger) a lease acquire. Per resource, the backend must see
// and apply tokens in non-decreasing order, no write below a raise may be
// applied after that raise returned, and every refusal must name a larger
// current token.
func TestRandomizedTakeovers(t *testing.T) {
	type storeKind struct {
		open   func(t *testing.T) fence.Store
		leases bool
		bypass bool // lease and operator raises beside the barrier: the protection off
	}
	openBadger := func(t *testing.T) fence.Store {
		s, err := badger.Open(t.TempDir(), badger.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	stores := map[string]storeKind{
		"mem":                       {open: func(t *testing.T) fence.Store { return newMemStore() }},
		"badger":                    {leases: true, open: openBadger},
		"badger beside the barrier": {leases: true, open: openBadger, bypass: true},
	}
	for name, kind := range stores {
		t.Run(name, func(t *testing.T) {
			const (
				workers   = 12
				perWorker = 450 // 5,400 requests
				resources = 4
			)
			log := newApplyLog(300 * time.Microsecond)
			backend := httptest.NewServer(log)
			defer backend.Close()
			store := kind.open(t)
			metrics := NewMetrics(prometheus.NewRegistry())
			opts := testOptions(t, backend.URL)
			opts.Metrics = metrics
			p, b := newProxy(t, store, opts, fence.Options{DrainTimeout: 10 * time.Second, ObserveRaise: metrics.ObserveRaise})
			srv := httptest.NewServer(p)
			defer srv.Close()
			var raise takeoverRaiser = b
			if kind.bypass {
				raise = storeRaiser{store}
			}
			var leases *lease.Manager
			if kind.leases {
				leases = lease.NewManager(store.(lease.Store), raise, lease.Options{MinTTL: time.Millisecond})
			}
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers}}

			var coordinator [resources]atomic.Uint64 // the external coordinator: last token granted per resource
			var ok, stale, other, broken atomic.Int64
			var byWrite, byAdmin, byLease, stalls atomic.Int64
			var wg sync.WaitGroup
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(w), 7))
					var held [resources]uint64 // the token this worker believes it holds
					for range perWorker {
						res := rng.IntN(resources)
						key := fmt.Sprintf("r%d/obj", res)
						if held[res] == 0 || rng.IntN(10) == 0 {
							held[res] = takeOver(t, rng, raise, leases, key, w, &coordinator[res], log, &byWrite, &byAdmin, &byLease)
						}
						if rng.IntN(20) == 0 {
							time.Sleep(time.Duration(rng.Int64N(int64(2 * time.Millisecond)))) // paces the load: a stall between grant and write
						}
						var body io.Reader
						size := []int{4, 2 << 10, 80 << 10}[rng.IntN(3)] // the fast path, and streamed
						data := []byte(strings.Repeat("d", size))
						if rng.IntN(5) == 0 {
							stalls.Add(1)
							body = &stallingBody{data: data, pause: time.Duration(rng.Int64N(int64(3 * time.Millisecond)))}
						} else {
							body = bytes.NewReader(data)
						}
						req, _ := http.NewRequest(http.MethodPut, srv.URL+"/"+key, body)
						req.Header.Set("X-Fencing-Token", strconv.FormatUint(held[res], 10))
						resp, err := client.Do(req)
						if err != nil {
							// A cut-off upload is answered 409 and the connection
							// closed while the client may still be sending: net/http's
							// client then reports the broken connection instead.
							broken.Add(1)
							held[res] = 0
							continue
						}
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						switch resp.StatusCode {
						case http.StatusNoContent:
							ok.Add(1)
						case http.StatusConflict:
							stale.Add(1)
							cur, _ := strconv.ParseUint(resp.Header.Get(wire.HeaderCurrentToken), 10, 64)
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
			if kind.bypass {
				n, first := log.appliedAfterRaise()
				if n == 0 {
					t.Fatal("with raises beside the barrier, no write was applied below a raise after it returned: the test has no teeth")
				}
				t.Logf("beside the barrier: %d writes applied below a raise after it returned; first: %s", n, first)
				return
			}
			applied := log.check(t)
			if n, first := log.appliedAfterRaise(); n > 0 {
				t.Errorf("%d writes applied below a raise after it returned; first: %s", n, first)
			}
			total := ok.Load() + stale.Load() + other.Load() + broken.Load()
			cuts := int64(testutil.ToFloat64(metrics.UpstreamErrors.WithLabelValues("upload_cut")))
			if broken.Load() > cuts {
				t.Errorf("%d requests failed at the client, more than the %d uploads the proxy cut off", broken.Load(), cuts)
			}
			log.mu.Lock()
			incomplete := log.incomplete
			log.mu.Unlock()
			t.Logf("%d requests (%d stalling mid-upload): %d admitted, %d stale, %d cut off mid-upload (%d of them after reaching the backend; "+
				"%d seen by the client as a closed connection), %d other; takeovers: %d by a write, %d by an operator's raise, %d by a lease acquire; %d applied",
				total, stalls.Load(), ok.Load(), stale.Load(), cuts, incomplete, broken.Load(), other.Load(), byWrite.Load(), byAdmin.Load(), byLease.Load(), applied)
			if total != workers*perWorker || int64(applied) != ok.Load() {
				t.Fatalf("requests %d, applied %d, admitted %d", total, applied, ok.Load())
			}
			if stale.Load() == 0 || ok.Load() == 0 || byAdmin.Load() == 0 || (kind.leases && byLease.Load() == 0) {
				t.Fatalf("the run exercised too little: %d admitted, %d stale, %d admin and %d lease takeovers",
					ok.Load(), stale.Load(), byAdmin.Load(), byLease.Load())
			}
			for res := range resources {
				m, err := store.Max(fmt.Sprintf("r%d/obj", res))
				if err != nil {
					t.Fatal(err)
				}
				seq := log.applied[fmt.Sprintf("r%d/obj", res)]
				if len(seq) > 0 && seq[len(seq)-1] > m {
					t.Errorf("r%d: last applied %d, above the stored max %d", res, seq[len(seq)-1], m)
				}
			}
		})
	}
}

// takeOver gets worker w a new token for key: from the coordinator (its first
// write raises), from the coordinator and then raised by an operator through
// the barrier, or from a lease (leases non-nil). Raises that return are marked
// in log.
// leaseTTL is short, so that leases change hands often in the randomized test.
const leaseTTL = 5 * time.Millisecond

// takeoverRaiser raises a fence beside writes: the barrier (*Fence), or
// storeRaiser.
type takeoverRaiser interface {
	lease.Barrier
	Raise(ctx context.Context, resource string, t uint64) (uint64, error)
}

// storeRaiser raises in the store, beside the barrier: nothing is cut off
// or drained. The protection switched off.
type storeRaiser struct{ store fence.Store }

func (s storeRaiser) RaiseWith(_ context.Context, resource string, raise func() error) (uint64, error) {
	if err := raise(); err != nil {
		return 0, err
	}
	return s.store.Max(resource)
}

func (s storeRaiser) Raise(_ context.Context, resource string, t uint64) (uint64, error) {
	return s.store.Raise(resource, t)
}

func takeOver(t *testing.T, rng *rand.Rand, raiser takeoverRaiser, leases *lease.Manager, key string, w int, coordinator *atomic.Uint64,
	log *applyLog, byWrite, byAdmin, byLease *atomic.Int64) uint64 {
	switch rng.IntN(3) {
	case 1:
		tok := coordinator.Add(1)
		m, err := raiser.Raise(context.Background(), key, tok)
		if err != nil {
			t.Errorf("operator's raise of %s to %d: %v", key, tok, err)
			return tok
		}
		log.markRaise(key, m)
		byAdmin.Add(1)
		return tok
	case 2:
		if leases == nil {
			break
		}
		l, err := leases.Acquire(context.Background(), key, strconv.Itoa(w), leaseTTL)
		if errors.Is(err, lease.ErrHeld) || errors.Is(err, lease.ErrLost) {
			break // held by another, or lost again while earlier writes drained past its TTL
		}
		if err != nil {
			t.Errorf("lease acquire of %s: %v", key, err)
			break
		}
		log.markRaise(key, l.Token)
		for cur := coordinator.Load(); cur < l.Token && !coordinator.CompareAndSwap(cur, l.Token); cur = coordinator.Load() {
		}
		byLease.Add(1)
		return l.Token
	}
	byWrite.Add(1)
	return coordinator.Add(1)
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
	time.Sleep(200 * time.Millisecond) // asserting nothing happens: B is not forwarded while A's write is applied
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
