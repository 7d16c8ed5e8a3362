// Package machinelock lets a test have the machine's CPUs to itself: the
// multi-process fault and fleet tests measure time bounds and request counts
// that they miss on a small machine shared with other tests (go test runs
// packages in parallel). They run only when asked (Skip), and one at a time
// (Take).
package machinelock

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Env names the variable that runs the machine-wide tests: set to 1, Skip
// lets them run; .ci/run sets it for each of them in a step of its own,
// after the other tests, so that each has the machine to itself.
const Env = "FENCEPROXY_TEST_MACHINE"

// Skip skips t unless Env is 1, saying how to run it.
func Skip(t testing.TB) {
	t.Helper()
	if os.Getenv(Env) != "1" {
		t.Skipf("a multi-process test that needs the machine to itself (minutes); run it alone with %s=1", Env)
	}
}

// Take blocks until no other test process holds the lock (an flock on a file
// in os.TempDir()), holds it until t's cleanup, and logs how long it waited.
// It fails the test if the lock file cannot be opened or locked.
func Take(t testing.TB) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "fenceproxy-machine-tests.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatalf("machinelock: %v", err)
	}
	start := time.Now()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		t.Fatalf("machinelock: %v", err)
	}
	if waited := time.Since(start); waited > time.Second {
		t.Logf("machinelock: waited %s for another machine-wide test to end", waited.Round(time.Second))
	}
	t.Cleanup(func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	})
}
