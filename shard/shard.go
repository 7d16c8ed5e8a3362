// Package shard decides, in cluster mode on etcd, which replica runs the
// barrier of which resource, and until when: resources hash to a fixed number
// of shards, each shard is owned by one replica at a time through a key bound
// to that replica's etcd lease, and the ownership is bounded in time, like
// Chubby's lock-delay, so that a replica that stalls or is cut off from etcd
// stops admitting writes before another one starts.
//
// Package cluster (cluster mode, FENCEPROXY_STORE=etcd) runs one Owner per
// replica: a fenced write is admitted only under MayAdmit and Context, counted
// in flight before them, and Drain waits for that count and the barrier.
//
// # Keys
//
// Under Options.Prefix (default "/fenceproxy/", the prefix of store/etcd,
// whose keys start with a two-byte kind "f/", "l/", "u/" or "m/", which none
// of these do):
//
//	Prefix + "shards/count"          the number of shards, decimal, written once at the first start (no lease)
//	Prefix + "members/" + id         {"id","addr"} on the replica's lease: the replica is alive
//	Prefix + "shards/" + n + "/owner" {"id","addr"} on the owner's lease: the owner of shard n
//	Prefix + "shards/" + n + "/state" {"state":"owned"|"released","id"} (no lease): the handover marker
//
// One watch covers members/ and shards/ (the range [Prefix+"members/",
// Prefix+"shards0")), so every replica sees membership and ownership changes
// in one order.
//
// # Who owns what
//
// Every replica computes the same assignment from the member ids: rendezvous
// hashing with bounded load (see assign), so each replica gets floor(N/m) or
// ceil(N/m) shards and a restarted replica (same Options.ID) gets back the
// same ones. A replica acquires a shard assigned to it once the owner key is
// absent, in one Txn: "owner key absent and state key unchanged since I read
// it" then put the owner key on its lease and the state "owned". When that
// Txn's answer is lost (a timeout, a connection cut: etcd may have applied
// it, even after the error), the replica reads the owner key back, and the
// watch tells it later too: an owner key on its lease, newer than what the
// Txn was built on, is adopted as the acquisition the answer would have
// given (the same lock-delay), rather than deleted, which would leave the
// state "owned" without its key and make the next owner wait the
// lock-delay again for nothing (no write was admitted under the key). It hands
// over a shard assigned to another live member (a scale up or down), and all
// of its shards on Close.
//
// # Validity
//
// The replica runs its own keepalive loop with KeepAliveOnce and records the
// time it SENT each request. etcd renews a lease to "now + TTL" when the
// leader handles the request, which is after it was sent, so the lease (and
// every owner key on it) lives at least until send time + TTL. The ownership
// is valid until the send time of the last confirmed keepalive (or of the
// grant) plus the TTL etcd answered minus Options.Margin, which covers clock
// rate differences between this machine and etcd's leader and the lateness of
// a timer. Past it, MayAdmit answers false and the contexts of Context are
// cancelled; a later confirmed keepalive (a short cut-off, the lease still
// alive) makes it valid again. A replica cut off from the etcd majority thus
// stops admitting within its validity on its own, while the lease expires in
// etcd at least Margin later and the others take its shards.
//
// # Handover
//
// Unclean (the previous owner's key went without a handover: its lease
// expired, it crashed, it was cut off): the new owner admits nothing for the
// shard until Options.LockDelay after the moment it saw the old key gone, as
// Chubby's lock-delay runs from a lock's release. The key went a TTL after
// the old owner's last renewal, so the old owner had stopped admitting at
// its validity, Margin before; the lock-delay covers what it admitted before
// and is still on the way upstream (the longest forwarded request, the
// abandon grace). So writes to the shard resume about TTL + LockDelay after
// the old owner's last renewal. The keys this package deletes itself (a
// handover that could not drain, Close) go only after the contexts of
// Context were cancelled. The lock-delay also bounds how long an old owner
// may stall (a GC pause, a frozen VM) in the middle of sending a write it
// admitted while valid: cancelling its context cannot stop bytes a
// goroutine writes before the cancellation runs after the stall. A lease revoked or an owner key deleted by hand
// while its replica runs (cut off from etcd, it may not see it) breaks that
// bound: never do it to a replica that may be alive; stop it instead.
//
// Planned (Close, or a rebalance): the owner stops admitting the shard
// (MayAdmit false, OnLoss called), calls Options.Drain until no write on the
// shard is in flight upstream, then in one Txn guarded by its owner key
// deletes the key and writes the state "released". A new owner that reads
// "released" in its acquiring Txn admits at once. Every acquisition rewrites
// the state to "owned", so a "released" state always belongs to the last
// owner key there was. An owner that hands a shard over while it still
// waits out the lock-delay of an unclean loss writes what is left of it in
// the marker, and the next owner waits that from when it saw the key go.
// If Drain fails or is nil, the owner cancels the shard's contexts (so that
// nothing it admitted still sends once the next owner's lock-delay starts),
// then deletes its key without the marker, and the next owner waits as
// after an unclean loss. A shard that was never owned (no state key) is
// admitted at once too.
//
// # Rules for the deployment
//
// Every replica of a prefix uses the same shard count (Start refuses
// another), and an ID unique among the live replicas and stable across
// restarts. Two live replicas with one ID would compute one assignment for
// both: Start waits for a member key with its ID left on another lease to
// expire (a previous instance that crashed), and fails with ErrDuplicateID
// when that lease is renewed; a running replica that sees its member key
// put on another lease logs an error and takes no shard until that key is
// gone. A member key deleted while its lease lives is put back. Never delete
// owner keys or revoke a replica's lease by hand while the replica may run
// (see Handover): stop it. To change the count: stop every replica, wait the TTL plus the lock-delay,
// delete the count, member and shard keys (Prefix+"shards/" and
// Prefix+"members/"; never the whole prefix: store/etcd keeps the maxima
// under it), start them with the new count. A replica that sees the
// count deleted or changed under it admits nothing more, and Start refuses
// to store a count where member or shard keys are left.
//
// # Clock
//
// Send times, deadlines and the lock-delay run on the boot-time clock
// (CLOCK_BOOTTIME on Linux), which goes on while the machine is suspended
// (hibernation, some hypervisors' pauses), unlike Go's monotonic clock
// (CLOCK_MONOTONIC): a replica resumed from a suspend longer than its
// validity refuses at once, and cancels the contexts of Context within
// 100ms (its timers run on the monotonic clock, so it reads the boot-time
// clock at least that often). Go has no system-call-free read of it, so it
// is estimated from a system call reading and Go's monotonic clock since,
// read again after a second, or at once when the wall clock ran ahead of
// the monotonic one (a suspend) or was stepped (see estimator). The
// exported times (Grant, OnAcquire, Stats) are wall-clock times mapped from
// it, without a monotonic reading.
//
// Known limit: outside Linux the monotonic clock stands in for the
// boot-time clock, and there a replica resumed from such a suspend could
// admit until its next keepalive fails. Everywhere, a request the suspend
// froze in the middle of sending goes on sending for the moment between the
// resume and its context's cancellation.
package shard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Defaults for the zero values of Options.
const (
	DefaultPrefix    = "/fenceproxy/"
	DefaultTTL       = 10 * time.Second
	DefaultLockDelay = 15 * time.Second
	// NoLockDelay as Options.LockDelay turns the lock-delay off.
	NoLockDelay           time.Duration = -1
	DefaultDrainTimeout                 = 30 * time.Second
	DefaultRequestTimeout               = 5 * time.Second
)

