package proxy

// Store fault tests: the in-memory store failing like a breaking or filling
// disk, driven end to end through New, an httptest proxy and a
// recording httptest backend. A fault must fail closed (503 store_error with
// Retry-After, nothing forwarded, the maximum unchanged) and must not outlive
// itself: once the store works again, the same write goes through.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/fence"
	"github.com/fenceproxy/fenceproxy/internal/rawbackend"
	"github.com/fenceproxy/fenceproxy/store/badger"
	"github.com/fenceproxy/fenceproxy/store/mem"
	"github.com/fenceproxy/fenceproxy/wire"
)

// faultStore is the in-memory store (store/mem) failing on command
// through its hooks: Max or Raise fail once they have succeeded okMax /
// okRaise times (0: from the first call), a failing Raise first hangs for
// delay (a slow disk that gives up); maxEvery / raiseEvery > 0 make them fail
// on every such call instead. A raise that returned nil is as durable as a
// real store's.
type faultStore struct {
	*mem.Store
	mu               sync.Mutex
	maxCalls, raises int // calls so far
	maxErr, raiseErr error
	okMax, okRaise   int
	maxEvery         int
	raiseEvery       int
	delay            time.Duration
}

func newFaultStore() *faultStore {
	s := &faultStore{}
	st, err := mem.OpenWith(mem.NewDisk(), mem.Options{
		BeforeMax: func(string) error {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.maxCalls++
			return s.fails(s.maxCalls, s.okMax, s.maxEvery, s.maxErr)
		},
		BeforeRaise: func(string, uint64) error {
			s.mu.Lock()
			s.raises++
			err := s.fails(s.raises, s.okRaise, s.raiseEvery, s.raiseErr)
			delay := s.delay
			s.mu.Unlock()
			if err != nil {
				time.Sleep(delay) // the slow disk of the case, not a wait for the test
			}
			return err
		},
	})
	if err != nil {
		panic(err) // a fresh Disk always opens
	}
	s.Store = st
	return s
}

func (s *faultStore) fails(calls, ok, every int, err error) error {
	if err == nil {
		return nil
	}
	if every > 0 {
		if calls%every == 0 {
			return err
		}
		return nil
	}
	if calls > ok {
		return err
	}
	return nil
}

// heal ends every fault.
func (s *faultStore) heal() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.maxErr, s.raiseErr = nil, nil
}

// durable returns resource's stored maximum, whatever faults are on.
func (s *faultStore) durable(resource string) uint64 {
	recs, _ := s.List(resource, "", 1)
	if len(recs) == 1 && recs[0].Resource == resource {
		return recs[0].Token
	}
	return 0
}

// seed stores maximum m for resource before any fault is on.
func (s *faultStore) seed(t *testing.T, resource string, m uint64) {
	t.Helper()
	if _, err := s.Store.Raise(resource, m); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.raises = 0
	s.mu.Unlock()
}

// arrival is one write as the backend received it, with the maximum the store
// had made durable for its resource when its headers arrived, and whether its
// whole body arrived (an upload cut off by a larger token does not).
type arrival struct {
	id, resource   string
	token, durable uint64
	whole          bool
}

// faultBackend records every write it receives and answers 204.
type faultBackend struct {
	*httptest.Server
	mu   sync.Mutex
	seen []arrival
}

func newFaultBackend(t *testing.T, store *faultStore) *faultBackend {
	b := &faultBackend{}
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resource := strings.TrimPrefix(r.URL.Path, "/")
		tok, _ := strconv.ParseUint(r.Header.Get("X-Fencing-Token"), 10, 64)
		a := arrival{id: r.Header.Get("X-Test-Id"), resource: resource, token: tok, durable: store.durable(resource)}
		_, err := io.Copy(io.Discard, r.Body)
		a.whole = err == nil
		b.mu.Lock()
		b.seen = append(b.seen, a)
		b.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(b.Close)
	return b
}

func (b *faultBackend) arrivals() []arrival {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]arrival(nil), b.seen...)
}

// checkStoreError asserts r is the proxy's own fail-closed answer to a store
// fault, and that the fault's cause stays out of the body.
func checkStoreError(t *testing.T, r result, cause error) {
	t.Helper()
	if r.err != nil {
		t.Fatalf("request failed: %v", r.err)
	}
	if r.status != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503; body %s", r.status, r.body)
	}
	if got := r.header.Get(wire.HeaderRefused); got != wire.ReasonStoreError {
		t.Errorf("%s %q, want %q", wire.HeaderRefused, got, wire.ReasonStoreError)
	}
	if r.header.Get("Retry-After") == "" {
		t.Error("no Retry-After on a store fault")
	}
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type %q", ct)
	}
	var pb wire.Problem
	if err := json.Unmarshal([]byte(r.body), &pb); err != nil {
		t.Fatalf("problem body %q: %v", r.body, err)
	}
	if pb.Status != 503 || pb.Reason != wire.ReasonStoreError {
		t.Errorf("problem %+v, want status 503 reason %s", pb, wire.ReasonStoreError)
	}
	if cause != nil && strings.Contains(r.body, cause.Error()) {
		t.Errorf("the store's error leaked into the body: %s", r.body)
	}
}

