package badger

import (
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
)

// DefaultCacheBytes is Options.CacheBytes when it is 0: the memory the
// cached maxima may take, 32 MiB. That holds about 230,000 maxima of names
// like "bkt/obj-123456", or about 26,000 of 1 KiB S3 keys.
const DefaultCacheBytes = 32 << 20

// entryOverhead is what one cached maximum costs beside its name's bytes, at
// worst: its slot (name header, value, flag: 32 bytes, up to 64 while the
// slots' capacity has doubled ahead of use) and its index entry (name header
// and slot number, 24 bytes, up to 57 in a map just grown to twice its
// size). The name's allocation rounds up by at most an eighth, which
// entryCost adds. TestCacheBytesAccounting checks it against the heap.
const entryOverhead = 128

// entryCost is the memory, in bytes, that caching resource's maximum takes.
func entryCost(resource string) int64 {
	return int64(len(resource)) + int64(len(resource))/8 + entryOverhead
}

const (
	// maxCacheShards splits a large cache so that hits on different
	// resources rarely share a lock.
	maxCacheShards = 64
	// minShardBytes keeps small caches (tests) in few shards, so that the
	// largest key (4 KiB) fits a shard and the bound stays close to the
	// configured size.
	minShardBytes = 256 << 10
	// loadStripes is the number of load locks (see maxCache).
	loadStripes = 256

	// markedBit flags a cached maximum of 0 whose resource is known to have
	// a durable record (MarkWritten). Tokens are at most 2^63-1, so the top
	// bit of a cached value is free.
	markedBit = 1 << 63
)

// maxCache keeps recently used fencing-token maxima in memory, within a
// budget in bytes (entryCost per entry, so long names count for what they
// take). Eviction is CLOCK (second chance): a hit only sets its entry's used
// flag under a read lock, and a shard over its budget evicts the first
// entries whose flag is clear, clearing the flags it passes. The cache holds
// 0 for a resource known to have no maximum, so repeated lookups of a
// resource not yet written skip the disk too; those entries count against
// the same budget, so a flood of distinct resources only evicts, it cannot
// grow memory. An entry larger than a whole shard's budget is not cached.
//
// A cached value is never above the durable maximum (only committed values
// are cached) and never below a maximum whose raise has returned. Eviction
// alone would break the second rule: a load reads 5 from disk, a raise
// commits and caches 7, 7 is evicted, and the load then caches 5. So every
// write of a resource's entry holds that resource's load lock: a load holds
// it from before its disk read until its value is cached, and any raise that
// caches while it is held committed before the read began, or caches after
// the load and lifts its value.
//
// store/etcd has a maxima cache of its own, on purpose: a Badger read is a
// local lookup, short enough to hold a striped load lock across, and hits
// from many cores need the shards and CLOCK; an etcd read is a network round
// trip that no lock may span, so that cache orders its values by epoch
// tickets instead, and forgets whole shards on a change of owner.
type maxCache struct {
	seed     maphash.Seed
	mask     uint64 // len(shards)-1
	shards   []cacheShard
	loads    [loadStripes]sync.Mutex
	positive atomic.Int64 // entries whose maximum is above 0
}

type cacheShard struct {
	mu     sync.RWMutex
	index  map[string]int32 // resource -> its slot
	slots  []cacheSlot      // the entries and holes (resource ""), in no order; the clock hand walks them
	free   []int32          // the holes' slot numbers
	bytes  int64            // entryCost of the entries
	budget int64            // the most bytes may be
	hand   int              // the next slot the clock looks at
	_      [24]byte         // 128 bytes a shard: every hit writes mu, keep it off its neighbours' lines
}

type cacheSlot struct {
	resource string
	value    uint64      // maximum | markedBit; written with mu held for writing
	used     atomic.Bool // set by hits since the clock last passed
}

