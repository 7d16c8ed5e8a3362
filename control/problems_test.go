package control

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/fenceproxy/fenceproxy/fence"
	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/pool"
	"github.com/fenceproxy/fenceproxy/wire"
)

// fakeAdmin is a hand-written AdminFences over a map of maxima. A set
// raiseErr is returned by Raise, after the raise when raiseApplies (a drain
// that timed out after the raise took effect); resetErr by Reset, which then
// changes nothing; listErr by List.
type fakeAdmin struct {
	mu                          sync.Mutex
	max                         map[string]uint64
	raises, resets              int
	raiseErr, resetErr, listErr error
	raiseApplies                bool
}

func newFakeAdmin() *fakeAdmin {
	return &fakeAdmin{max: map[string]uint64{"bkt/a": 5, "bkt/b": 7, "other/x": 9}}
}

func (a *fakeAdmin) Raise(_ context.Context, resource string, t uint64) (uint64, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.raises++
	if a.raiseErr != nil && !a.raiseApplies {
		return 0, a.raiseErr
	}
	a.max[resource] = max(a.max[resource], t)
	return a.max[resource], a.raiseErr
}

func (a *fakeAdmin) Reset(_ context.Context, resource string) (uint64, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.resets++
	if a.resetErr != nil {
		return 0, a.resetErr
	}
	removed := a.max[resource]
	delete(a.max, resource)
	return removed, nil
}

func (a *fakeAdmin) List(prefix, after string, limit int) ([]fence.Record, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.listErr != nil {
		return nil, a.listErr
	}
	var out []fence.Record
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range a.max {
			if !yield(k) {
				return
			}
		}
	}) {
		if strings.HasPrefix(k, prefix) && k > after && len(out) < limit {
			out = append(out, fence.Record{Resource: k, Token: a.max[k]})
		}
	}
	return out, nil
}

// snapshot returns the maxima and how many raises and resets ran.
func (a *fakeAdmin) snapshot() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return fmt.Sprintf("%v raises=%d resets=%d", a.max, a.raises, a.resets)
}

// errLeases is a Leases whose every call fails with err.
type errLeases struct{ err error }

func (l errLeases) Acquire(context.Context, string, string, time.Duration) (lease.Lease, error) {
	return lease.Lease{}, l.err
}
func (l errLeases) Renew(string, string, uint64) (lease.Lease, error)   { return lease.Lease{}, l.err }
func (l errLeases) Release(string, string, uint64) (lease.Lease, error) { return lease.Lease{}, l.err }
func (l errLeases) Get(string) (lease.Lease, lease.State, error)        { return lease.Lease{}, "", l.err }
func (l errLeases) ForceRelease(string) (lease.Lease, error)            { return lease.Lease{}, l.err }

// recordLog is a slog.Handler that keeps every record.
type recordLog struct {
	mu     sync.Mutex
	recs   []slog.Record
	logged chan struct{} // closed (and dropped) by each record
}

func (h *recordLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordLog) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	if h.logged != nil {
		close(h.logged)
		h.logged = nil
	}
	return nil
}

// next is closed by the next record.
func (h *recordLog) next() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.logged == nil {
		h.logged = make(chan struct{})
	}
	return h.logged
}
func (h *recordLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordLog) WithGroup(string) slog.Handler      { return h }

// problemLines returns the level and reason of every problem logged so far.
func (h *recordLog) problemLines() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, r := range h.recs {
		if !strings.HasPrefix(r.Message, "control call failed") {
			continue
		}
		reason := ""
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "reason" {
				reason = a.Value.String()
			}
			return true
		})
		out = append(out, r.Level.String()+" "+reason)
	}
	return out
}

// answer is a response as received.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// rawCall sends one HTTP/1.1 request to srv with target written as is (raw
// "\" and "#" included, which an http.Client would escape) and returns the
// answer. A bearer that starts with "Basic " is the Authorization header's
// whole value.
func rawCall(t *testing.T, srv *httptest.Server, method, target, bearer, body string) answer {
	t.Helper()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var head strings.Builder
	fmt.Fprintf(&head, "%s %s HTTP/1.1\r\nHost: control\r\nConnection: close\r\nContent-Length: %d\r\n", method, target, len(body))
	if body != "" {
		head.WriteString("Content-Type: application/json\r\n")
	}
	if strings.HasPrefix(bearer, "Basic ") {
		head.WriteString("Authorization: " + bearer + "\r\n")
	} else if bearer != "" {
		head.WriteString("Authorization: Bearer " + bearer + "\r\n")
	}
	head.WriteString("\r\n")
	go func() { io.WriteString(conn, head.String()+body) }() // the answer may come before the body is read
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the answer: %v", method, target, err)
	}
	return answer{resp.StatusCode, resp.Header, b}
}

// wantDetail fails t unless p's detail is want.
func wantDetail(t *testing.T, p wire.Problem, want string) {
	t.Helper()
	if p.Detail != want {
		t.Errorf("detail %q, want %q", p.Detail, want)
	}
}

