package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/smithy-go"
	"github.com/fenceproxy/fenceproxy/wire"
)

func TestCheckResponse(t *testing.T) {
	mk := func(status int, h map[string]string, body string) *http.Response {
		r := &http.Response{StatusCode: status, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(body))}
		for k, v := range h {
			r.Header.Set(k, v)
		}
		return r
	}
	// The backend's own 409: nil, body untouched.
	r := mk(409, nil, "mine")
	if err := CheckResponse(r); err != nil {
		t.Fatalf("backend 409: %v", err)
	}
	if b, _ := io.ReadAll(r.Body); string(b) != "mine" {
		t.Errorf("backend 409 body %q", b)
	}
	// A stale refusal: the header wins for Current, the body gives the rest, and the body stays readable.
	body := `{"title":"Stale fencing token","status":409,"reason":"stale","resource":"b/k","token":"7","current_token":"9"}`
	r = mk(409, map[string]string{HeaderRefused: "stale", HeaderCurrentToken: "9"}, body)
	var se *StaleError
	if err := CheckResponse(r); !errors.As(err, &se) || *se != (StaleError{"b/k", 7, 9}) {
		t.Fatalf("stale: %v", err)
	}
	if b, _ := io.ReadAll(r.Body); string(b) != body {
		t.Errorf("stale body after CheckResponse: %q", b)
	}
	// Headers alone suffice.
	r = mk(409, map[string]string{HeaderRefused: "stale", HeaderCurrentToken: "3"}, "not json")
	if err := CheckResponse(r); !errors.As(err, &se) || se.Current != 3 {
		t.Fatalf("stale without problem body: %v", err)
	}
	// Other refusals.
	r = mk(503, map[string]string{HeaderRefused: "drain_timeout"}, `{"title":"t","detail":"d"}`)
	var re *RefusedError
	if err := CheckResponse(r); !errors.As(err, &re) || *re != (RefusedError{Status: 503, Reason: "drain_timeout", Detail: "d"}) || errors.Is(err, ErrStale) {
		t.Fatalf("drain timeout: %v", err)
	}
	if CheckResponse(nil) != nil || CheckResponse(mk(200, nil, "")) != nil {
		t.Error("nil/200 not nil")
	}
	if _, ok := AsStale(errors.New("x")); ok {
		t.Error("AsStale of a plain error")
	}
}

func TestTransport(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Header.Get("X-Fencing-Token")+"|"+r.Header.Get("X-Epoch"))
	}))
	defer srv.Close()
	hc := &http.Client{Transport: &Transport{}}
	req, _ := http.NewRequestWithContext(WithToken(context.Background(), 42), http.MethodPut, srv.URL, nil)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if req.Header.Get(DefaultHeader) != "" {
		t.Error("the caller's request was modified")
	}
	req, _ = http.NewRequest(http.MethodGet, srv.URL, nil) // no token: sent unchanged
	if resp, err = hc.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	custom := &http.Client{Transport: &Transport{Header: "X-Epoch", Token: func(*http.Request) (uint64, error) { return 0, nil }}}
	if resp, err = custom.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	tooBig := &http.Client{Transport: &Transport{Token: func(*http.Request) (uint64, error) { return MaxToken + 1, nil }}}
	if _, err := tooBig.Do(req); err == nil {
		t.Error("token above 2^63-1 was sent")
	}
	if want := []string{"42|", "|", "|0"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("server saw %q, want %q", got, want)
	}
}

func TestLeasesErrors(t *testing.T) {
	srv := newControlStandIn(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.EscapedPath() {
		case "/v1/leases/a%20b/c":
			w.WriteHeader(404) // a 404 that is not the API's "Unknown lease"
		default:
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(409)
			io.WriteString(w, `{"title":"Fencing tokens exhausted","status":409,"reason":"tokens_exhausted","detail":"reset"}`)
		}
	}))
	defer srv.Close()
	l := &Leases{BaseURL: srv.URL + "/"}
	var ae *APIError
	if _, err := l.Get(context.Background(), "a b/c"); errors.Is(err, ErrNotFound) || !errors.As(err, &ae) || ae.Status != 404 {
		t.Errorf("plain 404: %v", err)
	}
	if _, err := l.Renew(context.Background(), "x", "h", 1); !errors.Is(err, ErrExhausted) {
		t.Errorf("exhausted: %v", err)
	}
	if _, err := l.Acquire(context.Background(), "x", "h", 0); err == nil {
		t.Error("zero ttl accepted")
	}
}

