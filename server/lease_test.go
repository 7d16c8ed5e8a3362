package server_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/servertest"
)

// leaseBackend records the fencing tokens of the writes that reach it.
type leaseBackend struct {
	mu     sync.Mutex
	tokens []string
}

func (b *leaseBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	b.mu.Lock()
	b.tokens = append(b.tokens, r.Header.Get("X-Fencing-Token"))
	b.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (b *leaseBackend) got() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Join(b.tokens, ",")
}

// write sends a fenced PUT through the proxy with token.
func write(t *testing.T, in *servertest.Instance, path, token string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, in.ProxyURL()+path, strings.NewReader("data"))
	req.Header.Set("X-Fencing-Token", token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func startLeaseProxy(t *testing.T, extra map[string]string) (*servertest.Instance, *leaseBackend) {
	backend := &leaseBackend{}
	srv := httptest.NewServer(backend)
	t.Cleanup(srv.Close)
	env := map[string]string{
		"FENCEPROXY_UPSTREAM": srv.URL, "FENCEPROXY_DATA_DIR": t.TempDir(),
		"FENCEPROXY_LEASE_MIN_TTL": "50ms", "FENCEPROXY_LEASE_GRACE": "200ms",
	}
	for k, v := range extra {
		env[k] = v
	}
	return servertest.Start(t, env), backend
}

// The first background document's timelines through the running server:
// (a) A stalls past its lease, B takes over, A's renew and write are refused;
// (b) A renews, stalls, B takes over, A's write is refused, before B writes.
func TestLeaseTakeoverFencesAhead(t *testing.T) {
	in, backend := startLeaseProxy(t, nil)
	leases := in.ControlURL() + "/v1/leases/bkt/report"

	status, a := servertest.Call(t, "POST", leases, `{"holder":"A","ttl":"300ms"}`, "")
	if status != 201 {
		t.Fatalf("A acquire: %d %v", status, a)
	}
	aTok := a["token"].(string)
	if write(t, in, "/bkt/report", aTok) != 204 {
		t.Fatal("A's write with its token was refused")
	}
	if status, _ := servertest.Call(t, "PUT", leases, `{"holder":"A","token":"`+aTok+`"}`, ""); status != 200 {
		t.Fatalf("A renew: %d", status)
	}
	// B cannot take over while A holds (or is in its grace).
	if status, body := servertest.Call(t, "POST", leases, `{"holder":"B","ttl":"300ms"}`, ""); status != 409 || body["holder"] != "A" {
		t.Fatalf("B acquire while A holds: %d %v", status, body)
	}
	// A stalls past TTL and grace. The lease ends on the server's clock, which
	// signals no event: poll its state.
	servertest.Eventually(t, 5*time.Second, "A's lease has expired", func() bool {
		_, body := servertest.Call(t, "GET", leases, "", "")
		return body["state"] == "expired"
	})
	status, b := servertest.Call(t, "POST", leases, `{"holder":"B","ttl":"300ms"}`, "")
	if status != 201 {
		t.Fatalf("B acquire after expiry: %d %v", status, b)
	}
	bTok := b["token"].(string)
	if an, bn := servertest.MustUint(t, aTok), servertest.MustUint(t, bTok); bn <= an {
		t.Fatalf("B's token %d not above A's %d", bn, an)
	}
	// Fence-ahead: before B writes anything, A is already refused.
	if got := write(t, in, "/bkt/report", aTok); got != 409 {
		t.Fatalf("A's late write before B wrote: %d, want 409", got)
	}
	if status, _ := servertest.Call(t, "PUT", leases, `{"holder":"A","token":"`+aTok+`"}`, ""); status != 409 {
		t.Fatalf("A's late renew: %d, want 409", status)
	}
	if write(t, in, "/bkt/report", bTok) != 204 {
		t.Fatal("B's write refused")
	}
	if got, want := backend.got(), aTok+","+bTok; got != want {
		t.Fatalf("backend applied %s, want %s", got, want)
	}
	status, state := servertest.Call(t, "GET", leases, "", "")
	if status != 200 || state["holder"] != "B" || state["token"] != bTok {
		t.Fatalf("GET lease: %d %v", status, state)
	}
}

func TestLeaseBearerToken(t *testing.T) {
	in, _ := startLeaseProxy(t, map[string]string{"FENCEPROXY_LEASE_TOKEN": "s3cret"})
	leases := in.ControlURL() + "/v1/leases/bkt/obj"
	for _, bearer := range []string{"", "wrong"} {
		if status, _ := servertest.Call(t, "POST", leases, `{"holder":"A","ttl":"1s"}`, bearer); status != 401 {
			t.Fatalf("acquire with bearer %q: %d, want 401", bearer, status)
		}
	}
	if status, _ := servertest.Call(t, "GET", leases, "", "s3cret"); status != 404 {
		t.Fatalf("nothing may have changed: GET %d, want 404", status)
	}
	if status, _ := servertest.Call(t, "POST", leases, `{"holder":"A","ttl":"1s"}`, "s3cret"); status != 201 {
		t.Fatalf("acquire with the token: %d", status)
	}
}

func TestLeaseBadRequests(t *testing.T) {
	in, _ := startLeaseProxy(t, map[string]string{"FENCEPROXY_RESOURCE_DEPTH": "2"})
	base := in.ControlURL() + "/v1/leases/"
	for _, tc := range []struct{ method, path, body string }{
		{"POST", "bkt/part/extra", `{"holder":"A","ttl":"1s"}`}, // 3 segments with depth 2
		{"POST", "bkt", `{"holder":"A","ttl":"1s"}`},
		{"POST", "bkt/part", `{"holder":"A","ttl":"10"}`},
		{"POST", "bkt/part", `{"holder":"","ttl":"1s"}`},
		{"POST", "bkt/part", `{"holder":"A","ttl":"2h"}`},
		{"POST", "bkt/part", `{"holder":"A","ttl":"1s","extra":1}`},
		{"PUT", "bkt/part", `{"holder":"A","token":"007"}`},
		{"PUT", "bkt/part", `{"holder":"A"}`},
		{"POST", "bkt/%2e%2e", `{"holder":"A","ttl":"1s"}`},
		{"POST", "bkt/a%00", `{"holder":"A","ttl":"1s"}`},
		{"PUT", "bkt/part", `{"holder":"A","token":"1","ttl":"30s"}`},
	} {
		if status, body := servertest.Call(t, tc.method, base+tc.path, tc.body, ""); status != 400 {
			t.Errorf("%s %s %s: %d %v, want 400", tc.method, tc.path, tc.body, status, body)
		}
	}
	if status, _ := servertest.Call(t, "GET", base+"bkt/part", "", ""); status != 404 {
		t.Fatalf("a bad request created a lease: %d", status)
	}
	// Tokens are accepted as strings or numbers.
	status, a := servertest.Call(t, "POST", base+"bkt/part", `{"holder":"A","ttl":"1s"}`, "")
	if status != 201 {
		t.Fatal(status)
	}
	if status, _ := servertest.Call(t, "PUT", base+"bkt/part", `{"holder":"A","token":`+a["token"].(string)+`}`, ""); status != 200 {
		t.Fatalf("renew with a numeric token: %d", status)
	}
}

// FENCEPROXY_LEASE_GRACE=0s is no grace at all: another holder acquires the
// moment the lease expires. Unset, the grace is 2/3 of the lease's TTL.
func TestLeaseGraceZeroMeansNone(t *testing.T) {
	for _, tc := range []struct {
		name      string
		grace     string // "" leaves FENCEPROXY_LEASE_GRACE unset
		wantState string // right after expiry
		wantB     int    // B's acquire right after expiry
	}{
		{"0s", "0s", "expired", http.StatusCreated},
		{"unset", "", "grace", http.StatusConflict},
	} {
		t.Run(tc.name, func(t *testing.T) {
			backend := httptest.NewServer(&leaseBackend{})
			t.Cleanup(backend.Close)
			env := map[string]string{"FENCEPROXY_UPSTREAM": backend.URL, "FENCEPROXY_DATA_DIR": t.TempDir(), "FENCEPROXY_LEASE_MIN_TTL": "50ms"}
			if tc.grace != "" {
				env["FENCEPROXY_LEASE_GRACE"] = tc.grace
			}
			in := servertest.Start(t, env)
			leases := in.ControlURL() + "/v1/leases/bkt/graceless"
			const ttl = 600 * time.Millisecond // unset: 400ms of grace after it
			if status, body := servertest.Call(t, "POST", leases, `{"holder":"A","ttl":"`+ttl.String()+`"}`, ""); status != 201 {
				t.Fatalf("A acquire: %d %v", status, body)
			}
			// The lease ends on the server's clock, which signals no event:
			// poll until its TTL has run out (held, then suspect, before).
			servertest.Eventually(t, 5*time.Second, "A's TTL has run out", func() bool {
				_, body := servertest.Call(t, "GET", leases, "", "")
				return body["state"] != "held" && body["state"] != "suspect"
			})
			if status, body := servertest.Call(t, "GET", leases, "", ""); status != 200 || body["state"] != tc.wantState {
				t.Fatalf("lease just after expiry: %d %v, want state %q", status, body, tc.wantState)
			}
			if status, body := servertest.Call(t, "POST", leases, `{"holder":"B","ttl":"1s"}`, ""); status != tc.wantB {
				t.Fatalf("B acquire just after A's expiry: %d %v, want %d", status, body, tc.wantB)
			}
		})
	}
}

// A real server sweeps expired lease records after FENCEPROXY_LEASE_RETENTION
// (issue 29): the listing and the lease's GET forget them, the metric counts
// them, and the name acquired again gets a token above every earlier one.
func TestLeaseRecordsSwept(t *testing.T) {
	in, _ := startLeaseProxy(t, map[string]string{"FENCEPROXY_LEASE_RETENTION": "0s", "FENCEPROXY_ADMIN_TOKEN": "adm"})
	base := in.ControlURL() + "/v1/leases/"
	var top uint64
	for _, name := range []string{"swept/a", "swept/b", "swept/c"} {
		status, body := servertest.Call(t, "POST", base+name, `{"holder":"w1","ttl":"100ms"}`, "")
		if status != 201 {
			t.Fatalf("acquire %s: %d %v", name, status, body)
		}
		top = max(top, servertest.MustUint(t, body["token"].(string)))
	}
	// Removable after TTL + grace + TTL + 0s; the sweep runs every second.
	deadline := time.Now().Add(15 * time.Second)
	for {
		status, body := servertest.Call(t, "GET", in.ControlURL()+"/v1/leases?prefix=swept/", "", "adm")
		if status != 200 {
			t.Fatalf("list: %d %v", status, body)
		}
		if n := len(body["leases"].([]any)); n == 0 {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("%d lease records still listed after 15s", n)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if status, _ := servertest.Call(t, "GET", base+"swept/a", "", ""); status != 404 {
		t.Fatalf("GET of a swept lease: %d, want 404", status)
	}
	resp, err := http.Get(in.ControlURL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(metrics), "fenceproxy_lease_records_removed_total 3") {
		t.Fatalf("metrics without fenceproxy_lease_records_removed_total 3")
	}
	status, body := servertest.Call(t, "POST", base+"swept/a", `{"holder":"w2","ttl":"1s"}`, "")
	if status != 201 {
		t.Fatalf("acquire after the sweep: %d %v", status, body)
	}
	if tok := servertest.MustUint(t, body["token"].(string)); tok <= top {
		t.Fatalf("token %d after the sweep, want above every earlier one (%d)", tok, top)
	}
}
