//go:build !linux

package shard

import "time"

// bootClock is Go's monotonic clock outside Linux: it may stand still while
// the machine is suspended (see the package doc's known limit).
var bootClock = monotonicClock

var processStart = time.Now()

// monotonicClock is nanoseconds on Go's monotonic clock.
func monotonicClock() int64 { return int64(time.Since(processStart)) }
