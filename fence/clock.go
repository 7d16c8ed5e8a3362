package fence

import "time"

// Clock is the time the barrier waits on: drain timeouts, the abandon grace
// and the start-up grace. Tests may drive it; nil in Options is the system
// clock.
type Clock interface {
	Now() time.Time
	// After fires once, d from now.
	After(d time.Duration) <-chan time.Time
	// AfterFunc calls f in its own goroutine, d from now.
	AfterFunc(d time.Duration, f func())
}

type systemClock struct{}

func (systemClock) Now() time.Time                         { return time.Now() }
func (systemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
func (systemClock) AfterFunc(d time.Duration, f func())    { time.AfterFunc(d, f) }
