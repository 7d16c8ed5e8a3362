package server_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/client"
	"github.com/fenceproxy/fenceproxy/internal/servertest"
	"github.com/fenceproxy/fenceproxy/wire"
)

// A pool with a prefix on a real fenceproxy, through the Go client: A's
// claim is a lease on the shard's prefix and A's writes to new keys below
// it pass; A stalls, its lease and grace run out and B claims the shard:
// from B's claim on, A's writes to new keys below the prefix are refused
// (409 naming the prefix fence, at B's token) and B's pass. A renew of the
// prefix name is a pool shard's; a prefix change while the shard is held
// is 409 pool_busy; a bad template is 400.
func TestPoolPrefixFencesShardKeys(t *testing.T) {
	backend := &lenientStore{objects: map[string]string{}}
	srv := httptest.NewServer(backend)
	t.Cleanup(srv.Close)
	in := servertest.Start(t, map[string]string{
		"FENCEPROXY_UPSTREAM": srv.URL, "FENCEPROXY_DATA_DIR": t.TempDir(),
		"FENCEPROXY_LEASE_MIN_TTL": "100ms", "FENCEPROXY_LEASE_GRACE": "100ms", "FENCEPROXY_LOG_LEVEL": "warn",
	})
	ctx := context.Background()
	leases := &client.Leases{BaseURL: in.ControlURL()}
	pa := &client.Pool{Leases: leases, Name: "daily", Holder: "A", TTL: 200 * time.Millisecond}
	pb := &client.Pool{Leases: leases, Name: "daily", Holder: "B", TTL: 10 * time.Second}

	for _, bad := range []struct{ prefix, why string }{
		{"reports/daily/", "{shard}"},
		{"reports/{shard}", `ends in "/"`},
		{"reports/{shard}/{shard}/", "exactly once"},
		{"reports/{shard}/../", "dot segment"},
	} {
		_, err := pa.Define(ctx, wire.PoolSpec{Names: []string{"3"}, Prefix: bad.prefix})
		var apiErr *client.APIError
		if !errors.As(err, &apiErr) || apiErr.Status != http.StatusBadRequest || !strings.Contains(apiErr.Detail, bad.why) {
			t.Errorf("define with prefix %q: %v; want 400 saying %q", bad.prefix, err, bad.why)
		}
	}
	st, err := pa.Define(ctx, wire.PoolSpec{Names: []string{"3"}, Prefix: "reports/daily/{shard}/"})
	if err != nil || st.Prefix != "reports/daily/{shard}/" || len(st.Shards) != 1 || st.Shards[0].Name != "reports/daily/3/" {
		t.Fatalf("define: %+v, %v", st, err)
	}

	a, err := pa.Claim(ctx)
	if err != nil || a.Shard != "3" || a.Lease.Name != "reports/daily/3/" {
		t.Fatalf("A's claim: %+v, %v; want the lease reports/daily/3/", a, err)
	}
	at := strconv.FormatUint(a.Lease.Token, 10)
	for _, key := range []string{"f1", "deeper/f2"} {
		if s, _, _ := send(t, in, http.MethodPut, "/"+a.Lease.Name+key, at, "A"); s != http.StatusOK {
			t.Fatalf("A's write of %s%s: %d", a.Lease.Name, key, s)
		}
	}
	// A renew of the prefix name is a pool shard's.
	status, out := servertest.Call(t, http.MethodPut, in.ControlURL()+"/v1/leases/"+a.Lease.Name, `{"holder":"A","token":"`+at+`"}`, "")
	if status != http.StatusOK || out["pool"] != "daily" || out["shard"] != "3" || out["name"] != "reports/daily/3/" {
		t.Fatalf("A's renew of %s: %d %v; want the pool shard daily/3", a.Lease.Name, status, out)
	}
	// The prefix cannot change under a held shard.
	_, err = pa.Define(ctx, wire.PoolSpec{Names: []string{"3"}, Prefix: "reports/weekly/{shard}/"})
	var apiErr *client.APIError
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusConflict || apiErr.Reason != wire.ReasonPoolBusy ||
		!strings.Contains(apiErr.Detail, "reports/weekly/{shard}/") {
		t.Fatalf("a prefix change while A holds the shard: %v; want 409 pool_busy naming the new prefix", err)
	}

	// A stalls; once its lease and grace end, B's claim gets the shard.
	var b client.Shard
	servertest.Eventually(t, 10*time.Second, "B claims shard 3", func() bool {
		b, err = pb.Claim(ctx)
		return err == nil
	})
	if b.Shard != "3" || b.Lease.Name != a.Lease.Name || b.Lease.Token <= a.Lease.Token {
		t.Fatalf("B's claim: %+v; want shard 3 with a larger token than A's %d", b, a.Lease.Token)
	}
	bt := strconv.FormatUint(b.Lease.Token, 10)
	if fenceUnprotected("prefix-admission") {
		s, _, _ := send(t, in, http.MethodPut, "/"+a.Lease.Name+"late", at, "A-stale")
		t.Logf("teeth: with the prefix check off, A's stale write of a new key below the shard's prefix got %d", s)
		return
	}
	for _, w := range []struct{ method, key string }{
		{http.MethodPut, "f3"}, {http.MethodPut, "deeper/f4"}, {http.MethodDelete, "f1"}, {http.MethodPut, ""},
	} {
		s, current, resource := send(t, in, w.method, "/"+a.Lease.Name+w.key, at, "A-stale")
		if s != http.StatusConflict || current != bt || resource != "reports/daily/3/" {
			t.Errorf("A's %s %s%s after B's claim: %d, current %q, resource %q; want 409 naming reports/daily/3/ at %s",
				w.method, a.Lease.Name, w.key, s, current, resource, bt)
		}
	}
	for _, key := range []string{"f3", "f1"} {
		if s, _, _ := send(t, in, http.MethodPut, "/"+b.Lease.Name+key, bt, "B"); s != http.StatusOK {
			t.Errorf("B's write of %s%s: %d", b.Lease.Name, key, s)
		}
	}
	backend.settled(t)
	for key, want := range map[string]string{"f1": bt + ":B", "f3": bt + ":B", "deeper/f2": at + ":A"} {
		if got, _ := backend.object("/reports/daily/3/" + key); got != want {
			t.Errorf("the backend holds %q at reports/daily/3/%s, want %q", got, key, want)
		}
	}
	if got, ok := backend.object("/reports/daily/3/deeper/f4"); ok {
		t.Errorf("the backend holds %q at reports/daily/3/deeper/f4: A's stale write was applied", got)
	}
	// Still no prefix change under B; the pool shows B on the prefix name.
	if _, err := pb.Define(ctx, wire.PoolSpec{Names: []string{"3"}}); !errors.As(err, &apiErr) || apiErr.Reason != wire.ReasonPoolBusy {
		t.Errorf("dropping the prefix while B holds the shard: %v; want pool_busy", err)
	}
	st, err = pb.Get(ctx)
	if err != nil || st.Prefix != "reports/daily/{shard}/" || st.Shards[0].Name != "reports/daily/3/" || st.Shards[0].Holder != "B" {
		t.Errorf("pool after B's claim: %+v, %v", st, err)
	}
	// B finishes the shard: done names the prefix lease.
	status, out = servertest.Call(t, http.MethodPost, in.ControlURL()+"/v1/pools/daily/shards/3/done", `{"holder":"B","token":"`+bt+`"}`, "")
	if status != http.StatusOK || out["name"] != "reports/daily/3/" {
		t.Errorf("B's done: %d %v; want the lease reports/daily/3/", status, out)
	}
}
