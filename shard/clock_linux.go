//go:build linux

package shard

import (
	"time"

	"golang.org/x/sys/unix"
)

// bootClock reads CLOCK_BOOTTIME, which, unlike CLOCK_MONOTONIC (Go's
// monotonic clock and its timers), goes on while the machine is suspended,
// in ns. It takes a system call only now and then (see estimator): the
// clock is read on every admitted write. A kernel without it (before
// 2.6.39, below Go's minimum) gets the monotonic fallback.
var bootClock = func() func() int64 {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts) != nil {
		return monotonicClock
	}
	e := &estimator{read: readGoClocks, sys: sysBootClock}
	return e.now
}()

// sysBootClock reads CLOCK_BOOTTIME with a system call (Go has no vDSO
// path for it), in ns.
func sysBootClock() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		// It answered once; it cannot fail later.
		panic("shard: CLOCK_BOOTTIME: " + err.Error())
	}
	return ts.Nano()
}

// readGoClocks reads Go's monotonic clock (ns since processStart) and the
// wall clock (Unix ns) in one time.Now, without a system call.
func readGoClocks() (mono, wall int64) {
	t := time.Now()
	return int64(t.Sub(processStart)), t.UnixNano()
}

var processStart = time.Now()

// monotonicClock is nanoseconds on Go's monotonic clock.
func monotonicClock() int64 { return int64(time.Since(processStart)) }