// newMaxCache returns a cache within budget bytes (DefaultCacheBytes when 0
// or less).
func newMaxCache(budget int64) *maxCache {
	if budget <= 0 {
		budget = DefaultCacheBytes
	}
	n := int64(1)
	for n < maxCacheShards && budget/(n*2) >= minShardBytes {
		n *= 2
	}
	c := &maxCache{seed: maphash.MakeSeed(), mask: uint64(n - 1), shards: make([]cacheShard, n)}
	for i := range c.shards {
		sh := &c.shards[i]
		sh.budget = budget / n
		if int64(i) < budget%n {
			sh.budget++
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

// insert adds resource, absent from sh, evicting until sh is within its
// budget. Caller holds sh.mu for writing.
func (c *maxCache) insert(sh *cacheShard, resource string, v uint64) {
	cost := entryCost(resource)
	if cost > sh.budget {
		return // disk answers it; never cached, so never stale
	}
	// CLOCK. Terminates within two turns: the first clears every flag.
	for sh.bytes+cost > sh.budget {
		if sh.hand >= len(sh.slots) {
			sh.hand = 0
		}
		sl := &sh.slots[sh.hand]
		switch {
		case sl.resource == "": // a hole: no key is empty
		case sl.used.Load():
			sl.used.Store(false)
		default:
			c.evict(sh, int32(sh.hand))
		}
		sh.hand++
	}
	// The caller's string may share memory with a whole request line (a
	// substring of it), which the cache would then keep alive.
	resource = strings.Clone(resource)
	if v&^markedBit > 0 {
		c.positive.Add(1)
	}
	// The last hole made is the victim's, just behind the hand: the new
	// entry gets a whole turn before the clock looks at it. It starts
	// unused, so a resource seen once (a fill of many distinct ones) is the
	// first to go.
	var i int32
	if n := len(sh.free); n > 0 {
		i, sh.free = sh.free[n-1], sh.free[:n-1]
		sh.slots[i].resource, sh.slots[i].value = resource, v
	} else {
		i = int32(len(sh.slots))
		sh.slots = append(sh.slots, cacheSlot{resource: resource, value: v})
	}
	sh.index[resource] = i
	sh.bytes += cost
	sh.compact()
}

// evict forgets slot i's entry, leaving a hole for the next insert. Caller
// holds sh.mu for writing.
func (c *maxCache) evict(sh *cacheShard, i int32) {
	sl := &sh.slots[i]
	if sl.value&^markedBit > 0 {
		c.positive.Add(-1)
	}
	delete(sh.index, sl.resource)
	sh.bytes -= entryCost(sl.resource)
	sl.resource, sl.value = "", 0 // drop the string for the GC
	sl.used.Store(false)
	sh.free = append(sh.free, i)
}

// compact reallocates the slots and the index without holes once fewer than
// half of the slots' capacity holds entries (short names replaced by long
// ones, or drops): neither a slice nor a map gives memory back by itself,
// and entryCost counts one slot and one index entry per entry. Caller holds
// sh.mu for writing.
func (sh *cacheShard) compact() {
	if cap(sh.slots) < 64 || len(sh.index) >= cap(sh.slots)/2 {
		return
	}
	slots := make([]cacheSlot, 0, len(sh.index)+len(sh.index)/4)
	index := make(map[string]int32, len(sh.index))
	hand := 0
	for i := range sh.slots {
		if i == sh.hand {
			hand = len(slots)
		}
		old := &sh.slots[i]
		if old.resource == "" {
			continue
		}
		index[old.resource] = int32(len(slots))
		slots = append(slots, cacheSlot{resource: old.resource, value: old.value})
		slots[len(slots)-1].used.Store(old.used.Load())
	}
	sh.slots, sh.index, sh.free, sh.hand = slots, index, nil, hand
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
	if i, ok := sh.index[resource]; ok {
		c.evict(sh, i)
		sh.compact()
	}
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

// bytes returns the entryCost of the cached entries.
func (c *maxCache) bytes() int64 {
	var n int64
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.RLock()
		n += sh.bytes
		sh.mu.RUnlock()
	}
	return n
}
