// Package machinelock lets a test have the machine's CPUs to itself against
// the other tests that take it: the multi-process fault and fleet tests,
// which measure time bounds and request counts that two of them running at
// once on a small machine (go test runs packages in parallel) would miss.
package machinelock

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

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
