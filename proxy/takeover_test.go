package proxy_test

// Takeover tests: a holder stalls mid-upload and loses the resource, to a
// write with a larger token, a lease acquire or an operator's raise. Every
// raise goes through the barrier, so the stale upload is cut off before its
// end and never applied, and the new holder's first write does not wait for
// the stalled one. Each case also runs with the raise made beside the barrier
// (as lease acquires and admin raises were once made), which must let the
// stale upload be applied after the raise returned: the test has teeth.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/control"
	"github.com/fenceproxy/fenceproxy/fence"
	"github.com/fenceproxy/fenceproxy/internal/servertest"
	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/proxy"
	"github.com/fenceproxy/fenceproxy/store/badger"
	"github.com/fenceproxy/fenceproxy/wire"
)

// takeoverEvent is one line of the takeover log: a write the backend applied
// (kind "applied", its token and body's first byte) or a raise that returned
// (kind "raised", the maximum it left).
type takeoverEvent struct {
	kind   string
	token  uint64
	holder byte
}

// takeoverLog is a backend that applies only bodies that arrived whole, and
// the one ordered log of applications and returned raises.
type takeoverLog struct {
	mu         sync.Mutex
	events     []takeoverEvent
	incomplete int
}

func (l *takeoverLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil || len(body) == 0 {
		l.mu.Lock()
		l.incomplete++
		l.mu.Unlock()
		http.Error(w, "incomplete body", http.StatusBadRequest)
		return
	}
	t, _ := strconv.ParseUint(r.Header.Get("X-Fencing-Token"), 10, 64)
	l.add(takeoverEvent{kind: "applied", token: t, holder: body[0]})
	w.WriteHeader(http.StatusNoContent)
}

func (l *takeoverLog) add(e takeoverEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
}

// staleAfterRaise returns the writes applied after a raise above their token
// had returned.
func (l *takeoverLog) staleAfterRaise() []takeoverEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	var raised uint64
	var stale []takeoverEvent
	for _, e := range l.events {
		switch {
		case e.kind == "raised":
			raised = max(raised, e.token)
		case e.token < raised:
			stale = append(stale, e)
		}
	}
	return stale
}

func (l *takeoverLog) applied(holder byte) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.events {
		if e.kind == "applied" && e.holder == holder {
			return true
		}
	}
	return false
}

// raiser is what takes a resource over beside writes: the fence barrier
// itself, or bypass.
type raiser interface {
	lease.Barrier
	Raise(ctx context.Context, resource string, t uint64) (uint64, error)
}

// bypass raises in the store directly, outside the barrier: no upload is cut
// and nothing is drained. The protection switched off.
type bypass struct{ store *badger.Store }

func (b bypass) RaiseWith(_ context.Context, resource string, raise func() error) (uint64, error) {
	if err := raise(); err != nil {
		return 0, err
	}
	return b.store.Max(resource)
}

func (b bypass) Raise(_ context.Context, resource string, t uint64) (uint64, error) {
	return b.store.Raise(resource, t)
}

// rigFences is the admin API's view of the fences, raising through r.
type rigFences struct {
	store *badger.Store
	r     raiser
}

func (f rigFences) Raise(ctx context.Context, resource string, t uint64) (uint64, error) {
	return f.r.Raise(ctx, resource, t)
}

func (f rigFences) Reset(ctx context.Context, resource string) (uint64, error) {
	return f.store.Reset(resource)
}

func (f rigFences) List(prefix, after string, limit int) ([]fence.Record, error) {
	return f.store.List(prefix, after, limit)
}

// takeoverRig is a proxy and its control API over one Badger store, in front
// of a takeoverLog, with a hand-driven lease clock.
type takeoverRig struct {
	log            *takeoverLog
	proxy, control string
	p              *proxy.Proxy
	barrier        *fence.Barrier
	bypassed       bool

	mu  sync.Mutex
	now time.Time // the lease clock
}

func (rig *takeoverRig) clock() time.Time {
	rig.mu.Lock()
	defer rig.mu.Unlock()
	return rig.now
}

func (rig *takeoverRig) advance(d time.Duration) {
	rig.mu.Lock()
	defer rig.mu.Unlock()
	rig.now = rig.now.Add(d)
}

