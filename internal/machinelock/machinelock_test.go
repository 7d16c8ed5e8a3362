package machinelock

import (
	"sync"
	"testing"
	"time"
)

// Two tests that Take at once run one after the other: neither holds the
// lock while the other does.
func TestTakeExcludes(t *testing.T) {
	var mu sync.Mutex
	var spans [][2]time.Time
	t.Run("group", func(t *testing.T) {
		for _, name := range []string{"a", "b"} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				Take(t)
				start := time.Now()
				time.Sleep(300 * time.Millisecond) // asserting nothing happens: no other holder overlaps
				mu.Lock()
				spans = append(spans, [2]time.Time{start, time.Now()})
				mu.Unlock()
			})
		}
	})
	if len(spans) != 2 {
		t.Fatalf("%d holders ran", len(spans))
	}
	a, b := spans[0], spans[1]
	if a[0].Before(b[1]) && b[0].Before(a[1]) {
		t.Fatalf("both held the lock at once: %v and %v", a, b)
	}
}