// Sentinel errors; test them with errors.Is.
var (
	// ErrShardCount: the prefix holds another shard count or depth (a
	// *CountError).
	ErrShardCount = errors.New("shard: shard count differs from the one stored in etcd")
	// ErrNotAdmitting: Context on a shard that MayAdmit refuses now.
	ErrNotAdmitting = errors.New("shard: this replica may not admit writes of the shard now")
	// ErrValidityEnded: the cause of a Context cancelled because the
	// ownership's validity ended.
	ErrValidityEnded = errors.New("shard: the ownership's validity ended")
	// ErrLost: the cause of a Context cancelled because the shard was lost
	// (its key went, the lease expired, Close) or is handed over without
	// a drain.
	ErrLost = errors.New("shard: the shard was lost")
	// ErrClosed: Close was called.
	ErrClosed = errors.New("shard: closed")
	// ErrDuplicateID: a live replica already uses Options.ID (a
	// *DuplicateIDError).
	ErrDuplicateID = errors.New("shard: another live replica uses this replica's ID")
)

// DuplicateIDError is Start's error when a member key with Options.ID is
// held by another live replica: its lease is renewed, or it has none.
type DuplicateIDError struct {
	ID    string
	Key   string
	Lease int64 // the other key's lease; 0: none (put by hand)
}

