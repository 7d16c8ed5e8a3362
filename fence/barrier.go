package fence

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Options configures a Barrier.
type Options struct {
	// DrainTimeout bounds how long an admitted write or a raise waits for
	// smaller-token writes in flight (and for a concurrent raise of the same
	// resource); past it ErrDrainTimeout. Must be above 0.
	DrainTimeout time.Duration
	// AbandonGrace keeps a resource's barrier closed this long after the
	// proxy gave up on a write it had sent whole (Upload.Abandon), like
	// Chubby's lock-delay. 0: off.
	AbandonGrace time.Duration
	// StartGrace: for this long after New, tokens above 0 on a resource that
	// had a record at start (StartView) wait until it has passed, since an
	// earlier process may have left writes in flight. 0: none (a clean start).
	StartGrace time.Duration
	// MaxTokenJump refuses (ErrJump) a token more than this above its
	// resource's maximum. 0: off.
	MaxTokenJump uint64
	// Clock: nil is the system clock.
	Clock Clock
	// ObserveRaise, when set, is called with the duration of every durable
	// raise the barrier made (a write's, Raise's, RaiseWith's), after it;
	// failed ones are not observed. nil: none.
	ObserveRaise func(time.Duration)
	// NoPrefixFences: a name ending in "/" is a resource like any other,
	// fencing nothing below it (cluster mode, where the keys below a prefix
	// may be owned by other replicas). False: it is a prefix fence.
	NoPrefixFences bool
	// PrefixSegments: a name ending in "/" is a prefix fence only when it
	// has at least this many segments (this many "/"); a shallower one is a
	// resource like any other. Cluster mode's FENCEPROXY_SHARD_DEPTH, so a
	// prefix fence has the shard of every key below it. 0: any.
	PrefixSegments int
	// PrefixBytes bounds the memory of the prefix fences' maxima, each
	// counted as its name's length plus 96 bytes; a raise that would create
	// one more past it is refused (ErrPrefixLimit). 0: DefaultPrefixBytes.
	PrefixBytes int64
	// PrefixOwnName: a prefix fence P/ also covers the resource P, its own
	// name without the "/" (S3 mode, where P is the alias class of the
	// object P/, a directory marker below the prefix, and a posix store
	// opens P and P/ as one object; plain mode, where a WebDAV or
	// file-system store opens /P/ as /P, Resolver.Alias). False: P is
	// beside the prefix.
	PrefixOwnName bool
	// Collections: a name ending in "/" is also a collection, and a write
	// on it must pass every prefix fence below it too, as must a write
	// admitted with AdmitCollections on a name R without "/" for every
	// prefix fence at or below R + "/"; a raise of such a prefix fence cuts
	// and drains those writes in flight with smaller tokens (plain mode,
	// where a WebDAV or REST backend applies a DELETE, MOVE or COPY of a
	// collection to everything below it). Only the prefix fences count,
	// which are in memory; the maxima of single keys below a collection do
	// not. With PrefixSegments (cluster mode), only collections with that
	// many segments are checked: the prefix fences below a shallower one
	// may be other replicas'. False (S3 mode): a write changes the object
	// it names.
	Collections bool
}

// Barrier is the per-resource admission rule and fence barrier (the brief's
// "fence barrier"): a write with token t on resource R is admitted when t >=
// the durable maximum m of R; t > m is first made durable; and an admitted t
// runs only once no write with a smaller token is in flight for R. Writes with
// equal tokens run concurrently. A prefix fence (a name ending in "/", see
// IsPrefix) also refuses every write below it with a token under its
// maximum, and its raise cuts and drains them as a raise of R does. Every raise of a maximum goes through it,
// whatever made it (Admit, Raise, RaiseWith), and cuts off the smaller-token
// uploads still sending their body. Compare-and-forward is atomic this way;
// see Kleppmann 2016, "How to do distributed locking".
type Barrier struct {
	store  Store
	opts   Options
	clock  Clock
	seed   maphash.Seed
	shards [64]shard

	prefixes prefixes // the prefix fences' maxima and raises in progress

	startUntil time.Time   // until then tokens above the maximum at start wait (start-up grace)
	started    atomic.Bool // startUntil has passed: skip the clock read

	active atomic.Int64 // admitted writes not finished yet, abandoned ones in their grace included
	idleMu sync.Mutex
	idle   chan struct{} // closed when active drops to 0; nil without waiters
}