// Lease errors are decided by the problem's reason, whatever its title says.
func TestLeasesErrorsByReason(t *testing.T) {
	srv := newControlStandIn(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		body := map[string]string{
			"/v1/leases/held":   `{"title":"x","status":409,"reason":"lease_held","name":"held","holder":"A","expires_at":"2026-01-02T03:04:05Z","grace_ends":"2026-01-02T03:04:07Z","detail":"d"}`,
			"/v1/leases/lost":   `{"title":"x","status":409,"reason":"lease_lost","detail":"d"}`,
			"/v1/leases/gone":   `{"title":"x","status":404,"reason":"not_found","detail":"d"}`,
			"/v1/leases/titled": `{"title":"Lease held","status":409,"holder":"A"}`,
			"/v1/leases/busy":   `{"title":"x","status":503,"reason":"drain_timeout","detail":"granted; acquire again"}`,
		}[r.URL.Path]
		var p struct{ Status int }
		json.Unmarshal([]byte(body), &p)
		w.WriteHeader(p.Status)
		io.WriteString(w, body)
	}))
	defer srv.Close()
	l := &Leases{BaseURL: srv.URL}
	ctx := context.Background()

	_, err := l.Acquire(ctx, "held", "B", time.Second)
	var held *HeldError
	if !errors.As(err, &held) || !errors.Is(err, ErrHeld) || held.Holder != "A" || held.Detail != "d" ||
		!held.ExpiresAt.Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) || !held.GraceEnds.Equal(time.Date(2026, 1, 2, 3, 4, 7, 0, time.UTC)) {
		t.Errorf("lease_held: %v (%+v)", err, held)
	}
	var apiErr *APIError
	if _, err := l.Renew(ctx, "lost", "A", 1); !errors.Is(err, ErrLost) || !errors.As(err, &apiErr) || apiErr.Reason != "lease_lost" {
		t.Errorf("lease_lost: %v", err)
	}
	if _, err := l.Get(ctx, "gone"); !errors.Is(err, ErrNotFound) {
		t.Errorf("not_found: %v", err)
	}
	if _, err := l.Acquire(ctx, "titled", "B", time.Second); errors.Is(err, ErrHeld) || !errors.As(err, &apiErr) || apiErr.Status != 409 {
		t.Errorf("a 409 titled Lease held without a reason: %v", err)
	}
	if _, err := l.Acquire(ctx, "busy", "B", time.Second); !errors.As(err, &apiErr) || apiErr.Status != 503 ||
		apiErr.Reason != "drain_timeout" || apiErr.Detail != "granted; acquire again" {
		t.Errorf("drain_timeout: %v", err)
	}
}

// TestCheckResponseS3Error: in S3 mode a refusal's body is an S3 <Error>;
// CheckResponse takes its Message as the detail and the request's token.
func TestCheckResponseS3Error(t *testing.T) {
	req, _ := http.NewRequest(http.MethodPut, "http://h/b/k", nil)
	req.Header.Set("X-Fencing-Token", "41")
	body := `<?xml version="1.0" encoding="UTF-8"?><Error><Code>StaleFencingToken</Code><Message>stale fencing token 41 for resource &#34;b/k&#34;: current maximum is 42</Message><Resource>/b/k</Resource><RequestId>X</RequestId></Error>`
	mk := func(status int, reason string) *http.Response {
		return &http.Response{StatusCode: status, Request: req, Body: io.NopCloser(strings.NewReader(body)),
			Header: http.Header{"Content-Type": {"application/xml"}, "Fencing-Refused": {reason}, "Fencing-Current-Token": {"42"}}}
	}
	err := CheckResponse(mk(http.StatusConflict, "stale"))
	se, ok := AsStale(err)
	if !ok || se.Token != 41 || se.Current != 42 {
		t.Fatalf("stale: %#v %v", err, ok)
	}
	var re *RefusedError
	if err := CheckResponse(mk(http.StatusPreconditionRequired, "missing")); !errors.As(err, &re) || !strings.Contains(re.Detail, "current maximum is 42") {
		t.Fatalf("missing: %#v", err)
	}
}