func (e *DuplicateIDError) Error() string {
	if e.Lease == 0 {
		return fmt.Sprintf("shard: the member key %s of replica ID %q is in etcd without a lease (put by hand?): delete it, or give this replica another ID", e.Key, e.ID)
	}
	return fmt.Sprintf("shard: another live replica uses the replica ID %q (member key %s on its lease %x, renewed): every replica needs a unique ID", e.ID, e.Key, e.Lease)
}

// Is makes errors.Is(err, ErrDuplicateID) true.
func (e *DuplicateIDError) Is(target error) bool { return target == ErrDuplicateID }

// CountError is Start's error when the prefix holds another shard count
// or depth.
type CountError struct {
	Prefix          string
	Stored          int // the count in etcd, written by the first replica
	Configured      int // Options.Shards of this replica
	StoredDepth     int // the depth in etcd (0: the whole key)
	ConfiguredDepth int // Options.Depth of this replica
}

func (e *CountError) Error() string {
	return fmt.Sprintf("shard: etcd holds %s under %q, this replica was started with %s: every replica of a prefix must use the count and depth stored at the first start",
		describeCount(e.Stored, e.StoredDepth), e.Prefix, describeCount(e.Configured, e.ConfiguredDepth))
}

// describeCount says how resources map to shards.
func describeCount(shards, depth int) string {
	if depth == 0 {
		return fmt.Sprintf("%d shards by the whole key", shards)
	}
	return fmt.Sprintf("%d shards by the first %d key segments", shards, depth)
}

// Is makes errors.Is(err, ErrShardCount) true.
func (e *CountError) Is(target error) bool { return target == ErrShardCount }

