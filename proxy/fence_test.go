package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/fence"
	"github.com/fenceproxy/fenceproxy/store/mem"
	"github.com/fenceproxy/fenceproxy/wire"
)

// memStore is the in-memory store (store/mem) with faults the test
// switches on and off through store/mem's hooks: Raise can be made to fail or
// to block until the test releases it, Max to fail.
type memStore struct {
	*mem.Store
	mu        sync.Mutex
	raises    int           // raises that passed the hooks
	failRaise error         // when set, Raise fails with it
	failMax   error         // when set, Max fails with it
	raiseGate chan struct{} // when set, each Raise waits for a receive from it
	entered   chan string   // when set, each Raise held by raiseGate sends its resource first
}

func newMemStore() *memStore {
	s := &memStore{}
	st, err := mem.OpenWith(mem.NewDisk(), mem.Options{
		BeforeMax: func(string) error {
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.failMax
		},
		BeforeRaise: func(resource string, _ uint64) error {
			s.mu.Lock()
			gate, entered := s.raiseGate, s.entered
			s.mu.Unlock()
			if gate != nil {
				if entered != nil {
					entered <- resource
				}
				<-gate
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.failRaise == nil {
				s.raises++
			}
			return s.failRaise
		},
	})
	if err != nil {
		panic(err) // a fresh Disk always opens
	}
	s.Store = st
	return s
}

// get returns resource's stored maximum, whatever faults are on.
func (s *memStore) get(resource string) uint64 {
	recs, _ := s.List(resource, "", 1)
	if len(recs) == 1 && recs[0].Resource == resource {
		return recs[0].Token
	}
	return 0
}

// seed stores maximum m for resource, not counted as a raise.
func (s *memStore) seed(t *testing.T, resource string, m uint64) {
	t.Helper()
	if _, err := s.Store.Raise(resource, m); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.raises = 0
	s.mu.Unlock()
}

// set changes the faults under the lock.
func (s *memStore) set(f func(s *memStore)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

// gateBackend records the writes it receives, in arrival order, and holds a
// request whose X-Test-Id is in hold until the test releases it.
type gateBackend struct {
	*httptest.Server
	mu      sync.Mutex
	arrived []string // X-Test-Id values in arrival order
	hold    map[string]chan struct{}
	arrival chan string // every arrival, for waiting in tests
}

func newGateBackend(t *testing.T) *gateBackend {
	b := &gateBackend{hold: map[string]chan struct{}{}, arrival: make(chan string, 1024)}
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		id := r.Header.Get("X-Test-Id")
		b.mu.Lock()
		b.arrived = append(b.arrived, id)
		gate := b.hold[id]
		b.mu.Unlock()
		b.arrival <- id
		if gate != nil {
			select {
			case <-gate:
			case <-r.Context().Done():
				return
			}
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(b.Close)
	return b
}

// holdNext makes the request with id wait at the backend until release is called.
func (b *gateBackend) holdNext(id string) (release func()) {
	ch := make(chan struct{})
	b.mu.Lock()
	b.hold[id] = ch
	b.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

func (b *gateBackend) got() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.arrived...)
}

// waitArrival waits until the request with id reaches the backend.
func (b *gateBackend) waitArrival(t *testing.T, id string) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case got := <-b.arrival:
			if got == id {
				return
			}
		case <-deadline:
			t.Fatalf("request %s never reached the backend; arrived: %v", id, b.got())
		}
	}
}

// assertNotArrived checks that id has not reached the backend within d.
func (b *gateBackend) assertNotArrived(t *testing.T, id string, d time.Duration) {
	t.Helper()
	time.Sleep(d) // asserting nothing happens: id does not arrive
	for _, got := range b.got() {
		if got == id {
			t.Fatalf("request %s reached the backend; arrived: %v", id, b.got())
		}
	}
}

// testOptions are the product's defaults (config.Default) for a proxy in
// front of backend.
func testOptions(t testing.TB, backend string) Options {
	t.Helper()
	u, err := url.Parse(backend)
	if err != nil {
		t.Fatal(err)
	}
	o := DefaultOptions()
	o.Upstream = u
	return o
}

// newProxy returns a proxy with opts over a barrier over store with fopts.
func newProxy(t testing.TB, store fence.Store, opts Options, fopts fence.Options) (*Proxy, *fence.Barrier) {
	t.Helper()
	b, err := fence.New(store, fopts)
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(b, opts)
	if err != nil {
		t.Fatal(err)
	}
	return p, b
}

