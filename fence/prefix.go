package fence

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ErrPrefixLimit: a new prefix fence would take the prefix fences' memory
// past Options.PrefixBytes (507); nothing was raised.
var ErrPrefixLimit = errors.New("too many prefix fences")

// IsPrefix reports whether name is a prefix fence's: it ends in "/".
func IsPrefix(name string) bool { return name != "" && name[len(name)-1] == '/' }

// prefixEntryBytes is what one prefix fence costs in memory beside its name:
// the map entry, the string headers (the map's and the sorted names') and
// the entry itself.
const prefixEntryBytes = 96

// DefaultPrefixBytes is Options.PrefixBytes when 0: 32 MiB, about 250,000
// prefix fences with 40-byte names.
const DefaultPrefixBytes = 32 << 20

// prefixes is the barrier's in-memory view of the prefix fences: every
// one's maximum, so that admission never reads the store per ancestor of a
// key, and the raises in progress, which writes below them wait for.
//
// A write registers in flight on its own resource before it checks the
// prefix fences above it (admitUnder); a raise publishes its prefix here
// (begin) before it scans for writes in flight below it (drainPrefix). So
// a write either sees the raise and waits, or is found by the scan and cut.
type prefixes struct {
	n     atomic.Int64 // entries: admission skips the lock when 0
	mu    sync.RWMutex
	byKey map[string]*prefixFence
	names []string // byKey's names, sorted: the fences at or below a collection are a range
	bytes int64
	limit int64
	// ownName: a prefix fence P/ also covers the resource P
	// (Options.PrefixOwnName).
	ownName bool
}

type prefixFence struct {
	max     uint64
	raising int           // raises or resets in progress
	done    chan struct{} // while raising: closed when it drops to 0
}

// begin marks a raise (or reset) of prefix in progress: writes below it wait
// for end. ErrPrefixLimit when a new entry would pass the limit.
func (p *prefixes) begin(prefix string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.byKey[prefix]
	if f == nil {
		if err := p.add(prefix, 0); err != nil {
			return err
		}
		f = p.byKey[prefix]
	}
	if f.raising++; f.raising == 1 {
		f.done = make(chan struct{})
	}
	return nil
}

// end ends a raise begun by begin: m is prefix's maximum now (0 after a
// reset or a failed first raise removes the entry).
func (p *prefixes) end(prefix string, m uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.byKey[prefix]
	f.max = max(f.max, m)
	if f.raising--; f.raising == 0 {
		close(f.done)
		f.done = nil
		if f.max == 0 {
			p.drop(prefix)
		}
	}
}

// reset ends a reset begun by begin: the entry goes.
func (p *prefixes) reset(prefix string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.byKey[prefix]
	f.max = 0
	if f.raising--; f.raising == 0 {
		close(f.done)
		f.done = nil
		p.drop(prefix)
	}
}

// add creates prefix's entry with maximum m. Caller holds mu.
// ErrPrefixLimit as begin.
func (p *prefixes) add(prefix string, m uint64) error {
	cost := int64(len(prefix) + prefixEntryBytes)
	if err := p.room(prefix, cost); err != nil {
		return err
	}
	p.byKey[prefix] = &prefixFence{max: m}
	i, _ := slices.BinarySearch(p.names, prefix) // at the end while load reads them in order
	p.names = slices.Insert(p.names, i, prefix)
	p.bytes += cost
	p.n.Add(1)
	return nil
}

// room returns ErrPrefixLimit when cost more bytes for prefix would pass
// the limit. Caller holds mu.
func (p *prefixes) room(prefix string, cost int64) error {
	if p.bytes+cost > p.limit {
		return onResource(prefix, fmt.Errorf("%w: the %d prefix fences held take %d bytes, the limit is %d (FENCEPROXY_PREFIX_FENCES_SIZE)",
			ErrPrefixLimit, len(p.byKey), p.bytes, p.limit))
	}
	return nil
}

