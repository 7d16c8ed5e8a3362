package shard

import (
	"testing"
	"time"
)

// fakeClocks is a machine's clocks: boot runs on in a suspend, mono does
// not, wall does (and may be stepped).
type fakeClocks struct {
	boot, mono, wall int64
	syscalls         int
}

func (c *fakeClocks) read() (int64, int64) { return c.mono, c.wall }
func (c *fakeClocks) sys() int64           { c.syscalls++; return c.boot }

func (c *fakeClocks) run(d time.Duration) {
	c.boot += int64(d)
	c.mono += int64(d)
	c.wall += int64(d)
}

func (c *fakeClocks) suspend(d time.Duration) {
	c.boot += int64(d)
	c.wall += int64(d)
}

// The estimator answers the boot-time clock with a system call only for a
// fresh base: after a suspend (seen by the wall clock running ahead of the
// monotonic one), a wall clock step, or baseMaxAge. Without the wall clock
// check, the reading right after a one-minute suspend is a minute behind,
// and a validity that ended in the suspend still looks valid.
func TestEstimator(t *testing.T) {
	c := &fakeClocks{boot: 1e12, mono: 5e9, wall: 1.7e18}
	e := &estimator{read: c.read, sys: c.sys}
	check := func(what string, syscalls int) {
		t.Helper()
		if got := e.now(); got != c.boot {
			t.Errorf("%s: estimate %d, boot-time clock %d (%+d ns)", what, got, c.boot, got-c.boot)
		}
		if c.syscalls != syscalls {
			t.Errorf("%s: %d system calls in all, want %d", what, c.syscalls, syscalls)
		}
	}
	check("first reading", 1)
	for range 100 {
		c.run(5 * time.Millisecond)
		check("running", 1)
	}
	c.run(baseMaxAge / 4) // the base is 750ms old: not too old yet
	c.suspend(time.Minute)
	check("right after a suspend", 2)
	c.run(time.Millisecond)
	check("after the suspend", 2)
	c.suspend(suspendSlack / 2) // too short to see: behind by it, at most
	c.run(time.Millisecond)
	if got := e.now(); got > c.boot || c.boot-got > int64(suspendSlack) {
		t.Errorf("after a short suspend: estimate %d, boot-time clock %d", got, c.boot)
	}
	c.run(baseMaxAge)
	check("after baseMaxAge", 3)
	c.wall -= int64(time.Hour) // a wall clock step back
	c.run(time.Millisecond)
	check("after a wall clock step", 4)
}

// Reading the boot-time clock costs no system call in the common case.
func BenchmarkBootClock(b *testing.B) {
	for b.Loop() {
		bootClock()
	}
}
