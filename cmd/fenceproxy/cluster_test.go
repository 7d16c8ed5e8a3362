package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/clustertest"
	"github.com/fenceproxy/fenceproxy/internal/etcdtest"
	"github.com/fenceproxy/fenceproxy/internal/machinelock"
	"github.com/fenceproxy/fenceproxy/internal/servertest"
)

// Environment variables of the cluster fault tests (read by the test, not
// passed on to the replicas).
const (
	clusterDurationEnv = "FENCEPROXY_TEST_CLUSTER_DURATION" // how long workers and faults run (default 100s)
	clusterSeedEnv     = "FENCEPROXY_TEST_CLUSTER_SEED"     // replays the random choices of a logged seed
	clusterTeethEnv    = "FENCEPROXY_TEST_CLUSTER_TEETH"    // "1": run TestClusterFaultsWithoutProtection
)

// The run's minimum counts (issue 15): fewer fails the test.
const (
	clusterMinRequests = 10000
	clusterMinFaults   = 20
)

// The cluster's timing: the shortest lease etcd grants with the members'
// election timeout of 1s is 2s. The slow writes take 2.6-3.6s to apply
// after their body arrived: within the abandon grace (a write the proxy gave
// up on is applied within it) and the lock-delay, but past the validity
// margin (0.4s) and the TTL, so that a new owner that waits no lock-delay
// admits before some of them are applied.
const (
	clusterShards    = 16
	clusterTTL       = 2 * time.Second
	clusterLockDelay = 5 * time.Second // at least clusterAbandon + 0.5s + clusterUnsent at 64 KiB/s (config.LockDelayMin)
	clusterAbandon   = 4 * time.Second
	clusterAdmin     = "cluster-admin-token"
	clusterUnsent    = "16KiB"
)

var clusterSlowApply = [2]time.Duration{2600 * time.Millisecond, 3600 * time.Millisecond}

// clusterTeethEnvironment switches the protection off in the replicas: no
// lock-delay after an unclean loss (0s: none) and no abandon grace (0s:
// off), which may not exceed it. A new owner then
// admits as soon as it saw the old key go.
var clusterTeethEnvironment = map[string]string{
	"FENCEPROXY_LOCK_DELAY":    "0s",
	"FENCEPROXY_ABANDON_GRACE": "0s",
}

// clusterReplica is one fenceproxy replica process on fixed loopback ports,
// so that it restarts where it ran.
type clusterReplica struct {
	t   *testing.T
	id  string
	env map[string]string

	proxy, control string // host:port

	mu    sync.Mutex
	p     *fpProcess
	procs []*fpProcess // every incarnation, for the logs
}

func (c *clusterReplica) ID() string         { return c.id }
func (c *clusterReplica) ProxyURL() string   { return "http://" + c.proxy }
func (c *clusterReplica) ControlURL() string { return "http://" + c.control }

func (c *clusterReplica) current() *fpProcess {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.p
}

func (c *clusterReplica) Signal(sig syscall.Signal) error {
	return c.current().cmd.Process.Signal(sig)
}

func (c *clusterReplica) Kill() {
	p := c.current()
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// Restart starts the process (again) and waits until /healthz answers. Its
// ports are fixed, so an outgoing connection of another process may hold
// one for a moment: a start that fails with "address already in use" is
// tried again.
func (c *clusterReplica) Restart() error {
	var err error
	for range 5 {
		if err = c.start(); err == nil || !strings.Contains(err.Error(), "address already in use") {
			return err
		}
		time.Sleep(500 * time.Millisecond) // a retry's back-off: no event says the port is free
	}
	return err
}

func (c *clusterReplica) start() error {
	p := startProcess(c.t, c.env)
	c.mu.Lock()
	c.p = p
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{Proxy: nil}}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := client.Get(c.ControlURL() + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.exited:
			return fmt.Errorf("replica %s exited at start: %v\nstderr:\n%s", c.id, p.waitErr, tail(p.Stderr.String(), 4000))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = p.cmd.Process.Kill()
			return fmt.Errorf("replica %s: /healthz not 200 within 30s (last error %v)", c.id, err)
		}
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}

// loopbackPorts returns n loopback ports that were free a moment ago.
func loopbackPorts(t *testing.T, n int) []string {
	t.Helper()
	var addrs []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		addrs = append(addrs, l.Addr().String())
	}
	return addrs
}