// newTestProxy serves a proxy in front of backend over store: the product's
// defaults, a barrier with a 5 s drain timeout, no abandon or start-up
// grace; mod (when set) changes both.
func newTestProxy(t *testing.T, store fence.Store, backend string, mod func(*Options, *fence.Options)) *httptest.Server {
	t.Helper()
	opts := testOptions(t, backend)
	fopts := fence.Options{DrainTimeout: 5 * time.Second}
	if mod != nil {
		mod(&opts, &fopts)
	}
	p, _ := newProxy(t, store, opts, fopts)
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return srv
}

type result struct {
	status int
	header http.Header
	body   string
	err    error
}

// put sends a PUT with token (omitted when "") and id, and returns the response.
func put(ctx context.Context, base, path, token, id string, extra ...string) result {
	return send(ctx, http.MethodPut, base+path, token, id, extra...)
}

// send sends a request with a small body, token (omitted when "") and id.
func send(ctx context.Context, method, target, token, id string, extra ...string) result {
	req, _ := http.NewRequestWithContext(ctx, method, target, strings.NewReader("body of "+id))
	if token != "" {
		req.Header.Set("X-Fencing-Token", token)
	}
	req.Header.Set("X-Test-Id", id)
	for i := 0; i+1 < len(extra); i += 2 {
		req.Header.Add(extra[i], extra[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return result{err: err}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return result{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// putAsync sends put in the background; the result arrives on the channel.
func putAsync(base, path, token, id string) <-chan result {
	ch := make(chan result, 1)
	go func() { ch <- put(context.Background(), base, path, token, id) }()
	return ch
}

func recv(t *testing.T, ch <-chan result) result {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("request failed: %v", r.err)
		}
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no response within 10s")
		return result{}
	}
}

func TestAdmission(t *testing.T) {
	cases := []struct {
		name       string
		stored     uint64 // 0: never seen
		token      []string
		status     int
		refused    string // Fencing-Refused; "" when forwarded
		current    string // Fencing-Current-Token on 409
		wantMax    uint64
		wantRaises int
		requireTok bool
	}{
		{"first write on unseen resource", 0, []string{"41"}, 204, "", "", 41, 1, true},
		{"token 0 on unseen resource", 0, []string{"0"}, 204, "", "", 0, 0, true},
		{"equal token passes without raise", 41, []string{"41"}, 204, "", "", 41, 0, true},
		{"larger token raises", 41, []string{"42"}, 204, "", "", 42, 1, true},
		{"max token", 41, []string{"9223372036854775807"}, 204, "", "", 1<<63 - 1, 1, true},
		{"smaller token refused", 42, []string{"41"}, 409, "stale", "42", 42, 0, true},
		{"zero below max refused", 42, []string{"0"}, 409, "stale", "42", 42, 0, true},
		{"missing token", 42, nil, 428, "missing", "", 42, 0, true},
		{"missing token not required", 42, nil, 204, "", "", 42, 0, false},
		{"empty token", 42, []string{""}, 400, "malformed", "", 42, 0, true},
		{"leading zero", 42, []string{"043"}, 400, "malformed", "", 42, 0, true},
		{"negative", 42, []string{"-43"}, 400, "malformed", "", 42, 0, true},
		{"out of range", 42, []string{"9223372036854775808"}, 400, "malformed", "", 42, 0, true},
		{"list", 42, []string{"5, 99"}, 400, "malformed", "", 42, 0, true},
		{"twice", 42, []string{"43", "43"}, 400, "malformed", "", 42, 0, true},
		{"malformed even when not required", 42, []string{"x"}, 400, "malformed", "", 42, 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			store := newMemStore()
			if tc.stored > 0 {
				store.seed(t, "bkt/obj", tc.stored)
			}
			backend := newGateBackend(t)
			srv := newTestProxy(t, store, backend.URL, func(o *Options, f *fence.Options) { o.RequireToken = tc.requireTok })
			req, _ := http.NewRequest(http.MethodPut, srv.URL+"/bkt/obj", strings.NewReader("x"))
			for _, v := range tc.token {
				req.Header.Add("X-Fencing-Token", v)
			}
			req.Header.Set("X-Test-Id", "w")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d; body %s", resp.StatusCode, tc.status, body)
			}
			if got := resp.Header.Get(wire.HeaderRefused); got != tc.refused {
				t.Errorf("Fencing-Refused %q, want %q", got, tc.refused)
			}
			if got := resp.Header.Get(wire.HeaderCurrentToken); got != tc.current {
				t.Errorf("Fencing-Current-Token %q, want %q", got, tc.current)
			}
			forwarded := len(backend.got()) == 1
			if forwarded != (tc.refused == "") {
				t.Errorf("forwarded=%v, want %v", forwarded, tc.refused == "")
			}
			if tc.refused != "" {
				if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
					t.Errorf("Content-Type %q", ct)
				}
				if !strings.Contains(string(body), `"status":`+strconv.Itoa(tc.status)) || !strings.Contains(string(body), `"reason":"`+tc.refused+`"`) {
					t.Errorf("problem body %s", body)
				}
			}
			if tc.status == 409 {
				want := fmt.Sprintf(`"resource":"bkt/obj","token":"%s","current_token":"%s"`, tc.token[0], tc.current)
				if !strings.Contains(string(body), want) {
					t.Errorf("409 body %s lacks %s", body, want)
				}
			}
			if got := store.get("bkt/obj"); got != tc.wantMax {
				t.Errorf("stored max %d, want %d", got, tc.wantMax)
			}
			if store.raises != tc.wantRaises {
				t.Errorf("%d raises, want %d", store.raises, tc.wantRaises)
			}
		})
	}
}

