package proxy

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Store is what the fence needs from durable storage (tokenstore.Store
// provides it).
type Store interface {
	// Max returns the stored maximum of resource, 0 if it was never raised.
	// It is called under the resource's lock (once per admitted write), so it
	// should answer from memory for resources in use; a load from disk only
	// holds up writes to the same resource.
	Max(resource string) (uint64, error)
	// Raise makes max(stored, t) durable (fsynced) and returns it.
	Raise(resource string, t uint64) (uint64, error)
}

var (
	// ErrStale: the token is below the resource's maximum (409).
	ErrStale = errors.New("stale fencing token")
	// ErrDrainTimeout: smaller-token writes were still in flight when the drain
	// timeout passed (503 with Retry-After).
	ErrDrainTimeout = errors.New("timed out waiting for in-flight writes with smaller tokens")
	// ErrJump: the token is more than MaxTokenJump above the resource's
	// maximum (403), so a wild token cannot fence a resource off for good.
	ErrJump = errors.New("fencing token jumps too far above the maximum")
	// ErrStore: the maximum could not be read or made durable (503, fail closed).
	ErrStore = errors.New("token store unavailable")
)

// StaleError is a refusal of token Token on Resource whose maximum is Current.
// It matches ErrStale with errors.Is.
type StaleError struct {
	Resource       string
	Token, Current uint64
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("stale fencing token %d for resource %q: current maximum is %d", e.Token, e.Resource, e.Current)
}

// Is makes errors.Is(err, ErrStale) hold.
func (e *StaleError) Is(target error) bool { return target == ErrStale }

// Fence is the per-resource admission rule and barrier (see the brief's
// "fence barrier"): a write with token t on resource R is admitted when t >= the
// durable maximum m of R; t > m is first made durable; and an admitted t runs
// only once no write with a smaller token is in flight for R. Writes with
// equal tokens run concurrently. Compare-and-forward is atomic this way; see
// Kleppmann 2016, "How to do distributed locking".
type Fence struct {
	store  Store
	drain  time.Duration
	seed   maphash.Seed
	shards [64]fenceShard

	// Set by proxy.New before use.
	abandonGrace time.Duration // an abandoned write holds its barrier this much longer
	maxJump      uint64        // 0: off; else ErrJump when t > max+maxJump
	startUntil   time.Time     // until then tokens above the maximum at start wait (start-up grace)
	started      atomic.Bool   // startUntil has passed: skip the clock read

	active atomic.Int64 // admitted writes not finished yet, abandoned ones in their grace included
}

// StartMaxer is implemented by stores that can tell whether a resource had a
// record when the process started (tokenstore.Store.MaxAtOpen), and can give
// a resource a record before a token-0 write, which raises nothing
// (MarkWritten). A write is forwarded only after its resource has a durable
// record, so a resource without one at start-up had no write in flight from
// an earlier process. On one with a record, every token above 0 waits out the
// start-up grace: smaller tokens may still be in flight, even for a token
// equal to the maximum (it was raised before its own write was forwarded).
// Stores without it make every token above 0 wait.
type StartMaxer interface {
	MaxAtOpen(resource string) (max uint64, found bool, err error)
	MarkWritten(resource string) error
}

type fenceShard struct {
	mu        sync.Mutex
	resources map[string]*resourceState
}

// resourceState exists while some request holds a reference to it; the
// durable maximum itself lives in the Store (in memory after the first load).
type resourceState struct {
	refs int // guarded by the shard's mu

	mu        sync.Mutex
	inflight  map[uint64]int       // forwarded, unfinished writes by token
	uploading map[*flight]struct{} // forwarded writes that may still be sending their body; nil when none
	raising   bool                 // a raise is being made durable; others wait for its outcome
	changed   chan struct{}        // closed (and cleared) when inflight or raising changes; nil without waiters
}

// Body states of a flight.
const (
	bodySending int32 = iota // the body is still being handed to the upstream client
	bodySent                 // the whole body was handed over (or there is none): a backend may apply it
	bodyCut                  // a larger token cut the upload off before its end: a backend cannot apply it
)

// flight is one forwarded write, as the barrier sees it.
type flight struct {
	token     uint64
	body      atomic.Int32 // bodySending, bodySent or bodyCut
	abandoned atomic.Bool  // the proxy gave up on the exchange after the body was sent
	interrupt func()       // unblocks a body read in progress (nil: none)
}

// cut stops an upload that has not handed its whole body over; it reports
// whether it did. A sent body cannot be recalled: a backend may apply it.
func (fl *flight) cut() bool {
	if !fl.body.CompareAndSwap(bodySending, bodyCut) {
		return false
	}
	if fl.interrupt != nil {
		fl.interrupt()
	}
	return true
}

// NewFence returns a fence over store. drain bounds how long an admitted
// request waits for smaller-token requests to finish (and for a concurrent
// raise of the same resource); past it Admit returns ErrDrainTimeout.
func NewFence(store Store, drain time.Duration) *Fence {
	f := &Fence{store: store, drain: drain, seed: maphash.MakeSeed()}
	for i := range f.shards {
		f.shards[i].resources = make(map[string]*resourceState)
	}
	return f
}

// Admit applies the admission rule and barrier for a write with token t on
// resource. On success the write may be forwarded now, and the caller must
// call release exactly once when the upstream exchange is over (response
// received or abandoned). Errors: *StaleError (ErrStale), ErrDrainTimeout,
// ErrStore (wrapping the cause), or ctx's error when the client went away.
func (f *Fence) Admit(ctx context.Context, resource string, t uint64) (release func(), err error) {
	return f.admit(ctx, resource, t, nil, new(<-chan time.Time))
}

// admit is Admit for a flight: while fl's body is still being sent, a larger
// token admitted on resource cuts it off; when fl is abandoned after its body
// was sent, release keeps the barrier closed for the abandon grace. deadline
// is the drain timer, started at the first wait and shared by the resources
// of one write, so a COPY or MOVE waits DRAIN_TIMEOUT in all.
func (f *Fence) admit(ctx context.Context, resource string, t uint64, fl *flight, deadline *<-chan time.Time) (release func(), err error) {
	startGrace := f.startGrace(resource, t) // fires when the start-up grace is over; nil: no wait
	if t == 0 {
		// Token 0 raises nothing; record the resource so that after a
		// restart larger tokens know a write may be in flight.
		if sm, ok := f.store.(StartMaxer); ok {
			if err := sm.MarkWritten(resource); err != nil {
				return nil, fmt.Errorf("%w: %w", ErrStore, err)
			}
		}
	}
	sh := f.shard(resource)
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
			if err := st.wait(ctx, deadline, f.drain, nil); err != nil {
				return nil, err
			}
			continue
		}
		if !fresh {
			// Read under st.mu: a raise by another write on this resource
			// happens under st.raising, so m stays current while we hold it.
			var err error
			if m, err = f.store.Max(resource); err != nil {
				st.mu.Unlock()
				return nil, fmt.Errorf("%w: %w", ErrStore, err)
			}
		}
		fresh = false
		if t < m {
			st.mu.Unlock()
			return nil, &StaleError{Resource: resource, Token: t, Current: m}
		}
		if t > m && f.maxJump > 0 && t-m > f.maxJump {
			st.mu.Unlock()
			return nil, fmt.Errorf("%w: token %d is more than %d above the maximum %d of resource %q", ErrJump, t, f.maxJump, m, resource)
		}
		if t > m {
			// Newcomers wait for the outcome: refused if it succeeds, admitted if not.
			st.raising = true
			st.mu.Unlock()
			raised, err := f.store.Raise(resource, t)
			st.mu.Lock()
			st.raising = false
			st.broadcast()
			if err != nil {
				st.mu.Unlock()
				return nil, fmt.Errorf("%w: %w", ErrStore, err)
			}
			// Check again with the maximum Raise returns (above t when a
			// larger token was raised meanwhile, by the admin API say).
			m, fresh = raised, true
			continue
		}
		if st.inflightBelow(t) {
			// t is the maximum now: smaller-token uploads still sending their
			// body are stale and cannot be applied if cut before their end.
			st.cutBelow(t)
			if err := st.wait(ctx, deadline, f.drain, nil); err != nil {
				return nil, err
			}
			continue
		}
		if startGrace != nil {
			if err := st.wait(ctx, deadline, f.drain, startGrace); err != nil {
				return nil, err
			}
			startGrace = nil
			continue
		}
		st.inflight[t]++
		if fl != nil && fl.body.Load() == bodySending {
			if st.uploading == nil {
				st.uploading = make(map[*flight]struct{}, 1)
			}
			st.uploading[fl] = struct{}{}
		}
		st.mu.Unlock()
		admitted = true
		f.active.Add(1)
		var once sync.Once
		return func() { once.Do(func() { f.release(sh, resource, st, t, fl) }) }, nil
	}
}