// drop removes prefix's entry. Caller holds mu.
func (p *prefixes) drop(prefix string) {
	delete(p.byKey, prefix)
	if i, ok := slices.BinarySearch(p.names, prefix); ok {
		p.names = slices.Delete(p.names, i, i+1)
	}
	p.bytes -= int64(len(prefix) + prefixEntryBytes)
	p.n.Add(-1)
}

// set records a maximum loaded at New or raised without the barrier's wait
// (observe mode).
func (p *prefixes) set(prefix string, m uint64) error {
	if err := p.begin(prefix); err != nil {
		return err
	}
	p.end(prefix, m)
	return nil
}

// above returns the prefix fence above resource (strictly: resource itself
// is not its own prefix; with ownName, resource + "/" is above resource)
// that refuses token t, or one being raised (wait is then its channel):
// name "" when none. It reads no store.
func (p *prefixes) above(resource string, t uint64) (name string, m uint64, wait <-chan struct{}) {
	if p.n.Load() == 0 || !protected("prefix-admission") {
		return "", 0, nil
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	for i := 0; i < len(resource); i++ {
		var prefix string
		switch {
		case resource[i] == '/' && i < len(resource)-1:
			prefix = resource[:i+1]
		case i == len(resource)-1 && p.ownName && resource[i] != '/':
			prefix = resource + "/" // allocates only while prefix fences are held
		default:
			continue
		}
		f := p.byKey[prefix]
		if f == nil {
			continue
		}
		if f.raising > 0 {
			return prefix, f.max, f.done
		}
		if t < f.max {
			return prefix, f.max, nil
		}
	}
	return "", 0, nil
}

// below returns the prefix fence at or below the collection that resource
// stands for (resource itself when it ends in "/", else resource + "/";
// resource's own fence excluded, the admission rule checks it) that refuses
// token t, or one being raised (wait is then its channel): name "" when
// none. It reads no store; its cost grows with the prefix fences below
// (binary search, then the range).
func (p *prefixes) below(resource string, t uint64) (name string, m uint64, wait <-chan struct{}) {
	if p.n.Load() == 0 || !protected("collection-admission") {
		return "", 0, nil
	}
	c := resource
	if !IsPrefix(c) {
		c += "/" // allocates only with prefix fences held
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	i, _ := slices.BinarySearch(p.names, c)
	for ; i < len(p.names) && strings.HasPrefix(p.names[i], c); i++ {
		if p.names[i] == resource {
			continue
		}
		f := p.byKey[p.names[i]]
		if f.raising > 0 {
			return p.names[i], f.max, f.done
		}
		if t < f.max {
			return p.names[i], f.max, nil
		}
	}
	return "", 0, nil
}

// collectionAbove reports how a write in flight on resource stands to a
// raise of the prefix fence prefix (Options.Collections): all reports that
// resource is a collection above prefix (a name ending in "/" that prefix
// starts with), trees that resource is a name whose collection,
// resource + "/", is prefix or above it, where only its collection writes
// count. Neither for prefix itself.
func collectionAbove(resource, prefix string) (all, trees bool) {
	if len(resource) >= len(prefix) || !strings.HasPrefix(prefix, resource) {
		return false, false
	}
	if IsPrefix(resource) {
		return true, false
	}
	return false, prefix[len(resource)] == '/'
}

// covers reports whether the prefix fence prefix covers resource.
func (p *prefixes) covers(prefix, resource string) bool {
	return len(resource) > len(prefix) && strings.HasPrefix(resource, prefix) ||
		p.ownName && resource == prefix[:len(prefix)-1]
}

// highest returns the prefix fence above resource (as above) with the largest maximum,
// "" when none.
func (p *prefixes) highest(resource string) (name string, m uint64) {
	if p.n.Load() == 0 {
		return "", 0
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	for i := 0; i < len(resource); i++ {
		var prefix string
		switch {
		case resource[i] == '/' && i < len(resource)-1:
			prefix = resource[:i+1]
		case i == len(resource)-1 && p.ownName && resource[i] != '/':
			prefix = resource + "/"
		default:
			continue
		}
		if f := p.byKey[prefix]; f != nil && f.max > m {
			name, m = prefix, f.max
		}
	}
	return name, m
}

// load reads the store's prefix fences that are ones here into p.
func (p *prefixes) load(store Store, isPrefix func(string) bool) error {
	return readPrefixes(store, func(r Record) error {
		if !isPrefix(r.Resource) {
			return nil
		}
		if err := p.set(r.Resource, r.Token); err != nil {
			return fmt.Errorf("the store holds more prefix fences than the limit lets this process keep in memory; "+
				"raise FENCEPROXY_PREFIX_FENCES_SIZE (with a process that starts, reset the ones no longer needed): %w", err)
		}
		return nil
	})
}

// readPrefixes calls each with every prefix fence of store with a maximum
// above 0, a page at a time, until it returns an error. Errors: ErrStore,
// each's.
func readPrefixes(store Store, each func(Record) error) error {
	pl, ok := store.(PrefixLister)
	if !ok {
		return nil
	}
	after := ""
	for {
		recs, err := pl.Prefixes(after, 1000)
		if err != nil {
			return fmt.Errorf("%w: loading the prefix fences: %w", ErrStore, err)
		}
		for _, r := range recs {
			if IsPrefix(r.Resource) && r.Token > 0 {
				if err := each(r); err != nil {
					return err
				}
			}
		}
		if len(recs) < 1000 {
			return nil
		}
		after = recs[len(recs)-1].Resource
	}
}

// Fence returns the fence that decides a write on resource now: resource's
// own maximum, or that of a prefix fence above it when larger (name is then
// the prefix). Errors: the store's, wrapped in ErrStore.
func (b *Barrier) Fence(resource string) (name string, m uint64, err error) {
	if m, err = b.Max(resource); err != nil {
		return "", 0, err
	}
	name = resource
	if p, pm := b.prefixes.highest(resource); pm > m {
		name, m = p, pm
	}
	return name, m, nil
}

// Floor returns the largest maximum among the fences that cover keys name
// covers too, besides name's own: the prefix fences above name (from
// memory) and, for a prefix fence, every fence below it (from the store's
// listing, a page at a time: its cost grows with the keys below). A lease
// acquire's token passes it, so that the newest acquire fences every key
// its lease covers. 0 when none. Errors: ErrStore.
func (b *Barrier) Floor(name string) (uint64, error) {
	if !protected("prefix-floor") {
		return 0, nil
	}
	_, m := b.prefixes.highest(name)
	if !b.isPrefix(name) {
		return m, nil
	}
	if b.prefixes.ownName { // P/ covers the resource P too
		own, err := b.store.Max(name[:len(name)-1])
		if err != nil {
			return 0, fmt.Errorf("%w: %w", ErrStore, err)
		}
		m = max(m, own)
	}
	l, ok := b.store.(lister)
	if !ok {
		return m, nil
	}
	after := name
	for {
		recs, err := l.List(name, after, 1000)
		if err != nil {
			return 0, fmt.Errorf("%w: %w", ErrStore, err)
		}
		for _, r := range recs {
			m = max(m, r.Token)
		}
		if len(recs) < 1000 {
			return m, nil
		}
		after = recs[len(recs)-1].Resource
	}
}

// lister is the store's listing of maxima, for Floor.
type lister interface {
	List(prefix, after string, limit int) ([]Record, error)
}

// IsPrefix reports whether name is a prefix fence here: it ends in "/",
// prefix fences are on (Options.NoPrefixFences is false), and it has at
// least Options.PrefixSegments segments.
func (b *Barrier) IsPrefix(name string) bool { return b.isPrefix(name) }

// CheckPrefix returns nil when name is a prefix fence here, else why it is
// not, as an ErrBadResource for the caller's 400 (a lease, a raise, a pool
// prefix or an X-Fencing-Prefix that would fence nothing below it).
func (b *Barrier) CheckPrefix(name string) error {
	switch {
	case b.isPrefix(name):
		return nil
	case !IsPrefix(name):
		return fmt.Errorf("%w: %q does not end in \"/\", so it is no prefix fence", ErrBadResource, name)
	case b.opts.NoPrefixFences:
		return fmt.Errorf("%w: %q ends in \"/\", a prefix fence, which cluster mode supports only with FENCEPROXY_SHARD_DEPTH set "+
			"(without it the keys below a prefix may be owned by other replicas)", ErrBadResource, name)
	default:
		n := strings.Count(name, "/")
		return fmt.Errorf("%w: prefix fence %q has %d %s, fewer than FENCEPROXY_SHARD_DEPTH %d: "+
			"cluster mode shards a key by its first %d segments, so the keys below a shallower prefix may be owned by other replicas",
			ErrBadResource, name, n, plural(n, "segment"), b.opts.PrefixSegments, b.opts.PrefixSegments)
	}
}

// ReloadPrefixes replaces the in-memory prefix fences that match with the
// store's: cluster mode calls it when this replica takes a shard over,
// before it admits the shard's writes, so it sees what earlier owners
// raised and reset. A fence being raised here keeps the larger of its
// maximum and the store's. It reads the whole index of prefix fences, a
// page at a time. Errors: ErrStore, ErrPrefixLimit (the prefix fences that
// match are then partly loaded: admit none of their writes).
func (b *Barrier) ReloadPrefixes(match func(name string) bool) error {
	if b.opts.NoPrefixFences || !protected("prefix-reload") {
		return nil
	}
	var recs []Record
	err := readPrefixes(b.store, func(r Record) error {
		if match(r.Resource) && b.isPrefix(r.Resource) {
			recs = append(recs, r)
		}
		return nil
	})
	if err != nil {
		return err
	}
	p := &b.prefixes
	p.mu.Lock()
	defer p.mu.Unlock()
	// The sorted names are rebuilt once, not edited per entry: a takeover
	// may move many thousands.
	for name, f := range p.byKey {
		if f.raising == 0 && match(name) {
			delete(p.byKey, name)
			p.bytes -= int64(len(name) + prefixEntryBytes)
			p.n.Add(-1)
		}
	}
	p.names = slices.DeleteFunc(p.names, func(name string) bool { return p.byKey[name] == nil })
	defer slices.Sort(p.names)
	for _, r := range recs {
		if f := p.byKey[r.Resource]; f != nil {
			f.max = max(f.max, r.Token)
			continue
		}
		cost := int64(len(r.Resource) + prefixEntryBytes)
		if err := p.room(r.Resource, cost); err != nil {
			return err
		}
		p.byKey[r.Resource] = &prefixFence{max: r.Token}
		p.names = append(p.names, r.Resource)
		p.bytes += cost
		p.n.Add(1)
	}
	return nil
}

// Covers reports whether the prefix fence prefix (a name ending in "/")
// covers resource: resource is below it, or with Options.PrefixOwnName is
// prefix without its final "/" (the directory marker's resource in S3 mode).
func (b *Barrier) Covers(prefix, resource string) bool {
	return b.isPrefix(prefix) && b.prefixes.covers(prefix, resource)
}

// RaiseAhead raises prefix fence prefix to token t before a write below it
// with t is admitted (an outside coordinator's token for a partition, see
// wire.HeaderPrefix), as Raise does, so smaller-token writes below it are
// cut and drained first; nothing when its maximum is t or more already
// (read from memory). A write with t below the maximum is then refused by
// Admit. resources are the write's, collections whether it is admitted with
// AdmitCollections: a token that one of them, or a prefix fence above one
// (or at or below its collection), refuses raises nothing (a stale write
// must not fence a partition). Errors: ErrBadResource when prefix is no
// prefix fence here; *StaleError; ErrStore; Raise's otherwise.
func (b *Barrier) RaiseAhead(ctx context.Context, prefix string, t uint64, resources []string, collections bool) error {
	if !b.isPrefix(prefix) {
		return onResource(prefix, fmt.Errorf("%w: %q is no prefix fence", ErrBadResource, prefix))
	}
	for _, r := range resources {
		m, err := b.store.Max(r)
		if err != nil {
			return onResource(r, fmt.Errorf("%w: %w", ErrStore, err))
		}
		if t < m {
			return &StaleError{Resource: r, Token: t, Current: m}
		}
		trees := b.collections() && (collections || IsPrefix(r))
		if p, pm, wait := b.fences(r, t, trees); p != "" && wait == nil {
			return &StaleError{Resource: p, Token: t, Current: pm}
		}
	}
	b.prefixes.mu.RLock()
	var m uint64
	if f := b.prefixes.byKey[prefix]; f != nil {
		m = f.max
	}
	b.prefixes.mu.RUnlock()
	if t <= m {
		return nil
	}
	_, err := b.Raise(ctx, prefix, t)
	return err
}

// PrefixFences returns how many prefix fences the barrier holds in memory
// and their bytes (a gauge).
func (b *Barrier) PrefixFences() (n int, bytes int64) {
	b.prefixes.mu.RLock()
	defer b.prefixes.mu.RUnlock()
	return len(b.prefixes.byKey), b.prefixes.bytes
}

// drainPrefix is a prefix raise's wait: it cuts every upload below token m
// still sending to a resource below prefix (and, with Options.Collections,
// a collection write above it: see collectionAbove), and returns once no
// such write below m is in flight (an abandoned one through its abandon
// grace). Writes admitted from now on see the raise (admitUnder). Errors:
// ErrDrainTimeout (as a *ResourceError of prefix) or ctx's cause.
func (b *Barrier) drainPrefix(ctx context.Context, prefix string, m uint64, deadline *<-chan time.Time) error {
	if !protected("prefix-drain") {
		return nil
	}
	return b.drainWhere(ctx, prefix, deadline, func(st *resourceState, trees bool) bool {
		if trees {
			if st.treesBelow(m) {
				st.cutBelow(m, prefix, true)
				return true
			}
			return false
		}
		if st.inflightBelow(m) {
			st.cutBelow(m, prefix, false)
			return true
		}
		return false
	})
}

// drainWhere waits until busy reports no resource below prefix busy (nor,
// with Options.Collections, a collection write above it); busy is called
// under the resource's lock with trees set when only the resource's
// collection writes count, and may cut.
func (b *Barrier) drainWhere(ctx context.Context, prefix string, deadline *<-chan time.Time, busy func(st *resourceState, trees bool) bool) error {
	for {
		ch := b.busyBelow(prefix, busy)
		if ch == nil {
			return nil
		}
		if *deadline == nil {
			*deadline = b.clock.After(b.opts.DrainTimeout)
		}
		select {
		case <-ch:
		case <-*deadline:
			return onResource(prefix, ErrDrainTimeout)
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// busyBelow calls busy for every resource below prefix with writes in
// flight (and every collection above it, see drainWhere), and returns the
// change channel of the first busy one (nil: none).
func (b *Barrier) busyBelow(prefix string, busy func(*resourceState, bool) bool) <-chan struct{} {
	var first <-chan struct{}
	collections := b.collections() && protected("collection-drain")
	for i := range b.shards {
		sh := &b.shards[i]
		sh.mu.Lock()
		for resource, st := range sh.resources {
			trees := false
			if !b.prefixes.covers(prefix, resource) {
				var all bool
				if collections {
					all, trees = collectionAbove(resource, prefix)
				}
				if !all && !trees {
					continue
				}
			}
			st.mu.Lock()
			if busy(st, trees) && first == nil {
				if st.changed == nil {
					st.changed = make(chan struct{})
				}
				first = st.changed
			}
			st.mu.Unlock()
		}
		sh.mu.Unlock()
	}
	return first
}

// plural is word, with an "s" unless n is 1.
func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