func TestStoreFailureFailsClosed(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fail  func(*memStore)
		token string
	}{
		{"raise fails", func(s *memStore) { s.failRaise = errors.New("disk full") }, "43"},
		{"read fails", func(s *memStore) { s.failMax = errors.New("io error") }, "42"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := newMemStore()
			store.seed(t, "bkt/obj", 42)
			store.set(tc.fail)
			backend := newGateBackend(t)
			srv := newTestProxy(t, store, backend.URL, nil)
			r := put(context.Background(), srv.URL, "/bkt/obj", tc.token, "w")
			if r.status != 503 || r.header.Get(wire.HeaderRefused) != wire.ReasonStoreError || r.header.Get("Retry-After") == "" {
				t.Fatalf("got %d %v %s", r.status, r.header, r.body)
			}
			if strings.Contains(r.body, "disk full") || strings.Contains(r.body, "io error") {
				t.Errorf("internal cause leaked into the body: %s", r.body)
			}
			if len(backend.got()) != 0 {
				t.Errorf("forwarded despite store failure: %v", backend.got())
			}
			store.set(func(s *memStore) { s.failRaise, s.failMax = nil, nil })
			if got := store.get("bkt/obj"); got != 42 {
				t.Errorf("max %d after failure, want 42", got)
			}
			// Service recovers once the store does.
			if r := put(context.Background(), srv.URL, "/bkt/obj", "43", "w2"); r.status != 204 {
				t.Errorf("after recovery: %d %s", r.status, r.body)
			}
		})
	}
}

func TestBarrierEqualTokensRunConcurrently(t *testing.T) {
	store := newMemStore()
	backend := newGateBackend(t)
	srv := newTestProxy(t, store, backend.URL, nil)
	relA, relB := backend.holdNext("a"), backend.holdNext("b")
	a := putAsync(srv.URL, "/bkt/obj", "5", "a")
	backend.waitArrival(t, "a")
	b := putAsync(srv.URL, "/bkt/obj", "5", "b")
	backend.waitArrival(t, "b") // b reached the backend while a is still held there
	relB()
	if r := recv(t, b); r.status != 204 {
		t.Fatalf("b: %d", r.status)
	}
	relA()
	if r := recv(t, a); r.status != 204 {
		t.Fatalf("a: %d", r.status)
	}
}

func TestBarrierLargerWaitsForSmaller(t *testing.T) {
	store := newMemStore()
	backend := newGateBackend(t)
	srv := newTestProxy(t, store, backend.URL, nil)
	relA := backend.holdNext("a5")
	a := putAsync(srv.URL, "/bkt/obj", "5", "a5")
	backend.waitArrival(t, "a5")

	b := putAsync(srv.URL, "/bkt/obj", "6", "b6")
	backend.assertNotArrived(t, "b6", 200*time.Millisecond)
	if got := store.get("bkt/obj"); got != 6 {
		t.Fatalf("max %d while 6 waits; the raise must be durable before waiting", got)
	}
	// From the raise on, smaller tokens are refused at once, body unread.
	if r := put(context.Background(), srv.URL, "/bkt/obj", "5", "late5"); r.status != 409 || r.header.Get(wire.HeaderCurrentToken) != "6" {
		t.Fatalf("late 5: %d %v", r.status, r.header)
	}
	// Another resource is not held up.
	if r := put(context.Background(), srv.URL, "/bkt/other", "1", "o"); r.status != 204 {
		t.Fatalf("other resource: %d", r.status)
	}
	relA()
	if r := recv(t, a); r.status != 204 {
		t.Fatalf("a5: %d", r.status)
	}
	if r := recv(t, b); r.status != 204 {
		t.Fatalf("b6: %d", r.status)
	}
	if got, want := strings.Join(backend.got(), ","), "a5,o,b6"; got != want {
		t.Fatalf("backend order %s, want %s", got, want)
	}
}