// Raise raises resource's maximum to max(current, t) as one raise of the
// barrier: the raise of a lease acquire's fence-ahead or an operator's, which
// carries no write of its own. See RaiseWith.
func (f *Fence) Raise(ctx context.Context, resource string, t uint64) (uint64, error) {
	return f.RaiseWith(ctx, resource, func() error {
		_, err := f.store.Raise(resource, t)
		return err
	})
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
// Errors: raise's own error, as is (nothing raised, nothing waited for);
// ErrStore when m cannot be read; ErrDrainTimeout when writes below m were
// still in flight after the drain timeout (m stays raised; a second call
// waits again); ctx's error. After raise succeeded, errors come with m.
func (f *Fence) RaiseWith(ctx context.Context, resource string, raise func() error) (uint64, error) {
	sh := f.shard(resource)
	st := sh.ref(resource)
	defer sh.unref(resource, st)
	var deadline <-chan time.Time
	st.mu.Lock()
	for st.raising {
		if err := st.wait(ctx, &deadline, f.drain, nil); err != nil {
			return 0, err
		}
	}
	st.raising = true
	st.mu.Unlock()
	err := raise()
	var m uint64
	if err == nil {
		if m, err = f.store.Max(resource); err != nil {
			err = fmt.Errorf("%w: %w", ErrStore, err)
		}
	}
	startGrace := f.startGrace(resource, m)
	st.mu.Lock()
	st.raising = false
	st.broadcast()
	if err != nil {
		st.mu.Unlock()
		return 0, err
	}
	for {
		if st.inflightBelow(m) {
			st.cutBelow(m)
			if err := st.wait(ctx, &deadline, f.drain, nil); err != nil {
				return m, err
			}
			continue
		}
		if startGrace != nil {
			if err := st.wait(ctx, &deadline, f.drain, startGrace); err != nil {
				return m, err
			}
			startGrace = nil
			continue
		}
		st.mu.Unlock()
		return m, nil
	}
}

// Reset runs reset, which removes resource's maximum (an operator's reset:
// the one way a maximum goes down), once every write on resource has
// finished upstream, and while newcomers wait; so no write admitted under
// the old maximum is still in flight when smaller tokens pass again. It
// returns what reset returns. Errors: ErrDrainTimeout when writes were still
// in flight after the drain timeout (reset did not run: nothing changed);
// ctx's error (nothing changed); reset's own error.
func (f *Fence) Reset(ctx context.Context, resource string, reset func() (uint64, error)) (uint64, error) {
	sh := f.shard(resource)
	st := sh.ref(resource)
	defer sh.unref(resource, st)
	var deadline <-chan time.Time
	st.mu.Lock()
	for st.raising {
		if err := st.wait(ctx, &deadline, f.drain, nil); err != nil {
			return 0, err
		}
	}
	st.raising = true // newcomers wait, as for a raise
	for len(st.inflight) > 0 {
		if err := st.wait(ctx, &deadline, f.drain, nil); err != nil {
			st.mu.Lock()
			st.raising = false
			st.broadcast()
			st.mu.Unlock()
			return 0, err
		}
	}
	st.mu.Unlock()
	removed, err := reset()
	st.mu.Lock()
	st.raising = false
	st.broadcast()
	st.mu.Unlock()
	return removed, err
}

// startGrace returns a channel that fires when the start-up grace is over, if
// a write or raise with token t on resource must wait it out; nil otherwise.
func (f *Fence) startGrace(resource string, t uint64) <-chan time.Time {
	if f.started.Load() {
		return nil
	}
	if wait := time.Until(f.startUntil); wait <= 0 {
		f.started.Store(true)
	} else if f.waitsAtStart(resource, t) {
		return time.After(wait)
	}
	return nil
}

func (f *Fence) shard(resource string) *fenceShard {
	return &f.shards[maphash.String(f.seed, resource)%uint64(len(f.shards))]
}

// waitsAtStart reports whether a write with token t on resource must wait
// out the start-up grace (see StartMaxer). Unknown (a store without
// StartMaxer, or an error): yes for t > 0, waiting is always safe.
func (f *Fence) waitsAtStart(resource string, t uint64) bool {
	if t == 0 {
		return false // no smaller token can be in flight
	}
	sm, ok := f.store.(StartMaxer)
	if !ok {
		return true
	}
	_, found, err := sm.MaxAtOpen(resource)
	return err != nil || found
}

// release ends an admitted write now, or after the abandon grace when the
// proxy gave up on it after sending it whole: a slow backend may still apply
// it, so larger tokens keep waiting (like Chubby's lock-delay).
func (f *Fence) release(sh *fenceShard, resource string, st *resourceState, t uint64, fl *flight) {
	if fl != nil && fl.abandoned.Load() && f.abandonGrace > 0 {
		st.mu.Lock()
		st.forget(fl) // its body was sent whole: nothing left to cut
		st.mu.Unlock()
		time.AfterFunc(f.abandonGrace, func() { f.finish(sh, resource, st, t, fl) })
		return
	}
	f.finish(sh, resource, st, t, fl)
}

// AdmitAll admits a write with token t that touches several resources (a
// WebDAV COPY or MOVE writes its Destination too). It checks every resource
// for staleness before raising any, then admits them one by one in sorted
// order, so two such writes cannot wait on each other in a cycle. The drain
// timeout bounds the whole wait, not each resource's. The release func
// releases all of them. Errors as for Admit; on error nothing stays admitted.
func (f *Fence) AdmitAll(ctx context.Context, resources []string, t uint64) (release func(), err error) {
	return f.admitAll(ctx, resources, t, nil)
}

// admitAll is AdmitAll for a flight (see admit).
func (f *Fence) admitAll(ctx context.Context, resources []string, t uint64, fl *flight) (release func(), err error) {
	keys := slices.Clone(resources)
	slices.Sort(keys)
	keys = slices.Compact(keys)
	for _, r := range keys {
		m, err := f.store.Max(r)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrStore, err)
		}
		if t < m {
			return nil, &StaleError{Resource: r, Token: t, Current: m}
		}
	}
	var deadline <-chan time.Time
	releases := make([]func(), 0, len(keys))
	releaseAll := func() {
		for _, rel := range releases {
			rel()
		}
	}
	for _, r := range keys {
		rel, err := f.admit(ctx, r, t, fl, &deadline)
		if err != nil {
			releaseAll()
			return nil, err
		}
		releases = append(releases, rel)
	}
	return releaseAll, nil
}

