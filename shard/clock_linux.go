//go:build linux

package shard

import (
	"time"

	"golang.org/x/sys/unix"
)

// bootClock reads CLOCK_BOOTTIME, which, unlike CLOCK_MONOTONIC (Go's
// monotonic clock and its timers), goes on while the machine is suspended.
// A kernel without it (before 2.6.39, below Go's minimum) gets the
// monotonic fallback.
var bootClock = func() func() int64 {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts) != nil {
		return monotonicClock
	}
	return func() int64 {
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
			// It answered once; it cannot fail later.
			panic("shard: CLOCK_BOOTTIME: " + err.Error())
		}
		return ts.Nano()
	}
}()

var processStart = time.Now()

// monotonicClock is nanoseconds on Go's monotonic clock.
func monotonicClock() int64 { return int64(time.Since(processStart)) }