func newTakeoverRig(t *testing.T, bypassed bool) *takeoverRig {
	t.Helper()
	rig := &takeoverRig{log: &takeoverLog{}, now: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC), bypassed: bypassed}
	backend := httptest.NewServer(rig.log)
	t.Cleanup(backend.Close)
	store, err := badger.Open(t.TempDir(), badger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	u, _ := url.Parse(backend.URL)
	opts := proxy.DefaultOptions()
	opts.Upstream, opts.UploadIdleTimeout = u, time.Minute
	b, err := fence.New(store, fence.Options{DrainTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	p, err := proxy.New(b, opts)
	if err != nil {
		t.Fatal(err)
	}
	rig.p, rig.barrier = p, b
	var r raiser = b
	if bypassed {
		r = bypass{store}
	}
	leases := lease.NewManager(store, r, lease.Options{MinTTL: time.Second, Now: rig.clock})
	ps := httptest.NewServer(p)
	t.Cleanup(ps.Close)
	cs := httptest.NewServer(control.Handler(store, slog.New(slog.DiscardHandler), control.Options{
		Leases: leases, Admin: rigFences{store: store, r: r}, AdminToken: "adm",
	}))
	t.Cleanup(cs.Close)
	rig.proxy, rig.control = ps.URL, cs.URL
	return rig
}

// call sends a control call with the admin bearer and decodes its JSON answer.
func (rig *takeoverRig) call(t *testing.T, method, path, body string) (int, map[string]any) {
	t.Helper()
	return servertest.Call(t, method, rig.control+path, body, "adm")
}

// write sends a whole PUT of body with token through the proxy.
func (rig *takeoverRig) write(t *testing.T, path string, token uint64, body string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, rig.proxy+path, strings.NewReader(body))
	req.Header.Set("X-Fencing-Token", strconv.FormatUint(token, 10))
	client := &http.Client{Timeout: time.Minute}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// stalledUpload is a write whose client sent its head and part of its body.
type stalledUpload struct {
	conn net.Conn
	br   *bufio.Reader
	rest string // what the client has not sent yet
}

// bodyPaths are the three ways a body goes upstream: read whole and then sent
// (the fast path, Content-Length up to 64 KiB), streamed with a
// Content-Length, and streamed chunked.
var bodyPaths = []struct {
	name    string
	size    int
	chunked bool
}{
	{"fast path", 40 << 10, false},
	{"streamed", 200 << 10, false},
	{"chunked", 200 << 10, true},
}

// startUpload sends the head and half the body of a PUT of size bytes of
// holder, then stalls.
func startUpload(t *testing.T, proxyURL, path string, token uint64, holder byte, size int, chunked bool) *stalledUpload {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(proxyURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	half := strings.Repeat(string(holder), size/2)
	head := fmt.Sprintf("PUT %s HTTP/1.1\r\nHost: bkt.example\r\nX-Fencing-Token: %d\r\n", path, token)
	u := &stalledUpload{conn: conn, br: bufio.NewReader(conn)}
	if chunked {
		head += fmt.Sprintf("Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", len(half), half)
		u.rest = fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(half), half)
	} else {
		head += fmt.Sprintf("Content-Length: %d\r\n\r\n%s", 2*len(half), half)
		u.rest = half
	}
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatal(err)
	}
	return u
}

// answer reads the upload's answer within wait; when none came, it sends the
// rest of the body and reads the answer then.
func (u *stalledUpload) answer(t *testing.T, wait time.Duration) *http.Response {
	t.Helper()
	u.conn.SetReadDeadline(time.Now().Add(wait))
	if _, err := u.br.Peek(1); err != nil {
		if _, err := io.WriteString(u.conn, u.rest); err != nil {
			t.Fatalf("sending the rest of the stalled upload: %v", err)
		}
		u.conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	}
	resp, err := http.ReadResponse(u.br, nil)
	if err != nil {
		t.Fatalf("the stalled writer got no answer: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// takeovers are the ways the resource changes hands while A is stalled; each
// returns B's token. B then writes with it.
var takeovers = []struct {
	name string
	// take raises the fence past a (through rig) and returns the token B writes with.
	take func(t *testing.T, rig *takeoverRig, path string, a uint64) uint64
}{
	{"write", func(t *testing.T, rig *takeoverRig, path string, a uint64) uint64 {
		return a + 1 // B's own write raises
	}},
	{"lease acquire", func(t *testing.T, rig *takeoverRig, path string, a uint64) uint64 {
		rig.advance(10 * time.Second) // A's lease (ttl 1s) expired, and its grace
		status, out := rig.call(t, http.MethodPost, "/v1/leases"+path, `{"holder":"B","ttl":"1s"}`)
		if status != http.StatusCreated {
			t.Fatalf("B's acquire: %d %v", status, out)
		}
		b, _ := strconv.ParseUint(out["token"].(string), 10, 64)
		rig.log.add(takeoverEvent{kind: "raised", token: b})
		return b
	}},
	{"admin raise", func(t *testing.T, rig *takeoverRig, path string, a uint64) uint64 {
		status, out := rig.call(t, http.MethodPut, "/v1/fences"+path, `{"token":50}`)
		if status != http.StatusOK || out["token"] != "50" {
			t.Fatalf("admin raise: %d %v", status, out)
		}
		rig.log.add(takeoverEvent{kind: "raised", token: 50})
		return 50
	}},
}

func TestTakeoverCutsStalledUpload(t *testing.T) {
	for _, to := range takeovers {
		for _, bp := range bodyPaths {
			for _, bypassed := range []bool{false, true} {
				if bypassed && to.name == "write" {
					continue // a write's raise is the barrier's own
				}
				name := to.name + "/" + bp.name
				if bypassed {
					name += "/beside the barrier"
				}
				t.Run(name, func(t *testing.T) {
					testTakeover(t, newTakeoverRig(t, bypassed), to.take, bp.size, bp.chunked)
				})
			}
		}
	}
}

func testTakeover(t *testing.T, rig *takeoverRig, take func(*testing.T, *takeoverRig, string, uint64) uint64, size int, chunked bool) {
	const path = "/bkt/obj1"
	// A holds the resource: a lease (used by the lease takeover) and a first write.
	status, out := rig.call(t, http.MethodPost, "/v1/leases"+path, `{"holder":"A","ttl":"1s"}`)
	if status != http.StatusCreated {
		t.Fatalf("A's acquire: %d %v", status, out)
	}
	a, _ := strconv.ParseUint(out["token"].(string), 10, 64)
	if s := rig.write(t, path, a, "first"); s != http.StatusNoContent {
		t.Fatalf("A's first write: %d", s)
	}
	up := startUpload(t, rig.proxy, path, a, 'A', size, chunked)
	waitUntil(t, "A's upload is admitted", func() bool { return rig.barrier.InFlight("bkt/obj1") == 1 })

	b := take(t, rig, path, a)
	if rig.bypassed {
		// B has its token but has not written yet; A wakes up and sends the rest.
		resp := up.answer(t, 200*time.Millisecond)
		waitUntil(t, "A's exchange is over", func() bool { return rig.barrier.InFlight("bkt/obj1") == 0 })
		stale := rig.log.staleAfterRaise()
		if len(stale) == 0 || !rig.log.applied('A') {
			t.Fatalf("with the raise beside the barrier, A's stale upload (token %d) should have been applied after the raise to %d; events %v",
				a, b, rig.log.events)
		}
		t.Logf("beside the barrier: A's upload answered %d and was applied after the raise to %d returned (%d stale applications)",
			resp.StatusCode, b, len(stale))
		return
	}
	if s := rig.write(t, path, b, "B"); s != http.StatusNoContent {
		t.Fatalf("B's first write (token %d): %d", b, s)
	}
	// A still has not sent the rest of its body: B did not wait for it, and
	// the proxy has answered A already.
	resp := up.answer(t, 10*time.Second)
	waitUntil(t, "A's exchange is over", func() bool { return rig.barrier.InFlight("bkt/obj1") == 0 })
	stale := rig.log.staleAfterRaise()
	if resp.StatusCode != http.StatusConflict || resp.Header.Get(wire.HeaderRefused) != wire.ReasonStale ||
		resp.Header.Get(wire.HeaderCurrentToken) != strconv.FormatUint(b, 10) {
		t.Fatalf("A's stalled upload: %d %v, want 409 stale with current token %d", resp.StatusCode, resp.Header, b)
	}
	if len(stale) > 0 || rig.log.applied('A') {
		t.Fatalf("A's stale upload was applied: %v", rig.log.events)
	}
	if !rig.log.applied('B') {
		t.Fatalf("B's write was not applied: %v", rig.log.events)
	}
}

// waitUntil polls cond (every millisecond, for at most 10 s): the barrier's
// in-flight count it is used on signals no event.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(time.Millisecond) // polled: no event (see above)
	}
}