// problemOf decodes a's body as a problem, checking its media type and headers.
func problemOf(t *testing.T, a answer) wire.Problem {
	t.Helper()
	if ct := a.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("%d with Content-Type %q, want application/problem+json: %s", a.status, ct, a.body)
	}
	if cc := a.header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("problem with Cache-Control %q, want no-store", cc)
	}
	var p wire.Problem
	if err := json.Unmarshal(a.body, &p); err != nil {
		t.Fatalf("problem body %s: %v", a.body, err)
	}
	if p.Status != a.status || p.Type != "about:blank" || p.Detail == "" {
		t.Errorf("problem %+v: want status %d, type about:blank and a detail", p, a.status)
	}
	return p
}

// problemRig is a control API over fakes, with a recorded log.
type problemRig struct {
	srv    *httptest.Server
	store  *fakeStore
	admin  *fakeAdmin
	leases Leases
	log    *recordLog
}

func newProblemRig(t *testing.T, leases Leases, edit func(*Options)) *problemRig {
	t.Helper()
	rig := &problemRig{
		store: &fakeStore{max: map[string]uint64{"bkt/a": 5}}, admin: newFakeAdmin(), leases: leases, log: &recordLog{},
	}
	opts := Options{Leases: leases, Admin: rig.admin, AdminToken: "adm"}
	if edit != nil {
		edit(&opts)
	}
	rig.srv = httptest.NewServer(Handler(rig.store, slog.New(rig.log), opts))
	t.Cleanup(rig.srv.Close)
	return rig
}

