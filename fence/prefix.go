package fence

import (
	"context"
	"errors"
	"fmt"
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
// the map entry, the string header and the entry itself.
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
		cost := int64(len(prefix) + prefixEntryBytes)
		if p.bytes+cost > p.limit {
			return onResource(prefix, fmt.Errorf("%w: the %d prefix fences held take %d bytes, the limit is %d (FENCEPROXY_PREFIX_FENCES_SIZE)",
				ErrPrefixLimit, len(p.byKey), p.bytes, p.limit))
		}
		f = &prefixFence{}
		p.byKey[prefix] = f
		p.bytes += cost
		p.n.Add(1)
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

// drop removes prefix's entry. Caller holds mu.
func (p *prefixes) drop(prefix string) {
	delete(p.byKey, prefix)
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
			prefix = resource + "/" // allocates only in S3 mode with prefix fences held
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

// load reads the store's prefix fences into p, a page at a time.
func (p *prefixes) load(store Store) error {
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
				if err := p.set(r.Resource, r.Token); err != nil {
					return fmt.Errorf("the store holds more prefix fences than the limit lets this process keep in memory; "+
						"raise FENCEPROXY_PREFIX_FENCES_SIZE (with a process that starts, reset the ones no longer needed): %w", err)
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
// and prefix fences are on (Options.NoPrefixFences is false).
func (b *Barrier) IsPrefix(name string) bool { return b.isPrefix(name) }

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
// Admit. resources are the write's: a token that one of them, or a prefix
// fence above one, refuses raises nothing (a stale write must not fence a
// partition). Errors: ErrBadResource when prefix is no prefix fence here;
// *StaleError; ErrStore; Raise's otherwise.
func (b *Barrier) RaiseAhead(ctx context.Context, prefix string, t uint64, resources []string) error {
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
		if p, pm, wait := b.prefixes.above(r, t); p != "" && wait == nil {
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
// still sending to a resource below prefix, and returns once no write below
// m on one is in flight (an abandoned one through its abandon grace).
// Writes admitted from now on see the raise (admitUnder). Errors:
// ErrDrainTimeout (as a *ResourceError of prefix) or ctx's cause.
func (b *Barrier) drainPrefix(ctx context.Context, prefix string, m uint64, deadline *<-chan time.Time) error {
	if !protected("prefix-drain") {
		return nil
	}
	return b.drainWhere(ctx, prefix, deadline, func(st *resourceState) bool {
		if st.inflightBelow(m) {
			st.cutBelow(m)
			return true
		}
		return false
	})
}

// drainWhere waits until busy reports no resource below prefix busy; busy
// is called under the resource's lock, and may cut.
func (b *Barrier) drainWhere(ctx context.Context, prefix string, deadline *<-chan time.Time, busy func(*resourceState) bool) error {
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
// flight, and returns the change channel of the first busy one (nil: none).
func (b *Barrier) busyBelow(prefix string, busy func(*resourceState) bool) <-chan struct{} {
	var first <-chan struct{}
	for i := range b.shards {
		sh := &b.shards[i]
		sh.mu.Lock()
		for resource, st := range sh.resources {
			if !b.prefixes.covers(prefix, resource) {
				continue
			}
			st.mu.Lock()
			if busy(st) && first == nil {
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
