package shard

import (
	"context"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"
)

// stallClocks are fakeClocks whose system calls may stall: the machine runs
// on before each reads the clock.
type stallClocks struct {
	fakeClocks
	stallSys []time.Duration // stall before each sys() reads the clock
}

func (c *stallClocks) sys() int64 {
	if len(c.stallSys) > 0 {
		c.run(c.stallSys[0])
		c.stallSys = c.stallSys[1:]
	}
	c.syscalls++
	return c.boot
}

// A base whose reads a stall split (between Go's clocks and the system
// call) is not kept, however often it happens: its estimates would run
// ahead by the stall for the base's life, and a reading too high is unsafe
// too (a keepalive's send time starts a validity, a lock-delay's end is
// compared with it).
func TestEstimatorBaseReadStalled(t *testing.T) {
	c := &stallClocks{fakeClocks: fakeClocks{boot: 1e12, mono: 5e9, wall: 1.7e18}}
	c.stallSys = []time.Duration{50 * time.Millisecond, 50 * time.Millisecond}
	e := &estimator{read: c.read, sys: c.sys}
	e.now()
	c.run(300 * time.Millisecond)
	got := e.now()
	over := time.Duration(got - c.boot)
	t.Logf("300ms after a doubly-preempted base read: estimate is %v above CLOCK_BOOTTIME (syscalls %d)", over, c.syscalls)
	if over >= 50*time.Millisecond {
		t.Errorf("persistent overestimate %v: a keepalive's `sent` read now extends validity by as much; a lock-delay check admits that early", over)
	}
}

// time.Now reads the wall clock, then the monotonic one: a thread
// descheduled for d between the two would see a suspend S as S - d. The
// wall clock that detects a suspend is read after the monotonic reading, so
// no deschedule hides one.
func TestEstimatorDescheduleInsideNow(t *testing.T) {
	c := &fakeClocks{boot: 1e12, mono: 5e9, wall: 1.7e18}
	var skew time.Duration
	read := func() (int64, int64) {
		w := c.wall
		c.run(skew) // descheduled between walltime() and nanotime()
		return c.mono, w
	}
	e := &estimator{read: read, sys: c.sys}
	e.now()
	c.run(100 * time.Millisecond)
	c.suspend(400 * time.Millisecond)
	skew = 398 * time.Millisecond
	got := e.now()
	if under := time.Duration(c.boot - got); under > suspendSlack {
		t.Errorf("estimate %v BELOW CLOCK_BOOTTIME (suspend 400ms hidden by a 398ms deschedule inside time.Now)", under)
	}
}

// A new clock base may answer a little lower than the old one's last
// estimate: a lapse that then finds the deadline not passed yet is looked at
// again at the deadline, not validityPoll (100 ms) later.
func TestLapseAfterClockStepsBack(t *testing.T) {
	// Fake time: the lapse is seen exactly when it is due.
	synctest.Test(t, func(t *testing.T) {
		var calls int
		const valid = int64(1e12)
		start := time.Now()
		clk := func() int64 {
			calls++
			switch calls {
			case 1:
				return valid + 1000 // old base: overestimates by a few us
			case 2:
				return valid - 1 // new base: a few us lower
			}
			return valid + int64(time.Since(start)) // past the deadline
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		o := &Owner{clk: clk, log: slog.New(slog.DiscardHandler), slots: make([]slot, 1), ctx: ctx}
		s := &session{stop: make(chan struct{})}
		s.valid.Store(valid)
		o.workers.Add(1)
		go o.watchValidity(s)
		time.Sleep(50 * time.Millisecond) // fake time: the lapse is due at once, validityPoll is 100ms
		synctest.Wait()
		lapsed := s.lapsed.Load()
		s.halt()
		if !lapsed {
			t.Errorf("no lapse 50ms after the deadline (validityPoll)")
		}
	})
}
