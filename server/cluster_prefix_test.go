package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fenceproxy/fenceproxy/internal/etcdtest"
	"github.com/fenceproxy/fenceproxy/internal/servertest"
	"github.com/fenceproxy/fenceproxy/shard"
)

// clusterDepth is FENCEPROXY_SHARD_DEPTH of the prefix tests: out/part-7/
// and every key below it have the shard of out/part-7.
const clusterDepth = 2

// sendVia is send with an X-Fencing-Prefix (none when prefix is ""); the
// last result is the problem's detail of a 400.
func sendVia(t *testing.T, in *servertest.Instance, path, token, prefix, body string) (int, string, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, in.ProxyURL()+path, strings.NewReader(body))
	req.Header.Set("X-Fencing-Token", token)
	if prefix != "" {
		req.Header.Set("X-Fencing-Prefix", prefix)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var p struct {
		Resource string `json:"resource"`
		Detail   string `json:"detail"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&p)
	if resp.StatusCode == http.StatusBadRequest {
		p.Resource = p.Detail
	}
	return resp.StatusCode, resp.Header.Get("Fencing-Current-Token"), p.Resource
}

// ownerOf returns the index in reps of the replica that owns the shard of
// resource, from its owner key in etcd.
func ownerOf(t *testing.T, c *etcdtest.Cluster, reps []*servertest.Instance, resource string) int {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	n := shard.Of(shard.Key(resource, clusterDepth), 8)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, "/fenceproxy/shards/"+strconv.Itoa(n)+"/owner")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("owner of shard %d: %v %v", n, resp, err)
	}
	var m shard.Member
	if err := json.Unmarshal(resp.Kvs[0].Value, &m); err != nil {
		t.Fatal(err)
	}
	i, err := strconv.Atoi(strings.TrimPrefix(m.ID, "r"))
	if err != nil || i >= len(reps) {
		t.Fatalf("owner %q of shard %d is none of the replicas", m.ID, n)
	}
	return i
}

// With FENCEPROXY_SHARD_DEPTH a prefix fence and every key below it have
// one owner: a lease on a prefix, a pool claim of a prefix shard, an admin
// raise and an X-Fencing-Prefix write, each through any replica, refuse every smaller token below the
// prefix through every replica, new keys included, and nothing of them
// reaches the (lenient) backend. When the prefix's shard moves, its next
// owner reads the prefix fences the last one raised (without that reload,
// FENCEPROXY_TEST_FENCE_UNPROTECTED=prefix-reload, it applies a stale write).
func TestClusterPrefixFence(t *testing.T) {
	c := etcdtest.Start(t)
	backend := &lenientStore{objects: map[string]string{}}
	srv := httptest.NewServer(backend)
	t.Cleanup(srv.Close)
	reps := startReplicas(t, c, srv.URL, 3, map[string]string{
		"FENCEPROXY_SHARD_DEPTH":   strconv.Itoa(clusterDepth),
		"FENCEPROXY_LEASE_MIN_TTL": "100ms", "FENCEPROXY_LEASE_GRACE": "100ms",
	})
	client := servertest.NewClient(t)
	settle(t, client, reps, []string{"/out/part-7/settled", "/out/part-8/settled", "/out/part-9/settled"})

	// A lease on out/part-8/ taken over by B through another replica: A's
	// writes below it are refused everywhere, B's pass.
	status, out := servertest.Call(t, http.MethodPost, reps[0].ControlURL()+"/v1/leases/out/part-8/", `{"holder":"A","ttl":"200ms"}`, "")
	if status != http.StatusCreated {
		t.Fatalf("A's acquire of out/part-8/: %d %v", status, out)
	}
	a := out["token"].(string)
	var b string
	servertest.Eventually(t, 10*time.Second, "B acquires out/part-8/ after A's lease ran out", func() bool {
		status, out = servertest.Call(t, http.MethodPost, reps[1].ControlURL()+"/v1/leases/out/part-8/", `{"holder":"B","ttl":"30s"}`, "")
		if status == http.StatusCreated {
			b = out["token"].(string)
		}
		return status == http.StatusCreated
	})
	for i, r := range reps {
		path := fmt.Sprintf("/out/part-8/new-%d/f", i)
		if s, cur, res := sendVia(t, r, path, a, "", "A-stale"); s != http.StatusConflict || cur != b || res != "out/part-8/" {
			t.Errorf("A's write of the new key %s through r%d after B's acquire: %d, current %q, fence %q; want 409, %s, out/part-8/", path, i, s, cur, res, b)
		}
		if s, _, _ := sendVia(t, r, path, b, "", "B"); s != http.StatusOK {
			t.Errorf("B's write of %s through r%d: %d", path, i, s)
		}
	}

	// A pool whose shards are prefixes: a claim taken over fences its old
	// holder's writes below the shard's prefix, through every replica.
	pool := reps[2].ControlURL() + "/v1/pools/jobs"
	if status, out := servertest.Call(t, http.MethodPut, pool, `{"shards":1,"prefix":"out/jobs-{shard}/"}`, ""); status != http.StatusOK {
		t.Fatalf("define a prefix pool: %d %v", status, out)
	}
	status, out = servertest.Call(t, http.MethodPost, reps[0].ControlURL()+"/v1/pools/jobs/claim", `{"holder":"A","ttl":"200ms"}`, "")
	if status != http.StatusCreated {
		t.Fatalf("A's claim: %d %v", status, out)
	}
	ca := out["token"].(string)
	var cb string
	servertest.Eventually(t, 10*time.Second, "B claims the shard after A's lease ran out", func() bool {
		status, out = servertest.Call(t, http.MethodPost, reps[1].ControlURL()+"/v1/pools/jobs/claim", `{"holder":"B","ttl":"30s"}`, "")
		if status == http.StatusCreated {
			cb = out["token"].(string)
		}
		return status == http.StatusCreated
	})
	for i, r := range reps {
		path := fmt.Sprintf("/out/jobs-0/k-%d", i)
		if s, cur, res := sendVia(t, r, path, ca, "", "A-stale"); s != http.StatusConflict || cur != cb || res != "out/jobs-0/" {
			t.Errorf("A's write of the new key %s through r%d after B's claim: %d, current %q, fence %q; want 409, %s, out/jobs-0/", path, i, s, cur, res, cb)
		}
		if s, _, _ := sendVia(t, r, path, cb, "", "B"); s != http.StatusOK {
			t.Errorf("B's write of %s through r%d: %d", path, i, s)
		}
	}
	if status, out := servertest.Call(t, http.MethodPut, reps[0].ControlURL()+"/v1/pools/shallow", `{"shards":1,"prefix":"{shard}/"}`, ""); status != http.StatusBadRequest ||
		!strings.Contains(fmt.Sprint(out["detail"]), "FENCEPROXY_SHARD_DEPTH") {
		t.Errorf("a pool of 1-segment prefixes with SHARD_DEPTH 2: %d %v, want 400 naming FENCEPROXY_SHARD_DEPTH", status, out)
	}

	// An admin raise of out/part-7/ through one replica.
	status, out = servertest.Call(t, http.MethodPut, reps[2].ControlURL()+"/v1/fences/out/part-7/", `{"token":50}`, "admin-secret")
	if status != http.StatusOK {
		t.Fatalf("admin raise of out/part-7/: %d %v", status, out)
	}
	// An X-Fencing-Prefix write raising out/part-9/ through another.
	if s, _, res := sendVia(t, reps[1], "/out/part-9/x", "7", "out/part-9/", "7"); s != http.StatusOK {
		t.Fatalf("a write with token 7 for out/part-9/: %d %s", s, res)
	}
	checkBelow := func(when string) {
		t.Helper()
		for i, r := range reps {
			if r == nil {
				continue
			}
			for _, w := range []struct{ path, token, fence, current string }{
				{fmt.Sprintf("/out/part-7/%s-%d", when, i), "49", "out/part-7/", "50"},
				{fmt.Sprintf("/out/part-7/deep/%s/%d/f", when, i), "49", "out/part-7/", "50"},
				{fmt.Sprintf("/out/part-9/%s-%d", when, i), "6", "out/part-9/", "7"},
			} {
				var s int
				var cur, res string
				servertest.Eventually(t, 20*time.Second, "an owner answers "+w.path, func() bool {
					s, cur, res = sendVia(t, r, w.path, w.token, "", "stale")
					return s != http.StatusServiceUnavailable
				})
				if s != http.StatusConflict || cur != w.current || res != w.fence {
					if fenceUnprotected("prefix-reload") {
						continue
					}
					t.Errorf("%s: token %s to the new key %s through r%d: %d, current %q, fence %q; want 409, %s, %s",
						when, w.token, w.path, i, s, cur, res, w.current, w.fence)
				}
			}
		}
	}
	checkBelow("before")

	// Refused with the reason: prefixes shallower than the shard depth.
	status, out = servertest.Call(t, http.MethodPost, reps[0].ControlURL()+"/v1/leases/out/", `{"holder":"A","ttl":"30s"}`, "")
	if status != http.StatusBadRequest || !strings.Contains(fmt.Sprint(out["detail"]), "FENCEPROXY_SHARD_DEPTH") {
		t.Errorf("a lease on out/ with SHARD_DEPTH 2: %d %v, want 400 naming FENCEPROXY_SHARD_DEPTH", status, out)
	}
	status, out = servertest.Call(t, http.MethodPut, reps[0].ControlURL()+"/v1/fences/out/", `{"token":9}`, "admin-secret")
	if status != http.StatusBadRequest || !strings.Contains(fmt.Sprint(out["detail"]), "FENCEPROXY_SHARD_DEPTH") {
		t.Errorf("a raise of out/ with SHARD_DEPTH 2: %d %v, want 400 naming FENCEPROXY_SHARD_DEPTH", status, out)
	}
	if s, _, detail := sendVia(t, reps[0], "/out/part-9/y", "8", "out/", "8"); s != http.StatusBadRequest || !strings.Contains(detail, "FENCEPROXY_SHARD_DEPTH") {
		t.Errorf("a write for the prefix out/: %d %q, want 400 naming FENCEPROXY_SHARD_DEPTH", s, detail)
	}

	// The owner of out/part-7's shard leaves: the next owner started
	// before the raises, and must read them at its takeover.
	o := ownerOf(t, c, reps, "out/part-7/")
	if o9 := ownerOf(t, c, reps, "out/part-9/"); o9 != o {
		t.Logf("out/part-9/ is owned by r%d, out/part-7/ by r%d", o9, o)
	}
	if err := reps[o].Stop(); err != nil {
		t.Fatal(err)
	}
	reps[o] = nil
	checkBelow("after")
	backend.settled(t)

	var stale []string
	backend.mu.Lock()
	for path, obj := range backend.objects {
		if strings.HasSuffix(obj, ":stale") || strings.HasSuffix(obj, ":A-stale") {
			stale = append(stale, path)
		}
	}
	backend.mu.Unlock()
	if fenceUnprotected("prefix-reload") {
		if len(stale) == 0 {
			t.Fatal("teeth: without the reload of prefix fences at a takeover, no stale write was applied")
		}
		t.Logf("teeth: without the reload at a takeover, these stale writes were applied: %v", stale)
		return
	}
	if len(stale) > 0 {
		t.Fatalf("stale writes applied below prefix fences: %v", stale)
	}
}

// In cluster mode too a plain-mode write to P/ is one to P (the WebDAV
// reading, fence.Resolver.Alias): with SHARD_DEPTH both have one owner, and
// a stale holder's write to out/part-7/f/ through any replica is refused at
// the fence of out/part-7/f. A shallower P/ whose P has another owner is
// refused, never applied.
func TestClusterTrailingSlashAlias(t *testing.T) {
	c := etcdtest.Start(t)
	backend := &lenientStore{objects: map[string]string{}}
	srv := httptest.NewServer(backend)
	t.Cleanup(srv.Close)
	reps := startReplicas(t, c, srv.URL, 3, map[string]string{"FENCEPROXY_SHARD_DEPTH": strconv.Itoa(clusterDepth)})
	client := servertest.NewClient(t)
	settle(t, client, reps, []string{"/out/part-7/settled"})
	if s, _, _ := send(t, reps[0], http.MethodPut, "/out/part-7/f", "5", "new"); s >= 300 {
		t.Fatalf("PUT /out/part-7/f with token 5: %d", s)
	}
	if s, _, _ := send(t, reps[0], http.MethodPut, "/top", "5", "top"); s >= 300 {
		t.Fatalf("PUT /top with token 5: %d", s)
	}
	for i, in := range reps {
		for _, path := range []string{"/out/part-7/f/", "/out//part-7/f%2F"} {
			if s, cur, res := send(t, in, http.MethodPut, path, "3", "stale"); s != http.StatusConflict || cur != "5" || res != "out/part-7/f" {
				t.Errorf("stale PUT %s through replica %d: %d, current %q, resource %q; want 409 naming out/part-7/f at 5", path, i, s, cur, res)
			}
		}
		if s, _, _ := send(t, in, http.MethodDelete, "/top/", "3", ""); s != http.StatusConflict && s != http.StatusServiceUnavailable {
			t.Errorf("stale DELETE /top/ through replica %d: %d, want 409, or 503 when top and top/ have two owners", i, s)
		}
	}
	backend.mu.Lock()
	defer backend.mu.Unlock()
	if got := backend.objects["/out/part-7/f"]; got != "5:new" {
		t.Errorf("the backend holds /out/part-7/f as %q, want 5:new", got)
	}
	for k := range backend.objects {
		if strings.HasSuffix(k, "/") {
			t.Errorf("a stale write reached the backend as %s", k)
		}
	}
	if got := backend.objects["/top"]; got != "5:top" {
		t.Errorf("the backend holds /top as %q, want 5:top", got)
	}
}
