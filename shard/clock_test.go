package shard

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/etcdtest"
)

// A suspend of the machine longer than the validity, simulated: the
// boot-time clock jumps a minute ahead while Go's monotonic clock and its
// timers do not (on Linux CLOCK_MONOTONIC stands still in a suspend). The
// replica is cut off from etcd first, so that no keepalive confirms after
// the resume (after a real suspend its lease is gone). Right after the
// resume it admits nothing, and an upload's context ends within
// validityPoll, long before the validity would end on the monotonic clock.
func TestSuspendEndsValidity(t *testing.T) {
	var jump atomic.Int64
	c := &cluster{t: t, etcd: etcdtest.Start(t), shards: 4, opts: longValidity, tweak: func(o *Owner) {
		o.clk = func() int64 { return bootClock() + jump.Load() }
	}}
	a := c.start("a", "a", true)
	c.settled(10*time.Second, []int{4}, a)
	upload, end, err := a.o.Context(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer end()
	for _, p := range a.proxies {
		p.Cut()
	}
	// Let a keepalive in flight end, then read how long the validity has
	// left without the suspend.
	time.Sleep(50 * time.Millisecond) // no event: a keepalive in flight to etcd ends
	g, _ := a.o.State(0)
	left := time.Until(g.ValidUntil)
	if left < 5*time.Second {
		t.Fatalf("only %v of validity left at the cut, of a 20 s TTL renewed every %v", left, testTTL/4)
	}

	jump.Store(int64(time.Minute)) // the resume
	resumed := time.Now()
	for n := range c.shards {
		if _, ok := a.o.MayAdmit(n); ok {
			t.Errorf("shard %d: MayAdmit true right after a suspend longer than the validity", n)
		}
	}
	if _, _, err := a.o.Context(context.Background(), 1); !errors.Is(err, ErrNotAdmitting) {
		t.Errorf("Context right after the suspend: %v, want ErrNotAdmitting", err)
	}
	select {
	case <-upload.Done():
		took := time.Since(resumed)
		t.Logf("upload cancelled %v after the resume (%v before the validity would have ended on the monotonic clock): %v",
			took.Round(time.Millisecond), (left - took).Round(time.Millisecond), context.Cause(upload))
		if !errors.Is(context.Cause(upload), ErrValidityEnded) {
			t.Errorf("cause %v, want ErrValidityEnded", context.Cause(upload))
		}
		if took > 3*validityPoll {
			t.Errorf("upload cancelled %v after the resume, want within %v", took, 3*validityPoll)
		}
	case <-time.After(left / 2):
		t.Fatalf("upload still live %v after a suspend that ended its validity", left/2)
	}
	if st := a.o.Stats(); st.ValidityLapses == 0 {
		t.Errorf("no validity lapse counted: %+v", st)
	}

	// The lease is still alive in etcd (no real suspend): the next
	// confirmed keepalive, sent after the resume, makes it valid again.
	for _, p := range a.proxies {
		p.Restore()
	}
	waitFor(t, 3*time.Second, "valid again after a confirmed keepalive", func() bool {
		_, ok := a.o.MayAdmit(0)
		return ok
	})
}

// MayAdmit reads the clock once and takes no lock.
func BenchmarkMayAdmit(b *testing.B) {
	o := &Owner{clk: bootClock, slots: make([]slot, 1)}
	o.wallBase, o.bootBase = time.Now().Round(0), o.now()
	s := &session{}
	s.valid.Store(o.now() + int64(time.Hour))
	o.slots[0].h.Store(&holding{sess: s, epoch: 1, admitAfter: o.now()})
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := o.MayAdmit(0); !ok {
			b.Fatal("refused")
		}
	}
}
