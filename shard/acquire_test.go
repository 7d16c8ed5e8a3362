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
// waits the lock-delay all the same. Shard 2's read back fails
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
	if wait := g.AdmitAfter.Sub(started); wait < testLockDelay {
		t.Errorf("shard 0 (unclean) admits %v after Start, want at least the lock-delay %v", wait, testLockDelay)
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

// A shard handed over (drained, with the marker) by an owner that still
// waits out the lock-delay of an unclean loss: the next owner waits the
// rest of it, as the old owner of the lost key may still be sending until
// then. Without the rest in the marker, a replica restarted after a crash
// got its shards back from the others at once, inside the lock-delay.
func TestHandoverWithinLockDelay(t *testing.T) {
	c := &cluster{t: t, etcd: etcdtest.Start(t), shards: 4}
	cli := newClient(t, c.etcd.Endpoints())
	ctx := context.Background()
	if _, err := cli.Put(ctx, "/test/shards/count", "4"); err != nil {
		t.Fatal(err)
	}
	for n := range 4 {
		if _, err := cli.Put(ctx, fmt.Sprintf("/test/shards/%d/state", n), `{"state":"owned","id":"ghost","ttl_ms":2000}`); err != nil {
			t.Fatal(err)
		}
	}
	b := c.start("b", "b", false)
	waitFor(t, 2*time.Second, "b holds the 4 shards", func() bool { return len(b.o.Owned()) == 4 })
	first := map[int]time.Time{}
	for n := range 4 {
		g, _ := b.o.State(n)
		first[n] = g.AdmitAfter
	}
	a := c.start("a", "a", false)
	waitFor(t, 2*time.Second, "a holds 2 shards", func() bool { return len(a.o.Owned()) == 2 })
	for _, n := range a.o.Owned() {
		g, _ := a.o.State(n)
		t.Logf("shard %d: handed over to a %v before the lock-delay of the lost key ended; a admits from %v after it",
			n, time.Until(first[n]).Round(time.Millisecond), g.AdmitAfter.Sub(first[n]).Round(time.Millisecond))
		if g.AdmitAfter.Before(first[n].Add(-5 * time.Millisecond)) {
			t.Errorf("shard %d: a admits from %s, before the end of the lock-delay %s", n, g.AdmitAfter.Format("15:04:05.000"), first[n].Format("15:04:05.000"))
		}
		if _, ok := a.o.MayAdmit(n); ok && time.Now().Before(first[n]) {
			t.Errorf("shard %d: a admits within the lock-delay", n)
		}
	}
	c.settled(3*(testTTL+testLockDelay), []int{2, 2}, a, b)
	if st := a.o.Stats(); st.AcquiredPlanned != 2 || st.LockDelayWaits != 2 {
		t.Errorf("a: want 2 planned acquisitions that waited: %+v", st)
	}
	c.close(a, 5*time.Second)
	c.close(b, 5*time.Second)
	c.checkExclusive(false)
}