// Options configure a replica's shard ownership.
type Options struct {
	// Prefix of every key (see the package doc). Empty: DefaultPrefix.
	Prefix string
	// Shards is the number of shards, > 0. Stored at the first start;
	// Start refuses another.
	Shards int
	// Depth is how many leading "/"-separated segments of a resource key
	// decide its shard (see Key); 0: the whole key. Stored with Shards;
	// Start refuses another.
	Depth int
	// ID names this replica among the live ones, stable across restarts
	// (a pod name of a StatefulSet, a host name). Required.
	ID string
	// Advertise is the address peers forward requests to (published in
	// the member and owner keys).
	Advertise string
	// TTL of the lease, rounded up to whole seconds (etcd's unit); etcd
	// may raise it to its minimum. 0: DefaultTTL.
	TTL time.Duration
	// Margin is taken off every validity deadline. 0: TTL/5.
	Margin time.Duration
	// KeepAliveInterval between keepalives. 0: TTL/4. After a failure,
	// the next try comes after min(KeepAliveInterval, 500ms).
	KeepAliveInterval time.Duration
	// LockDelay: a new owner after an unclean loss waits this after it
	// saw the old key go. It must cover the longest forwarded request, the
	// abandon grace and the longest stall of a replica in the middle of a
	// send; the server also requires at least the TTL. 0:
	// DefaultLockDelay; NoLockDelay: none (unsafe: for tests that must
	// find what it prevents).
	LockDelay time.Duration
	// DrainTimeout bounds one Drain call. 0: DefaultDrainTimeout.
	DrainTimeout time.Duration
	// RequestTimeout bounds each etcd request. 0: DefaultRequestTimeout.
	RequestTimeout time.Duration

	// OnAcquire is called when this replica became the owner of shard
	// (its key is in etcd); it may admit from admitAfter on (now for a
	// planned handover or a shard never owned). nil: not told.
	OnAcquire func(shard int, admitAfter time.Time)
	// OnLoss is called once when this replica stops admitting a shard for
	// good: at the start of a handover (before Drain), when its key went
	// (lease expired, deleted), when the lease was lost, on Close. nil:
	// not told (MayAdmit answers false all the same).
	OnLoss func(shard int)
	// Drain returns once no write of shard is in flight upstream (the
	// proxy's barrier drained, abandoned writes included), or an error
	// when ctx ends first. nil: a handover passes no marker, and the next
	// owner waits LockDelay as after an unclean loss; then, as
	// when Drain fails, the contexts of Context are cancelled (ErrLost)
	// before the owner key is deleted.
	//
	// The caller counts a request as in flight BEFORE it calls MayAdmit or
	// Context for it (and uncounts it when refused), and Drain waits for
	// that count to reach zero: a request that passed MayAdmit just before
	// the handover began is then counted already when Drain looks, while
	// counting it after MayAdmit could miss it.
	Drain func(ctx context.Context, shard int) error

	// Logger for ownership changes. nil: none.
	Logger *slog.Logger
}

// Member is a live replica as its member or owner key says.
type Member struct {
	ID   string `json:"id"`
	Addr string `json:"addr"`
}

// Grant is this replica's ownership of a shard as MayAdmit answers it.
type Grant struct {
	Shard int
	// Epoch is the owner key's CreateRevision: unique per ownership.
	Epoch int64
	// AdmitAfter: no write is admitted before it.
	AdmitAfter time.Time
	// ValidUntil: no write may be admitted at or after it, and every
	// upstream request started under this grant must end before it.
	//
	// Both are wall-clock times (no monotonic reading) mapped from the
	// boot-time clock MayAdmit decides on. A deadline set from ValidUntil
	// runs on Go's timers, which stand still during a suspend: Context's
	// cancellation does not.
	ValidUntil time.Time
}

// Stats are the counters of a replica. The server will export them as
// Prometheus metrics with a collector that reads Stats at each scrape:
// fenceproxy_shards_owned (gauge), fenceproxy_shard_acquisitions_total{kind=
// "planned"|"unclean"|"new"}, fenceproxy_shard_releases_total{kind="planned"|
// "undrained"}, fenceproxy_shard_losses_total, fenceproxy_shard_lock_delay_
// waits_total and _seconds_total, fenceproxy_shard_keepalive_failures_total,
// fenceproxy_shard_validity_lapses_total.
type Stats struct {
	Owned               int           // shards held now (admitting, waiting or handing over)
	AcquiredPlanned     int64         // acquisitions that read a "released" marker
	AcquiredUnclean     int64         // acquisitions after a key that went without a handover
	AcquiredNew         int64         // acquisitions of a shard never owned
	AcquiredAdopted     int64         // of those, acquire Txns whose answer was lost but were applied (counted in their kind too)
	ReleasedPlanned     int64         // handovers with the marker (drained)
	ReleasedUndrained   int64         // handovers without it (Drain nil or failed)
	Lost                int64         // shards lost without a handover (key gone, lease lost)
	LockDelayWaits      int64         // acquisitions that had to wait (unclean; planned within the rest of a lock-delay)
	LockDelayWaitTotal  time.Duration // sum of those waits (admitAfter - acquisition time)
	KeepAliveFailures   int64         // keepalive requests that failed
	ValidityLapses      int64         // times the validity deadline passed
	Sessions            int64         // leases granted (1 + re-registrations after a lost lease)
	MemberReregistered  int64         // member keys put again after they were deleted while the lease lived
	DuplicateID         bool          // another live replica uses this ID: this one takes no shard
	MembersSeen         int           // live replicas in this replica's view
	LastKeepAliveSentAt time.Time     // send time of the last confirmed keepalive
}

