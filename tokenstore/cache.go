package tokenstore

import (
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
)

// DefaultCacheEntries is Options.CacheEntries when it is 0: how many maxima
// stay in memory. An entry costs about 60 bytes plus a copy of its resource
// name: ~23 MiB when full with names like "bkt/obj-123456".
const DefaultCacheEntries = 1 << 18

const (
	// maxCacheShards splits a large cache so that hits on different
	// resources rarely share a lock.
	maxCacheShards = 64
	// minShardEntries keeps small caches (tests) in few shards, so that their
	// bound stays close to the configured size.
	minShardEntries = 1024
	// loadStripes is the number of load locks (see maxCache).
	loadStripes = 256

	// markedBit flags a cached maximum of 0 whose resource is known to have
	// a durable record (MarkWritten). Tokens are at most 2^63-1, so the top
	// bit of a cached value is free.
	markedBit = 1 << 63
)

// maxCache keeps recently used fencing-token maxima in memory, at most a
// fixed number of entries. Eviction is CLOCK (second chance): a hit only sets
// its entry's used flag under a read lock, and a full shard evicts the first
// entry whose flag is clear, clearing the flags it passes. The cache holds 0
// for a resource known to have no maximum, so repeated lookups of a resource
// not yet written skip the disk too; those entries count against the same
// bound, so a flood of distinct resources only evicts, it cannot grow memory.
//
// A cached value is never above the durable maximum (only committed values
// are cached) and never below a maximum whose raise has returned. Eviction
// alone would break the second rule: a load reads 5 from disk, a raise
// commits and caches 7, 7 is evicted, and the load then caches 5. So every
// write of a resource's entry holds that resource's load lock: a load holds
// it from before its disk read until its value is cached, and any raise that
// caches while it is held committed before the read began, or caches after
// the load and lifts its value.
type maxCache struct {
	seed     maphash.Seed
	mask     uint64 // len(shards)-1
	shards   []cacheShard
	loads    [loadStripes]sync.Mutex
	positive atomic.Int64 // entries whose maximum is above 0
}

type cacheShard struct {
	mu    sync.RWMutex
	index map[string]int32 // resource -> its slot
	slots []cacheSlot      // grows up to size, then slots are reused
	size  int
	hand  int      // the next slot the clock looks at
	_     [56]byte // 128 bytes a shard: every hit writes mu, keep it off its neighbours' lines
}

type cacheSlot struct {
	resource string
	value    uint64      // maximum | markedBit; written with mu held for writing
	used     atomic.Bool // set by hits since the clock last passed
}

func newMaxCache(entries int) *maxCache {
	if entries <= 0 {
		entries = DefaultCacheEntries
	}
	n := 1
	for n < maxCacheShards && entries/(n*2) >= minShardEntries {
		n *= 2
	}
	c := &maxCache{seed: maphash.MakeSeed(), mask: uint64(n - 1), shards: make([]cacheShard, n)}
	for i := range c.shards {
		sh := &c.shards[i]
		sh.size = entries / n
		if i < entries%n {
			sh.size++
		}
		sh.index = make(map[string]int32)
	}
	return c
}

func (c *maxCache) shard(resource string) *cacheShard {
	return &c.shards[maphash.String(c.seed, resource)&c.mask]
}

// get returns resource's cached maximum.
func (c *maxCache) get(resource string) (uint64, bool) {
	sh := c.shard(resource)
	sh.mu.RLock()
	i, ok := sh.index[resource]
	var v uint64
	if ok {
		sl := &sh.slots[i]
		v = sl.value
		if !sl.used.Load() { // a load first: no cache-line write on repeated hits
			sl.used.Store(true)
		}
	}
	sh.mu.RUnlock()
	return v &^ markedBit, ok
}

// hasRecord reports whether the cache knows resource has a durable record:
// its cached maximum is above 0, or MarkWritten marked it.
func (c *maxCache) hasRecord(resource string) bool {
	sh := c.shard(resource)
	sh.mu.RLock()
	i, ok := sh.index[resource]
	known := ok && sh.slots[i].value != 0
	sh.mu.RUnlock()
	return known
}