// finish ends an admitted write and wakes requests waiting for the barrier.
func (f *Fence) finish(sh *fenceShard, resource string, st *resourceState, t uint64, fl *flight) {
	st.mu.Lock()
	if st.inflight[t]--; st.inflight[t] == 0 {
		delete(st.inflight, t)
	}
	st.forget(fl)
	st.broadcast()
	st.mu.Unlock()
	sh.unref(resource, st)
	f.active.Add(-1)
}

// WaitIdle waits until no admitted write is unfinished, the abandoned ones
// holding their barrier for the abandon grace included: from then on no write
// this fence let through can still reach the backend. It returns ctx's error
// if ctx ends first. For a clean shutdown, after the listener stopped taking
// requests.
func (f *Fence) WaitIdle(ctx context.Context) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for f.active.Load() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}

// InFlight returns the number of admitted, unfinished writes on resource.
func (f *Fence) InFlight(resource string) int {
	sh := f.shard(resource)
	sh.mu.Lock()
	st := sh.resources[resource]
	sh.mu.Unlock()
	if st == nil {
		return 0
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	n := 0
	for _, c := range st.inflight {
		n += c
	}
	return n
}

func (sh *fenceShard) ref(resource string) *resourceState {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	st := sh.resources[resource]
	if st == nil {
		st = &resourceState{inflight: make(map[uint64]int, 1)}
		sh.resources[resource] = st
	}
	st.refs++
	return st
}

func (sh *fenceShard) unref(resource string, st *resourceState) {
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

// forget drops fl from the uploads a larger token may cut: after its
// exchange, cutting would touch the connection's next request. Caller holds st.mu.
func (st *resourceState) forget(fl *flight) {
	if fl != nil && st.uploading != nil {
		delete(st.uploading, fl)
		if len(st.uploading) == 0 {
			st.uploading = nil
		}
	}
}

// cutBelow cuts off the uploads of writes with tokens below t that have not
// sent their whole body. Caller holds st.mu.
func (st *resourceState) cutBelow(t uint64) {
	for fl := range st.uploading {
		if fl.token < t && fl.cut() {
			delete(st.uploading, fl)
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

// wait releases st.mu until the state changes or wake fires, then takes it
// again. The drain timer starts at the first wait of a request. On timeout or
// cancellation it returns with st.mu released. Caller holds st.mu.
func (st *resourceState) wait(ctx context.Context, deadline *<-chan time.Time, drain time.Duration, wake <-chan time.Time) error {
	if *deadline == nil {
		*deadline = time.After(drain)
	}
	if st.changed == nil {
		st.changed = make(chan struct{})
	}
	ch := st.changed
	st.mu.Unlock()
	var err error
	select {
	case <-ch:
	case <-wake:
	case <-*deadline:
		err = ErrDrainTimeout
	case <-ctx.Done():
		err = context.Cause(ctx)
	}
	if err == nil {
		st.mu.Lock()
	}
	return err
}
