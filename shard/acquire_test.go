package shard

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/etcdtest"
)

// An acquire Txn that etcd applied but whose answer was lost (a timeout, a
// connection cut after the commit) leaves the owner key on this replica's
// lease: the replica reads it back and adopts the shard, with the
// admit-after rule the Txn's answer would have given. Shard 0 was owned
// before by a replica that vanished (the state says "owned"): adopted, it
// waits the TTL plus the lock-delay all the same. Shard 2's read back fails
// too: the watch shows the key and the loop adopts it. Without the
// adoption, both stay owned in etcd by this replica, unknown to it, for as
// long as its lease lives: nobody admits them.
func TestAcquireAnswerLost(t *testing.T) {
	e := etcdtest.Start(t)
	cli := newClient(t, e.Endpoints())
	ctx := context.Background()
	if _, err := cli.Put(ctx, "/lost/shards/count", "4"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "/lost/shards/0/state", `{"state":"owned","id":"ghost","ttl_ms":2000}`); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	faults := map[string]bool{}
	fault := func(op string, n int) error {
		mu.Lock()
		defer mu.Unlock()
		key := fmt.Sprintf("%s%d", op, n)
		if (n == 0 && op == "acquire") || (n == 2 && op != "") {
			if !faults[key] {
				faults[key] = true
				return context.DeadlineExceeded
			}
		}
		return nil
	}
	started := time.Now()
	o, err := start(ctx, cli, Options{Prefix: "/lost/", Shards: 4, ID: "a", TTL: testTTL, LockDelay: testLockDelay, RequestTimeout: time.Second},
		func(o *Owner) { o.fault = fault })
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close(ctx)
	held := waitFor(t, 2*time.Second, "a holds every shard", func() bool { return len(o.Owned()) == 4 })
	t.Logf("a holds its 4 shards %v after Start", held.Round(time.Millisecond))
	mu.Lock()
	if !faults["acquire0"] || !faults["acquire2"] || !faults["readback2"] {
		t.Errorf("faults not injected: %v", faults)
	}
	mu.Unlock()
	for n := range 4 {
		g, _ := o.State(n)
		resp, err := cli.Get(ctx, o.k.owner(n))
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) != 1 || resp.Kvs[0].CreateRevision != g.Epoch || resp.Kvs[0].Lease != int64(o.sess.Load().lease) {
			t.Errorf("shard %d: held with epoch %d, owner key in etcd %v", n, g.Epoch, resp.Kvs)
		}
	}
	// Shard 0: the unclean wait of the state read before the lost answer.
	g, _ := o.State(0)
	if wait := g.AdmitAfter.Sub(started); wait < testTTL+testLockDelay {
		t.Errorf("shard 0 (unclean) admits %v after Start, want at least the TTL plus the lock-delay %v", wait, testTTL+testLockDelay)
	}
	if _, ok := o.MayAdmit(0); ok && time.Now().Before(g.AdmitAfter) {
		t.Error("shard 0 admits before its lock-delay ended")
	}
	for _, n := range []int{1, 2, 3} {
		if _, ok := o.MayAdmit(n); !ok {
			t.Errorf("shard %d (never owned) not admitted at once", n)
		}
	}
	waitFor(t, 2*(testTTL+testLockDelay), "shard 0 admitted after its lock-delay", func() bool {
		_, ok := o.MayAdmit(0)
		return ok
	})
	if time.Now().Before(g.AdmitAfter) {
		t.Errorf("shard 0 admitted before %v", g.AdmitAfter)
	}
	st := o.Stats()
	t.Logf("%+v", st)
	if st.AcquiredAdopted != 2 || st.AcquiredUnclean != 1 || st.AcquiredNew != 3 || st.LockDelayWaits != 1 {
		t.Errorf("want 2 adopted, 1 unclean with a wait, 3 new: %+v", st)
	}
}
