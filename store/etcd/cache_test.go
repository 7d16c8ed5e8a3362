package etcd

import "testing"

// A value read before a raise committed is not cached after the raise
// returned, when an eviction kept the raise from caching its own value: the
// raise, finding the epoch moved, forgot the resource and moved the epoch
// again, so the older read is dropped too.
func TestCacheStaleReadAfterEviction(t *testing.T) {
	c := newMaxCache(16 * (entryOverhead + 8))
	raise := c.ticket() // a Raise sends its Txn: it will commit 7
	epoch := c.epoch
	for i := range 64 { // others fill the cache: an eviction
		c.read(string(rune('a'+i%26))+"-filler", cacheEntry{max: 1, rec: true}, c.ticket())
	}
	if c.epoch == epoch {
		t.Fatal("no eviction")
	}
	load := c.ticket()                                 // a Max sends its Get, which reads 5 before the raise commits
	c.wrote("r", cacheEntry{max: 7, rec: true}, raise) // the Raise returns 7
	c.read("r", cacheEntry{max: 5, rec: true}, load)   // the Max's answer comes back
	if e, ok := c.get("r"); ok && e.max < 7 {
		t.Fatalf("cached %d after a Raise returned 7", e.max)
	}
}

// A value read before a Reset is not cached after it: it would be above the
// maximum in etcd.
func TestCacheStaleReadAfterReset(t *testing.T) {
	c := newMaxCache(0)
	c.wrote("r", cacheEntry{max: 12, rec: true}, c.ticket())
	load := c.ticket() // a Get that reads 12, before the Reset commits
	c.drop("r")        // Reset
	c.read("r", cacheEntry{max: 12, rec: true}, load)
	if e, ok := c.get("r"); ok {
		t.Fatalf("cached %+v after the Reset", e)
	}
	c.wrote("r", cacheEntry{max: 3, rec: true}, c.ticket())
	if e, _ := c.get("r"); e.max != 3 {
		t.Fatalf("cached %d after Raise(3) following the Reset, want 3", e.max)
	}
}

// Writes only lift; the memory stays within the budget; Resources counts
// maxima above 0 only.
func TestCacheLiftAndBudget(t *testing.T) {
	budget := int64(100 * (entryOverhead + 8))
	c := newMaxCache(budget)
	c.wrote("r", cacheEntry{max: 9, rec: true}, c.ticket())
	c.wrote("r", cacheEntry{max: 4, rec: true}, c.ticket())
	if e, _ := c.get("r"); e.max != 9 {
		t.Fatalf("a smaller write lowered the entry to %d", e.max)
	}
	c.read("z", cacheEntry{}, c.ticket())
	if n := c.positive.Load(); n != 1 {
		t.Fatalf("positive = %d, want 1", n)
	}
	for i := range 10000 {
		c.read(string(rune(i)), cacheEntry{max: 1, rec: true}, c.ticket())
		if c.bytes > budget {
			t.Fatalf("cache holds %d bytes, budget %d", c.bytes, budget)
		}
	}
	var pos int64
	for _, e := range c.m {
		if e.max > 0 {
			pos++
		}
	}
	if pos != c.positive.Load() {
		t.Fatalf("positive = %d, entries above 0: %d", c.positive.Load(), pos)
	}
}