var (
	errIO      = fmt.Errorf("write 000001.vlog: %w", syscall.EIO)
	errNoSpace = fmt.Errorf("store/badger: raise %q: %w: 1048576 bytes free", "bkt/obj", badger.ErrNoSpace)
)

func TestStoreFaults(t *testing.T) {
	cases := []struct {
		name   string
		fault  func(s *faultStore)
		before []string // tokens written while the store still works
		token  string   // the write that meets the fault
		want   uint64   // the maximum, which the fault must leave as is
		cause  error
	}{
		{"max fails", func(s *faultStore) { s.maxErr = errIO }, nil, "43", 42, errIO},
		{"max fails for the current token", func(s *faultStore) { s.maxErr = errIO }, nil, "42", 42, errIO},
		{"raise fails", func(s *faultStore) { s.raiseErr = errIO }, nil, "43", 42, errIO},
		{"raise refused for lack of space", func(s *faultStore) { s.raiseErr = errNoSpace }, nil, "43", 42, errNoSpace},
		{"raise fails after a delay", func(s *faultStore) { s.raiseErr, s.delay = errIO, 300*time.Millisecond }, nil, "43", 42, errIO},
		{"raise fails from the 3rd call", func(s *faultStore) { s.raiseErr, s.okRaise = errNoSpace, 2 }, []string{"43", "44"}, "45", 44, errNoSpace},
		{"max fails after a first success", func(s *faultStore) { s.maxErr, s.okMax = errIO, 1 }, []string{"43"}, "44", 43, errIO},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			store := newFaultStore()
			store.seed(t, "bkt/obj", 42)
			tc.fault(store)
			backend := newFaultBackend(t, store)
			srv := newTestProxy(t, store, backend.URL, nil)
			ctx := context.Background()
			for i, tok := range tc.before {
				if r := put(ctx, srv.URL, "/bkt/obj", tok, fmt.Sprint("before-", i)); r.status != http.StatusNoContent {
					t.Fatalf("write %s before the fault: %d %s", tok, r.status, r.body)
				}
			}
			forwarded := len(backend.arrivals())
			for i := range 3 { // a fault that lasts fails every attempt
				checkStoreError(t, put(ctx, srv.URL, "/bkt/obj", tc.token, fmt.Sprint("faulted-", i)), tc.cause)
			}
			if got := backend.arrivals(); len(got) != forwarded {
				t.Fatalf("forwarded during the fault: %+v", got[forwarded:])
			}
			if got := store.durable("bkt/obj"); got != tc.want {
				t.Fatalf("maximum %d after the fault, want %d", got, tc.want)
			}

			store.heal()
			if r := put(ctx, srv.URL, "/bkt/obj", tc.token, "retry"); r.status != http.StatusNoContent {
				t.Fatalf("the same write after the fault cleared: %d %s", r.status, r.body)
			}
			got := backend.arrivals()
			if len(got) != forwarded+1 || got[forwarded].id != "retry" {
				t.Fatalf("backend got %+v, want the retry only", got[forwarded:])
			}
			if a := got[forwarded]; a.durable < a.token {
				t.Fatalf("token %d forwarded while only %d was durable", a.token, a.durable)
			}
			// The maximum was never lowered: a token below it is still stale.
			if r := put(ctx, srv.URL, "/bkt/obj", strconv.FormatUint(tc.want-1, 10), "stale"); r.status != http.StatusConflict {
				t.Fatalf("token below the maximum after the fault: %d %s", r.status, r.body)
			}
		})
	}
}

// A raise that hangs and then fails: writers with the same token wait for it,
// then try their own raise and fail too; the current holder's write (the
// maximum's own token) waits for the outcome and then goes through, since the
// failed raise changed nothing.
func TestStoreFaultSlowRaise(t *testing.T) {
	store := newFaultStore()
	store.seed(t, "r", 42)
	store.raiseErr, store.delay = errIO, 200*time.Millisecond
	backend := newFaultBackend(t, store)
	srv := newTestProxy(t, store, backend.URL, nil)

	var larger []<-chan result
	for i := range 4 {
		larger = append(larger, putAsync(srv.URL, "/r", "50", fmt.Sprint("w50-", i)))
	}
	waitFor(t, func() bool {
		store.mu.Lock()
		defer store.mu.Unlock()
		return store.raises > 0
	})
	holder := putAsync(srv.URL, "/r", "42", "w42")
	for _, ch := range larger {
		checkStoreError(t, recv(t, ch), errIO)
	}
	if r := recv(t, holder); r.status != http.StatusNoContent {
		t.Fatalf("the current holder's write after a failed raise: %d %s", r.status, r.body)
	}
	for _, a := range backend.arrivals() {
		if a.id != "w42" {
			t.Fatalf("forwarded %+v, want only the current holder's write", a)
		}
	}
	store.heal()
	for i := range 4 {
		if r := put(context.Background(), srv.URL, "/r", "50", fmt.Sprint("again-", i)); r.status != http.StatusNoContent {
			t.Fatalf("token 50 after the fault cleared: %d %s", r.status, r.body)
		}
	}
	if got := store.durable("r"); got != 50 {
		t.Fatalf("maximum %d, want 50", got)
	}
}

