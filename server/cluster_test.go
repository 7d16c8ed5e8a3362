package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/config"
	"github.com/fenceproxy/fenceproxy/internal/etcdtest"
	"github.com/fenceproxy/fenceproxy/internal/servertest"
	"github.com/fenceproxy/fenceproxy/server"
)

const peerSecret = "cluster-test-peer-secret"

// freeAddr returns a loopback address with a port free a moment ago: the
// advertised peer address must be known before the replica starts.
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startReplicas starts n replicas in-process on one etcd, over backend.
func startReplicas(t testing.TB, c *etcdtest.Cluster, backend string, n int, overlay map[string]string) []*servertest.Instance {
	t.Helper()
	var out []*servertest.Instance
	for i := range n {
		peer := freeAddr(t)
		env := servertest.Env(map[string]string{
			"FENCEPROXY_UPSTREAM":       backend,
			"FENCEPROXY_STORE":          "etcd",
			"FENCEPROXY_ETCD_ENDPOINTS": strings.Join(c.Endpoints(), ","),
			"FENCEPROXY_SHARDS":         "8",
			"FENCEPROXY_REPLICA_ID":     "r" + strconv.Itoa(i),
			"FENCEPROXY_PEER_LISTEN":    peer,
			"FENCEPROXY_PEER_ADVERTISE": peer,
			"FENCEPROXY_PEER_SECRET":    peerSecret,
			"FENCEPROXY_SHARD_TTL":      "2s",
			"FENCEPROXY_LOCK_DELAY":     "20s",
			"FENCEPROXY_ABANDON_GRACE":  "1s",
			"FENCEPROXY_ADMIN_TOKEN":    "admin-secret",
		}, overlay)
		out = append(out, servertest.Start(t, env))
	}
	return out
}

