package clustertest

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fenceproxy/fenceproxy/internal/etcdtest"
	"github.com/fenceproxy/fenceproxy/shard"
)

func put(t *testing.T, b *Backend, path, token, id string, body string, extra map[string]string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, b.URL()+path, strings.NewReader(body))
	req.Header.Set(HeaderToken, token)
	req.Header.Set(HeaderWriteID, id)
	for k, v := range extra {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// The backend applies whole bodies in the order it finishes them, counts
// decreasing tokens, honours X-Apply-Delay, and tells when a write's
// headers arrived.
func TestBackendAppliesWholeBodiesInOrder(t *testing.T) {
	b := NewBackend(t, 0)
	if st := put(t, b, "/a", "5", "w1", "x", nil); st != 200 {
		t.Fatalf("status %d", st)
	}
	began := time.Now()
	if st := put(t, b, "/a", "3", "w2", "y", map[string]string{HeaderApplyDelay: "200ms"}); st != 200 {
		t.Fatalf("status %d", st)
	}
	if d := time.Since(began); d < 200*time.Millisecond {
		t.Errorf("X-Apply-Delay 200ms: answered after %v", d)
	}
	put(t, b, "/b", "1", "w3", "z", nil)
	if !b.WaitStarted("w3", time.Second) {
		t.Error("WaitStarted: w3's headers arrived, but it says not")
	}
	if b.WaitStarted("w-never", 10*time.Millisecond) {
		t.Error("WaitStarted: w-never never came")
	}
	got := b.Applies()
	if len(got) != 3 || got[0].Token != 5 || got[1].Token != 3 || got[1].ID != "w2" || got[2].Resource != "b" {
		t.Fatalf("applies %+v", got)
	}
	if b.Decreases() != 1 {
		t.Errorf("Decreases %d, want 1", b.Decreases())
	}
	if v := CheckApplied(got); len(v) != 1 || v[0].Check != CheckOrder || v[0].Resource != "a" {
		t.Errorf("CheckApplied: %v", v)
	}
}

// A body that ends before its Content-Length is not applied, though its
// headers arrived.
func TestBackendSkipsCutBodies(t *testing.T) {
	b := NewBackend(t, 0)
	addr := strings.TrimPrefix(b.URL(), "http://")
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "PUT /cut HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\nX-Fencing-Token: 7\r\nX-Write-Id: wc\r\n\r\nhalf")
	if !b.WaitStarted("wc", 2*time.Second) {
		t.Fatal("the cut write's headers did not arrive")
	}
	c.Close()
	deadline := time.Now().Add(2 * time.Second)
	for b.Incomplete() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if b.Incomplete() != 1 || len(b.Applies()) != 0 {
		t.Errorf("a cut body: %d incomplete, applies %+v", b.Incomplete(), b.Applies())
	}
}

func at(base time.Time, ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }

// Each invariant of the checker catches its violation, and sequential,
// overlapping and equal-token histories pass.
func TestCheckers(t *testing.T) {
	t0 := time.Now()
	op := func(k Kind, tok uint64, start, end int) Op {
		return Op{Kind: k, Resource: "r", Token: tok, Start: at(t0, start), End: at(t0, end), Status: 200, Acked: true}
	}
	good := []Op{
		op(KindWrite, 1, 0, 10), op(KindWrite, 1, 5, 12), op(KindRaise, 3, 20, 30),
		op(KindLease, 4, 31, 40), op(KindWrite, 4, 41, 50),
		// overlapping: a write of 2 concurrent with the raise to 3 may be acknowledged
		op(KindWrite, 2, 15, 25),
		{Kind: KindWrite, Resource: "r", Token: 2, Start: at(t0, 60), End: at(t0, 61), Status: 409},
	}
	if v := CheckAcks(good); len(v) != 0 {
		t.Errorf("CheckAcks on a good history: %v", v)
	}
	cases := []struct {
		name string
		ops  []Op
		want string
	}{
		{"stale write acknowledged", []Op{op(KindRaise, 5, 0, 10), op(KindWrite, 4, 11, 20)}, CheckStaleAcked},
		{"lease token not above", []Op{op(KindWrite, 5, 0, 10), op(KindLease, 5, 11, 20)}, CheckLeaseOrder},
		{"raise answered below", []Op{op(KindLease, 5, 0, 10), op(KindRaise, 4, 11, 20)}, CheckRaiseLost},
		{"lease twice", []Op{op(KindLease, 5, 0, 10), op(KindLease, 5, 5, 20)}, CheckLeaseDup},
	}
	for _, c := range cases {
		v := CheckAcks(c.ops)
		if len(v) == 0 || v[0].Check != c.want {
			t.Errorf("%s: %v, want %s", c.name, v, c.want)
		}
	}

	applies := []Apply{{Resource: "r", Token: 2, ID: "a", At: at(t0, 35)}}
	if v := CheckAppliedAfterAcks(applies, good); len(v) != 1 || v[0].Check != CheckBelowAck {
		t.Errorf("a write of 2 applied after the raise to 3 was acknowledged: %v", v)
	}
	if v := CheckAppliedAfterAcks([]Apply{{Resource: "r", Token: 2, At: at(t0, 25)}}, good); len(v) != 0 {
		t.Errorf("applied before the raise answered: %v", v)
	}

	final := map[string]Final{"r": {Fence: 4, Lease: 4}}
	if v := CheckFinal(good, applies, final); len(v) != 0 {
		t.Errorf("CheckFinal on a good history: %v", v)
	}
	if v := CheckFinal(good, applies, map[string]Final{"r": {Fence: 3, Lease: 4}}); len(v) != 1 || v[0].Check != CheckFenceLost {
		t.Errorf("fence below an acknowledged token: %v", v)
	}
	if v := CheckFinal(good, applies, map[string]Final{"r": {Fence: 4, Lease: 3}}); len(v) != 1 || v[0].Check != CheckLeaseLost {
		t.Errorf("lease record below an acknowledged lease: %v", v)
	}
	if v := CheckFinal(good, []Apply{{Resource: "r", Token: 9}}, final); len(v) != 1 || v[0].Check != CheckAboveFence {
		t.Errorf("applied above the fence: %v", v)
	}
	if v := CheckFinal(good, nil, map[string]Final{"r": {Missing: "503"}}); len(v) != 1 || v[0].Check != CheckFenceMissing {
		t.Errorf("fence unreadable: %v", v)
	}
	// A write applied after the final reads is held against what etcd
	// stores.
	late := []Apply{{Resource: "r", Token: 9, At: at(t0, 60)}}
	if v := CheckStored(late, map[string]uint64{"r": 9}); len(v) != 0 {
		t.Errorf("applied at the stored maximum: %v", v)
	}
	if v := CheckStored(late, map[string]uint64{"r": 8}); len(v) != 1 || v[0].Check != CheckAboveStored {
		t.Errorf("applied above the stored maximum: %v", v)
	}
	if v := CheckStored(late, map[string]uint64{}); len(v) != 0 {
		t.Errorf("a resource whose maximum was not read: %v", v)
	}
}

// The fault machinery on a real 3-member etcd: the leader is found, stopped
// and continued, killed and restarted; a replica's proxies cut it off and
// restore it; a shard's owner key names a replica.
func TestEtcdFaultMachinery(t *testing.T) {
	c := etcdtest.StartCluster(t, 3)
	var proxies []*etcdtest.Proxy
	var eps []string
	for _, m := range c.Members {
		p := etcdtest.NewProxy(t, m.ClientURL)
		proxies = append(proxies, p)
		eps = append(eps, p.URL())
	}
	r := &run{t: t, cfg: Config{Etcd: c, Shards: 16, Prefix: "/x/", Replicas: []Replica{fakeReplica("a"), fakeReplica("b")}},
		faults: map[string]int{}, resources: []string{"fault/r00"}}
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	r.etcd = cli
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	if _, ok := r.ownerOf(0); ok {
		t.Error("ownerOf without an owner key")
	}
	if _, err := cli.Put(ctx, "/x/shards/"+fmt.Sprint(shard.Of("fault/r00", 16))+"/owner", `{"id":"b","addr":"127.0.0.1:1"}`); err != nil {
		t.Fatal(err)
	}
	if o, ok := r.ownerOf(0); !ok || o != 1 {
		t.Errorf("ownerOf: %d %v, want replica 1", o, ok)
	}

	l, ok := r.leader()
	if !ok {
		t.Fatal("no leader found")
	}
	m := c.Members[l]
	if err := m.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		if nl, ok := r.leader(); ok && nl != l {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no new leader while the old one is stopped")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := m.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	l, _ = r.leader()
	c.Members[l].Kill()
	if err := c.Members[l].Restart(); err != nil {
		t.Fatal(err)
	}

	// Through the proxies: works, cut hangs, restored works again.
	pc, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	get := func(d time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		_, err := pc.Get(ctx, "k")
		return err
	}
	if err := get(10 * time.Second); err != nil {
		t.Fatalf("get through the proxies: %v", err)
	}
	for _, p := range proxies {
		p.Cut()
	}
	if err := get(time.Second); err == nil {
		t.Error("get through cut proxies answered")
	}
	for _, p := range proxies {
		p.Restore()
	}
	deadline = time.Now().Add(15 * time.Second)
	for get(time.Second) != nil {
		if time.Now().After(deadline) {
			t.Fatal("get through restored proxies still fails")
		}
	}
}

type fakeReplica string

func (f fakeReplica) ID() string                  { return string(f) }
func (f fakeReplica) ProxyURL() string            { return "" }
func (f fakeReplica) ControlURL() string          { return "" }
func (f fakeReplica) Signal(syscall.Signal) error { return nil }
func (f fakeReplica) Kill()                       {}
func (f fakeReplica) Restart() error              { return nil }