// TestRefusalsAreAPIErrors: a refusal is a smithy.APIError with the S3
// code the proxy sends in S3 mode, so code written for the SDK's own errors
// (ErrorCode) reads it through StackFencing, in either mode.
func TestRefusalsAreAPIErrors(t *testing.T) {
	for _, c := range []struct {
		status int
		reason string
		code   string
		fault  smithy.ErrorFault
	}{
		{409, "stale", "StaleFencingToken", smithy.FaultClient},
		{428, "missing", "MissingFencingToken", smithy.FaultClient},
		{400, "malformed", "InvalidFencingToken", smithy.FaultClient},
		{403, "jump", "FencingTokenTooFarAhead", smithy.FaultClient},
		{503, "drain_timeout", "FencingDrainTimeout", smithy.FaultServer},
	} {
		resp := &http.Response{StatusCode: c.status, Body: io.NopCloser(strings.NewReader("{}")),
			Header: http.Header{"Fencing-Refused": {c.reason}, "Fencing-Current-Token": {"42"}}}
		var ae smithy.APIError
		if err := CheckResponse(resp); !errors.As(err, &ae) || ae.ErrorCode() != c.code || ae.ErrorFault() != c.fault || ae.ErrorMessage() != err.Error() {
			t.Errorf("%d %s: %#v, want a smithy.APIError with code %s, fault %v", c.status, c.reason, err, c.code, c.fault)
		}
	}
}

// newControlStandIn serves h as a control listener stand-in: every answer
// carries the control listener's header, as the real one's do.
func newControlStandIn(h http.Handler) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(wire.HeaderListener, wire.ListenerControl)
		h.ServeHTTP(w, r)
	}))
}

// A bearer token is never sent to an address that is not the control API:
// pointed at a proxy listener (which forwards to its backend), the call
// fails naming the mix-up, and the backend never sees the credential.
func TestControlRefusesProxyListener(t *testing.T) {
	var sawBearer atomic.Int32
	var calls atomic.Int32
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.Header.Get("Authorization") != "" {
			sawBearer.Add(1)
		}
		w.Write([]byte("ok from the backend"))
	}))
	defer backend.Close()
	c := &Control{BaseURL: backend.URL, AdminBearer: "secret-admin"}
	_, err := c.ListFences(context.Background(), "", "", 0)
	if !errors.Is(err, ErrNotControlListener) || !strings.Contains(err.Error(), "FENCEPROXY_CONTROL_LISTEN") {
		t.Fatalf("ListFences against a non-control address: %v, want ErrNotControlListener naming FENCEPROXY_CONTROL_LISTEN", err)
	}
	if _, err := c.RaiseFence(context.Background(), "bkt/a", 5); !errors.Is(err, ErrNotControlListener) {
		t.Fatalf("RaiseFence: %v, want ErrNotControlListener", err)
	}
	if _, err := c.GetFence(context.Background(), "bkt/a"); !errors.Is(err, ErrNotControlListener) {
		t.Fatalf("GetFence (no bearer): %v, want ErrNotControlListener, not a JSON decoding error", err)
	}
	if n := sawBearer.Load(); n != 0 {
		t.Fatalf("the backend saw the admin bearer %d times", n)
	}
	if calls.Load() == 0 {
		t.Fatal("the stand-in was never called: the test proves nothing")
	}
}

// bearerLog records, per path, the requests a test server got and those
// that carried an Authorization header.
type bearerLog struct {
	mu      sync.Mutex
	calls   map[string]int
	bearers map[string]int
}

func newBearerLog() *bearerLog {
	return &bearerLog{calls: map[string]int{}, bearers: map[string]int{}}
}

func (l *bearerLog) record(r *http.Request) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls[r.URL.Path]++
	if r.Header.Get("Authorization") != "" {
		l.bearers[r.URL.Path]++
	}
}

func (l *bearerLog) counts() (calls, bearers map[string]int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.calls), maps.Clone(l.bearers)
}