// lockLoad takes resource's load lock; the caller must unlock it.
func (c *maxCache) lockLoad(resource string) *sync.Mutex {
	mu := &c.loads[maphash.String(c.seed, resource)%loadStripes]
	mu.Lock()
	return mu
}

// raise caches max(cached, v) for resource, v a committed maximum, and
// returns it. It takes the load lock: see maxCache.
func (c *maxCache) raise(resource string, v uint64) uint64 {
	mu := c.lockLoad(resource)
	defer mu.Unlock()
	return c.raiseLocked(resource, v)
}

// raiseLocked is raise for a caller that holds resource's load lock.
func (c *maxCache) raiseLocked(resource string, v uint64) uint64 {
	sh := c.shard(resource)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i, ok := sh.index[resource]
	if !ok {
		c.insert(sh, resource, v)
		return v
	}
	sl := &sh.slots[i]
	if cur := sl.value &^ markedBit; cur >= v {
		return cur
	} else if cur == 0 {
		c.positive.Add(1)
	}
	sl.value = v // a maximum above 0 implies a record: the mark can go
	return v
}

// insert adds resource, absent from sh, evicting if sh is full. Caller holds
// sh.mu for writing.
func (c *maxCache) insert(sh *cacheShard, resource string, v uint64) {
	// The caller's string may share memory with a whole request line (a
	// substring of it), which the cache would then keep alive.
	resource = strings.Clone(resource)
	if v&^markedBit > 0 {
		c.positive.Add(1)
	}
	if len(sh.slots) < sh.size {
		if len(sh.slots) == cap(sh.slots) {
			// Grow by doubling but never past size: append's own growth
			// would overshoot the bound by up to a quarter.
			grown := make([]cacheSlot, len(sh.slots), min(max(2*cap(sh.slots), 16), sh.size))
			copy(grown, sh.slots)
			sh.slots = grown
		}
		sh.index[resource] = int32(len(sh.slots))
		sh.slots = append(sh.slots, cacheSlot{resource: resource, value: v})
		return
	}
	// Terminates within two turns: the first clears every used flag.
	for {
		if sh.hand >= len(sh.slots) {
			sh.hand = 0
		}
		sl := &sh.slots[sh.hand]
		if sl.used.Load() {
			sl.used.Store(false)
			sh.hand++
			continue
		}
		if sl.value&^markedBit > 0 {
			c.positive.Add(-1)
		}
		delete(sh.index, sl.resource)
		// A new entry starts unused: a resource seen once (a fill of many
		// distinct ones) is the first to go.
		sl.resource, sl.value = resource, v
		sh.index[resource] = int32(sh.hand)
		sh.hand++
		return
	}
}

// mark records that resource has a durable record, on its entry if one is
// cached. Without an entry nothing is stored: inserting 0 could hide a
// maximum that was evicted.
func (c *maxCache) mark(resource string) {
	mu := c.lockLoad(resource)
	defer mu.Unlock()
	sh := c.shard(resource)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if i, ok := sh.index[resource]; ok && sh.slots[i].value == 0 {
		sh.slots[i].value = markedBit
	}
}

// drop forgets resource's entry, so the next lookup reads the disk.
func (c *maxCache) drop(resource string) {
	mu := c.lockLoad(resource)
	defer mu.Unlock()
	sh := c.shard(resource)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i, ok := sh.index[resource]
	if !ok {
		return
	}
	if sh.slots[i].value&^markedBit > 0 {
		c.positive.Add(-1)
	}
	delete(sh.index, resource)
	// Move the last slot into the hole.
	last := len(sh.slots) - 1
	if int(i) != last {
		moved := &sh.slots[last]
		sh.slots[i].resource, sh.slots[i].value = moved.resource, moved.value
		sh.slots[i].used.Store(moved.used.Load())
		sh.index[moved.resource] = i
	}
	sh.slots[last] = cacheSlot{} // drop the string for the GC
	sh.slots = sh.slots[:last]
}

// len returns the number of cached entries.
func (c *maxCache) len() int {
	n := 0
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.RLock()
		n += len(sh.index)
		sh.mu.RUnlock()
	}
	return n
}