type shard struct {
	mu        sync.Mutex
	resources map[string]*resourceState
}

// resourceState exists while some request holds a reference to it; the
// durable maximum itself lives in the Store (in memory after the first load).
type resourceState struct {
	refs int // guarded by the shard's mu

	mu        sync.Mutex
	inflight  map[uint64]flight    // forwarded, unfinished writes by token
	uploading map[*Upload]struct{} // forwarded writes that may still be sending their body; nil when none
	raising   bool                 // a raise (or reset) is being made durable; others wait for its outcome
	changed   chan struct{}        // closed (and cleared) when inflight or raising changes; nil without waiters
}

// flight counts the writes in flight with one token: n in all, trees of
// them collection writes on a name without "/" (AdmitCollections).
type flight struct{ n, trees int32 }

// New returns a barrier over store. Errors: an Options field out of range, named.
func New(store Store, opts Options) (*Barrier, error) {
	if opts.DrainTimeout <= 0 {
		return nil, errors.New("fence: Options.DrainTimeout must be above 0")
	}
	if opts.AbandonGrace < 0 || opts.StartGrace < 0 {
		return nil, errors.New("fence: Options.AbandonGrace and StartGrace must not be negative")
	}
	b := &Barrier{store: store, opts: opts, clock: opts.Clock, seed: maphash.MakeSeed()}
	if b.clock == nil {
		b.clock = systemClock{}
	}
	for i := range b.shards {
		b.shards[i].resources = make(map[string]*resourceState)
	}
	b.prefixes.byKey = make(map[string]*prefixFence)
	b.prefixes.ownName = opts.PrefixOwnName
	b.prefixes.limit = opts.PrefixBytes
	if b.prefixes.limit <= 0 {
		b.prefixes.limit = DefaultPrefixBytes
	}
	if !opts.NoPrefixFences {
		if err := b.prefixes.load(store, b.isPrefix); err != nil {
			return nil, err
		}
	}
	if opts.StartGrace > 0 {
		b.startUntil = b.clock.Now().Add(opts.StartGrace)
	} else {
		b.started.Store(true)
	}
	return b, nil
}

// rule is the admission rule for token t on resource with maximum m, the one
// both the barrier and Check apply: raise when t > m; *StaleError when t < m;
// ErrJump when t is more than MaxTokenJump above m.
func (b *Barrier) rule(resource string, t, m uint64) (raise bool, err error) {
	switch {
	case t < m:
		return false, &StaleError{Resource: resource, Token: t, Current: m}
	case t > m && b.opts.MaxTokenJump > 0 && t-m > b.opts.MaxTokenJump:
		return false, onResource(resource, fmt.Errorf("%w: token %d is more than %d above the maximum %d of resource %q",
			ErrJump, t, b.opts.MaxTokenJump, m, resource))
	}
	return t > m, nil
}

// Admit applies the admission rule and the barrier to a write with token t
// on resources (one; a WebDAV COPY or MOVE also writes its Destination). up
// is the write's body (nil: none). On success the write may be forwarded now,
// and the caller must call release exactly once when the upstream exchange is
// over (response received or abandoned). Meanwhile a larger token raised on
// any of its resources cuts up off while it is still sending.
//
// With several resources, every one is checked for staleness before any is
// raised, then they are admitted one by one in sorted order (two such writes
// cannot wait on each other in a cycle); DrainTimeout bounds the whole wait,
// and on error none stays admitted.
//
// Errors: *StaleError (ErrStale, naming the fence that refused: a resource
// or a prefix fence); ErrJump, ErrDrainTimeout, ErrStore (with its cause) as
// *ResourceError; ctx's cause when the client went away.
func (b *Barrier) Admit(ctx context.Context, resources []string, t uint64, up *Upload) (release func(), err error) {
	return b.admitAll(ctx, resources, t, up, false)
}

// AdmitCollections is Admit for a write that may act on collections (a
// WebDAV DELETE, MOVE or COPY): with Options.Collections, each resource R
// without a trailing "/" also stands for the collection R + "/", so the
// write must pass every prefix fence at or below it, and a raise of one cuts
// and drains it. Without Options.Collections it is Admit. Errors as Admit's.
func (b *Barrier) AdmitCollections(ctx context.Context, resources []string, t uint64, up *Upload) (release func(), err error) {
	return b.admitAll(ctx, resources, t, up, b.collections())
}

