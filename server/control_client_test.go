package server_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/client"
	"github.com/fenceproxy/fenceproxy/internal/servertest"
	"github.com/fenceproxy/fenceproxy/wire"
)

// client.Control against a real server: each call with its bearer (admin
// calls the admin token, the lease read the lease token), answers in wire
// types, refusals as *client.APIError with the problem's reason.
func TestControlClient(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) }))
	defer backend.Close()
	in := servertest.Start(t, map[string]string{"FENCEPROXY_UPSTREAM": backend.URL, "FENCEPROXY_DATA_DIR": t.TempDir(),
		"FENCEPROXY_ADMIN_TOKEN": "admin", "FENCEPROXY_LEASE_TOKEN": "lease"})
	ctx := context.Background()
	c := &client.Control{BaseURL: in.ControlURL() + "/", AdminBearer: "admin", LeaseBearer: "lease"}
	reason := func(err error) string {
		var apiErr *client.APIError
		if !errors.As(err, &apiErr) {
			return "not an APIError: " + errString(err)
		}
		return apiErr.Reason
	}

	for _, key := range []string{"bkt/a", "bkt/b c%", "bkt/c"} {
		if f, err := c.RaiseFence(ctx, key, 4); err != nil || f != (wire.Fence{Resource: key, Token: 4}) {
			t.Fatalf("RaiseFence(%q) = %+v, %v", key, f, err)
		}
	}
	if f, err := c.RaiseFence(ctx, "bkt/a", 2); err != nil || f.Token != 4 {
		t.Errorf("RaiseFence below the fence = %+v, %v; want the fence, 4", f, err)
	}
	var apiErr *client.APIError
	if _, err := c.RaiseFence(ctx, "bkt/a", 1<<63); err == nil || errors.As(err, &apiErr) {
		t.Errorf("RaiseFence(2^63) = %v, want an error before sending", err)
	}
	if f, err := c.GetFence(ctx, "bkt/b c%"); err != nil || f.Token != 4 {
		t.Errorf("GetFence = %+v, %v", f, err)
	}
	if _, err := c.GetFence(ctx, "bkt/none"); reason(err) != wire.ReasonNotFound {
		t.Errorf("GetFence of a fence never raised: %v, want not_found", err)
	}
	page, err := c.ListFences(ctx, "bkt/", "", 2)
	if err != nil || len(page.Fences) != 2 || page.Fences[1].Resource != "bkt/b c%" || page.Next != "bkt/b c%" {
		t.Errorf("ListFences(bkt/, 2) = %+v, %v", page, err)
	}
	page, err = c.ListFences(ctx, "bkt/", page.Next, 0)
	if err != nil || len(page.Fences) != 1 || page.Fences[0].Resource != "bkt/c" || page.Next != "" {
		t.Errorf("ListFences after = %+v, %v", page, err)
	}
	if _, err := c.ResetFence(ctx, "bkt/a", "bkt/b"); reason(err) != wire.ReasonBadRequest {
		t.Errorf("ResetFence with a wrong confirm: %v, want bad_request", err)
	}
	if f, err := c.ResetFence(ctx, "bkt/a", "bkt/a"); err != nil || f.Token != 4 {
		t.Errorf("ResetFence = %+v, %v", f, err)
	}

	leases := &client.Leases{BaseURL: in.ControlURL(), Bearer: "lease"}
	if _, err := leases.Acquire(ctx, "jobs/x", "A", time.Minute); err != nil {
		t.Fatal(err)
	}
	if l, err := c.GetLease(ctx, "jobs/x"); err != nil || l.Holder != "A" || l.State != "held" || l.TTL != "1m0s" {
		t.Errorf("GetLease = %+v, %v", l, err)
	}
	if lp, err := c.ListLeases(ctx, "jobs/", "", 0); err != nil || len(lp.Leases) != 1 || lp.Leases[0].Name != "jobs/x" {
		t.Errorf("ListLeases = %+v, %v", lp, err)
	}
	if l, err := c.ForceRelease(ctx, "jobs/x"); err != nil || l.State != "released" {
		t.Errorf("ForceRelease = %+v, %v", l, err)
	}
	if _, err := c.ForceRelease(ctx, "jobs/none"); reason(err) != wire.ReasonNotFound {
		t.Errorf("ForceRelease of a lease never acquired: %v, want not_found", err)
	}

	// Each bearer goes where it belongs.
	noAdmin := &client.Control{BaseURL: in.ControlURL(), LeaseBearer: "lease"}
	for name, err := range map[string]error{
		"ListFences":   func() error { _, err := noAdmin.ListFences(ctx, "", "", 0); return err }(),
		"RaiseFence":   func() error { _, err := noAdmin.RaiseFence(ctx, "bkt/c", 9); return err }(),
		"ResetFence":   func() error { _, err := noAdmin.ResetFence(ctx, "bkt/c", "bkt/c"); return err }(),
		"ListLeases":   func() error { _, err := noAdmin.ListLeases(ctx, "", "", 0); return err }(),
		"ForceRelease": func() error { _, err := noAdmin.ForceRelease(ctx, "jobs/x"); return err }(),
	} {
		if reason(err) != wire.ReasonUnauthorized {
			t.Errorf("%s without the admin bearer: %v, want unauthorized", name, err)
		}
	}
	noLease := &client.Control{BaseURL: in.ControlURL(), AdminBearer: "admin"}
	if _, err := noLease.GetLease(ctx, "jobs/x"); reason(err) != wire.ReasonUnauthorized {
		t.Errorf("GetLease without the lease bearer: %v, want unauthorized", err)
	}

	// Out of reach: the transport's error, not an APIError.
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	if _, err := (&client.Control{BaseURL: dead.URL}).GetFence(ctx, "bkt/c"); err == nil || errors.As(err, &apiErr) {
		t.Errorf("GetFence on a closed listener: %v, want a transport error", err)
	}
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}