// TestErrorTable reaches every row of the error table through real HTTP and
// checks the answer (status, reason, title, Retry-After, the problem's
// media type) and the level of its log line.
func TestErrorTable(t *testing.T) {
	secret := errors.New("badger: secret internal detail")
	expires := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	held := &lease.HeldError{Holder: "A", ExpiresAt: expires, GraceEnds: expires.Add(2 * time.Second)}
	cases := []struct {
		name                 string
		leases               Leases
		opts                 func(*Options)
		fakes                func(*problemRig)
		method, target, body string
		bearer               string
		status               int
		reason, title        string
		retry                bool
		level                slog.Level
		check                func(t *testing.T, rig *problemRig, p wire.Problem, a answer)
	}{
		{name: "admin bearer missing", method: "PUT", target: "/v1/fences/bkt/a", body: `{"token":"9"}`,
			status: 401, reason: "unauthorized", title: "Unauthorized", level: slog.LevelInfo,
			check: func(t *testing.T, rig *problemRig, p wire.Problem, a answer) {
				if got := a.header.Get("WWW-Authenticate"); got != `Bearer realm="fenceproxy admin"` {
					t.Errorf("WWW-Authenticate %q", got)
				}
				wantDetail(t, p, "unauthorized: admin calls need Authorization: Bearer <FENCEPROXY_ADMIN_TOKEN>; the request has no Authorization header")
			}},
		// A wrong bearer is told apart from a missing one, without a token in the answer.
		{name: "admin bearer wrong", method: "PUT", target: "/v1/fences/bkt/a", body: `{"token":"9"}`, bearer: "wrong-guess",
			status: 401, reason: "unauthorized", title: "Unauthorized", level: slog.LevelInfo,
			check: func(t *testing.T, rig *problemRig, p wire.Problem, _ answer) {
				wantDetail(t, p, "unauthorized: admin calls need Authorization: Bearer <FENCEPROXY_ADMIN_TOKEN>; the bearer token sent does not match it")
				if strings.Contains(p.Detail, "wrong-guess") {
					t.Errorf("detail %q echoes the token sent", p.Detail)
				}
				if got := rig.admin.snapshot(); !strings.Contains(got, "bkt/a:5") {
					t.Errorf("after a refused raise: %s", got)
				}
			}},
		{name: "admin credentials not a bearer", method: "GET", target: "/v1/fences", bearer: "Basic YWRtOmFkbQ==",
			status: 401, reason: "unauthorized", title: "Unauthorized", level: slog.LevelInfo,
			check: func(t *testing.T, _ *problemRig, p wire.Problem, _ answer) {
				wantDetail(t, p, "unauthorized: admin calls need Authorization: Bearer <FENCEPROXY_ADMIN_TOKEN>; the Authorization header is not a Bearer token")
			}},
		{name: "lease bearer wrong", leases: &memLeases{leases: map[string]lease.Lease{}},
			opts:   func(o *Options) { o.LeaseToken = "lease" },
			method: "POST", target: "/v1/leases/bkt/a", body: `{"holder":"A","ttl":"10s"}`, bearer: "leas",
			status: 401, reason: "unauthorized", title: "Unauthorized", level: slog.LevelInfo,
			check: func(t *testing.T, _ *problemRig, p wire.Problem, _ answer) {
				wantDetail(t, p, "unauthorized: lease calls need Authorization: Bearer <FENCEPROXY_LEASE_TOKEN>; the bearer token sent does not match it")
			}},
		{name: "lease bearer missing", leases: &memLeases{leases: map[string]lease.Lease{}},
			opts:   func(o *Options) { o.LeaseToken = "lease" },
			method: "POST", target: "/v1/leases/bkt/a", body: `{"holder":"A","ttl":"10s"}`,
			status: 401, reason: "unauthorized", title: "Unauthorized", level: slog.LevelInfo,
			check: func(t *testing.T, rig *problemRig, p wire.Problem, a answer) {
				if got := a.header.Get("WWW-Authenticate"); got != `Bearer realm="fenceproxy leases"` {
					t.Errorf("WWW-Authenticate %q", got)
				}
				wantDetail(t, p, "unauthorized: lease calls need Authorization: Bearer <FENCEPROXY_LEASE_TOKEN>; the request has no Authorization header")
			}},
		{name: "admin disabled", opts: func(o *Options) { o.AdminToken = "" },
			method: "GET", target: "/v1/fences", bearer: "adm",
			status: 403, reason: "admin_disabled", title: "Admin API disabled", level: slog.LevelInfo},
		{name: "no such endpoint", method: "GET", target: "/v2/whatever",
			status: 404, reason: "not_found", title: "Not found", level: slog.LevelDebug},
		{name: "method not allowed", method: "PATCH", target: "/v1/fences/bkt/a",
			status: 405, reason: "method_not_allowed", title: "Method not allowed", level: slog.LevelDebug},
		{name: "fence never raised", method: "GET", target: "/v1/fences/bkt/none",
			status: 404, reason: "not_found", title: "Unknown resource", level: slog.LevelDebug},
		{name: "fence read of no resource key", method: "GET", target: "/v1/fences/bkt/../a",
			status: 404, reason: "not_found", title: "Unknown resource", level: slog.LevelDebug},
		{name: "reset of a fence never raised", method: "DELETE", target: "/v1/fences/bkt/none?confirm=bkt/none", bearer: "adm",
			status: 404, reason: "not_found", title: "Unknown resource", level: slog.LevelDebug},
		{name: "bad lease name", leases: &memLeases{leases: map[string]lease.Lease{}},
			method: "POST", target: "/v1/leases/bkt/%2e%2e", body: `{"holder":"A","ttl":"10s"}`,
			status: 400, reason: "bad_resource", title: "Bad lease name", level: slog.LevelDebug},
		{name: "raise without a token", method: "PUT", target: "/v1/fences/bkt/a", body: `{}`, bearer: "adm",
			status: 400, reason: "bad_request", title: "Bad fence request", level: slog.LevelDebug},
		{name: "bad limit", method: "GET", target: "/v1/fences?limit=0", bearer: "adm",
			status: 400, reason: "bad_request", title: "Bad limit", level: slog.LevelDebug},
		{name: "reset without confirm", method: "DELETE", target: "/v1/fences/bkt/a", bearer: "adm",
			status: 400, reason: "bad_request", title: "Confirmation required", level: slog.LevelDebug},
		{name: "reset with confirm given twice", method: "DELETE", target: "/v1/fences/bkt/a?confirm=bkt/a&confirm=x", bearer: "adm",
			status: 400, reason: "bad_request", title: "Bad query parameter", level: slog.LevelDebug,
			check: func(t *testing.T, rig *problemRig, p wire.Problem, _ answer) {
				if !strings.Contains(p.Detail, "?confirm= is given 2 times") {
					t.Errorf("detail %q does not say confirm is given twice", p.Detail)
				}
				if got := rig.admin.snapshot(); !strings.Contains(got, "bkt/a:5") {
					t.Errorf("after a refused reset: %s", got)
				}
			}},
		{name: "bad force", leases: &memLeases{leases: map[string]lease.Lease{}},
			method: "DELETE", target: "/v1/leases/bkt/a?force=maybe", bearer: "adm",
			status: 400, reason: "bad_request", title: "Bad force parameter", level: slog.LevelDebug},
		{name: "reset drain timeout", fakes: func(rig *problemRig) { rig.admin.resetErr = fence.ErrDrainTimeout },
			method: "DELETE", target: "/v1/fences/bkt/a?confirm=bkt/a", bearer: "adm",
			status: 503, reason: "drain_timeout", title: "Writes still in flight", retry: true, level: slog.LevelWarn,
			check: func(t *testing.T, rig *problemRig, p wire.Problem, _ answer) {
				if !strings.Contains(p.Detail, "nothing changed") {
					t.Errorf("detail %q does not say that nothing changed", p.Detail)
				}
				if got := rig.admin.snapshot(); !strings.Contains(got, "bkt/a:5") {
					t.Errorf("after a reset that timed out: %s", got)
				}
			}},
		{name: "not ready", fakes: func(rig *problemRig) { rig.store.closed = true },
			method: "GET", target: "/readyz",
			status: 503, reason: "unavailable", title: "Not ready", level: slog.LevelWarn},
		{name: "lease store failing", leases: errLeases{secret},
			method: "GET", target: "/v1/leases/bkt/a",
			status: 503, reason: "unavailable", title: "Lease store unavailable", retry: true, level: slog.LevelError},
		{name: "lease held", leases: errLeases{held},
			method: "POST", target: "/v1/leases/bkt/a", body: `{"holder":"B","ttl":"10s"}`,
			status: 409, reason: "lease_held", title: "Lease held", level: slog.LevelDebug,
			check: func(t *testing.T, _ *problemRig, p wire.Problem, _ answer) {
				if p.Name != "bkt/a" || p.Holder != "A" || p.ExpiresAt == nil || !p.ExpiresAt.Equal(expires) ||
					p.GraceEnds == nil || !p.GraceEnds.Equal(held.GraceEnds) {
					t.Errorf("lease_held problem %+v: want name, holder, expires_at and grace_ends", p)
				}
			}},
		{name: "lease lost", leases: errLeases{fmt.Errorf("%w: taken over", lease.ErrLost)},
			method: "PUT", target: "/v1/leases/bkt/a", body: `{"holder":"A","token":"1"}`,
			status: 409, reason: "lease_lost", title: "Lease lost", level: slog.LevelDebug},
		{name: "tokens exhausted", leases: errLeases{lease.ErrExhausted},
			method: "POST", target: "/v1/leases/bkt/a", body: `{"holder":"A","ttl":"10s"}`,
			status: 409, reason: "tokens_exhausted", title: "Fencing tokens exhausted", level: slog.LevelWarn},
		{name: "bad ttl", leases: &memLeases{leases: map[string]lease.Lease{}},
			method: "POST", target: "/v1/leases/bkt/a", body: `{"holder":"A","ttl":"soon"}`,
			status: 400, reason: "bad_request", title: "Bad lease request", level: slog.LevelDebug},
		{name: "unknown lease", leases: &memLeases{leases: map[string]lease.Lease{}},
			method: "GET", target: "/v1/leases/bkt/none",
			status: 404, reason: "not_found", title: "Unknown lease", level: slog.LevelDebug},
		{name: "raise of no resource key", method: "PUT", target: "/v1/fences/bkt/./a", body: `{"token":"9"}`, bearer: "adm",
			status: 400, reason: "bad_resource", title: "Bad resource", level: slog.LevelDebug},
		{name: "raise drain timeout, raised", method: "PUT", target: "/v1/fences/bkt/a", body: `{"token":"8"}`, bearer: "adm",
			fakes: func(rig *problemRig) {
				rig.admin.raiseErr, rig.admin.raiseApplies = &fence.ResourceError{Resource: "bkt/a", Err: fence.ErrDrainTimeout}, true
			},
			status: 503, reason: "drain_timeout", title: "Smaller-token writes still in flight", retry: true, level: slog.LevelWarn,
			check: func(t *testing.T, rig *problemRig, p wire.Problem, _ answer) {
				if !strings.Contains(p.Detail, "raised to 8 and stays") {
					t.Errorf("detail %q does not say that the raise stays", p.Detail)
				}
				if got := rig.admin.snapshot(); !strings.Contains(got, "bkt/a:8") {
					t.Errorf("after the raise: %s", got)
				}
			}},
		{name: "raise of a new prefix fence past the limit", method: "PUT", target: "/v1/fences/bkt/p/", body: `{"token":"8"}`, bearer: "adm",
			fakes: func(rig *problemRig) {
				rig.admin.raiseErr = &fence.ResourceError{Resource: "bkt/p/", Err: fence.ErrPrefixLimit}
			},
			status: 507, reason: "prefix_limit", title: "Too many prefix fences", level: slog.LevelError},
		{name: "raise drain timeout, nothing raised", method: "PUT", target: "/v1/fences/bkt/a", body: `{"token":"8"}`, bearer: "adm",
			fakes:  func(rig *problemRig) { rig.admin.raiseErr = fence.ErrDrainTimeout },
			status: 503, reason: "drain_timeout", title: "Smaller-token writes still in flight", retry: true, level: slog.LevelWarn,
			check: func(t *testing.T, _ *problemRig, p wire.Problem, _ answer) {
				if !strings.Contains(p.Detail, "nothing changed") {
					t.Errorf("detail %q does not say that nothing changed", p.Detail)
				}
			}},
		{name: "acquire drain timeout", leases: errLeases{fmt.Errorf("lease granted; acquire again: %w", fence.ErrDrainTimeout)},
			method: "POST", target: "/v1/leases/bkt/a", body: `{"holder":"A","ttl":"10s"}`,
			status: 503, reason: "drain_timeout", title: "Smaller-token writes still in flight", retry: true, level: slog.LevelWarn,
			check: func(t *testing.T, _ *problemRig, p wire.Problem, _ answer) {
				if !strings.Contains(p.Detail, "lease granted") {
					t.Errorf("detail %q lost the lease manager's word on the grant", p.Detail)
				}
			}},
		{name: "fence store failing", fakes: func(rig *problemRig) { rig.store.readErr = secret },
			method: "GET", target: "/v1/fences/bkt/a",
			status: 503, reason: "unavailable", title: "Fencing store unavailable", retry: true, level: slog.LevelError},
		{name: "list store failing", fakes: func(rig *problemRig) { rig.admin.listErr = secret },
			method: "GET", target: "/v1/fences", bearer: "adm",
			status: 503, reason: "unavailable", title: "Fencing store unavailable", retry: true, level: slog.LevelError},
		{name: "raise store failing", fakes: func(rig *problemRig) { rig.admin.raiseErr = fmt.Errorf("%w: %w", fence.ErrStore, secret) },
			method: "PUT", target: "/v1/fences/bkt/a", body: `{"token":"8"}`, bearer: "adm",
			status: 503, reason: "unavailable", title: "Fencing store unavailable", retry: true, level: slog.LevelError},
		{name: "shard unavailable (cluster mode)", method: "GET", target: "/v1/fences/bkt/a",
			opts: func(o *Options) {
				o.Owner = func(*http.Request, string) (func(), http.Handler, error) {
					return nil, nil, fmt.Errorf("%w: shard 3 has no owner now", ErrShardUnavailable)
				}
			},
			status: 503, reason: "shard_unavailable", title: "Shard unavailable", retry: true, level: slog.LevelWarn,
			check: func(t *testing.T, rig *problemRig, p wire.Problem, _ answer) {
				if !strings.Contains(p.Detail, "shard 3 has no owner") {
					t.Errorf("detail %q does not say why", p.Detail)
				}
			}},
		{name: "bad pool name", leases: &memLeases{leases: map[string]lease.Lease{}}, opts: withPools(errPools{nil}),
			method: "POST", target: "/v1/pools/bad%21name/claim", body: `{"holder":"A","ttl":"10s"}`,
			status: 400, reason: "bad_resource", title: "Bad pool or shard name", level: slog.LevelDebug},
		{name: "pool claim at share", leases: &memLeases{leases: map[string]lease.Lease{}},
			opts:   withPools(errPools{&pool.NoShardError{AtShare: true, Share: 2, Held: 2}}),
			method: "POST", target: "/v1/pools/jobs/claim", body: `{"holder":"A","ttl":"10s"}`,
			status: 409, reason: "no_shard", title: "No shard to claim", level: slog.LevelDebug,
			check: func(t *testing.T, _ *problemRig, p wire.Problem, _ answer) {
				if !p.AtShare || p.Share == nil || *p.Share != 2 || p.Held == nil || *p.Held != 2 {
					t.Errorf("no_shard problem %+v: want at_share, share 2, held 2", p)
				}
			}},
		{name: "pool shrink over held shards", leases: &memLeases{leases: map[string]lease.Lease{}},
			opts:   withPools(errPools{fmt.Errorf("%w: [\"3\"] are held", pool.ErrBusy)}),
			method: "PUT", target: "/v1/pools/jobs", body: `{"shards":2}`,
			status: 409, reason: "pool_busy", title: "Pool shards held", level: slog.LevelDebug},
		{name: "pool shard done with another token", leases: &memLeases{leases: map[string]lease.Lease{}},
			opts:   withPools(errPools{pool.ErrDone}),
			method: "POST", target: "/v1/pools/jobs/shards/3/done", body: `{"holder":"A","token":"4"}`,
			status: 409, reason: "shard_done", title: "Shard already done", level: slog.LevelDebug},
		{name: "bad pool definition", leases: &memLeases{leases: map[string]lease.Lease{}}, opts: withPools(errPools{nil}),
			method: "PUT", target: "/v1/pools/jobs", body: `{"shards":2,"names":["a"]}`,
			status: 400, reason: "bad_request", title: "Bad pool request", level: slog.LevelDebug},
		{name: "bad pool prefix template", leases: &memLeases{leases: map[string]lease.Lease{}}, opts: withPools(errPools{nil}),
			method: "PUT", target: "/v1/pools/jobs", body: `{"shards":2,"prefix":"out/{shard}"}`,
			status: 400, reason: "bad_request", title: "Bad pool request", level: slog.LevelDebug,
			check: func(t *testing.T, _ *problemRig, p wire.Problem, _ answer) {
				if !strings.Contains(p.Detail, `ends in "/"`) {
					t.Errorf("detail %q does not say a prefix ends in /", p.Detail)
				}
			}},
		{name: "pool prefix in cluster mode", leases: &memLeases{leases: map[string]lease.Lease{}},
			opts: func(o *Options) {
				o.Pools = errPools{nil}
				o.PrefixFence = func(string) error { return errors.New("cluster mode needs FENCEPROXY_SHARD_DEPTH") }
			},
			method: "PUT", target: "/v1/pools/jobs", body: `{"shards":2,"prefix":"out/{shard}/"}`,
			status: 400, reason: "bad_request", title: "Bad pool request", level: slog.LevelDebug,
			check: func(t *testing.T, _ *problemRig, p wire.Problem, _ answer) {
				if !strings.Contains(p.Detail, "cluster mode") {
					t.Errorf("detail %q does not say cluster mode", p.Detail)
				}
			}},
		{name: "pool prefix beyond the resource depth", leases: &memLeases{leases: map[string]lease.Lease{}},
			opts:   func(o *Options) { o.Pools, o.ResourceDepth = errPools{nil}, 2 },
			method: "PUT", target: "/v1/pools/jobs", body: `{"shards":2,"prefix":"out/{shard}/"}`,
			status: 400, reason: "bad_request", title: "Bad pool request", level: slog.LevelDebug,
			check: func(t *testing.T, _ *problemRig, p wire.Problem, _ answer) {
				if !strings.Contains(p.Detail, "FENCEPROXY_RESOURCE_DEPTH 2") || !strings.Contains(p.Detail, `such as "{shard}/"`) {
					t.Errorf("detail %q does not say what fits depth 2", p.Detail)
				}
			}},
		{name: "unknown pool", leases: &memLeases{leases: map[string]lease.Lease{}},
			opts:   withPools(errPools{pool.ErrNotFound}),
			method: "GET", target: "/v1/pools/nope",
			status: 404, reason: "not_found", title: "Unknown pool or shard", level: slog.LevelDebug},
		{name: "client gone", leases: errLeases{context.Canceled},
			method: "POST", target: "/v1/leases/bkt/a", body: `{"holder":"A","ttl":"10s"}`,
			status: 499, reason: "client_gone", title: "Client closed request", level: slog.LevelInfo},
	}
	reached := map[string]bool{}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rig := newProblemRig(t, c.leases, c.opts)
			if c.fakes != nil {
				c.fakes(rig)
			}
			a := rawCall(t, rig.srv, c.method, c.target, c.bearer, c.body)
			p := problemOf(t, a)
			if a.status != c.status || p.Reason != c.reason || p.Title != c.title {
				t.Errorf("%s %s: %d %q %q, want %d %q %q (%s)", c.method, c.target, a.status, p.Reason, p.Title, c.status, c.reason, c.title, a.body)
			}
			if got := a.header.Get("Retry-After"); (got != "") != c.retry || (c.retry && got != "1") {
				t.Errorf("Retry-After %q, want it: %v", got, c.retry)
			}
			if strings.Contains(string(a.body), "secret") {
				t.Errorf("the store's error text reached the client: %s", a.body)
			}
			if got, want := rig.log.problemLines(), []string{c.level.String() + " " + c.reason}; !slices.Equal(got, want) {
				t.Errorf("log lines %q, want %q", got, want)
			}
			if c.check != nil {
				c.check(t, rig, p, a)
			}
			reached[fmt.Sprint(c.status, c.reason, c.title)] = true
		})
	}
	// The last row takes errors that nothing else matches on a route that
	// names no failed row: reached through a route made for it.
	t.Run("internal", func(t *testing.T) {
		log := &recordLog{}
		s := &server{store: &fakeStore{}, log: slog.New(log)}
		r := chi.NewRouter()
		r.Get("/boom", handle(s, route{op: "test", status: http.StatusOK}, func(context.Context, request[none]) (none, error) {
			return none{}, errors.New("an error no row knows")
		}))
		srv := httptest.NewServer(r)
		defer srv.Close()
		a := rawCall(t, srv, "GET", "/boom", "", "")
		if p := problemOf(t, a); a.status != 500 || p.Reason != "internal" || p.Title != "Internal error" || strings.Contains(p.Detail, "no row") {
			t.Errorf("internal: %d %s", a.status, a.body)
		}
		if got := log.problemLines(); !slices.Equal(got, []string{"ERROR internal"}) {
			t.Errorf("log lines %q", got)
		}
		reached[fmt.Sprint(a.status, "internal", "Internal error")] = true
	})

	titles := map[string]bool{}
	for _, row := range table {
		if titles[row.Title] {
			t.Errorf("title %q is on two rows", row.Title)
		}
		titles[row.Title] = true
		if !reached[fmt.Sprint(row.Status, row.Reason, row.Title)] {
			t.Errorf("row %d %s %q (%v) was not reached", row.Status, row.Reason, row.Title, row.Err)
		}
	}
}