// put sends PUT base+path with token and returns the status and body.
func put(t testing.TB, client *http.Client, base, path string, token uint64) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, base+path, strings.NewReader("body of "+strconv.FormatUint(token, 10)))
	req.Header.Set("X-Fencing-Token", strconv.FormatUint(token, 10))
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("PUT %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// settle waits until a write of every resource through every replica is
// answered by its owner (no 503), so that every shard has one.
func settle(t testing.TB, client *http.Client, reps []*servertest.Instance, paths []string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, p := range paths {
		for _, r := range reps {
			for {
				status, body := put(t, client, r.ProxyURL(), p, 1)
				if status < 300 {
					break
				}
				if status != http.StatusServiceUnavailable || time.Now().After(deadline) {
					t.Fatalf("PUT %s through %s: %d %s", p, r.Proxy, status, body)
				}
				// 503: the shard has no owner yet. Only the answer shows
				// that an owner took it: polled.
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
}

// Writes, lease calls and admin raises through any replica reach the
// shard's owner, which fences them in one barrier: a token below what
// another replica admitted is refused, and every replica answers alike.
func TestClusterForwardsToOwner(t *testing.T) {
	c := etcdtest.Start(t)
	backend := servertest.NewRecordingBackend(t)
	reps := startReplicas(t, c, backend.URL(), 3, nil)
	client := servertest.NewClient(t)
	var paths []string
	for i := range 16 {
		paths = append(paths, fmt.Sprintf("/bkt/obj-%d", i))
	}
	settle(t, client, reps, paths)

	for i, p := range paths {
		if status, body := put(t, client, reps[i%3].ProxyURL(), p, 10); status >= 300 {
			t.Fatalf("PUT %s token 10 through r%d: %d %s", p, i%3, status, body)
		}
		for j, r := range reps {
			if status, _ := put(t, client, r.ProxyURL(), p, 9); status != http.StatusConflict {
				t.Fatalf("PUT %s token 9 through r%d after 10 through r%d: %d, want 409", p, j, i%3, status)
			}
		}
	}
	backend.CheckOrder(t)

	// Every shard is owned once, and writes were forwarded.
	owned, forwarded := 0.0, 0.0
	for _, r := range reps {
		owned += metric(t, client, r.Control, "fenceproxy_shards_owned")
		forwarded += metric(t, client, r.Control, `fenceproxy_peer_forwards_total{result="ok"}`)
		if v := metric(t, client, r.Control, "fenceproxy_cluster_members"); v != 3 {
			t.Errorf("%s sees %v members, want 3", r.Control, v)
		}
	}
	if owned != 8 || forwarded == 0 {
		t.Errorf("shards owned %v (want 8), forwards %v (want > 0)", owned, forwarded)
	}

	// Admin raise through one replica, write through another.
	req, _ := http.NewRequest(http.MethodPut, reps[1].ControlURL()+"/v1/fences/bkt/obj-3", strings.NewReader(`{"token":50}`))
	req.Header.Set("Authorization", "Bearer admin-secret")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("admin raise: %d", resp.StatusCode)
	}
	for j, r := range reps {
		if status, _ := put(t, client, r.ProxyURL(), "/bkt/obj-3", 49); status != http.StatusConflict {
			t.Fatalf("PUT token 49 through r%d after an admin raise to 50: %d, want 409", j, status)
		}
		if m := servertest.FenceMax(t, client, r.Control, "bkt/obj-3"); m != 50 {
			t.Fatalf("GET fence through r%d = %d, want 50", j, m)
		}
	}

	// A lease acquired through one replica is renewed through another, and
	// its token fences writes everywhere.
	resp, err = client.Post(reps[0].ControlURL()+"/v1/leases/bkt/obj-5", "application/json", strings.NewReader(`{"holder":"w1","ttl":"30s"}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("acquire: %d %s", resp.StatusCode, b)
	}
	var acquired struct{ Token string }
	if err := json.Unmarshal(b, &acquired); err != nil || acquired.Token == "" {
		t.Fatalf("acquire answered no token: %s (%v)", b, err)
	}
	tok := acquired.Token
	req, _ = http.NewRequest(http.MethodPut, reps[2].ControlURL()+"/v1/leases/bkt/obj-5", strings.NewReader(`{"holder":"w1","token":"`+tok+`"}`))
	resp, err = client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("renew through another replica: %d %s", resp.StatusCode, b)
	}
	leaseTok, _ := strconv.ParseUint(tok, 10, 64)
	if status, _ := put(t, client, reps[1].ProxyURL(), "/bkt/obj-5", leaseTok-1); status != http.StatusConflict {
		t.Fatalf("PUT below the lease token: %d, want 409", status)
	}
	if status, body := put(t, client, reps[1].ProxyURL(), "/bkt/obj-5", leaseTok); status >= 300 {
		t.Fatalf("PUT with the lease token: %d %s", status, body)
	}

	// A prefix fence is refused in cluster mode, with the reason: the keys
	// below it may be owned by other replicas.
	status, out := servertest.Call(t, http.MethodPost, reps[0].ControlURL()+"/v1/leases/bkt/part-7/", `{"holder":"w1","ttl":"30s"}`, "")
	if status != http.StatusBadRequest || !strings.Contains(fmt.Sprint(out["detail"]), "cluster mode") {
		t.Fatalf("a lease on a prefix in cluster mode: %d %v, want 400 saying cluster mode", status, out)
	}
	// So is a pool whose shards' leases would be prefix fences, at its
	// definition.
	status, out = servertest.Call(t, http.MethodPut, reps[1].ControlURL()+"/v1/pools/bkt", `{"shards":2,"prefix":"bkt/{shard}/"}`, "")
	if status != http.StatusBadRequest || !strings.Contains(fmt.Sprint(out["detail"]), "cluster mode") {
		t.Fatalf("a pool with a prefix in cluster mode: %d %v, want 400 saying cluster mode", status, out)
	}
}

// The peer listener serves only replicas: without the secret, 403 and
// nothing reaches the backend.
func TestClusterPeerListenerNeedsSecret(t *testing.T) {
	c := etcdtest.Start(t)
	backend := servertest.NewRecordingBackend(t)
	reps := startReplicas(t, c, backend.URL(), 1, nil)
	client := servertest.NewClient(t)
	for _, secret := range []string{"", "wrong-secret-of-some-length"} {
		req, _ := http.NewRequest(http.MethodPut, "http://"+reps[0].Peer+"/bkt/x", strings.NewReader("x"))
		req.Header.Set("X-Fencing-Token", "7")
		req.Header.Set("Fenceproxy-Peer-Target", "proxy")
		if secret != "" {
			req.Header.Set("Fenceproxy-Peer-Secret", secret)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("peer PUT with secret %q: %d, want 403", secret, resp.StatusCode)
		}
	}
	if n := len(backend.Requests()); n != 0 {
		t.Fatalf("the backend received %d requests", n)
	}
}

// A replica that stops (SIGTERM) hands its shards over drained: the others
// admit their writes at once, not after the TTL plus the 20s lock-delay.
func TestClusterPlannedHandover(t *testing.T) {
	c := etcdtest.Start(t)
	backend := servertest.NewRecordingBackend(t)
	reps := startReplicas(t, c, backend.URL(), 2, nil)
	client := servertest.NewClient(t)
	var paths []string
	for i := range 16 {
		paths = append(paths, fmt.Sprintf("/bkt/h-%d", i))
	}
	settle(t, client, reps, paths)
	start := time.Now()
	if err := reps[0].Stop(); err != nil {
		t.Fatal(err)
	}
	stopped := time.Since(start)
	deadline := time.Now().Add(10 * time.Second)
	for _, p := range paths {
		for {
			status, body := put(t, client, reps[1].ProxyURL(), p, 2)
			if status < 300 {
				break
			}
			if status != http.StatusServiceUnavailable || time.Now().After(deadline) {
				t.Fatalf("PUT %s after the other replica stopped: %d %s", p, status, body)
			}
			// 503: not taken over yet. How soon the answer changes is what
			// the test measures, and only the answer shows it: polled.
			time.Sleep(20 * time.Millisecond)
		}
	}
	if took := time.Since(start); took > 8*time.Second {
		t.Fatalf("the writes of the stopped replica's shards were admitted after %s (stop took %s): not a planned handover", took, stopped)
	}
	if !strings.Contains(reps[0].Logs.String(), "every shard handed over") {
		t.Fatalf("the stopped replica did not log a full handover:\n%s", reps[0].Logs)
	}
}

// metric reads one sample (name with its labels, as exposed) from /metrics.
func metric(t testing.TB, client *http.Client, control, series string) float64 {
	t.Helper()
	resp, err := client.Get("http://" + control + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("no %s in /metrics", series)
	return 0
}

// A replica cut off from etcd stops admitting within its validity and cuts
// an upload still sending: the backend never gets the body whole, and the
// client gets 503 shard_unavailable. (The write must not complete after the
// ownership ended: another replica may own the shard by then.)
func TestClusterCutOffReplicaCutsUpload(t *testing.T) {
	c := etcdtest.Start(t)
	backend := servertest.NewRecordingBackend(t)
	cut := etcdtest.NewProxy(t, c.Endpoints()[0])
	reps := startReplicas(t, c, backend.URL(), 1, map[string]string{
		"FENCEPROXY_ETCD_ENDPOINTS": cut.URL(), "FENCEPROXY_SHARDS": "1",
	})
	client := servertest.NewClient(t)
	settle(t, client, reps, []string{"/bkt/slow"})

	pr, pw := io.Pipe()
	req, _ := http.NewRequest(http.MethodPut, reps[0].ProxyURL()+"/bkt/slow", pr)
	req.ContentLength = 2048
	req.Header.Set("X-Fencing-Token", "5")
	type result struct {
		status int
		body   string
		err    error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := client.Do(req)
		if err != nil {
			done <- result{err: err}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- result{status: resp.StatusCode, body: string(b)}
	}()
	pw.Write(make([]byte, 1024))
	// Cut once the upload is admitted; only the gauge shows the admission.
	servertest.Eventually(t, 10*time.Second, "the upload is admitted", func() bool {
		return metric(t, client, reps[0].Control, "fenceproxy_inflight_requests") >= 1
	})
	cut.Cut() // no keepalive is confirmed from now on: validity ends within the 2s TTL
	// Logged once the validity deadline passed: Valid is false from then on.
	if !reps[0].Logs.WaitFor("ownership validity ended", 10*time.Second) {
		t.Fatalf("the cut-off replica's validity did not end:\n%s", reps[0].Logs)
	}
	pw.Write(make([]byte, 1024)) // the rest arrives after the validity ended
	pw.Close()
	res := <-done
	for _, r := range backend.Requests() {
		if r.Path == "/bkt/slow" && r.Token == "5" {
			t.Fatalf("the backend applied the upload completed after the replica's ownership ended (client saw %d %s)", res.status, res.body)
		}
	}
	if res.err == nil && (res.status != http.StatusServiceUnavailable || !strings.Contains(res.body, "shard_unavailable")) {
		t.Fatalf("client got %d %s, want 503 shard_unavailable", res.status, res.body)
	}
	// And it admits nothing new while cut off.
	if status, body := put(t, client, reps[0].ProxyURL(), "/bkt/slow", 6); status != http.StatusServiceUnavailable {
		t.Fatalf("PUT while cut off: %d %s, want 503", status, body)
	}
	cut.Restore()
}

// BenchmarkClusterPut is same-token 1 KiB PUTs (answered from memory, no
// etcd request) sent to the shard's owner (owner) and to the other replica,
// which forwards them (forwarded): the cost of the hop, as the ratio of the
// two in one run (docs/CLUSTER.md, Scaling).
func BenchmarkClusterPut(b *testing.B) {
	c := etcdtest.Start(b)
	backend := servertest.NewRecordingBackend(b)
	reps := startReplicas(b, c, backend.URL(), 2, map[string]string{"FENCEPROXY_SHARDS": "1", "FENCEPROXY_LOG_LEVEL": "warn"})
	client := servertest.NewClient(b)
	settle(b, client, reps, []string{"/bkt/bench"})
	owner, other := reps[0], reps[1]
	if metric(b, client, owner.Control, "fenceproxy_shards_owned") == 0 {
		owner, other = other, owner
	}
	body := make([]byte, 1024)
	for _, tc := range []struct {
		name string
		to   *servertest.Instance
	}{{"owner", owner}, {"forwarded", other}} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetParallelism(16)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					req, _ := http.NewRequest(http.MethodPut, tc.to.ProxyURL()+"/bkt/bench", bytes.NewReader(body))
					req.Header.Set("X-Fencing-Token", "1")
					resp, err := client.Do(req)
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						b.Errorf("status %d", resp.StatusCode)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
		})
	}
}

// Replicas whose PEER_SECRET lists share no secret refuse each other's
// forwards: the forwarding replica answers 503 shard_unavailable with
// Fencing-Refused, says why, counts it, and nothing reaches the backend.
func TestClusterPeerSecretMismatch(t *testing.T) {
	c := etcdtest.Start(t)
	backend := servertest.NewRecordingBackend(t)
	a := startReplicas(t, c, backend.URL(), 1, nil)[0]
	b := startReplicas(t, c, backend.URL(), 1, map[string]string{"FENCEPROXY_REPLICA_ID": "other", "FENCEPROXY_PEER_SECRET": "another-secret-of-16+"})[0]
	client := servertest.NewClient(t)
	// The shards split between the two; only the gauges show it.
	servertest.Eventually(t, 20*time.Second, "both replicas own shards", func() bool {
		na, nb := metric(t, client, a.Control, "fenceproxy_shards_owned"), metric(t, client, b.Control, "fenceproxy_shards_owned")
		return na >= 1 && nb >= 1 && na+nb == 8
	})
	refused := 0
	for i := range 16 {
		path := fmt.Sprintf("/bkt/m-%d", i)
		req, _ := http.NewRequest(http.MethodPut, a.ProxyURL()+path, strings.NewReader("x"))
		req.Header.Set("X-Fencing-Token", "3")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			continue
		}
		if resp.Header.Get("Fencing-Refused") != "shard_unavailable" || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("503 without Fencing-Refused or Retry-After: %v %s", resp.Header, body)
		}
		if strings.Contains(string(body), "peer secret") {
			refused++
			for _, r := range backend.Requests() {
				if r.Path == path {
					t.Fatalf("a write refused for the peer secret reached the backend: %+v", r)
				}
			}
		}
	}
	if refused == 0 {
		t.Fatalf("no write was refused for the peer secret (shards owned by %s: %v)", b.Control, metric(t, client, b.Control, "fenceproxy_shards_owned"))
	}
	if v := metric(t, client, a.Control, `fenceproxy_peer_forwards_total{result="refused"}`); v != float64(refused) {
		t.Fatalf("refused forwards counted %v, want %d", v, refused)
	}
	if !strings.Contains(a.Logs.String(), "refused the peer secret") {
		t.Fatalf("the forwarding replica did not log the refusal:\n%s", a.Logs)
	}
}

// Pools in cluster mode: claims decided in the pool's owner are leases
// granted by each shard name's owner, reached from any replica; the shard
// tokens fence writes through any replica, and done is refused to no one
// but a stale token.
func TestClusterPool(t *testing.T) {
	c := etcdtest.Start(t)
	backend := servertest.NewRecordingBackend(t)
	reps := startReplicas(t, c, backend.URL(), 3, map[string]string{"FENCEPROXY_LOG_LEVEL": "debug"})
	client := servertest.NewClient(t)
	call := func(method, url, body string) (int, map[string]any) {
		t.Helper()
		// 503: the shard has no owner yet, which only the answer shows: polled.
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			req, _ := http.NewRequest(method, url, strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var out map[string]any
			json.NewDecoder(resp.Body).Decode(&out)
			resp.Body.Close()
			if resp.StatusCode != http.StatusServiceUnavailable || time.Now().After(deadline) {
				return resp.StatusCode, out
			}
		}
	}
	if status, out := call(http.MethodPut, reps[0].ControlURL()+"/v1/pools/p", `{"shards": 6}`); status != http.StatusOK {
		t.Fatalf("define: %d %v", status, out)
	}
	type claim struct{ shard, holder, token string }
	var claims []claim
	for i := range 6 {
		holder := fmt.Sprintf("h%d", i%3)
		status, out := call(http.MethodPost, reps[i%3].ControlURL()+"/v1/pools/p/claim", `{"holder":"`+holder+`","ttl":"30s"}`)
		if status != http.StatusCreated {
			t.Fatalf("claim %d by %s through r%d: %d %v", i, holder, i%3, status, out)
		}
		claims = append(claims, claim{out["shard"].(string), holder, out["token"].(string)})
	}
	seen := map[string]bool{}
	for i, cl := range claims {
		if seen[cl.shard] {
			t.Fatalf("shard %s claimed twice: %v", cl.shard, claims)
		}
		seen[cl.shard] = true
		tok, _ := strconv.ParseUint(cl.token, 10, 64)
		if status, body := put(t, client, reps[(i+1)%3].ProxyURL(), "/p/"+cl.shard, tok); status != http.StatusOK {
			t.Fatalf("write with the claim's token: %d %s", status, body)
		}
		if status, _ := put(t, client, reps[(i+2)%3].ProxyURL(), "/p/"+cl.shard, tok-1); status != http.StatusConflict && tok > 1 {
			t.Fatalf("write below the claim's token: %d, want 409", status)
		}
	}
	if status, out := call(http.MethodPost, reps[1].ControlURL()+"/v1/pools/p/claim", `{"holder":"h9","ttl":"30s"}`); status != http.StatusConflict {
		t.Fatalf("a claim with every shard held: %d %v, want 409", status, out)
	}
	cl := claims[0]
	if status, out := call(http.MethodPost, reps[2].ControlURL()+"/v1/pools/p/shards/"+cl.shard+"/done", `{"holder":"`+cl.holder+`","token":"`+cl.token+`"}`); status != http.StatusOK {
		t.Fatalf("done: %d %v", status, out)
	}
	status, out := call(http.MethodGet, reps[1].ControlURL()+"/v1/pools/p", "")
	if status != http.StatusOK {
		t.Fatalf("status: %d %v", status, out)
	}
	if b, _ := json.Marshal(out); !strings.Contains(string(b), `"done"`) {
		t.Fatalf("pool status does not show the done shard: %s", b)
	}
	remote := 0
	for _, r := range reps {
		remote += strings.Count(r.Logs.String(), "pool lease call run on the owner replica")
	}
	if remote == 0 {
		t.Fatal("no claim's lease was granted by another replica than the pool's owner: the test shows nothing of that path")
	}
	t.Logf("%d pool lease calls ran on another replica than the pool's owner", remote)
}

// A start that cannot reach etcd ends when Options.Stop does (a SIGTERM to
// the command), within one etcd request, not after the 30 s of retries.
func TestClusterStartStops(t *testing.T) {
	env := servertest.Env(map[string]string{
		"FENCEPROXY_UPSTREAM":       "http://127.0.0.1:1",
		"FENCEPROXY_STORE":          "etcd",
		"FENCEPROXY_ETCD_ENDPOINTS": "http://" + freeAddr(t), // nothing listens there
		"FENCEPROXY_PEER_ADVERTISE": "127.0.0.1:1",
		"FENCEPROXY_PEER_SECRET":    peerSecret,
	}, nil)
	cfg, _, err := config.Parse(env)
	if err != nil {
		t.Fatal(err)
	}
	stop, cancel := context.WithCancel(context.Background())
	time.AfterFunc(500*time.Millisecond, cancel)
	start := time.Now()
	srv, err := server.New(cfg, server.Options{Logger: slog.New(slog.DiscardHandler), Stop: stop})
	took := time.Since(start)
	if err == nil {
		srv.Close()
		t.Fatal("server.New with no etcd succeeded")
	}
	if !errors.Is(err, context.Canceled) || took > 8*time.Second {
		t.Fatalf("server.New returned after %v: %v; want context.Canceled within 8s", took, err)
	}
	t.Logf("stopped after %v: %v", took.Round(time.Millisecond), err)
}
