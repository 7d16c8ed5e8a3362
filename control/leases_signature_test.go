package control

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/lease"
)

// memLeases is a hand-written Leases: one holder per name, tokens counting up.
type memLeases struct {
	mu     sync.Mutex
	leases map[string]lease.Lease
	next   uint64
}

func (m *memLeases) Acquire(_ context.Context, name, holder string, ttl time.Duration) (lease.Lease, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.next++
	now := time.Now()
	l := lease.Lease{Name: name, Holder: holder, Token: m.next, TTL: ttl, AcquiredAt: now, RenewedAt: now, ExpiresAt: now.Add(ttl)}
	m.leases[name] = l
	return l, nil
}

func (m *memLeases) owned(name, holder string, token uint64) (lease.Lease, error) {
	l, ok := m.leases[name]
	if !ok || l.Holder != holder || l.Token != token || l.Released {
		return lease.Lease{}, lease.ErrLost
	}
	return l, nil
}

func (m *memLeases) Renew(name, holder string, token uint64) (lease.Lease, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, err := m.owned(name, holder, token)
	if err == nil {
		l.RenewedAt = time.Now()
		m.leases[name] = l
	}
	return l, err
}

func (m *memLeases) Release(name, holder string, token uint64) (lease.Lease, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, err := m.owned(name, holder, token)
	if err == nil {
		l.Released = true
		m.leases[name] = l
	}
	return l, err
}

func (m *memLeases) Get(name string) (lease.Lease, lease.State, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.leases[name]
	if !ok {
		return lease.Lease{}, "", lease.ErrNotFound
	}
	return l, lease.StateHeld, nil
}

func (m *memLeases) ForceRelease(name string) (lease.Lease, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.leases[name]
	l.Released = true
	m.leases[name] = l
	return l, nil
}

// fakeSigner makes a readable "signature" naming what it signed.
type fakeSigner struct{}

func (fakeSigner) Sign(resource string, token uint64) string {
	return fmt.Sprintf("sig-%s-%d", resource, token)
}

func TestLeaseAnswersCarrySignature(t *testing.T) {
	for _, signed := range []bool{true, false} {
		t.Run(fmt.Sprintf("signed=%v", signed), func(t *testing.T) {
			opts := Options{Leases: &memLeases{leases: map[string]lease.Lease{}}, AdminToken: "adm"}
			if signed {
				opts.Signer = fakeSigner{}
			}
			srv := httptest.NewServer(Handler(&fakeStore{}, slog.New(slog.DiscardHandler), opts))
			defer srv.Close()
			u := srv.URL + "/v1/leases/bkt/obj%41"
			steps := []struct {
				name, method, target, body string
				status                     int
				sig                        string // expected in header and body when signed; "" = none
			}{
				{"acquire", "POST", u, `{"holder":"A","ttl":"10s"}`, 201, "sig-bkt/objA-1"},
				{"renew", "PUT", u, `{"holder":"A","token":"1"}`, 200, "sig-bkt/objA-1"},
				{"read", "GET", u, "", 200, ""},
				{"acquire again", "POST", u, `{"holder":"A","ttl":"10s"}`, 201, "sig-bkt/objA-2"},
				{"renew with the old token", "PUT", u, `{"holder":"A","token":"1"}`, 409, ""},
				{"release", "DELETE", u, `{"holder":"A","token":"2"}`, 200, ""},
				{"force-release", "DELETE", u + "?force=true", "", 200, ""},
			}
			for _, s := range steps {
				req, _ := http.NewRequest(s.method, s.target, strings.NewReader(s.body))
				if s.method == "DELETE" && strings.Contains(s.target, "force") {
					req.Header.Set("Authorization", "Bearer adm")
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				var body map[string]any
				json.NewDecoder(resp.Body).Decode(&body)
				resp.Body.Close()
				if resp.StatusCode != s.status {
					t.Fatalf("%s: %d %v, want %d", s.name, resp.StatusCode, body, s.status)
				}
				want := ""
				if signed {
					want = s.sig
				}
				gotBody, inBody := body["token_signature"]
				if got := resp.Header.Get("X-Fencing-Token-Signature"); got != want {
					t.Errorf("%s: header %q, want %q", s.name, got, want)
				}
				if (want != "") != inBody || (inBody && gotBody != want) {
					t.Errorf("%s: token_signature %v (present %v), want %q", s.name, gotBody, inBody, want)
				}
			}
		})
	}
}

// A renew answer names a pool and shard only for a shard of a defined pool,
// not for any two-segment lease name.
func TestRenewNamesPoolOnlyForPoolShards(t *testing.T) {
	leases := &memLeases{leases: map[string]lease.Lease{}}
	rig := newProblemRig(t, leases, withPools(errPools{nil}))
	l, _ := leases.Acquire(context.Background(), "other/report.txt", "A", time.Minute)
	req, _ := http.NewRequest(http.MethodPut, rig.srv.URL+"/v1/leases/other/report.txt", strings.NewReader(fmt.Sprintf(`{"holder":"A","token":"%d"}`, l.Token)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || strings.Contains(string(body), `"pool"`) || strings.Contains(string(body), `"shard"`) {
		t.Errorf("renew of a lease that is no pool shard: %d %s; want 200 without pool and shard", resp.StatusCode, body)
	}
}