// TestClientGoneLoggedAtInfo: a lease acquire whose client goes away while
// it waits is logged at info (the client's doing), never at error.
func TestClientGoneLoggedAtInfo(t *testing.T) {
	entered := make(chan struct{})
	rig := newProblemRig(t, blockingLeases{entered: entered}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "POST", rig.srv.URL+"/v1/leases/bkt/a", strings.NewReader(`{"holder":"A","ttl":"10s"}`))
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the acquire never reached the lease manager")
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the canceled call got an answer")
	}
	timeout := time.After(10 * time.Second)
	for {
		next := rig.log.next() // before the check: a record from now on wakes us
		lines := rig.log.problemLines()
		if len(lines) > 0 {
			if !slices.Equal(lines, []string{"INFO client_gone"}) {
				t.Fatalf("log lines %q, want [INFO client_gone]", lines)
			}
			return
		}
		select {
		case <-next:
		case <-timeout:
			t.Fatal("no log line for the canceled call")
		}
	}
}

// blockingLeases is a Leases whose Acquire waits until its context ends and
// then fails with the context's cause, as lease.Manager does.
type blockingLeases struct {
	errLeases
	entered chan struct{}
}

func (l blockingLeases) Acquire(ctx context.Context, name, _ string, _ time.Duration) (lease.Lease, error) {
	close(l.entered)
	<-ctx.Done()
	return lease.Lease{}, fmt.Errorf("lease %q was granted, but writes with smaller tokens are still in flight; acquire again: %w", name, context.Cause(ctx))
}