func (b *Barrier) admitAll(ctx context.Context, resources []string, t uint64, up *Upload, trees bool) (release func(), err error) {
	if up != nil {
		up.token = t
		up.tree = trees
	}
	var deadline <-chan time.Time // the drain timer, started at the first wait
	if len(resources) == 1 {
		return b.admit(ctx, resources[0], t, up, &deadline, trees)
	}
	keys := slices.Clone(resources)
	slices.Sort(keys)
	keys = slices.Compact(keys)
	for _, r := range keys {
		m, err := b.store.Max(r)
		if err != nil {
			return nil, onResource(r, fmt.Errorf("%w: %w", ErrStore, err))
		}
		if t < m {
			return nil, &StaleError{Resource: r, Token: t, Current: m}
		}
		if p, pm, wait := b.fences(r, t, trees); p != "" && wait == nil {
			return nil, &StaleError{Resource: p, Token: t, Current: pm}
		}
	}
	releases := make([]func(), 0, len(keys))
	releaseAll := func() {
		for _, rel := range releases {
			rel()
		}
	}
	for _, r := range keys {
		rel, err := b.admit(ctx, r, t, up, &deadline, trees)
		if err != nil {
			releaseAll()
			return nil, err
		}
		releases = append(releases, rel)
	}
	return releaseAll, nil
}

// admit is Admit on one resource; trees: the write acts on collections
// (AdmitCollections).
func (b *Barrier) admit(ctx context.Context, resource string, t uint64, up *Upload, deadline *<-chan time.Time, trees bool) (release func(), err error) {
	// A collection write on a name without "/": counted apart, so a raise
	// of a prefix fence below the name drains only these.
	tree := trees && !IsPrefix(resource)
	trees = trees || b.collections() && IsPrefix(resource)
	startGrace := b.startGrace(resource, t) // fires when the start-up grace is over; nil: no wait
	if t == 0 {
		// Token 0 raises nothing; record the resource so that after a
		// restart larger tokens know a write may be in flight.
		if sv, ok := b.store.(StartView); ok {
			if err := sv.MarkWritten(resource); err != nil {
				return nil, onResource(resource, fmt.Errorf("%w: %w", ErrStore, err))
			}
		}
	}
	sh := b.shard(resource)
	st := sh.ref(resource)
	admitted := false
	defer func() {
		if !admitted {
			sh.unref(resource, st)
		}
	}()

	st.mu.Lock()
	var m uint64
	fresh := false // m is the maximum as our own raise left it: no need to read it again
	for {
		if st.raising {
			if err := b.wait(ctx, st, resource, deadline); err != nil {
				return nil, err
			}
			continue
		}
		if !fresh {
			// Read under st.mu: every raise of this resource happens under
			// st.raising, so m stays current while we hold it.
			var err error
			if m, err = b.store.Max(resource); err != nil {
				st.mu.Unlock()
				return nil, onResource(resource, fmt.Errorf("%w: %w", ErrStore, err))
			}
		}
		fresh = false
		raise, err := b.rule(resource, t, m)
		if err != nil {
			st.mu.Unlock()
			return nil, err
		}
		if p, pm, wait := b.fences(resource, t, trees); p != "" {
			// Refused before anything is raised; checked again once in flight.
			st.mu.Unlock()
			if wait == nil {
				return nil, &StaleError{Resource: p, Token: t, Current: pm}
			}
			if err := b.waitPrefix(ctx, p, wait, deadline); err != nil {
				return nil, err
			}
			st.mu.Lock()
			continue
		}
		if raise {
			// Newcomers wait for the outcome: refused if it succeeds, admitted if not.
			st.raising = true
			st.mu.Unlock()
			raised, err := b.raiseOwn(ctx, resource, t, deadline)
			st.mu.Lock()
			st.raising = false
			st.broadcast()
			if err != nil {
				if raised > 0 { // raised, but the prefix's drain failed
					st.cutBelow(raised, resource, false)
				}
				st.mu.Unlock()
				return nil, err
			}
			// A client that left while the raise waited for the store
			// gets nothing forwarded: the write would land with nobody
			// to answer. The raise stays, and like any raise it cuts the
			// smaller uploads still sending.
			if ctx.Err() != nil {
				st.cutBelow(raised, resource, false)
				st.mu.Unlock()
				return nil, context.Cause(ctx)
			}
			// Check again with the maximum Raise returns (above t when a
			// larger token was raised meanwhile).
			m, fresh = raised, true
			continue
		}
		if st.inflightBelow(t) {
			// t is the maximum now: smaller-token uploads still sending their
			// body are stale and cannot be applied if cut before their end.
			st.cutBelow(t, resource, false)
			if err := b.wait(ctx, st, resource, deadline); err != nil {
				return nil, err
			}
			continue
		}
		if startGrace != nil {
			over, err := b.waitOr(ctx, st, resource, deadline, startGrace)
			if err != nil {
				return nil, err
			}
			if over {
				startGrace = nil
			}
			continue
		}
		f := st.inflight[t]
		f.n++
		if tree {
			f.trees++
		}
		st.inflight[t] = f
		if up != nil && up.State() == Sending {
			if st.uploading == nil {
				st.uploading = make(map[*Upload]struct{}, 1)
			}
			st.uploading[up] = struct{}{}
		}
		// In flight now, so a prefix raise from here on finds this write;
		// one published before is seen here.
		if p, pm, wait := b.fences(resource, t, trees); p != "" {
			st.done(t, tree)
			st.forget(up)
			st.broadcast()
			st.mu.Unlock()
			if wait == nil {
				return nil, &StaleError{Resource: p, Token: t, Current: pm}
			}
			if err := b.waitPrefix(ctx, p, wait, deadline); err != nil {
				return nil, err
			}
			st.mu.Lock()
			continue
		}
		st.mu.Unlock()
		admitted = true
		b.active.Add(1)
		var once sync.Once
		return func() { once.Do(func() { b.release(sh, resource, st, t, up, tree) }) }, nil
	}
}