// Owner is one replica's share of the shards. Start it with Start, stop it
// with Close.
type Owner struct {
	cli  *clientv3.Client
	opts Options
	k    keys
	ttl  time.Duration // granted by etcd
	log  *slog.Logger
	// clk reads the boot-time clock (bootClock; a test's own), in ns:
	// every deadline below is on it. wallBase and bootBase map it onto the
	// wall clock for the exported times.
	clk      func() int64
	wallBase time.Time // wall clock at Start, without a monotonic reading
	bootBase int64     // clk at Start

	slots []slot
	sess  atomic.Pointer[session]

	mu    sync.RWMutex // guards view for readers other than the loop
	view  view
	stats counters

	ctx      context.Context // ends on Close (after the handovers)
	cancel   context.CancelFunc
	kick     chan struct{}
	released chan releaseDone
	closing  atomic.Bool
	drained  chan struct{} // closed by the loop once closing and no shard held
	done     chan struct{} // the loop exited
	workers  sync.WaitGroup

	// Test switches (the test with teeth turns protections off).
	noValidity bool
	noLockWait bool
	// fault, when set, injects etcd failures: called with "acquire" after
	// an acquire Txn was committed (an error replaces its answer: applied,
	// the answer lost) and with "readback" before the read that follows
	// (an error fails it).
	fault func(op string, shard int) error
}

type counters struct {
	acquiredPlanned, acquiredUnclean, acquiredNew atomic.Int64
	adopted                                       atomic.Int64
	releasedPlanned, releasedUndrained, lost      atomic.Int64
	lockWaits, lockWaitNanos                      atomic.Int64
	kaFailures, lapses, sessions, reregistered    atomic.Int64
	duplicate                                     atomic.Bool
	lastSent                                      atomic.Int64 // boot-time ns
}

type slot struct {
	h  atomic.Pointer[holding]
	mu sync.Mutex
	// ctxs are the live contexts of Context on this shard.
	ctxs map[*watcher]struct{}
}

type watcher struct {
	cancel context.CancelCauseFunc
	sess   *session
}

// holding is this replica's ownership of one shard.
type holding struct {
	sess       *session
	epoch      int64
	admitAfter int64 // boot-time ns
	releasing  atomic.Bool
	lossCalled bool // loop only
}

// session is one lease: its validity, and whether it is known lost.
type session struct {
	lease  clientv3.LeaseID
	ttl    time.Duration
	valid  atomic.Int64 // deadline, boot-time ns
	lost   atomic.Bool
	lapsed atomic.Bool
	stop   chan struct{} // closed by halt: its keepalive and validity loops end
	// memberRev is the revision of the put of the member key on it (the
	// loop's, after Start).
	memberRev int64
	once      sync.Once
}

// halt ends s's keepalive and validity loops.
func (s *session) halt() { s.once.Do(func() { close(s.stop) }) }

type keys struct{ prefix string }

func (k keys) count() string           { return k.prefix + "shards/count" }
func (k keys) member(id string) string { return k.prefix + "members/" + id }
func (k keys) owner(n int) string      { return k.prefix + "shards/" + strconv.Itoa(n) + "/owner" }
func (k keys) state(n int) string      { return k.prefix + "shards/" + strconv.Itoa(n) + "/state" }
func (k keys) rangeStart() string      { return k.prefix + "members/" }
func (k keys) rangeEnd() string        { return clientv3.GetPrefixRangeEnd(k.prefix + "shards/") }

