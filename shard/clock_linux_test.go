//go:build linux

package shard

import (
	"testing"
	"time"
)

// On the real clocks an estimate stays within a millisecond of a system
// call reading taken right after it, and never goes back.
func TestBootClockFast(t *testing.T) {
	last := bootClock()
	for range 10000 {
		est := bootClock()
		sys := sysBootClock()
		if est < last {
			t.Fatalf("went back: %d after %d", est, last)
		}
		if d := time.Duration(est - sys); d > time.Millisecond || d < -time.Millisecond {
			t.Fatalf("estimate %d, system call %d: %v apart", est, sys, d)
		}
		last = est
	}
}