// fences returns the prefix fence that refuses token t on resource, or one
// being raised (wait is then its channel), "" when none: one above
// resource, and when trees (a collection write) one at or below the
// collection resource stands for. From memory.
func (b *Barrier) fences(resource string, t uint64, trees bool) (name string, m uint64, wait <-chan struct{}) {
	if name, m, wait = b.prefixes.above(resource, t); name != "" || !trees || !b.ownsBelow(resource) {
		return name, m, wait
	}
	return b.prefixes.below(resource, t)
}

// ownsBelow reports whether the prefix fences below the collection that
// resource stands for are decided here: with Options.PrefixSegments
// (cluster mode) only a collection with that many segments has the shard
// of every prefix fence below it; the rest may be other replicas'.
func (b *Barrier) ownsBelow(resource string) bool {
	if b.opts.PrefixSegments == 0 {
		return true
	}
	n := strings.Count(resource, "/")
	if !IsPrefix(resource) {
		n++
	}
	return n >= b.opts.PrefixSegments
}

// collections reports whether Options.Collections holds here.
func (b *Barrier) collections() bool { return b.opts.Collections && !b.opts.NoPrefixFences }

// Check applies the admission rule to a write with token t on resource
// without the barrier, for observe mode: a token above the maximum is raised
// durably, and nothing waits or is counted in flight. Errors as for Admit.
func (b *Barrier) Check(resource string, t uint64) error {
	return b.check(resource, t, b.collections() && IsPrefix(resource))
}

// CheckCollections is Check for a write that may act on collections, as
// AdmitCollections is Admit's.
func (b *Barrier) CheckCollections(resource string, t uint64) error {
	return b.check(resource, t, b.collections())
}

func (b *Barrier) check(resource string, t uint64, trees bool) error {
	m, err := b.store.Max(resource)
	if err != nil {
		return onResource(resource, fmt.Errorf("%w: %w", ErrStore, err))
	}
	raise, err := b.rule(resource, t, m)
	if p, pm, _ := b.fences(resource, t, trees); err == nil && p != "" && t < pm {
		err = &StaleError{Resource: p, Token: t, Current: pm}
	}
	switch {
	case err != nil:
		return err
	case raise:
		if !b.isPrefix(resource) {
			if _, err := b.raise(resource, t); err != nil {
				return onResource(resource, fmt.Errorf("%w: %w", ErrStore, err))
			}
			break
		}
		if err := b.prefixes.begin(resource); err != nil {
			return err
		}
		m, err := b.raise(resource, t)
		b.prefixes.end(resource, m)
		if err != nil {
			return onResource(resource, fmt.Errorf("%w: %w", ErrStore, err))
		}
	case t == 0:
		// Token 0 raises nothing: record the resource, so a later enforce-mode
		// process knows a write may be in flight (start-up grace).
		if sv, ok := b.store.(StartView); ok {
			if err := sv.MarkWritten(resource); err != nil {
				return onResource(resource, fmt.Errorf("%w: %w", ErrStore, err))
			}
		}
	}
	return nil
}