// The client pointed at the proxy listener by mistake sends no bearer,
// even when the backend behind it answers like the control API: with its
// Fenceproxy-Listener: control header (which the proxy drops), or with a
// redirect to a stand-in that has the header (which the client does not
// follow). The backend and the stand-in never see an Authorization header.
func TestControlClientProxyListenerImpersonated(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{} // "backend /path" and "stand-in /path", with " bearer" when one came
	record := func(who string, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		seen[who+" "+r.URL.Path]++
		if r.Header.Get("Authorization") != "" {
			seen[who+" bearer"]++
		}
	}
	standIn := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		record("stand-in", r)
		w.Header().Set(wire.HeaderListener, wire.ListenerControl)
		io.WriteString(w, `{"status":"ok","fences":[],"leases":[]}`)
	}))
	defer standIn.Close()
	for _, redirect := range []bool{false, true} {
		t.Run(fmt.Sprintf("redirect=%v", redirect), func(t *testing.T) {
			mu.Lock()
			clear(seen)
			mu.Unlock()
			backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				record("backend", r)
				if redirect {
					http.Redirect(w, r, standIn.URL+r.URL.RequestURI(), http.StatusFound)
					return
				}
				w.Header().Set(wire.HeaderListener, wire.ListenerControl)
				io.WriteString(w, `{"status":"ok","fences":[],"leases":[]}`)
			}))
			defer backend.Close()
			in := servertest.Start(t, map[string]string{"FENCEPROXY_UPSTREAM": backend.URL, "FENCEPROXY_DATA_DIR": t.TempDir(),
				"FENCEPROXY_ADMIN_TOKEN": "admin", "FENCEPROXY_LEASE_TOKEN": "lease"})
			ctx := context.Background()
			c := &client.Control{BaseURL: in.ProxyURL(), AdminBearer: "admin", LeaseBearer: "lease"}
			leases := &client.Leases{BaseURL: in.ProxyURL(), Bearer: "lease"}
			for name, err := range map[string]error{
				"ListFences": func() error { _, err := c.ListFences(ctx, "", "", 0); return err }(),
				"RaiseFence": func() error { _, err := c.RaiseFence(ctx, "bkt/a", 9); return err }(),
				"GetLease":   func() error { _, err := c.GetLease(ctx, "jobs/x"); return err }(),
				"Acquire":    func() error { _, err := leases.Acquire(ctx, "jobs/x", "A", time.Minute); return err }(),
			} {
				if !errors.Is(err, client.ErrNotControlListener) {
					t.Errorf("%s on the proxy listener: %v, want ErrNotControlListener", name, err)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if seen["backend /healthz"] == 0 {
				t.Fatalf("the backend was never asked (%v): the test proves nothing", seen)
			}
			if seen["backend bearer"] != 0 || seen["stand-in bearer"] != 0 {
				t.Errorf("a bearer was sent: %v", seen)
			}
			if c, err := (&client.Control{BaseURL: in.ControlURL(), AdminBearer: "admin"}).ListFences(ctx, "", "", 0); err != nil {
				t.Errorf("ListFences on the control listener: %+v, %v", c, err)
			}
		})
	}
}
