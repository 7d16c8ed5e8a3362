package etcdtest

import (
	"context"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func client(t *testing.T, endpoints []string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// A write acknowledged by a 3-member cluster survives the SIGKILL of its
// leader: the other two elect a new one, read it back and take new writes;
// the killed member restarts over its data directory and has it too.
func TestClusterSurvivesKillOfLeader(t *testing.T) {
	c := StartCluster(t, 3)
	cli := client(t, c.Endpoints())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "k", "before"); err != nil {
		t.Fatalf("put: %v", err)
	}
	leader := -1
	for i, m := range c.Members {
		st, err := cli.Status(ctx, m.ClientURL)
		if err != nil {
			t.Fatalf("status of %s: %v", m.Name, err)
		}
		if st.Leader == st.Header.MemberId {
			leader = i
		}
	}
	if leader < 0 {
		t.Fatal("no member says it is the leader")
	}
	c.Members[leader].Kill()

	var others []string
	for i, m := range c.Members {
		if i != leader {
			others = append(others, m.ClientURL)
		}
	}
	rest := client(t, others)
	// Linearizable reads and writes need the new leader: retry until then.
	var err error
	// Polls: etcd, other processes, signals no event here.
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		var resp *clientv3.GetResponse
		if resp, err = rest.Get(ctx, "k"); err == nil {
			if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "before" {
				t.Fatalf("after the leader's SIGKILL k = %v, want before", resp.Kvs)
			}
			break
		}
	}
	if err != nil {
		t.Fatalf("no read from the two members left: %v", err)
	}
	if _, err := rest.Put(ctx, "k2", "after"); err != nil {
		t.Fatalf("put with two members left: %v", err)
	}

	killed := c.Members[leader]
	if err := killed.Restart(); err != nil {
		t.Fatal(err)
	}
	back := client(t, []string{killed.ClientURL})
	for _, kv := range [][2]string{{"k", "before"}, {"k2", "after"}} {
		resp, err := back.Get(ctx, kv[0])
		if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != kv[1] {
			t.Fatalf("restarted member: %s = %v, %v; want %s", kv[0], resp, err, kv[1])
		}
	}
}

// Metric reads etcd's own counters (the group-commit test counts Txns so).
func TestMetric(t *testing.T) {
	c := Start(t)
	cli := client(t, c.Endpoints())
	before, err := c.Members[0].Metric("grpc_server_handled_total", `grpc_method="Txn"`)
	if err != nil {
		before = 0 // no Txn handled yet: no sample
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 3 {
		if _, err := cli.Txn(ctx).Then(clientv3.OpGet("x")).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	after, err := c.Members[0].Metric("grpc_server_handled_total", `grpc_method="Txn"`)
	if err != nil {
		t.Fatal(err)
	}
	if after-before != 3 {
		t.Fatalf("Txns counted by etcd: %v, want 3", after-before)
	}
}

// A client behind a Proxy reaches etcd; cut, its requests hang until their
// deadline while a direct client carries on; restored, it reaches etcd again.
func TestProxyCut(t *testing.T) {
	c := Start(t)
	p := NewProxy(t, c.Members[0].ClientURL)
	via := client(t, []string{p.URL()})
	direct := client(t, c.Endpoints())
	ctx := context.Background()
	if _, err := via.Put(ctx, "k", "1"); err != nil {
		t.Fatalf("put through the proxy: %v", err)
	}
	p.Cut()
	cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err := via.Get(cctx, "k")
	cancel()
	if err == nil {
		t.Fatal("a get through a cut proxy succeeded")
	}
	if _, err := direct.Put(ctx, "k", "2"); err != nil {
		t.Fatalf("direct put while cut: %v", err)
	}
	p.Restore()
	cctx, cancel = context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := via.Get(cctx, "k")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "2" {
		t.Fatalf("get after restore: %v %v", resp, err)
	}
}

// A SIGSTOPped member does not answer, and the two others carry on; after
// SIGCONT it answers again with what they wrote meanwhile.
func TestStoppedMember(t *testing.T) {
	c := StartCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stopped := c.Members[2]
	if err := stopped.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	rest := client(t, []string{c.Members[0].ClientURL, c.Members[1].ClientURL})
	var err error
	// Polls: etcd, other processes, signals no event here.
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if _, err = rest.Put(ctx, "k", "while stopped"); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("put with a member stopped: %v", err)
	}
	one := client(t, []string{stopped.ClientURL})
	short, cancelShort := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = one.Get(short, "k")
	cancelShort()
	if err == nil {
		t.Fatal("a SIGSTOPped member answered")
	}
	if err := stopped.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// Polls: etcd, other processes, signals no event here.
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		var resp *clientv3.GetResponse
		if resp, err = one.Get(ctx, "k"); err == nil && len(resp.Kvs) == 1 && string(resp.Kvs[0].Value) == "while stopped" {
			return
		}
	}
	t.Fatalf("after SIGCONT the member does not answer with the others' write: %v", err)
}
