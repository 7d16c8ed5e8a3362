package shard

import (
	"sync/atomic"
	"time"
)

// Limits of estimator: a base older than baseMaxAge, or a reading whose wall
// clock moved more than suspendSlack away from the monotonic clock since the
// base, takes a fresh system call reading.
const (
	baseMaxAge   = time.Second
	suspendSlack = 5 * time.Millisecond
	// baseReadSlack: a base whose reads took longer is not kept.
	baseReadSlack = 100 * time.Microsecond
)

// estimator answers a boot-time clock (in ns) from a system call reading
// (the base) plus Go's monotonic clock since it: the two run at one rate
// except while the machine is suspended, when only the boot-time clock goes
// on. A suspend moves the wall clock on too, so a reading whose wall clock
// ran ahead of (or behind: a step of the wall clock) the monotonic clock
// since the base by more than suspendSlack reads the boot-time clock again.
// The current wall clock is read after the current monotonic one, and the
// base's before its own (time.Now reads the wall clock first), so no
// deschedule between two reads can hide a suspend. A suspend shorter than
// suspendSlack (far below the validity margin), or one that a step of the
// wall clock back by as much hid, goes unseen until the base is baseMaxAge
// old on the monotonic clock.
//
// The base's Go clocks are read before its system call, so an estimate is
// never below the boot-time clock at the same moment (a deadline never looks
// further away than it is), and above it by at most baseReadSlack: a base
// whose reads took longer (a preemption) is not kept, and after three such
// tries the system call answers alone. Readings that start a validity (a
// keepalive's send time) or end a lock-delay are thus late by at most that,
// far inside the validity margin. A new base may answer a few microseconds
// lower than the last estimate of the old one.
type estimator struct {
	read func() (mono, wall int64) // Go's monotonic and wall clocks, ns
	sys  func() int64              // the boot-time clock's system call, ns
	base atomic.Pointer[clockBase]
}

type clockBase struct{ mono, wall, boot int64 }

// now returns the boot-time clock, in ns.
func (e *estimator) now() int64 {
	mono, _ := e.read()
	_, wall := e.read() // wall read after mono: a deschedule inside time.Now cannot hide a suspend
	if b := e.base.Load(); b != nil {
		dm, dw := mono-b.mono, wall-b.wall
		if dm >= 0 && dm < int64(baseMaxAge) && abs(dw-dm) < int64(suspendSlack) {
			return b.boot + dm
		}
	}
	for range 3 {
		m, w := e.read() // time.Now: wall before mono
		b := &clockBase{mono: m, wall: w, boot: e.sys()}
		if again, _ := e.read(); again-m <= int64(baseReadSlack) {
			e.base.Store(b)
			return b.boot
		}
	}
	return e.sys() // no tight base: answer without one, try again next time
}

func abs(d int64) int64 {
	if d < 0 {
		return -d
	}
	return d
}