// startCluster starts a 3-member etcd, the recording backend and 3 replicas
// on etcd, each reaching every member through its own TCP proxy (so that
// one replica can be cut off), with extra added to every replica's
// environment.
func startCluster(t *testing.T, extra map[string]string) clustertest.Config {
	t.Helper()
	fenceproxyBinary(t) // skips under -short, before etcd starts
	// Without fsync: the faults are process faults (SIGKILL, SIGSTOP), which
	// the page cache survives, so fsync adds nothing the test checks, and on
	// a small machine's disk it makes the leader's heartbeats late (spurious
	// elections, requests over a second) beside the faults injected.
	etcd := etcdtest.StartCluster(t, 3, "--unsafe-no-fsync")
	// Lenient, as real stores are: a body cut short by an orderly close is
	// applied (so every cut must reach it as a reset).
	backend := clustertest.NewBackendWith(t, clustertest.BackendOptions{MaxDelay: 3 * time.Millisecond, Lenient: true})
	cfg := clustertest.Config{
		Etcd: etcd, Backend: backend, Shards: clusterShards, AdminToken: clusterAdmin,
		TTL: clusterTTL, LockDelay: clusterLockDelay, SlowApply: clusterSlowApply,
	}
	var endpoints [][]string
	for range 3 {
		var cut []*etcdtest.Proxy
		var eps []string
		for _, m := range etcd.Members {
			p := etcdtest.NewProxy(t, m.ClientURL)
			cut = append(cut, p)
			eps = append(eps, p.URL())
		}
		cfg.Cut = append(cfg.Cut, cut)
		endpoints = append(endpoints, eps)
	}
	// The replicas' ports, fixed so that a restart runs where it ran.
	ports := loopbackPorts(t, 9)
	var replicas []*clusterReplica
	for i := range 3 {
		r := &clusterReplica{t: t, id: "replica-" + strconv.Itoa(i), proxy: ports[3*i], control: ports[3*i+1]}
		r.env = map[string]string{
			"FENCEPROXY_UPSTREAM":            backend.URL(),
			"FENCEPROXY_LISTEN":              r.proxy,
			"FENCEPROXY_CONTROL_LISTEN":      r.control,
			"FENCEPROXY_STORE":               "etcd",
			"FENCEPROXY_ETCD_ENDPOINTS":      strings.Join(endpoints[i], ","),
			"FENCEPROXY_SHARDS":              strconv.Itoa(clusterShards),
			"FENCEPROXY_REPLICA_ID":          r.id,
			"FENCEPROXY_PEER_LISTEN":         ports[3*i+2],
			"FENCEPROXY_PEER_ADVERTISE":      ports[3*i+2],
			"FENCEPROXY_PEER_SECRET":         "cluster-test-peer-secret",
			"FENCEPROXY_SHARD_TTL":           clusterTTL.String(),
			"FENCEPROXY_LOCK_DELAY":          clusterLockDelay.String(),
			"FENCEPROXY_ABANDON_GRACE":       clusterAbandon.String(),
			"FENCEPROXY_UPSTREAM_UNSENT_MAX": clusterUnsent,
			"FENCEPROXY_ADMIN_TOKEN":         clusterAdmin,
			"FENCEPROXY_UPLOAD_IDLE_TIMEOUT": "1s",
			"FENCEPROXY_SHUTDOWN_TIMEOUT":    "5s",
			"FENCEPROXY_LOG_LEVEL":           "warn",
		}
		for k, v := range extra {
			r.env[k] = v
		}
		replicas = append(replicas, r)
		cfg.Replicas = append(cfg.Replicas, r)
	}
	for _, r := range replicas {
		if err := r.Restart(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, r := range replicas {
			for n, p := range r.procs {
				t.Logf("--- %s, process %d, stderr (tail):\n%s", r.id, n, tail(p.Stderr.String(), 6000))
			}
		}
	})
	waitAllReady(t, replicas)
	return cfg
}

// waitAllReady polls /readyz of every replica until it is 200.
func waitAllReady(t *testing.T, replicas []*clusterReplica) {
	t.Helper()
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{Proxy: nil}}
	defer client.CloseIdleConnections()
	for _, r := range replicas {
		// Another process: only its /readyz shows that it is ready.
		var err error
		if !servertest.Within(30*time.Second, func() bool {
			var resp *http.Response
			if resp, err = client.Get(r.ControlURL() + "/readyz"); err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		}) {
			t.Fatalf("%s: /readyz not 200 within 30s (last error %v)", r.id, err)
		}
	}
}