// raise makes the store's raise, timed for ObserveRaise.
func (b *Barrier) raise(resource string, t uint64) (uint64, error) {
	if b.opts.ObserveRaise == nil {
		return b.store.Raise(resource, t)
	}
	start := b.clock.Now()
	m, err := b.store.Raise(resource, t)
	if err == nil {
		b.opts.ObserveRaise(b.clock.Now().Sub(start))
	}
	return m, err
}

// AbandonGrace returns Options.AbandonGrace: how long an abandoned write
// holds its resource's barrier (0: off).
func (b *Barrier) AbandonGrace() time.Duration { return b.opts.AbandonGrace }

// Max returns resource's durable maximum, 0 for one never raised.
// Errors: the store's, wrapped in ErrStore.
func (b *Barrier) Max(resource string) (uint64, error) {
	m, err := b.store.Max(resource)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrStore, err)
	}
	return m, nil
}

// Raise raises resource's maximum to max(current, t) as one raise of the
// barrier: the raise of a lease acquire's fence-ahead or an operator's, which
// carries no write of its own. See RaiseWith.
func (b *Barrier) Raise(ctx context.Context, resource string, t uint64) (uint64, error) {
	return b.RaiseWith(ctx, resource, func() error {
		_, err := b.store.Raise(resource, t)
		return err
	}) // RaiseWith times it
}

// RaiseWith runs raise, a durable change that may raise resource's maximum
// (a lease grant and its fence in one transaction), through the barrier, as
// a write's raise goes: writes on resource wait for its outcome, and from
// then on those below the new maximum m are refused. Every upload with a
// token below m that is still sending its body is cut off (the backend never
// gets it whole), and RaiseWith returns only once no write below m is in
// flight upstream (an abandoned one through its abandon grace; after an
// unclean start, the start-up grace): no write below m can be applied after
// it returns. It returns m.
// Errors: raise's own error, as is (nothing waited for); ErrStore when m
// cannot be read; ErrDrainTimeout when writes below m were still in flight
// after the drain timeout (m stays raised; a second call waits again); ctx's
// cause. Once raise succeeded, errors come with m.
func (b *Barrier) RaiseWith(ctx context.Context, resource string, raise func() error) (uint64, error) {
	sh := b.shard(resource)
	st := sh.ref(resource)
	defer sh.unref(resource, st)
	var deadline <-chan time.Time
	if err := b.startRaise(ctx, st, resource, &deadline); err != nil {
		return 0, err
	}
	st.mu.Unlock()
	prefix := b.isPrefix(resource)
	var err error
	if prefix {
		err = b.prefixes.begin(resource) // writes below wait for the outcome
	}
	var m uint64
	if err == nil {
		start := b.clock.Now()
		err = raise()
		if b.opts.ObserveRaise != nil && err == nil {
			b.opts.ObserveRaise(b.clock.Now().Sub(start))
		}
		if err == nil {
			if m, err = b.store.Max(resource); err != nil {
				err = onResource(resource, fmt.Errorf("%w: %w", ErrStore, err))
			}
		}
		if prefix {
			b.prefixes.end(resource, m) // m is 0 on an error: the old maximum stays
		}
	}
	startGrace := b.startGrace(resource, m)
	st.mu.Lock()
	st.raising = false
	st.broadcast()
	if err != nil {
		st.mu.Unlock()
		return 0, err
	}
	for {
		if st.inflightBelow(m) {
			st.cutBelow(m, resource, false)
			if err := b.wait(ctx, st, resource, &deadline); err != nil {
				return m, err
			}
			continue
		}
		if startGrace != nil {
			over, err := b.waitOr(ctx, st, resource, &deadline, startGrace)
			if err != nil {
				return m, err
			}
			if over {
				startGrace = nil
			}
			continue
		}
		st.mu.Unlock()
		if prefix && m > 0 {
			return m, b.drainPrefix(ctx, resource, m, &deadline)
		}
		return m, nil
	}
}