// A redirect is never followed: the check before a bearer is sent refuses
// an address whose /healthz redirects to a control API (or something that
// answers like one), and a call to a verified control API that answers
// with a redirect, to its own host or another, fails naming it. Nothing
// with the bearer reaches the redirect's target, nor, for the check, the
// address itself.
func TestControlRefusesRedirects(t *testing.T) {
	ctx := context.Background()
	// newFake starts a stand-in control API for the redirects to point to.
	newFake := func(t *testing.T) (*httptest.Server, *bearerLog) {
		log := newBearerLog()
		fake := newControlStandIn(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			log.record(r)
			io.WriteString(w, `{"fences":[]}`)
		}))
		t.Cleanup(fake.Close)
		return fake, log
	}

	t.Run("check", func(t *testing.T) {
		fake, fakeLog := newFake(t)
		frontLog := newBearerLog()
		front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			frontLog.record(r)
			http.Redirect(w, r, fake.URL+r.URL.RequestURI(), http.StatusFound)
		}))
		defer front.Close()
		c := &Control{BaseURL: front.URL, AdminBearer: "secret-admin"}
		_, err := c.ListFences(ctx, "", "", 0)
		if !errors.Is(err, ErrNotControlListener) || !errors.Is(err, ErrRedirect) || !strings.Contains(err.Error(), fake.URL) {
			t.Errorf("ListFences through a redirecting address: %v, want ErrNotControlListener and ErrRedirect naming the target", err)
		}
		lease := &Leases{BaseURL: front.URL, Bearer: "secret-lease"}
		if _, err := lease.Acquire(ctx, "jobs/a", "A", time.Minute); !errors.Is(err, ErrRedirect) {
			t.Errorf("Leases.Acquire through a redirecting address: %v, want ErrRedirect", err)
		}
		calls, bearers := frontLog.counts()
		if calls["/healthz"] == 0 {
			t.Fatal("the redirecting address was never asked: the test proves nothing")
		}
		if len(bearers) != 0 || len(calls) != 1 {
			t.Errorf("the redirecting address got %v (with a bearer: %v), want /healthz only, never a bearer", calls, bearers)
		}
		if calls, _ := fakeLog.counts(); len(calls) != 0 {
			t.Errorf("the redirect's target got %v: the redirect was followed", calls)
		}
	})

	t.Run("calls", func(t *testing.T) {
		fake, fakeLog := newFake(t)
		ctlLog := newBearerLog()
		ctl := newControlStandIn(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctlLog.record(r)
			switch r.URL.Path {
			case "/healthz":
				io.WriteString(w, `{"status":"ok"}`)
			case "/v1/fences": // to its own host: net/http would resend the bearer
				http.Redirect(w, r, "/elsewhere", http.StatusTemporaryRedirect)
			case "/v1/leases":
				http.Redirect(w, r, fake.URL+"/v1/leases", http.StatusPermanentRedirect)
			default:
				io.WriteString(w, `{"fences":[]}`)
			}
		}))
		defer ctl.Close()
		c := &Control{BaseURL: ctl.URL, AdminBearer: "secret-admin"}
		if _, err := c.ListFences(ctx, "", "", 0); !errors.Is(err, ErrRedirect) || !strings.Contains(err.Error(), "/elsewhere") {
			t.Errorf("ListFences answered with a redirect to its own host: %v, want ErrRedirect naming /elsewhere", err)
		}
		if _, err := c.ListLeases(ctx, "", "", 0); !errors.Is(err, ErrRedirect) {
			t.Errorf("ListLeases answered with a redirect to another host: %v, want ErrRedirect", err)
		}
		calls, bearers := ctlLog.counts()
		if bearers["/v1/fences"] != 1 || bearers["/v1/leases"] != 1 {
			t.Fatalf("the control stand-in got %v (with a bearer: %v): the calls never reached it; the test proves nothing", calls, bearers)
		}
		if calls["/elsewhere"] != 0 {
			t.Errorf("the same-host redirect was followed: /elsewhere got %d requests (%d with the bearer)", calls["/elsewhere"], bearers["/elsewhere"])
		}
		if calls, _ := fakeLog.counts(); len(calls) != 0 {
			t.Errorf("the other host got %v: the redirect was followed", calls)
		}
	})
}
