package shard

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/etcdtest"
)

// A handover without a drain (Drain fails) cancels the shard's contexts
// before it deletes the owner key: the next owner's lock-delay runs from
// the deletion, so nothing admitted here may still send after it. Drain
// cuts the replica off from etcd before it fails, so that the deleting Txn
// hangs: the upload's context must end at once all the same, with ErrLost,
// while the key is still there (not at the validity's end).
func TestUndrainedHandoverCancelsFirst(t *testing.T) {
	var (
		a       *replica
		drained = make(chan time.Time, 4)
	)
	c := &cluster{t: t, etcd: etcdtest.Start(t), shards: 4, opts: func(o *Options) {
		longValidity(o)
		o.Drain = func(context.Context, int) error {
			for _, p := range a.proxies {
				p.Cut()
			}
			drained <- time.Now()
			return errors.New("not drained")
		}
	}}
	cli := newClient(t, c.etcd.Endpoints())
	a = c.start("a", "a", true)
	c.settled(10*time.Second, []int{4}, a)
	upload, end, err := a.o.Context(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer end()
	g, _ := a.o.State(0)
	// Close keeps trying the handover (cut off) until the checks are done:
	// when it gives up, the upload's context ends (ErrLost) all the same.
	closing, giveUp := context.WithTimeout(context.Background(), time.Minute)
	closed := make(chan error)
	go func() { closed <- a.o.Close(closing) }()
	defer func() {
		giveUp()
		t.Logf("Close: %v", <-closed)
	}()
	begin := <-drained
	left := time.Until(g.ValidUntil)
	if left < 5*time.Second {
		t.Fatalf("only %v of validity left at the cut, of a 20 s TTL renewed every %v", left, testTTL/4)
	}
	select {
	case <-upload.Done():
		took := time.Since(begin)
		t.Logf("upload cancelled %v after the failed drain (%v before the validity's end): %v",
			took.Round(time.Millisecond), (left - took).Round(time.Millisecond), context.Cause(upload))
		if !errors.Is(context.Cause(upload), ErrLost) {
			t.Errorf("cause %v, want ErrLost", context.Cause(upload))
		}
	case <-time.After(left / 2):
		t.Fatalf("upload still live %v after an undrained handover began", left/2)
	}
	resp, err := cli.Get(context.Background(), "/test/shards/0/owner")
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].CreateRevision != g.Epoch {
		t.Errorf("the owner key was gone before the upload's context ended: %v %v", resp, err)
	}
}