// Concurrent writers on a few resources while every 7th Max and every
// 2nd Raise fails: every write is forwarded, refused as stale, or refused
// with store_error; nothing refused reaches the backend whole; nothing is
// forwarded with a token the store had not made durable; per resource the
// backend gets whole writes in non-decreasing token order. After the fault,
// writes go through again.
func TestStoreFaultConcurrentWriters(t *testing.T) {
	store := newFaultStore()
	store.maxErr, store.raiseErr, store.maxEvery, store.raiseEvery = errIO, errNoSpace, 7, 2
	backend := newFaultBackend(t, store)
	srv := newTestProxy(t, store, backend.URL, nil)

	const writers, writes, resources = 12, 25, 3
	type outcome struct {
		id     string
		status int
		reason string
	}
	outcomes := make(chan outcome, writers*writes)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range writes {
				// Tokens rise over time and overlap between writers, so
				// raises, equal tokens and stale ones all occur.
				tok := strconv.Itoa(i*4 + w%5 + 1)
				id := fmt.Sprintf("w%d-%d", w, i)
				res := fmt.Sprintf("/res%d", (w+i)%resources)
				r := put(context.Background(), srv.URL, res, tok, id)
				if r.err != nil {
					t.Errorf("%s: %v", id, r.err)
					return
				}
				outcomes <- outcome{id, r.status, r.header.Get(wire.HeaderRefused)}
			}
		})
	}
	wg.Wait()
	close(outcomes)

	// A write counts as received once its whole body arrived: a larger token
	// may cut off an upload in progress, which then reached the backend only
	// in part (and is answered 409).
	seen := map[string]int{}
	for _, a := range backend.arrivals() {
		if a.whole {
			seen[a.id]++
		}
		if a.durable < a.token {
			t.Errorf("%s forwarded with token %d while the store had made only %d durable", a.id, a.token, a.durable)
		}
	}
	counts := map[string]int{}
	for o := range outcomes {
		switch {
		case o.status == http.StatusNoContent:
			counts["forwarded"]++
			if seen[o.id] != 1 {
				t.Errorf("%s answered 204 but reached the backend whole %d times", o.id, seen[o.id])
			}
		case o.status == http.StatusConflict && o.reason == wire.ReasonStale,
			o.status == http.StatusServiceUnavailable && o.reason == wire.ReasonStoreError:
			counts[o.reason]++
			if seen[o.id] != 0 {
				t.Errorf("%s refused (%s) but reached the backend whole", o.id, o.reason)
			}
		default:
			t.Errorf("%s: unexpected answer %d %q (reached the backend whole %d times)", o.id, o.status, o.reason, seen[o.id])
		}
	}
	if counts[wire.ReasonStoreError] == 0 || counts["forwarded"] == 0 {
		t.Fatalf("outcomes %v: the fault did not interleave with successful writes", counts)
	}
	t.Logf("outcomes during the fault: %v", counts)

	last := map[string]uint64{}
	for _, a := range backend.arrivals() {
		if !a.whole {
			continue
		}
		if a.token < last[a.resource] {
			t.Errorf("%s: token %d forwarded after %d: %+v", a.resource, a.token, last[a.resource], a)
		}
		last[a.resource] = max(last[a.resource], a.token)
	}

	store.heal()
	for i := range resources {
		res := fmt.Sprintf("res%d", i)
		tok := strconv.FormatUint(store.durable(res)+1, 10)
		if r := put(context.Background(), srv.URL, "/"+res, tok, "after-"+res); r.status != http.StatusNoContent {
			t.Fatalf("%s token %s after the fault: %d %s", res, tok, r.status, r.body)
		}
	}
}

// A backend status outside 100-999 (which net/http's server cannot write)
// gives a 502, on both upstream clients, instead of a dropped connection.
func TestBackendStatusOutOfRange(t *testing.T) {
	backend := rawbackend.New(t, "127.0.0.1:0", rawbackend.KeepAfter("HTTP/1.1 042 Odd\r\nContent-Length: 2\r\n\r\nok"))
	for _, standard := range []bool{false, true} {
		srv := newTestProxy(t, newMemStore(), backend.URL(), func(o *Options, f *fence.Options) { o.UpstreamFastPath = !standard })
		for _, method := range []string{http.MethodGet, http.MethodPut} {
			r := send(context.Background(), method, srv.URL+"/bkt/obj", "7", "x")
			if r.status != http.StatusBadGateway {
				t.Fatalf("standard client %v, %s: status %d, want 502", standard, method, r.status)
			}
		}
	}
}