func TestBarrierDrainTimeout(t *testing.T) {
	store := newMemStore()
	backend := newGateBackend(t)
	srv := newTestProxy(t, store, backend.URL, func(o *Options, f *fence.Options) { f.DrainTimeout = 300 * time.Millisecond })
	relA := backend.holdNext("a5")
	defer relA()
	a := putAsync(srv.URL, "/bkt/obj", "5", "a5")
	backend.waitArrival(t, "a5")

	start := time.Now()
	r := put(context.Background(), srv.URL, "/bkt/obj", "6", "b6")
	if r.status != 503 || r.header.Get(wire.HeaderRefused) != wire.ReasonDrainTimeout || r.header.Get("Retry-After") == "" {
		t.Fatalf("got %d %v %s", r.status, r.header, r.body)
	}
	if el := time.Since(start); el < 300*time.Millisecond {
		t.Fatalf("refused after %v, before the drain timeout", el)
	}
	backend.assertNotArrived(t, "b6", 50*time.Millisecond)
	if got := store.get("bkt/obj"); got != 6 {
		t.Fatalf("max %d, want 6 (the raise stays)", got)
	}
	relA()
	recv(t, a)
	if r := put(context.Background(), srv.URL, "/bkt/obj", "6", "b6again"); r.status != 204 {
		t.Fatalf("retry after drain: %d", r.status)
	}
}

// A waiter re-checks on waking: a still larger token admitted meanwhile makes it stale.
func TestBarrierWakeRechecks(t *testing.T) {
	store := newMemStore()
	backend := newGateBackend(t)
	srv := newTestProxy(t, store, backend.URL, nil)
	relA := backend.holdNext("a5")
	a := putAsync(srv.URL, "/bkt/obj", "5", "a5")
	backend.waitArrival(t, "a5")
	b := putAsync(srv.URL, "/bkt/obj", "6", "b6")
	waitFor(t, func() bool { return store.get("bkt/obj") == 6 })
	c := putAsync(srv.URL, "/bkt/obj", "7", "c7")
	waitFor(t, func() bool { return store.get("bkt/obj") == 7 })
	relA()
	recv(t, a)
	if r := recv(t, b); r.status != 409 || r.header.Get(wire.HeaderCurrentToken) != "7" {
		t.Fatalf("b6 after wake: %d %v", r.status, r.header)
	}
	if r := recv(t, c); r.status != 204 {
		t.Fatalf("c7: %d", r.status)
	}
	if got, want := strings.Join(backend.got(), ","), "a5,c7"; got != want {
		t.Fatalf("backend order %s, want %s", got, want)
	}
}

// While a raise is being made durable, a smaller token is neither forwarded
// nor refused: it waits for the outcome.
func TestRaiseInProgress(t *testing.T) {
	for _, fail := range []bool{false, true} {
		t.Run(fmt.Sprintf("raise fails=%v", fail), func(t *testing.T) {
			store := newMemStore()
			store.seed(t, "bkt/obj", 5)
			gate := make(chan struct{})
			store.set(func(s *memStore) { s.raiseGate, s.entered = gate, make(chan string, 1) })
			backend := newGateBackend(t)
			srv := newTestProxy(t, store, backend.URL, nil)
			b := putAsync(srv.URL, "/bkt/obj", "6", "b6")
			<-store.entered // b6 is inside Raise
			a := putAsync(srv.URL, "/bkt/obj", "5", "a5")
			backend.assertNotArrived(t, "a5", 200*time.Millisecond)
			if fail {
				store.set(func(s *memStore) { s.failRaise = errors.New("disk full") })
			}
			store.set(func(s *memStore) { s.raiseGate = nil })
			close(gate)
			rb, ra := recv(t, b), recv(t, a)
			if fail {
				if rb.status != 503 || ra.status != 204 {
					t.Fatalf("failed raise: b6 %d (want 503), a5 %d (want 204)", rb.status, ra.status)
				}
				return
			}
			if rb.status != 204 || ra.status != 409 {
				t.Fatalf("b6 %d (want 204), a5 %d (want 409)", rb.status, ra.status)
			}
		})
	}
}

// waitFor polls cond for at most 5 s: the barrier's counts, the stores and
// backends it is used on signal no event.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(5 * time.Millisecond) // polled: no event (see above)
	}
}
