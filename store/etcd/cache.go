package etcd

import (
	"sync"
	"sync/atomic"
)

// DefaultCacheBytes is Options.CacheBytes when it is 0: 32 MiB, about
// 230,000 maxima of short names.
const DefaultCacheBytes = 32 << 20

// entryOverhead is what one cached maximum costs beside its name's bytes: the
// map entry (string header, value, flag) and the map's own slack, counted
// generously.
const entryOverhead = 128

func entryCost(resource string) int64 { return int64(len(resource)) + entryOverhead }

// cacheEntry is what this process knows of one resource: its maximum, and
// whether it has a record (a maximum of 0 from MarkWritten included).
type cacheEntry struct {
	max uint64
	rec bool
}

// maxCache keeps the maxima this process raised or read, within a budget in
// bytes. It answers Max, and Raise of a token at or below the cached maximum,
// without a round trip to etcd.
//
// Two rules make that safe, for a store that is the only writer of its
// prefix (see the package doc):
//   - a cached maximum is never below a maximum that a call of this store
//     has returned, and
//   - never above the one in etcd (only Reset lowers one, and it drops the
//     entry).
//
// Every call that may store a value takes a ticket (the epoch) before its
// request to etcd, and stores its value only if the epoch has not moved by
// the time the answer is back. Everything that removes entries moves the
// epoch: an eviction, a Reset, and a write whose value could not be stored
// (which also removes the resource's entry). So a value read before a
// commit, or before a Reset, can never land in the cache after that
// commit's or Reset's effect was taken out of it. A write's value that is
// stored only lifts an entry, never lowers it.
//
// store/badger has a maxima cache of its own, on purpose: there a read is a
// local lookup, so a striped lock held across it orders it against raises,
// with sharding and CLOCK for hits from many cores; here a read is a
// network round trip that no lock may span (hence the tickets), and only
// this store forgets the maxima of a shard this replica comes to own.
type maxCache struct {
	mu       sync.Mutex
	m        map[string]cacheEntry
	bytes    int64
	budget   int64
	epoch    uint64
	positive atomic.Int64 // entries with a maximum above 0
}

func newMaxCache(budget int64) *maxCache {
	if budget <= 0 {
		budget = DefaultCacheBytes
	}
	return &maxCache{m: map[string]cacheEntry{}, budget: budget}
}

// ticket returns the epoch, to be taken before a request whose answer may be
// cached.
func (c *maxCache) ticket() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.epoch
}

func (c *maxCache) get(resource string) (cacheEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[resource]
	return e, ok
}

// read stores what a read found (the maximum, whether there was a record),
// if the epoch is still ticket; a read that comes back too late is simply
// not cached.
func (c *maxCache) read(resource string, e cacheEntry, ticket uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.epoch == ticket {
		c.liftLocked(resource, e)
	}
}

// wrote stores what a committed write made durable, if the epoch is still
// ticket; otherwise it forgets the resource and moves the epoch, so that no
// older value read meanwhile can be cached after this write returns.
func (c *maxCache) wrote(resource string, e cacheEntry, ticket uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.epoch == ticket {
		c.liftLocked(resource, e)
		return
	}
	c.removeLocked(resource)
	c.epoch++
}

// drop forgets resource and moves the epoch (Reset).
func (c *maxCache) drop(resource string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.removeLocked(resource)
	c.epoch++
}

// forget drops every resource that match reports and moves the epoch.
func (c *maxCache) forget(match func(resource string) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for r := range c.m {
		if match(r) {
			c.removeLocked(r)
		}
	}
	c.epoch++
}

func (c *maxCache) liftLocked(resource string, e cacheEntry) {
	old, ok := c.m[resource]
	if ok {
		e.max, e.rec = max(e.max, old.max), e.rec || old.rec
		if e == old {
			return
		}
		if old.max == 0 && e.max > 0 {
			c.positive.Add(1)
		}
		c.m[resource] = e
		return
	}
	cost := entryCost(resource)
	if cost > c.budget/16 {
		return // a name too long to be worth its memory
	}
	if c.bytes+cost > c.budget {
		c.evictLocked()
	}
	c.m[resource] = e
	c.bytes += cost
	if e.max > 0 {
		c.positive.Add(1)
	}
}

func (c *maxCache) removeLocked(resource string) {
	if old, ok := c.m[resource]; ok {
		delete(c.m, resource)
		c.bytes -= entryCost(resource)
		if old.max > 0 {
			c.positive.Add(-1)
		}
	}
}

// evictLocked removes entries in map order (random) until a tenth of the
// budget is free, and moves the epoch.
func (c *maxCache) evictLocked() {
	for r := range c.m {
		if c.bytes <= c.budget-c.budget/10 {
			break
		}
		c.removeLocked(r)
	}
	c.epoch++
}