// Of returns the shard of a resource key (the package's Of with this
// replica's shard count).
func (o *Owner) Of(resource string) int { return Of(resource, o.opts.Shards) }

// Shards returns the number of shards.
func (o *Owner) Shards() int { return o.opts.Shards }

// TTL returns the lease TTL etcd granted.
func (o *Owner) TTL() time.Duration { return o.ttl }

// now reads the boot-time clock: every validity and admission decision
// compares its readings.
func (o *Owner) now() int64 { return o.clk() }

// wall maps a boot-time reading onto the wall clock (for the exported times
// only): the wall clock at Start plus the boot-time elapsed since, without
// a monotonic reading, so that time.Now() compares with it by the wall
// clock, which a suspend advances too.
func (o *Owner) wall(ns int64) time.Time { return o.wallBase.Add(time.Duration(ns - o.bootBase)) }

// MayAdmit answers whether this replica may admit a write of shard now: it
// owns the shard, is not handing it over, the lock-delay is over and its
// validity has not ended. The Grant's ValidUntil is the deadline for every
// upstream request admitted now. It takes no lock.
func (o *Owner) MayAdmit(shard int) (Grant, bool) {
	h := o.slots[shard].h.Load()
	if h == nil || h.releasing.Load() || h.sess.lost.Load() {
		return Grant{}, false
	}
	now := o.now() // the one clock read
	valid := h.sess.valid.Load()
	if o.noValidity {
		valid = now + int64(time.Hour)
	}
	g := Grant{Shard: shard, Epoch: h.epoch, AdmitAfter: o.wall(h.admitAfter), ValidUntil: o.wall(valid)}
	if now < h.admitAfter || now >= valid {
		return g, false
	}
	return g, true
}

// Holds reports whether the ownership that granted g still holds now: the
// same ownership of g.Shard (its epoch), its session not lost and its
// validity not ended, by the boot-time clock. A handover in progress does
// not end it (Drain waits for the requests admitted under it). For a
// request admitted under g, to check before each step that may complete it.
func (o *Owner) Holds(g Grant) bool {
	h := o.slots[g.Shard].h.Load()
	if h == nil || h.epoch != g.Epoch || h.sess.lost.Load() {
		return false
	}
	return o.noValidity || o.now() < h.sess.valid.Load()
}

// ValidUntil returns when the validity of the ownership that granted g ends
// as it stands now (a later confirmed keepalive moves it), on the wall clock
// (converted from the boot-time clock), and false once that ownership no
// longer holds (another epoch, its session lost); with the validity off
// (tests), the zero time and true. An upstream exchange of a request
// admitted under g must end by it (docs/CLUSTER.md).
func (o *Owner) ValidUntil(g Grant) (time.Time, bool) {
	h := o.slots[g.Shard].h.Load()
	if h == nil || h.epoch != g.Epoch || h.sess.lost.Load() {
		return time.Time{}, false
	}
	if o.noValidity {
		return time.Time{}, true
	}
	return o.wall(h.sess.valid.Load()), true
}

// OwnerKey returns the etcd key of shard's owner; its CreateRevision is
// the Epoch of the ownership that created it. A store can guard its writes
// with it (store/etcd's Options.Guard): a compare on it fails once the shard
// changed owner.
func (o *Owner) OwnerKey(shard int) string { return o.k.owner(shard) }

// Valid reports whether this replica's etcd lease is confirmed now: a
// keepalive sent less than the TTL minus the margin ago was answered (by the
// boot-time clock). Shards it holds may be admitted only while it is.
func (o *Owner) Valid() bool {
	s := o.sess.Load()
	return s != nil && !s.lost.Load() && o.now() < s.valid.Load()
}

// State returns this replica's grant of shard, whether it may admit now or
// not (waiting for the lock-delay, validity lapsed, handing over); ok false
// when it does not hold the shard.
func (o *Owner) State(shard int) (g Grant, ok bool) {
	h := o.slots[shard].h.Load()
	if h == nil {
		return Grant{}, false
	}
	return Grant{Shard: shard, Epoch: h.epoch, AdmitAfter: o.wall(h.admitAfter), ValidUntil: o.wall(h.sess.valid.Load())}, true
}