// Reset runs reset, which removes resource's maximum (an operator's reset:
// the one way a maximum goes down), once every write on resource has
// finished upstream (after an unclean start, once the start-up grace is
// over too), while newcomers wait: no write admitted under the old
// maximum is still in flight when smaller tokens pass again. It returns what
// reset returns. Errors: ErrDrainTimeout when writes were still in flight
// after the drain timeout, or ctx's cause (reset did not run: nothing
// changed); reset's own error.
func (b *Barrier) Reset(ctx context.Context, resource string, reset func() (uint64, error)) (uint64, error) {
	sh := b.shard(resource)
	st := sh.ref(resource)
	defer sh.unref(resource, st)
	// After an unclean start, the previous process's writes may be in flight too.
	startGrace := b.startGrace(resource, MaxToken)
	var deadline <-chan time.Time
	if err := b.startRaise(ctx, st, resource, &deadline); err != nil {
		return 0, err
	}
	prefix := b.isPrefix(resource)
	if prefix {
		// Writes below wait while those admitted under the old maximum
		// finish, all of them: smaller tokens pass again after.
		if err := b.prefixes.begin(resource); err != nil {
			prefix = false // not held: nothing below it to drain
		}
	}
	abort := func(err error) (uint64, error) {
		if prefix {
			b.prefixes.end(resource, 0)
		}
		st.mu.Lock()
		st.raising = false
		st.broadcast()
		st.mu.Unlock()
		return 0, err
	}
	for len(st.inflight) > 0 || startGrace != nil {
		wake := startGrace
		if len(st.inflight) > 0 {
			wake = nil
		}
		over, err := b.waitOr(ctx, st, resource, &deadline, wake)
		if err != nil {
			return abort(err) // waitOr released st.mu
		}
		if over {
			startGrace = nil
		}
	}
	st.mu.Unlock()
	if prefix {
		if err := b.drainWhere(ctx, resource, &deadline, func(st *resourceState, trees bool) bool {
			if trees {
				return st.treesBelow(^uint64(0)) // any token
			}
			return len(st.inflight) > 0
		}); err != nil {
			return abort(err)
		}
	}
	removed, err := reset()
	if prefix {
		if err == nil {
			b.prefixes.reset(resource)
		} else {
			b.prefixes.end(resource, 0)
		}
	}
	st.mu.Lock()
	st.raising = false
	st.broadcast()
	st.mu.Unlock()
	return removed, err
}

// startRaise waits until no other raise of the resource is in progress, then
// marks one: newcomers wait for its outcome. It returns with st.mu held, or
// with the wait's error and st.mu released.
func (b *Barrier) startRaise(ctx context.Context, st *resourceState, resource string, deadline *<-chan time.Time) error {
	st.mu.Lock()
	for st.raising {
		if err := b.wait(ctx, st, resource, deadline); err != nil {
			return err
		}
	}
	st.raising = true
	return nil
}

// startGrace returns a channel that fires when the start-up grace is over if
// a write or raise with token t on resource must wait it out; nil otherwise.
func (b *Barrier) startGrace(resource string, t uint64) <-chan time.Time {
	if b.started.Load() {
		return nil
	}
	if wait := b.startUntil.Sub(b.clock.Now()); wait <= 0 {
		b.started.Store(true)
	} else if b.waitsAtStart(resource, t) {
		return b.clock.After(wait)
	}
	return nil
}

// waitsAtStart reports whether token t on resource must wait out the
// start-up grace (see StartView). Unknown (a store without StartView, or an
// error): yes for t > 0, waiting is always safe.
func (b *Barrier) waitsAtStart(resource string, t uint64) bool {
	if t == 0 {
		return false // no smaller token can be in flight
	}
	if b.isPrefix(resource) {
		return true // any key below it may have had a write in flight
	}
	sv, ok := b.store.(StartView)
	if !ok {
		return true
	}
	_, found, err := sv.MaxAtOpen(resource)
	return err != nil || found
}