func clusterSettings(t *testing.T) (time.Duration, uint64) {
	t.Helper()
	d := clustertest.EnvDuration(t, clusterDurationEnv, 100*time.Second)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(clusterSeedEnv); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: want an unsigned integer", clusterSeedEnv, s)
		}
		seed = n
	}
	t.Logf("seed %d (replay the choices with %s=%d; goroutine scheduling is not replayed)", seed, clusterSeedEnv, seed)
	return d, seed
}

// TestClusterFaults is the fault test of issue 15: a real 3-member etcd,
// three fenceproxy replicas on it as separate processes, and the recording
// backend. Workers take over 20 resources with rising tokens through random
// replicas (writes, some of them uploads that stall half way, some slow to
// apply; lease acquires followed by writes with the lease's token; admin
// raises; reads), while faults are injected one after another: SIGSTOP of a
// shard owner in the middle of an upload (a long stop: another replica
// takes the resource over, and the rest of the body waits at the stopped
// owner's socket), SIGKILL and restart of a replica, a replica cut off from
// every etcd member (a long cut: the others take over), and, beside them,
// SIGSTOP/SIGCONT and SIGKILL/restart of the etcd leader. Then the checker:
// per resource the backend applied tokens in non-decreasing order and none
// below an acknowledged raise or lease; no write was acknowledged below an
// earlier acknowledged token; lease tokens strictly increase; after the run
// every acknowledged token is at most the fence (and every lease token at
// most the lease record). At least 10,000 requests and 20 faults.
//
// FENCEPROXY_TEST_CLUSTER_DURATION sets how long the faults run (default
// 100s; longer for more requests and faults), FENCEPROXY_TEST_CLUSTER_SEED
// replays a logged seed's choices.
func TestClusterFaults(t *testing.T) {
	machinelock.Skip(t)
	machinelock.Take(t)
	d, seed := clusterSettings(t)
	cfg := startCluster(t, nil)
	cfg.Duration, cfg.Seed, cfg.MinRequests = d, seed, clusterMinRequests
	rep := clustertest.Run(t, cfg)
	rep.Log(t.Logf)
	t.Logf("backend: %s", cfg.Backend)
	if n := len(rep.Violations); n > 0 {
		t.Errorf("%d violations", n)
	}
	if rep.Requests < clusterMinRequests {
		t.Errorf("%d requests answered, want at least %d", rep.Requests, clusterMinRequests)
	}
	if n := rep.FaultCount(); n < clusterMinFaults {
		t.Errorf("%d faults injected, want at least %d", n, clusterMinFaults)
	}
	// Every kind the issue names, at least once.
	kinds := map[string]int{}
	for kind, n := range rep.Faults {
		for _, k := range []string{"replica SIGSTOP mid-upload", "replica SIGKILL", "replica cut off from etcd", "etcd leader SIGSTOP", "etcd leader SIGKILL"} {
			if strings.HasPrefix(kind, k) {
				kinds[k] += n
			}
		}
	}
	for _, k := range []string{"replica SIGSTOP mid-upload", "replica SIGKILL", "replica cut off from etcd", "etcd leader SIGSTOP", "etcd leader SIGKILL"} {
		if kinds[k] == 0 && d >= time.Minute {
			t.Errorf("no fault of kind %q in %s", k, d)
		}
	}
}

// TestClusterFaultsWithoutProtection is TestClusterFaults with the
// protection switched off in the replicas (clusterTeethEnvironment) and only
// the faults that then break it (long SIGSTOPs of owners mid-upload, long
// cut-offs with slow writes): it must find violations, or the test has no
// teeth. It stops at the first decreasing token the backend applies. Run it
// with FENCEPROXY_TEST_CLUSTER_TEETH=1.
func TestClusterFaultsWithoutProtection(t *testing.T) {
	if os.Getenv(clusterTeethEnv) != "1" {
		t.Skipf("set %s=1 to run the fault test with the protection off", clusterTeethEnv)
	}
	machinelock.Take(t)
	d, seed := clusterSettings(t)
	cfg := startCluster(t, clusterTeethEnvironment)
	cfg.Duration, cfg.Seed, cfg.Teeth = d, seed, true
	rep := clustertest.Run(t, cfg)
	rep.Log(t.Logf)
	t.Logf("backend: %s", cfg.Backend)
	if len(rep.Violations) == 0 {
		t.Fatal("without the protection the checker found no violation: the test has no teeth")
	}
	t.Logf("found, as expected without the protection: %d violations", len(rep.Violations))
}