// TestStrictRequests: bodies that are not exactly one JSON object of the
// call's members, or larger than 64 KiB, and names that are not resource
// keys, are refused with 400 before anything runs: a raise leaves every
// maximum as it was, a lease call grants nothing.
func TestStrictRequests(t *testing.T) {
	leases := &memLeases{leases: map[string]lease.Lease{}}
	rig := newProblemRig(t, leases, nil)
	before := rig.admin.snapshot()
	huge := `{"token":"9"` + strings.Repeat(" ", maxBody) + `}`
	type call struct{ method, target, body, reason, title string }
	var calls []call
	for _, body := range []string{
		`{"token":"9","holder":"x"}`,             // unknown field
		`{"token":"9"}{"token":"10"}`,            // a second object
		`{"token":"9"} x`,                        // trailing data
		huge,                                     // larger than 64 KiB
		``, `null`, `[]`, `"9"`, `9`, `{"token"`, // not one JSON object
		`{"token":"09"}`, `{"token":-1}`, `{"token":"9223372036854775808"}`, `{"token":1.5}`, // malformed tokens
	} {
		calls = append(calls, call{"PUT", "/v1/fences/bkt/a", body, "bad_request", "Bad fence request"})
	}
	for _, name := range []string{
		`bkt\a`, "bkt/a#frag", "bkt/a%0Ab", "bkt/%00", "bkt/a%7F", // raw "\", raw "#", encoded control bytes
		"bkt/../a", "bkt/./a", "bkt/%2e%2e/a", "../bkt/a", "bkt/a/..", "", // dot segments, an empty key
	} {
		calls = append(calls, call{"PUT", "/v1/fences/" + name, `{"token":"99"}`, "bad_resource", "Bad resource"})
		calls = append(calls, call{"POST", "/v1/leases/" + name, `{"holder":"A","ttl":"10s"}`, "bad_resource", "Bad lease name"})
	}
	for _, q := range []string{"prefix=bkt/%00", "after=bkt/%0A", "prefix=" + strings.Repeat("k", 4097)} {
		calls = append(calls, call{"GET", "/v1/fences?" + q, "", "bad_resource", "Bad resource"})
	}
	for _, body := range []string{
		`{"holder":"A","ttl":"10s","extra":1}`, `{"holder":"A","ttl":"10s"} {}`, `{"holder":"A","ttl":"10s"}]`,
		`{"holder":"A","ttl":"10s"` + strings.Repeat(" ", maxBody) + `}`, ``, `null`,
		`{"holder":"A","ttl":"10s","token":"1"}`, `{"holder":"A","ttl":10}`,
	} {
		calls = append(calls, call{"POST", "/v1/leases/bkt/a", body, "bad_request", "Bad lease request"})
	}
	// A value of the wrong JSON type is named in the caller's terms, not Go's.
	if a := rawCall(t, rig.srv, "POST", "/v1/leases/bkt/a", "", `{"holder":"A","ttl":10}`); a.status != 400 ||
		!strings.Contains(problemOf(t, a).Detail, `field "ttl" must be a JSON string holding a Go duration such as "30s"`) ||
		strings.Contains(problemOf(t, a).Detail, "Go struct") {
		t.Errorf(`"ttl": 10: %d %q, want 400 naming the field and the string it takes`, a.status, problemOf(t, a).Detail)
	}
	if a := rawCall(t, rig.srv, "POST", "/v1/leases/bkt/a", "", `{"holder":7,"ttl":"10s"}`); a.status != 400 ||
		!strings.Contains(problemOf(t, a).Detail, `field "holder" must be a JSON string, not a JSON number`) {
		t.Errorf(`"holder": 7: %d %q, want 400 naming the field`, a.status, problemOf(t, a).Detail)
	}
	for _, body := range []string{`{"holder":"A","token":"1","x":1}`, `{"holder":"A","token":"01"}`, `{"holder":"A"}`, `{"token":"1"}`} {
		calls = append(calls, call{"PUT", "/v1/leases/bkt/a", body, "bad_request", "Bad lease request"})
	}
	for _, c := range calls {
		a := rawCall(t, rig.srv, c.method, c.target, "adm", c.body)
		p := problemOf(t, a)
		if a.status != 400 || p.Reason != c.reason || p.Title != c.title {
			short := c.body
			if len(short) > 40 {
				short = short[:40] + "..."
			}
			t.Errorf("%s %q %q: %d %q %q, want 400 %q %q", c.method, c.target, short, a.status, p.Reason, p.Title, c.reason, c.title)
		}
	}
	if after := rig.admin.snapshot(); after != before {
		t.Errorf("refused raises changed the fences: %s, before %s", after, before)
	}
	if len(leases.leases) != 0 || leases.next != 0 {
		t.Errorf("refused lease calls granted %v", leases.leases)
	}
	// The same calls with a good name and body go through.
	if a := rawCall(t, rig.srv, "PUT", "/v1/fences/bkt/a", "adm", " {\"token\": 9}\n "); a.status != 200 {
		t.Errorf("a good raise: %d %s", a.status, a.body)
	}
	if a := rawCall(t, rig.srv, "POST", "/v1/leases/bkt/a%5Cb", "", `{"holder":"A","ttl":"10s"}`); a.status != 201 {
		t.Errorf("a good acquire (an encoded backslash is a key byte): %d %s", a.status, a.body)
	}
}