// release ends an admitted write now, or after the abandon grace when the
// proxy gave up on it after sending it whole: a slow backend may still apply
// it, so larger tokens keep waiting (like Chubby's lock-delay).
func (b *Barrier) release(sh *shard, resource string, st *resourceState, t uint64, up *Upload, tree bool) {
	if up != nil && up.abandoned.Load() && b.opts.AbandonGrace > 0 {
		st.mu.Lock()
		st.forget(up) // its body was sent whole: nothing left to cut
		st.mu.Unlock()
		b.clock.AfterFunc(b.opts.AbandonGrace, func() { b.finish(sh, resource, st, t, up, tree) })
		return
	}
	b.finish(sh, resource, st, t, up, tree)
}

// finish ends an admitted write and wakes requests waiting for the barrier.
func (b *Barrier) finish(sh *shard, resource string, st *resourceState, t uint64, up *Upload, tree bool) {
	st.mu.Lock()
	st.done(t, tree)
	st.forget(up)
	st.broadcast()
	st.mu.Unlock()
	sh.unref(resource, st)
	if b.active.Add(-1) == 0 {
		b.idleMu.Lock()
		if b.idle != nil {
			close(b.idle)
			b.idle = nil
		}
		b.idleMu.Unlock()
	}
}

// WaitIdle waits until no admitted write is unfinished, the abandoned ones
// holding their barrier for the abandon grace included: from then on no write
// this barrier let through can still reach the backend. It returns ctx's
// error if ctx ends first. For a clean shutdown, after the listener stopped
// taking requests.
func (b *Barrier) WaitIdle(ctx context.Context) error {
	for {
		b.idleMu.Lock()
		if b.active.Load() == 0 {
			b.idleMu.Unlock()
			return nil
		}
		if b.idle == nil {
			b.idle = make(chan struct{})
		}
		idle := b.idle
		b.idleMu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-idle:
		}
	}
}