// Owned returns the shards this replica holds now.
func (o *Owner) Owned() []int {
	var out []int
	for i := range o.slots {
		if o.slots[i].h.Load() != nil {
			out = append(out, i)
		}
	}
	return out
}

// OwnerOf returns the owner of shard as this replica's view of etcd has it
// (for forwarding; it may lag etcd).
func (o *Owner) OwnerOf(shard int) (Member, bool) {
	o.mu.RLock()
	defer o.mu.RUnlock()
	ow, ok := o.view.owners[shard]
	return ow.Member, ok
}

// Context returns a context derived from parent that is cancelled when this
// replica's ownership of shard ends: its validity passes (cause
// ErrValidityEnded) or the shard is lost (ErrLost). A drained handover
// does not cancel it (Drain waits for it); one without a drain does, before
// the owner key is deleted. It fails with ErrNotAdmitting when MayAdmit
// answers false. Call cancel when the request ends.
func (o *Owner) Context(parent context.Context, shard int) (context.Context, context.CancelFunc, error) {
	sl := &o.slots[shard]
	sl.mu.Lock()
	defer sl.mu.Unlock()
	h := sl.h.Load()
	// A drop clears the slot before it cancels the slot's contexts under
	// sl.mu: either it sees this one, or this one sees the slot changed.
	if _, ok := o.MayAdmit(shard); !ok || h == nil || sl.h.Load() != h {
		return nil, nil, ErrNotAdmitting
	}
	ctx, cancel := context.WithCancelCause(parent)
	w := &watcher{cancel: cancel, sess: h.sess}
	if sl.ctxs == nil {
		sl.ctxs = map[*watcher]struct{}{}
	}
	sl.ctxs[w] = struct{}{}
	return ctx, func() {
		sl.mu.Lock()
		delete(sl.ctxs, w)
		sl.mu.Unlock()
		cancel(context.Canceled)
	}, nil
}

// cancelContexts cancels the contexts of shard (of session s, or all when s
// is nil) with cause.
func (o *Owner) cancelContexts(shard int, s *session, cause error) {
	sl := &o.slots[shard]
	sl.mu.Lock()
	defer sl.mu.Unlock()
	for w := range sl.ctxs {
		if s == nil || w.sess == s {
			w.cancel(cause)
			delete(sl.ctxs, w)
		}
	}
}

// Stats returns the counters.
func (o *Owner) Stats() Stats {
	st := Stats{
		AcquiredPlanned:    o.stats.acquiredPlanned.Load(),
		AcquiredUnclean:    o.stats.acquiredUnclean.Load(),
		AcquiredNew:        o.stats.acquiredNew.Load(),
		AcquiredAdopted:    o.stats.adopted.Load(),
		ReleasedPlanned:    o.stats.releasedPlanned.Load(),
		ReleasedUndrained:  o.stats.releasedUndrained.Load(),
		Lost:               o.stats.lost.Load(),
		LockDelayWaits:     o.stats.lockWaits.Load(),
		LockDelayWaitTotal: time.Duration(o.stats.lockWaitNanos.Load()),
		KeepAliveFailures:  o.stats.kaFailures.Load(),
		ValidityLapses:     o.stats.lapses.Load(),
		Sessions:           o.stats.sessions.Load(),
		MemberReregistered: o.stats.reregistered.Load(),
		DuplicateID:        o.stats.duplicate.Load(),
	}
	if ns := o.stats.lastSent.Load(); ns != 0 {
		st.LastKeepAliveSentAt = o.wall(ns)
	}
	st.Owned = len(o.Owned())
	o.mu.RLock()
	st.MembersSeen = len(o.view.members)
	o.mu.RUnlock()
	return st
}