// TestAdminFenceCalls drives list, raise and reset through the handler.
func TestAdminFenceCalls(t *testing.T) {
	rig := newProblemRig(t, nil, nil)
	get := func(method, target, body string) (int, map[string]any) {
		t.Helper()
		a := rawCall(t, rig.srv, method, target, "adm", body)
		var out map[string]any
		if err := json.Unmarshal(a.body, &out); err != nil {
			t.Fatalf("%s %s: %d %s", method, target, a.status, a.body)
		}
		return a.status, out
	}
	if st, out := get("GET", "/v1/fences?prefix=bkt/&limit=1", ""); st != 200 ||
		fmt.Sprint(out) != "map[fences:[map[resource:bkt/a token:5]] next:bkt/a]" {
		t.Errorf("list page: %d %v", st, out)
	}
	if st, out := get("GET", "/v1/fences?prefix=nothing/", ""); st != 200 || fmt.Sprint(out) != "map[fences:[]]" {
		t.Errorf("empty list: %d %v", st, out)
	}
	for _, tc := range []struct{ body, want string }{{`{"token":"50"}`, "50"}, {`{"token":60}`, "60"}, {`{"token":"10"}`, "60"}} {
		if st, out := get("PUT", "/v1/fences/bkt/a", tc.body); st != 200 || out["token"] != tc.want || out["resource"] != "bkt/a" {
			t.Errorf("raise %s: %d %v, want %s", tc.body, st, out, tc.want)
		}
	}
	if st, out := get("PUT", "/v1/fences/bkt/obj%41", `{"token":"3"}`); st != 200 || out["resource"] != "bkt/objA" {
		t.Errorf("raise by an encoded key: %d %v", st, out)
	}
	if st, out := get("DELETE", "/v1/fences/bkt/a?confirm=bkt%2Fa", ""); st != 200 || out["token"] != "60" {
		t.Errorf("reset: %d %v", st, out)
	}
	if st, _ := get("DELETE", "/v1/fences/bkt/a?confirm=bkt/a", ""); st != 404 {
		t.Errorf("second reset: %d", st)
	}
	if got := strconv.Itoa(rig.admin.resets); got != "2" {
		t.Errorf("resets: %s", got)
	}
}