// WaitIdleWhere is WaitIdle for the resources that match reports: it
// returns once none of them has an admitted write unfinished (abandoned ones
// through their abandon grace), or ctx's error. It polls every poll (10ms
// when 0), calling match under the barrier's locks: keep it cheap. For a
// handover of part of the resources (cluster mode), once no new write on
// them can be admitted.
func (b *Barrier) WaitIdleWhere(ctx context.Context, match func(resource string) bool, poll time.Duration) error {
	if poll <= 0 {
		poll = 10 * time.Millisecond
	}
	for {
		if !b.busy(match) {
			return nil
		}
		t := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// busy reports whether a resource that match reports has an unfinished write.
func (b *Barrier) busy(match func(resource string) bool) bool {
	for i := range b.shards {
		sh := &b.shards[i]
		sh.mu.Lock()
		for resource, st := range sh.resources {
			if !match(resource) {
				continue
			}
			st.mu.Lock()
			n := len(st.inflight)
			st.mu.Unlock()
			if n > 0 {
				sh.mu.Unlock()
				return true
			}
		}
		sh.mu.Unlock()
	}
	return false
}

// InFlight returns the number of admitted, unfinished writes on resource.
func (b *Barrier) InFlight(resource string) int {
	sh := b.shard(resource)
	sh.mu.Lock()
	st := sh.resources[resource]
	sh.mu.Unlock()
	if st == nil {
		return 0
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	n := 0
	for _, f := range st.inflight {
		n += int(f.n)
	}
	return n
}

func (b *Barrier) shard(resource string) *shard {
	return &b.shards[maphash.String(b.seed, resource)%uint64(len(b.shards))]
}

func (sh *shard) ref(resource string) *resourceState {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	st := sh.resources[resource]
	if st == nil {
		st = &resourceState{inflight: make(map[uint64]flight, 1)}
		sh.resources[resource] = st
	}
	st.refs++
	return st
}

func (sh *shard) unref(resource string, st *resourceState) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if st.refs--; st.refs == 0 {
		delete(sh.resources, resource)
	}
}

// inflightBelow reports whether a write with a token below t is in flight.
// The map holds one or two tokens in practice (the current one and the one
// being drained). Caller holds st.mu.
func (st *resourceState) inflightBelow(t uint64) bool {
	for tok := range st.inflight {
		if tok < t {
			return true
		}
	}
	return false
}

// done counts a write with token t (a collection write when tree) out of
// flight. Caller holds st.mu.
func (st *resourceState) done(t uint64, tree bool) {
	f := st.inflight[t]
	f.n--
	if tree {
		f.trees--
	}
	if f.n == 0 {
		delete(st.inflight, t)
	} else {
		st.inflight[t] = f
	}
}

// treesBelow is inflightBelow for the collection writes. Caller holds st.mu.
func (st *resourceState) treesBelow(t uint64) bool {
	for tok, f := range st.inflight {
		if tok < t && f.trees > 0 {
			return true
		}
	}
	return false
}

// forget drops up from the uploads a larger token may cut: after its
// exchange, cutting would touch the connection's next request. Caller holds st.mu.
func (st *resourceState) forget(up *Upload) {
	if up != nil && st.uploading != nil {
		delete(st.uploading, up)
		if len(st.uploading) == 0 {
			st.uploading = nil
		}
	}
}

// cutBelow cuts off the uploads of writes with tokens below t that have not
// sent their whole body (only the collection writes' when trees), for the
// raise of fence by to t. Caller holds st.mu.
func (st *resourceState) cutBelow(t uint64, by string, trees bool) {
	for up := range st.uploading {
		if up.token < t && (!trees || up.tree) && up.cut(by, t) {
			delete(st.uploading, up)
		}
	}
}

// broadcast wakes all waiters. The channel exists only while someone waits
// on it, so the common no-waiter case allocates nothing. Caller holds st.mu.
func (st *resourceState) broadcast() {
	if st.changed != nil {
		close(st.changed)
		st.changed = nil
	}
}

// wait releases st.mu until the state changes, then takes it again. The
// drain timer starts at the first wait of a request. On timeout or
// cancellation it returns with st.mu released: ErrDrainTimeout (as a
// *ResourceError of resource) or ctx's cause. Caller holds st.mu.
func (b *Barrier) wait(ctx context.Context, st *resourceState, resource string, deadline *<-chan time.Time) error {
	_, err := b.waitOr(ctx, st, resource, deadline, nil)
	return err
}

// waitOr is wait that also ends when wake fires, and then reports it: a
// wait for the state to change must not take a change for the end of a
// grace.
func (b *Barrier) waitOr(ctx context.Context, st *resourceState, resource string, deadline *<-chan time.Time, wake <-chan time.Time) (woke bool, err error) {
	if *deadline == nil {
		*deadline = b.clock.After(b.opts.DrainTimeout)
	}
	if st.changed == nil {
		st.changed = make(chan struct{})
	}
	ch := st.changed
	st.mu.Unlock()
	select {
	case <-ch:
	case <-wake:
		woke = true
	case <-*deadline:
		err = onResource(resource, ErrDrainTimeout)
	case <-ctx.Done():
		err = context.Cause(ctx)
	}
	if err == nil {
		st.mu.Lock()
	}
	return woke, err
}

// isPrefix reports whether resource is a prefix fence here.
func (b *Barrier) isPrefix(resource string) bool {
	return !b.opts.NoPrefixFences && IsPrefix(resource) &&
		(b.opts.PrefixSegments == 0 || strings.Count(resource, "/") >= b.opts.PrefixSegments)
}

// raiseOwn is a write's raise of its own resource to t; for a prefix fence
// also its publication and drain, so the write is forwarded only once no
// smaller-token write below the prefix can land. It returns the maximum, and
// errors as Admit's (with the maximum when the raise stayed but the drain failed).
func (b *Barrier) raiseOwn(ctx context.Context, resource string, t uint64, deadline *<-chan time.Time) (uint64, error) {
	if !b.isPrefix(resource) {
		m, err := b.raise(resource, t)
		if err != nil {
			return 0, onResource(resource, fmt.Errorf("%w: %w", ErrStore, err))
		}
		return m, nil
	}
	if err := b.prefixes.begin(resource); err != nil {
		return 0, err
	}
	m, err := b.raise(resource, t)
	b.prefixes.end(resource, m)
	if err != nil {
		return 0, onResource(resource, fmt.Errorf("%w: %w", ErrStore, err))
	}
	return m, b.drainPrefix(ctx, resource, m, deadline)
}

// waitPrefix waits for the raise of prefix fence prefix to end (wait
// closes). Errors: ErrDrainTimeout (as a *ResourceError of prefix), ctx's cause.
func (b *Barrier) waitPrefix(ctx context.Context, prefix string, wait <-chan struct{}, deadline *<-chan time.Time) error {
	if *deadline == nil {
		*deadline = b.clock.After(b.opts.DrainTimeout)
	}
	select {
	case <-wait:
		return nil
	case <-*deadline:
		return onResource(prefix, ErrDrainTimeout)
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
