package badger

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// TestEvictionRaceNeverLowersMax hammers a cache of four entries, so that
// evictions constantly race disk loads and raises: Max must never answer
// below a raise that has returned. Without the load lock (see maxCache) it
// fails within a run. The interleaving it guards against: a
// load reads 5 from disk, a raise commits and caches 7, 7 is evicted, and the
// load caches 5; a stale token 6 would then be admitted.
func TestEvictionRaceNeverLowersMax(t *testing.T) {
	budget := 4 * entryCost("bkt/hot-0")
	s, err := Open(t.TempDir(), Options{CacheBytes: budget})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Widen the window between a load's disk read and its caching, where
	// a raise can commit, cache and be evicted.
	s.loadedHook = func(resource string) {
		if strings.HasPrefix(resource, "bkt/hot-") {
			for range 100 {
				runtime.Gosched()
			}
		}
	}
	const (
		resources = 6
		writers   = 8
		perWriter = 400
		readers   = 4
		evictors  = 2
	)
	var next, acked [resources]atomic.Uint64 // per resource: last token handed out, largest returned raise
	name := func(i int) string { return fmt.Sprintf("bkt/hot-%d", i) }

	var done atomic.Bool
	var wg, bg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for range perWriter {
				i := rng.IntN(resources)
				tok := next[i].Add(1)
				m, err := s.Raise(name(i), tok)
				if err != nil {
					t.Errorf("Raise(%s, %d): %v", name(i), tok, err)
					return
				}
				if m < tok {
					t.Errorf("Raise(%s, %d) = %d, below its token", name(i), tok, m)
				}
				for a := acked[i].Load(); m > a && !acked[i].CompareAndSwap(a, m); a = acked[i].Load() {
				}
			}
		})
	}
	var reads, violations atomic.Int64
	for r := range readers {
		bg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(r), 2))
			for !done.Load() {
				i := rng.IntN(resources)
				want := acked[i].Load() // acknowledged before Max starts
				m, err := s.Max(name(i))
				if err != nil {
					t.Errorf("Max(%s): %v", name(i), err)
					return
				}
				reads.Add(1)
				if m < want && violations.Add(1) <= 5 {
					t.Errorf("Max(%s) = %d after a raise to %d returned", name(i), m, want)
				}
			}
		})
	}
	for e := range evictors {
		bg.Go(func() {
			for n := 0; !done.Load(); n++ {
				// Never-written resources: each miss caches a 0 and evicts.
				if _, err := s.Max(fmt.Sprintf("bkt/cold-%d-%d", e, n%64)); err != nil {
					t.Errorf("Max: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	done.Store(true)
	bg.Wait()
	if reads.Load() == 0 {
		t.Fatal("readers made no observations")
	}
	if n, b := s.cache.len(), s.cache.bytes(); n > 4 || b > budget {
		t.Fatalf("cache holds %d entries of %d bytes, budget %d (4 entries)", n, b, budget)
	}
	for i := range resources {
		if got := mustMax(t, s, name(i)); got != next[i].Load() {
			t.Errorf("final Max(%s) = %d, want %d", name(i), got, next[i].Load())
		}
	}
	t.Logf("%d reads, %d below an acknowledged raise", reads.Load(), violations.Load())
}

// The cache never holds more than its budget; a full shard evicts the first
// entry not used since the clock last passed it, and the count of maxima
// above 0 follows inserts, raises, evictions and drops.
func TestCacheClockEviction(t *testing.T) {
	budget := 4 * entryCost("a") // four one-byte names
	c := newMaxCache(budget)
	if len(c.shards) != 1 {
		t.Fatalf("%d shards for 4 entries, want 1", len(c.shards))
	}
	for i, r := range []string{"a", "b", "c", "d"} {
		c.raise(r, uint64(i+1))
	}
	if _, ok := c.get("a"); !ok { // a used: survives the next eviction
		t.Fatal("a missing")
	}
	c.raise("e", 5)
	if _, ok := c.get("b"); ok {
		t.Fatal("b, the first unused entry, was not evicted")
	}
	for _, r := range []string{"a", "c", "d", "e"} {
		if _, ok := c.get(r); !ok {
			t.Fatalf("%s evicted", r)
		}
	}
	if n, p := c.len(), c.positive.Load(); n != 4 || p != 4 {
		t.Fatalf("len %d, positive %d; want 4, 4", n, p)
	}
	c.drop("c")
	if _, ok := c.get("c"); ok || c.len() != 3 || c.positive.Load() != 3 {
		t.Fatalf("after drop: c cached %v, len %d, positive %d", ok, c.len(), c.positive.Load())
	}
	c.raise("z", 0) // fills the hole, no eviction
	if n, p := c.len(), c.positive.Load(); n != 4 || p != 3 {
		t.Fatalf("len %d, positive %d; want 4, 3", n, p)
	}
	for i := range 100 { // a flood of distinct unknown resources
		c.raise(fmt.Sprintf("%c", 'A'+i%26)+strings.Repeat("x", i%3), 0)
	}
	if n, p, b := c.len(), c.positive.Load(), c.bytes(); n < 3 || n > 4 || p != 0 || b > budget {
		t.Fatalf("after a flood: len %d, positive %d, %d bytes; want 3 or 4, 0, at most %d", n, p, b, budget)
	}
	// Long names count for what they take: a budget for four short names
	// holds one name of 300 bytes, and none of 400.
	c.raise(strings.Repeat("L", 300), 1)
	if n, b := c.len(), c.bytes(); n != 1 || b != entryCost(strings.Repeat("L", 300)) {
		t.Fatalf("after a 300-byte name: len %d, %d bytes", n, b)
	}
	c.raise(strings.Repeat("M", 400), 1)
	if _, ok := c.get(strings.Repeat("M", 400)); ok || c.bytes() > budget {
		t.Fatalf("a name over the budget was cached (%d bytes)", c.bytes())
	}
	if got := c.raise("cold-99", 0); got != 0 {
		t.Fatalf("raise(0) = %d", got)
	}
	if got := c.raise("cold-99", 9); got != 9 || c.positive.Load() != 1 {
		t.Fatalf("raise 0 -> 9: %d, positive %d", got, c.positive.Load())
	}
	if got := c.raise("cold-99", 3); got != 9 {
		t.Fatalf("raise(3) over 9 = %d, want 9", got)
	}
}

// A large cache is split in shards whose budgets add up to the bound, each
// large enough for the longest resource key.
func TestCacheShardSizes(t *testing.T) {
	for _, budget := range []int64{1, 1000, 300_000, 1 << 20, DefaultCacheBytes, DefaultCacheBytes + 7} {
		c := newMaxCache(budget)
		var sum int64
		for i := range c.shards {
			sum += c.shards[i].budget
			if len(c.shards) > 1 && c.shards[i].budget < entryCost(strings.Repeat("k", 4096)) {
				t.Fatalf("%d bytes: shard %d has %d, less than the longest key needs", budget, i, c.shards[i].budget)
			}
		}
		if sum != budget || len(c.shards) > maxCacheShards {
			t.Fatalf("%d bytes: %d shards holding %d", budget, len(c.shards), sum)
		}
	}
	if n := len(newMaxCache(0).shards); n != maxCacheShards {
		t.Fatalf("default cache has %d shards, want %d", n, maxCacheShards)
	}
}

// TestCacheBytesAccounting: entryCost is no undercount of what an entry takes
// on the heap, for short names and for S3's longest (1 KiB), so a full cache
// stays within its budget in real memory; and no gross overcount either.
func TestCacheBytesAccounting(t *testing.T) {
	for _, keyLen := range []int{12, 64, 1024, -1} {
		const budget = 16 << 20
		heap := func() uint64 {
			var ms runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&ms)
			return ms.HeapAlloc
		}
		before := heap()
		c := newMaxCache(budget)
		if keyLen < 0 { // the worst mix: a fill of short names, then long ones
			for i := range budget / entryCost("k-00000000") {
				c.raise(fmt.Sprintf("k-%08d", i), 1)
			}
			keyLen = 1024
		}
		pad := strings.Repeat("k", keyLen-8)
		// Fill it twice over: each name in its own allocation, as a
		// request's would be.
		for i := int64(0); i < 2*budget/entryCost(pad+"00000000"); i++ {
			c.raise(fmt.Sprintf("%s%08d", pad, i), uint64(i+1))
		}
		for i := range 10_000 { // and keep going: evictions must free what they drop
			c.raise(fmt.Sprintf("%s%08d", pad, 1<<24+i), 1)
		}
		used := int64(heap() - before)
		runtime.KeepAlive(c)
		t.Logf("keys of %d bytes: %d entries, %d bytes accounted, heap grew %d bytes (%.2f of the accounting)",
			keyLen, c.len(), c.bytes(), used, float64(used)/float64(c.bytes()))
		if used > c.bytes()*11/10 {
			t.Errorf("keys of %d bytes: the heap grew %d bytes for %d accounted: entryCost undercounts", keyLen, used, c.bytes())
		}
		if used < c.bytes()/2 {
			t.Errorf("keys of %d bytes: the heap grew %d bytes for %d accounted: entryCost overcounts twice over", keyLen, used, c.bytes())
		}
	}
}

// MarkWritten's knowledge lives on the cache entry: it needs no memory of
// its own, and a maximum above 0 implies it.
func TestCacheMark(t *testing.T) {
	c := newMaxCache(4 * entryCost("absent"))
	c.mark("absent") // nothing cached: nothing stored
	if c.len() != 0 || c.hasRecord("absent") {
		t.Fatal("mark cached an absent resource")
	}
	c.raise("r", 0)
	if c.hasRecord("r") {
		t.Fatal("a cached 0 claims a record")
	}
	c.mark("r")
	if m, ok := c.get("r"); !ok || m != 0 || !c.hasRecord("r") {
		t.Fatalf("marked r: %d %v, record %v", m, ok, c.hasRecord("r"))
	}
	if got := c.raise("r", 0); got != 0 || !c.hasRecord("r") {
		t.Fatal("a load of 0 lost the mark")
	}
	c.raise("r", 4)
	if m, _ := c.get("r"); m != 4 || !c.hasRecord("r") || c.positive.Load() != 1 {
		t.Fatalf("raised r: %d, record %v, positive %d", m, c.hasRecord("r"), c.positive.Load())
	}
	c.raise("p", 2)
	if !c.hasRecord("p") {
		t.Fatal("a maximum above 0 is a record")
	}
}

// Through the Store: distinct resources beyond the bound are answered right
// from disk after eviction, memory stays bounded, and MarkWritten is
// remembered while the entry lasts.
func TestStoreCacheBounded(t *testing.T) {
	budget := 64 * entryCost("bkt/w-100")
	s, err := Open(t.TempDir(), Options{CacheBytes: budget})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 300 {
		if _, err := s.Raise(fmt.Sprintf("bkt/w-%d", i), uint64(i+1)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Max(fmt.Sprintf("bkt/unknown-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if n, b := s.cache.len(), s.cache.bytes(); n > 64 || b > budget {
		t.Fatalf("cache holds %d entries of %d bytes, budget %d", n, b, budget)
	}
	if r := s.Resources(); r < 1 || r > 64 {
		t.Fatalf("Resources() = %d, want 1..64", r)
	}
	for i := range 300 {
		if got := mustMax(t, s, fmt.Sprintf("bkt/w-%d", i)); got != uint64(i+1) {
			t.Fatalf("Max(bkt/w-%d) = %d after eviction, want %d", i, got, i+1)
		}
	}
	if err := s.MarkWritten("bkt/zero"); err != nil {
		t.Fatal(err)
	}
	mustMax(t, s, "bkt/zero") // cache its 0; the next mark sticks to it
	if err := s.MarkWritten("bkt/zero"); err != nil {
		t.Fatal(err)
	}
	if !s.cache.hasRecord("bkt/zero") {
		t.Fatal("MarkWritten not remembered on the cached entry")
	}
	if _, found, err := s.MaxAtOpen("bkt/zero"); err != nil || found {
		t.Fatalf("MaxAtOpen(bkt/zero) = found %v, %v; the record is newer than the open", found, err)
	}
	if v := rawVersion(t, s, "bkt/zero"); v == 0 {
		t.Fatal("MarkWritten wrote no record")
	}
}