// errPools is a Pools whose calls all fail with err (nil: succeed empty).
type errPools struct{ err error }

func (p errPools) Define(string, pool.Spec) ([]string, error) { return nil, p.err }
func (p errPools) Claim(context.Context, string, string, time.Duration, bool) (pool.Claim, error) {
	return pool.Claim{}, p.err
}
func (p errPools) Status(string) (pool.Status, error)                  { return pool.Status{}, p.err }
func (p errPools) Done(string, string, string, uint64) (string, error) { return "", p.err }
func (p errPools) HandBack(string, string) (string, string, []string, error) {
	return "", "", nil, p.err
}
func withPools(p Pools) func(*Options) { return func(o *Options) { o.Pools = p } }

// A claim on a pool with every shard done answers no_shard with all_done,
// share and held 0, and a detail that says so.
func TestClaimAllDoneProblem(t *testing.T) {
	rig := newProblemRig(t, &memLeases{leases: map[string]lease.Lease{}}, withPools(errPools{&pool.NoShardError{AllDone: true}}))
	resp, err := http.Post(rig.srv.URL+"/v1/pools/jobs/claim", "application/json", strings.NewReader(`{"holder":"A","ttl":"10s"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var p wire.Problem
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 409 || p.Reason != wire.ReasonNoShard || !p.AllDone || p.AtShare || p.Share == nil || *p.Share != 0 ||
		p.Detail != "every shard of the pool is done" {
		t.Errorf("all-done claim: %d %+v", resp.StatusCode, p)
	}
}
