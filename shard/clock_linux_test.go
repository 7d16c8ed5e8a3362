//go:build linux

package shard

import (
	"testing"
	"time"
)

// On the real clocks an estimate is never below a system call reading
// taken before it (a deadline never looks further away than it is), stays
// near one taken after it (the gap is the time between the two reads, and
// what a preempted base read adds).
func TestBootClockFast(t *testing.T) {
	for range 10000 {
		before := sysBootClock()
		est := bootClock()
		after := sysBootClock()
		if est < before-int64(time.Microsecond) {
			t.Fatalf("estimate %d below the boot-time clock %d read before it (%v)", est, before, time.Duration(before-est))
		}
		if d := time.Duration(est - after); d > 100*time.Millisecond {
			t.Fatalf("estimate %d is %v above the boot-time clock read after it", est, d)
		}
	}
}
