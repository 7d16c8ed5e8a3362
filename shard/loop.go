package shard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// retryDelay is the pause after a failed keepalive (at most) or a failed
// watch, before trying again.
const retryDelay = 500 * time.Millisecond

// validityPoll is the longest a session's validity loop sleeps between two
// readings of the boot-time clock: Go's timers run on the monotonic clock,
// which stands still while the machine is suspended, so after a resume the
// contexts of an ownership whose validity ended during the suspend are
// cancelled within this (MayAdmit refuses at once: it reads the clock).
const validityPoll = 100 * time.Millisecond

type memberKV struct {
	Member
	lease  int64
	modRev int64
}

type ownerKV struct {
	Member
	lease     int64
	createRev int64
}

type stateKV struct {
	modRev   int64
	released bool
	wait     time.Duration // released: what was left of its owner's lock-delay
}

type stateValue struct {
	State string `json:"state"` // "owned" or "released"
	ID    string `json:"id"`
	// WaitMs, in a "released" state: the owner handed the shard over
	// while still waiting out the lock-delay of an unclean loss, this
	// much before its end; the next owner waits it from its sighting.
	WaitMs int64 `json:"wait_ms,omitempty"`
}

// view is this replica's copy of the members/ and shards/ keys, as of rev.
// The loop goroutine writes it under Owner.mu; it reads it without.
type view struct {
	rev     int64
	members map[string]memberKV
	owners  map[int]ownerKV
	states  map[int]stateKV
	// goneAt is, for each shard without an owner key, when this replica
	// saw it absent (boot-time ns): the delete event, or the read that
	// found none.
	goneAt map[int]int64
	// countChanged: the stored shard count was deleted or changed under
	// this replica; its shards no longer name the same resources.
	countChanged bool
}

func newView() view {
	return view{members: map[string]memberKV{}, owners: map[int]ownerKV{}, states: map[int]stateKV{}, goneAt: map[int]int64{}}
}

type releaseKind int

const (
	releasedPlanned   releaseKind = iota // key deleted, "released" written
	releasedUndrained                    // key deleted without the marker
	releaseLost                          // the key was gone, or the lease lost, before the Txn
)

type releaseDone struct {
	shard int
	h     *holding
	kind  releaseKind
}

// Start checks the shard count under the prefix (storing it at the first
// start), grants this replica's lease, registers it as a member and starts
// its keepalive and ownership loops. It returns before any shard is
// acquired; OnAcquire tells when. ctx bounds Start only. The client stays the
// caller's: Close does not close it.
func Start(ctx context.Context, cli *clientv3.Client, opts Options) (*Owner, error) {
	return start(ctx, cli, opts, nil)
}

func start(ctx context.Context, cli *clientv3.Client, opts Options, tweak func(*Owner)) (*Owner, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	o := &Owner{
		cli:      cli,
		opts:     opts,
		k:        keys{opts.Prefix},
		log:      opts.Logger,
		clk:      bootClock,
		slots:    make([]slot, opts.Shards),
		view:     newView(),
		kick:     make(chan struct{}, 1),
		released: make(chan releaseDone, opts.Shards),
		drained:  make(chan struct{}),
		done:     make(chan struct{}),
	}
	if o.log == nil {
		o.log = slog.New(slog.DiscardHandler)
	}
	o.log = o.log.With("replica", opts.ID)
	if tweak != nil {
		tweak(o)
	}
	o.wallBase, o.bootBase = time.Now().Round(0), o.now()
	if err := o.checkCount(ctx); err != nil {
		return nil, err
	}
	if err := o.awaitPredecessor(ctx); err != nil {
		return nil, err
	}
	o.ctx, o.cancel = context.WithCancel(context.Background())
	s, err := o.grant(ctx)
	if err != nil {
		o.cancel()
		return nil, err
	}
	o.ttl = s.ttl
	o.sess.Store(s)
	go o.run()
	return o, nil
}

func (opts *Options) setDefaults() error {
	if opts.Shards <= 0 {
		return fmt.Errorf("shard: Options.Shards must be positive, not %d", opts.Shards)
	}
	if opts.Depth < 0 {
		return fmt.Errorf("shard: Options.Depth must not be negative, not %d", opts.Depth)
	}
	if opts.ID == "" {
		return errors.New("shard: Options.ID is required")
	}
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if opts.TTL == 0 {
		opts.TTL = DefaultTTL
	}
	opts.TTL = (opts.TTL + time.Second - 1).Truncate(time.Second)
	if opts.Margin == 0 {
		opts.Margin = opts.TTL / 5
	}
	if opts.KeepAliveInterval == 0 {
		opts.KeepAliveInterval = opts.TTL / 4
	}
	switch {
	case opts.LockDelay == 0:
		opts.LockDelay = DefaultLockDelay
	case opts.LockDelay == NoLockDelay:
		opts.LockDelay = 0
	}
	if opts.DrainTimeout == 0 {
		opts.DrainTimeout = DefaultDrainTimeout
	}
	if opts.RequestTimeout == 0 {
		opts.RequestTimeout = DefaultRequestTimeout
	}
	if opts.Margin < 0 || opts.LockDelay < 0 || opts.KeepAliveInterval < 0 || opts.DrainTimeout < 0 || opts.RequestTimeout < 0 {
		return errors.New("shard: negative duration in Options")
	}
	if opts.Margin+opts.KeepAliveInterval >= opts.TTL {
		return fmt.Errorf("shard: Margin %v plus KeepAliveInterval %v must be below TTL %v", opts.Margin, opts.KeepAliveInterval, opts.TTL)
	}
	return nil
}

func (o *Owner) checkCount(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, o.opts.RequestTimeout)
	defer cancel()
	key := o.k.count()
	// No count but shards or members already there: the count was deleted
	// under running replicas, and a new one would map resources to other
	// shards beside them.
	existing, err := o.cli.Get(ctx, o.k.rangeStart(), clientv3.WithRange(o.k.rangeEnd()), clientv3.WithKeysOnly())
	if err != nil {
		return fmt.Errorf("shard: read the shard count %s: %w", key, err)
	}
	hasCount := false
	for _, kv := range existing.Kvs {
		hasCount = hasCount || string(kv.Key) == key
	}
	if !hasCount && len(existing.Kvs) > 0 {
		return fmt.Errorf("shard: the shard count %s is missing but %d member or shard keys are there (%s...): "+
			"it was deleted under running replicas; stop them all, wait the TTL plus the lock-delay, delete %s, then start",
			key, len(existing.Kvs), existing.Kvs[0].Key, o.k.prefix)
	}
	resp, err := o.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, o.opts.countValue())).
		Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return fmt.Errorf("shard: read the shard count %s: %w", key, err)
	}
	if resp.Succeeded {
		o.log.Info("shard count stored", "shards", o.opts.Shards, "depth", o.opts.Depth, "key", key)
		return nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) != 1 {
		return fmt.Errorf("shard: the shard count %s vanished", key)
	}
	stored, depth, err := parseCount(string(kvs[0].Value))
	if err != nil {
		return fmt.Errorf("shard: the shard count %s holds %q: %w", key, kvs[0].Value, err)
	}
	if stored != o.opts.Shards || depth != o.opts.Depth {
		return &CountError{Prefix: o.opts.Prefix, Stored: stored, Configured: o.opts.Shards,
			StoredDepth: depth, ConfiguredDepth: o.opts.Depth}
	}
	return nil
}

// grant starts a session: a lease, its validity from the grant's send time,
// the member key on it, its keepalive loop and its lapse timer.
func (o *Owner) grant(ctx context.Context) (*session, error) {
	ctx, cancel := context.WithTimeout(ctx, o.opts.RequestTimeout)
	defer cancel()
	sent := o.now()
	resp, err := o.cli.Grant(ctx, int64(o.opts.TTL/time.Second))
	if err != nil {
		return nil, fmt.Errorf("shard: grant a lease: %w", err)
	}
	s := &session{lease: resp.ID, ttl: time.Duration(resp.TTL) * time.Second, stop: make(chan struct{})}
	s.valid.Store(sent + int64(s.ttl-o.opts.Margin))
	rev, err := o.register(ctx, s)
	if err != nil {
		rctx, rcancel := context.WithTimeout(context.Background(), o.opts.RequestTimeout)
		_, _ = o.cli.Revoke(rctx, resp.ID)
		rcancel()
		return nil, err
	}
	s.memberRev = rev
	o.stats.sessions.Add(1)
	o.log.Info("lease granted", "lease", int64(resp.ID), "ttl", s.ttl.String())
	o.workers.Add(2)
	go o.keepAlive(s)
	go o.watchValidity(s)
	return s, nil
}

// register puts this replica's member key on s's lease unless a member
// key with its ID is there (another replica's: ErrDuplicateID), and
// returns the revision of the put.
func (o *Owner) register(ctx context.Context, s *session) (int64, error) {
	key := o.k.member(o.opts.ID)
	val, _ := json.Marshal(Member{ID: o.opts.ID, Addr: o.opts.Advertise})
	resp, err := o.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(val), clientv3.WithLease(s.lease))).
		Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return 0, fmt.Errorf("shard: register member %s: %w", o.opts.ID, err)
	}
	if !resp.Succeeded {
		lease := int64(0)
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
			lease = kvs[0].Lease
		}
		if lease == int64(s.lease) {
			return resp.Header.Revision, nil // a put whose answer was lost
		}
		return 0, &DuplicateIDError{ID: o.opts.ID, Key: key, Lease: lease}
	}
	return resp.Header.Revision, nil
}

// awaitPredecessor waits until no member key with this replica's ID is
// left on another lease. A previous instance that crashed (a restart under
// the same ID) leaves one that goes with its lease within the lease's TTL;
// a key whose lease is renewed duplicateRenewals times meanwhile (its
// remaining TTL rises; an etcd leader election extends it once) belongs to a
// live replica: ErrDuplicateID, as is one whose lease shows a remaining TTL
// above 0 at every look for three of its TTLs (a dead one's runs down to 0,
// where it may stay while etcd elects a leader, which then extends it).
func (o *Owner) awaitPredecessor(ctx context.Context) error {
	key := o.k.member(o.opts.ID)
	var (
		lease    int64
		lastTTL  int64
		rises    int       // times the lease's remaining TTL went up: renewals
		warned   time.Time // last "still waiting" log
		deadline time.Time // past it, the key's lease was kept alive: a live replica
	)
	for {
		rctx, cancel := context.WithTimeout(ctx, o.opts.RequestTimeout)
		resp, err := o.cli.Get(rctx, key)
		cancel()
		if err != nil {
			return fmt.Errorf("shard: read the member key %s: %w", key, err)
		}
		if len(resp.Kvs) == 0 {
			return nil
		}
		kv := resp.Kvs[0]
		if kv.Lease == 0 {
			return &DuplicateIDError{ID: o.opts.ID, Key: key}
		}
		if kv.Lease != lease {
			lease, lastTTL, rises, warned, deadline = kv.Lease, -1, 0, time.Now(), time.Time{}
			o.log.Warn("a member key with this replica's ID is on another lease: waiting for it to expire (a previous instance that crashed?)",
				"key", key, "lease", lease)
		}
		rctx, cancel = context.WithTimeout(ctx, o.opts.RequestTimeout)
		ttl, err := o.cli.TimeToLive(rctx, clientv3.LeaseID(lease))
		cancel()
		if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return fmt.Errorf("shard: read the lease of the member key %s: %w", key, err)
		}
		if err == nil && ttl.TTL >= 0 {
			// A live replica renews every KeepAliveInterval; an etcd leader
			// election also extends every lease, once: only repeated
			// renewals tell a live duplicate from a crashed predecessor.
			if lastTTL >= 0 && ttl.TTL > lastTTL {
				rises++
			}
			if deadline.IsZero() || ttl.TTL == 0 {
				// A crashed predecessor's lease runs down to 0 and waits
				// there for a leader to revoke it; an election extends it
				// again. A live replica's, renewed every KeepAliveInterval,
				// never shows 0: three TTLs without one mean a live holder.
				deadline = time.Now().Add(3*time.Duration(ttl.GrantedTTL)*time.Second + time.Second)
			}
			if rises >= duplicateRenewals || time.Now().After(deadline) {
				return &DuplicateIDError{ID: o.opts.ID, Key: key, Lease: lease}
			}
			lastTTL = ttl.TTL
			if time.Since(warned) > time.Duration(ttl.GrantedTTL)*time.Second+time.Second {
				warned = time.Now()
				o.log.Warn("still waiting for the member key of this replica's ID to expire", "key", key, "lease", lease, "ttl_left", ttl.TTL)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("shard: waiting for the member key %s of a previous instance to expire: %w", key, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// duplicateRenewals is how many renewals of another lease's member key with
// this replica's ID Start sees before it calls that key a live duplicate.
const duplicateRenewals = 3

// keepAlive renews s with KeepAliveOnce every KeepAliveInterval, and moves
// its validity to each confirmed request's send time + TTL - Margin.
func (o *Owner) keepAlive(s *session) {
	defer o.workers.Done()
	next := time.Now().Add(o.opts.KeepAliveInterval)
	t := time.NewTimer(time.Until(next))
	defer t.Stop()
	for {
		t.Reset(time.Until(next))
		select {
		case <-o.ctx.Done():
			return
		case <-s.stop:
			return
		case <-t.C:
		}
		sentAt, sent := time.Now(), o.now() // the schedule's clock, the validity's
		ctx, cancel := context.WithTimeout(o.ctx, o.opts.RequestTimeout)
		resp, err := o.cli.KeepAliveOnce(ctx, s.lease)
		cancel()
		switch {
		case err == nil:
			valid := sent + int64(time.Duration(resp.TTL)*time.Second-o.opts.Margin)
			for {
				old := s.valid.Load()
				if valid <= old || s.valid.CompareAndSwap(old, valid) {
					break
				}
			}
			s.lapsed.Store(false)
			o.stats.lastSent.Store(sent)
			next = sentAt.Add(o.opts.KeepAliveInterval)
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			o.log.Warn("lease lost: it expired in etcd", "lease", int64(s.lease))
			s.lost.Store(true)
			o.poke()
			return
		default:
			if o.ctx.Err() != nil {
				return
			}
			o.stats.kaFailures.Add(1)
			o.log.Warn("keepalive failed", "lease", int64(s.lease), "err", err,
				"valid_for", time.Duration(s.valid.Load()-o.now()).Round(time.Millisecond))
			next = time.Now().Add(min(o.opts.KeepAliveInterval, retryDelay))
		}
	}
}

// watchValidity calls lapse once s's validity deadline passed on the
// boot-time clock, and again every validityPoll while it stays passed. Its
// timer runs on the monotonic clock, so it never sleeps longer than
// validityPoll: a suspend is noticed within that after the resume.
func (o *Owner) watchValidity(s *session) {
	defer o.workers.Done()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-o.ctx.Done():
			return
		case <-s.stop:
			return
		case <-t.C:
		}
		left := time.Duration(s.valid.Load() - o.now())
		if left <= 0 {
			if o.lapse(s) {
				left = validityPoll
			} else if left = time.Duration(s.valid.Load() - o.now()); left <= 0 {
				left = time.Microsecond // the clock stepped back across the deadline
			}
		}
		t.Reset(min(left, validityPoll))
	}
}

// lapse runs once s's validity deadline passed: unless a keepalive moved
// it, the contexts of s's shards are cancelled.
func (o *Owner) lapse(s *session) bool {
	if o.now() < s.valid.Load() {
		return false
	}
	if s.lapsed.CompareAndSwap(false, true) {
		o.stats.lapses.Add(1)
		o.log.Warn("ownership validity ended: admitting nothing until a keepalive is confirmed", "lease", int64(s.lease))
	}
	for n := range o.slots {
		if h := o.slots[n].h.Load(); h != nil && h.sess == s {
			o.cancelContexts(n, s, ErrValidityEnded)
		}
	}
	return true
}

func (o *Owner) poke() {
	select {
	case o.kick <- struct{}{}:
	default:
	}
}

// run is the ownership loop: it reads the members/ and shards/ keys, watches
// them and reconciles after every change; a failed watch starts over.
func (o *Owner) run() {
	defer close(o.done)
	defer o.dropAll()
	st := &loopState{pending: map[int]pendingAcquire{}}
	for o.ctx.Err() == nil {
		err := o.syncAndWatch(st)
		if o.ctx.Err() != nil {
			return
		}
		o.log.Warn("watch of the shard keys ended; reading them again", "err", err)
		select {
		case <-o.ctx.Done():
			return
		case <-time.After(retryDelay):
		}
	}
}

// loopState is the loop goroutine's own.
type loopState struct {
	releasing int
	// pending are the acquire Txns whose answer was lost, by shard: they
	// may have been applied later than anything the loop read.
	pending       map[int]pendingAcquire
	memberDeleted bool
	duplicate     bool // a member key with this ID on another lease
	drainedClosed bool
	countStopped  bool
}

func (o *Owner) syncAndWatch(st *loopState) error {
	ctx, cancel := context.WithTimeout(o.ctx, o.opts.RequestTimeout)
	resp, err := o.cli.Get(ctx, o.k.rangeStart(), clientv3.WithRange(o.k.rangeEnd()))
	cancel()
	if err != nil {
		return err
	}
	now := o.now()
	nv := newView()
	nv.rev = resp.Header.Revision
	for _, kv := range resp.Kvs {
		o.apply(&nv, kv, true, now)
	}
	for n := range o.opts.Shards {
		if _, ok := nv.owners[n]; ok {
			continue
		}
		// Absent before and now: keep the earlier sighting only if no
		// owner came and went in between, which the state key tells.
		if t, ok := o.view.goneAt[n]; ok && o.view.states[n] == nv.states[n] {
			nv.goneAt[n] = t
		} else {
			nv.goneAt[n] = now
		}
	}
	o.mu.Lock()
	o.view = nv
	o.mu.Unlock()

	wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(o.ctx))
	defer wcancel()
	wch := o.cli.Watch(wctx, o.k.rangeStart(), clientv3.WithRange(o.k.rangeEnd()), clientv3.WithRev(nv.rev+1))
	o.reconcile(st)
	tick := time.NewTicker(o.opts.KeepAliveInterval)
	defer tick.Stop()
	for {
		select {
		case <-o.ctx.Done():
			return nil
		case wr, ok := <-wch:
			if !ok {
				return errors.New("watch channel closed")
			}
			if err := wr.Err(); err != nil {
				return err
			}
			if len(wr.Events) == 0 {
				continue
			}
			now := o.now()
			o.mu.Lock()
			for _, ev := range wr.Events {
				o.apply(&o.view, ev.Kv, ev.Type == mvccpb.Event_PUT, now)
			}
			o.view.rev = wr.Header.Revision
			o.mu.Unlock()
		case rd := <-o.released:
			o.finishRelease(st, rd)
		case <-o.kick:
		case <-tick.C:
		}
		o.reconcile(st)
	}
}

// apply puts one key's change into v.
func (o *Owner) apply(v *view, kv *mvccpb.KeyValue, put bool, now int64) {
	key, ok := strings.CutPrefix(string(kv.Key), o.k.prefix)
	if !ok {
		return
	}
	if id, ok := strings.CutPrefix(key, "members/"); ok {
		if !put {
			delete(v.members, id)
			return
		}
		var m Member
		if json.Unmarshal(kv.Value, &m) != nil {
			m = Member{ID: id}
		}
		v.members[id] = memberKV{Member: m, lease: kv.Lease, modRev: kv.ModRevision}
		return
	}
	rest, ok := strings.CutPrefix(key, "shards/")
	if !ok {
		return
	}
	if rest == "count" {
		if !put || string(kv.Value) != o.opts.countValue() {
			v.countChanged = true
		}
		return
	}
	num, what, _ := strings.Cut(rest, "/")
	n, err := strconv.Atoi(num)
	if err != nil || n < 0 || n >= o.opts.Shards {
		return
	}
	switch what {
	case "owner":
		if !put {
			delete(v.owners, n)
			v.goneAt[n] = now
			return
		}
		var m Member
		_ = json.Unmarshal(kv.Value, &m)
		v.owners[n] = ownerKV{Member: m, lease: kv.Lease, createRev: kv.CreateRevision}
		delete(v.goneAt, n)
	case "state":
		if !put {
			delete(v.states, n)
			return
		}
		var sv stateValue
		_ = json.Unmarshal(kv.Value, &sv)
		v.states[n] = stateKV{modRev: kv.ModRevision, released: sv.State == "released", wait: time.Duration(sv.WaitMs) * time.Millisecond}
	}
}

// reconcile acquires the free shards assigned to this replica, hands over
// the ones assigned to another live member (all of them when closing), and
// drops the ones whose key went. Loop goroutine only.
func (o *Owner) reconcile(st *loopState) {
	closing := o.closing.Load()
	s := o.sess.Load()
	if s.lost.Load() {
		o.dropSession(s)
		clear(st.pending)
		st.memberDeleted = true
		if !closing {
			ns, err := o.grant(o.ctx)
			if errors.Is(err, ErrDuplicateID) {
				o.duplicateID(st, err)
				return
			}
			if err != nil {
				o.log.Warn("new lease failed; retrying", "err", err)
				return
			}
			o.sess.Store(ns)
			s = ns
			st.memberDeleted = false
		}
	}
	if closing && !st.memberDeleted {
		ctx, cancel := context.WithTimeout(o.ctx, o.opts.RequestTimeout)
		key := o.k.member(o.opts.ID)
		_, err := o.cli.Txn(ctx).If(clientv3.Compare(clientv3.LeaseValue(key), "=", s.lease)).
			Then(clientv3.OpDelete(key)).Commit()
		cancel()
		if err == nil {
			st.memberDeleted = true
		}
	}
	v := &o.view
	if v.countChanged {
		// Another count maps resources to other shards: admitting any of
		// ours could overlap another replica's. Stop, for good.
		if !st.countStopped {
			st.countStopped = true
			o.log.Error("the stored shard count was deleted or changed under this replica: it admits nothing more; "+
				"to change the count, stop every replica, wait the TTL plus the lock-delay, then start them with the new one",
				"shards", o.opts.Shards, "key", o.k.count())
		}
		o.dropAll()
		if closing && st.memberDeleted && st.releasing == 0 && !st.drainedClosed {
			st.drainedClosed = true
			close(o.drained)
		}
		return
	}
	me, ok := v.members[o.opts.ID]
	registered := ok && me.lease == int64(s.lease)
	switch {
	case registered:
		if st.duplicate {
			st.duplicate = false
			o.stats.duplicate.Store(false)
			o.log.Info("registered again: taking shards again")
		}
	case closing:
	case ok && me.modRev > s.memberRev:
		// Put after this replica's own member key: by another replica
		// started with the same ID (an older view may still show the
		// key of a lease that expired, put before ours).
		o.duplicateID(st, &DuplicateIDError{ID: o.opts.ID, Key: o.k.member(o.opts.ID), Lease: me.lease})
	case !ok && v.rev >= s.memberRev:
		// Deleted while the lease lives (by hand?): without it the
		// others leave this replica out of the assignment.
		ctx, cancel := context.WithTimeout(o.ctx, o.opts.RequestTimeout)
		rev, err := o.register(ctx, s)
		cancel()
		switch {
		case errors.Is(err, ErrDuplicateID):
			o.duplicateID(st, err)
		case err != nil:
			o.log.Warn("registering the member key again failed; retrying", "err", err)
		default:
			s.memberRev = rev
			o.stats.reregistered.Add(1)
			o.log.Warn("the member key was deleted while the lease lives: registered again", "key", o.k.member(o.opts.ID))
		}
	}
	desired := assign(slices.Collect(maps.Keys(v.members)), o.opts.Shards)
	held := 0
	acquireFailed := false
	for n := range o.opts.Shards {
		h := o.slots[n].h.Load()
		own, owned := v.owners[n]
		if h == nil && owned && own.lease == int64(s.lease) {
			// Written by an acquire Txn whose answer was lost, after
			// its read back (or that read failed too).
			h = o.adoptPending(st, n, s, own.lease, own.createRev, own.ID, "watch")
		}
		if h != nil {
			held++
			if h.releasing.Load() {
				continue
			}
			if h.sess != s || (v.rev >= h.epoch && (!owned || own.createRev != h.epoch)) {
				o.log.Warn("shard lost: its key went without a handover", "shard", n, "epoch", h.epoch)
				o.drop(n, h)
				held--
				continue
			}
			switch {
			case closing:
				o.startRelease(st, n, h, "") // whoever takes it
			case registered && desired[n] != o.opts.ID:
				o.startRelease(st, n, h, desired[n])
			}
			continue
		}
		if closing || !registered || owned || desired[n] != o.opts.ID || acquireFailed {
			continue
		}
		if !o.acquire(st, n, s, v) {
			acquireFailed = true
		}
	}
	if closing && held == 0 && st.releasing == 0 && st.memberDeleted && !st.drainedClosed {
		st.drainedClosed = true
		close(o.drained)
	}
}

// duplicateID reports, once, another replica with this replica's ID. It
// takes no shard while the other's key is there (its shards stay its own:
// their keys guard them).
func (o *Owner) duplicateID(st *loopState, err error) {
	o.stats.duplicate.Store(true)
	if st.duplicate {
		return
	}
	st.duplicate = true
	o.log.Error("ANOTHER REPLICA RUNS WITH THIS REPLICA'S ID: this one takes no shard until its member key is gone; "+
		"give every replica a unique ID (REPLICA_ID)", "err", err)
}

// pendingAcquire is an acquire Txn of shard n as it was sent: what the
// acquisition is (kind, admitAfter) as the state key said before it.
type pendingAcquire struct {
	sess       *session
	viewRev    int64 // the view it was built on: an owner key it wrote is newer
	kind       string
	admitAfter int64 // boot-time ns
	sent       int64 // boot-time ns
}

// acquire tries to take shard n; false when etcd did not answer.
func (o *Owner) acquire(st *loopState, n int, s *session, v *view) bool {
	now := o.now()
	stv, hasState := v.states[n]
	kind, admitAfter := "new", now
	switch {
	case !hasState:
	case stv.released:
		kind = "planned"
		if stv.wait > 0 && !o.noLockWait {
			// Handed over within the lock-delay of an earlier unclean
			// loss: the rest of it, from the sighting of the key gone
			// (after the release, so no earlier than its end).
			gone, ok := v.goneAt[n]
			if !ok {
				gone = now
			}
			admitAfter = max(now, gone+int64(stv.wait))
		}
	default:
		kind = "unclean"
		gone, ok := v.goneAt[n]
		if !ok {
			gone = now
		}
		// The key went a TTL after the old owner's last renewal, past the
		// end of its validity: only what it sent upstream before may
		// still land.
		wait := o.opts.LockDelay
		if o.noLockWait {
			wait = 0
		}
		admitAfter = gone + int64(wait)
	}
	p := pendingAcquire{sess: s, viewRev: v.rev, kind: kind, admitAfter: admitAfter, sent: now}
	owner, state := o.k.owner(n), o.k.state(n)
	mval, _ := json.Marshal(Member{ID: o.opts.ID, Addr: o.opts.Advertise})
	sval, _ := json.Marshal(stateValue{State: "owned", ID: o.opts.ID})
	ctx, cancel := context.WithTimeout(o.ctx, o.opts.RequestTimeout)
	resp, err := o.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(owner), "=", 0),
			clientv3.Compare(clientv3.ModRevision(state), "=", stv.modRev),
			clientv3.Compare(clientv3.Value(o.k.count()), "=", o.opts.countValue())).
		Then(clientv3.OpPut(owner, string(mval), clientv3.WithLease(s.lease)),
			clientv3.OpPut(state, string(sval))).Commit()
	cancel()
	if err == nil && o.fault != nil {
		err = o.fault("acquire", n)
	}
	if err != nil {
		// A timeout or a lost connection says nothing of whether etcd
		// applied it: read the owner key back, and adopt it if the Txn
		// put it (the watch will tell as well if the read fails too).
		o.log.Warn("acquire failed: reading the owner key back", "shard", n, "err", err)
		st.pending[n] = p
		o.readBack(st, n, s)
		return false
	}
	if !resp.Succeeded {
		return true // someone was faster, or the view lags: the watch will tell
	}
	delete(st.pending, n)
	o.hold(n, s, resp.Header.Revision, p)
	return true
}

// readBack reads shard n's owner key after an acquire Txn whose answer was
// lost, and adopts it if that Txn put it.
func (o *Owner) readBack(st *loopState, n int, s *session) {
	var resp *clientv3.GetResponse
	err := error(nil)
	if o.fault != nil {
		err = o.fault("readback", n)
	}
	if err == nil {
		ctx, cancel := context.WithTimeout(o.ctx, o.opts.RequestTimeout)
		resp, err = o.cli.Get(ctx, o.k.owner(n))
		cancel()
	}
	if err != nil {
		o.log.Warn("reading the owner key back failed: the watch will tell", "shard", n, "err", err)
		return
	}
	if len(resp.Kvs) == 1 {
		kv := resp.Kvs[0]
		var m Member
		_ = json.Unmarshal(kv.Value, &m)
		o.adoptPending(st, n, s, kv.Lease, kv.CreateRevision, m.ID, "read back")
	}
}

// adoptPending holds shard n if its owner key (on lease, created at
// createRev, naming id) was put by the pending acquire Txn of s: the key is
// on s's lease and newer than the view that Txn was built on, and this
// replica does not hold the shard. The acquisition is the one the Txn would
// have made had its answer come: the same kind, the same admitAfter (the
// lock-delay counted from the same moment). nil when it is not.
func (o *Owner) adoptPending(st *loopState, n int, s *session, lease, createRev int64, id, how string) *holding {
	p, ok := st.pending[n]
	if !ok || p.sess != s || lease != int64(s.lease) || id != o.opts.ID || createRev <= p.viewRev || o.slots[n].h.Load() != nil {
		return nil
	}
	delete(st.pending, n)
	o.log.Warn("an acquire whose answer was lost was applied: adopting the shard", "shard", n, "epoch", createRev, "seen_by", how)
	o.stats.adopted.Add(1)
	return o.hold(n, s, createRev, p)
}

// hold records the acquisition of shard n under the owner key created at
// epoch.
func (o *Owner) hold(n int, s *session, epoch int64, p pendingAcquire) *holding {
	h := &holding{sess: s, epoch: epoch, admitAfter: p.admitAfter}
	o.slots[n].h.Store(h)
	switch p.kind {
	case "new":
		o.stats.acquiredNew.Add(1)
	case "planned":
		o.stats.acquiredPlanned.Add(1)
	case "unclean":
		o.stats.acquiredUnclean.Add(1)
	}
	if w := p.admitAfter - p.sent; w > 0 {
		o.stats.lockWaits.Add(1)
		o.stats.lockWaitNanos.Add(w)
	}
	level := slog.LevelInfo
	if p.kind == "new" {
		// A shard no replica held before (a fresh cluster's 64 at start):
		// nothing handed over, nothing to wait for; fenceproxy_shards_owned
		// shows the count.
		level = slog.LevelDebug
	}
	o.log.Log(context.Background(), level, "shard acquired", "shard", n, "epoch", h.epoch, "handover", p.kind, "admit_in", time.Duration(p.admitAfter-o.now()).Round(time.Millisecond).String())
	if o.opts.OnAcquire != nil {
		o.opts.OnAcquire(n, o.wall(p.admitAfter))
	}
	return h
}

// startRelease stops admitting shard n and hands it over in a goroutine.
func (o *Owner) startRelease(st *loopState, n int, h *holding, to string) {
	h.releasing.Store(true)
	st.releasing++
	o.log.Info("handing shard over", "shard", n, "epoch", h.epoch, "to", to, "closing", o.closing.Load())
	o.notifyLoss(n, h)
	o.workers.Add(1)
	go func() {
		defer o.workers.Done()
		o.released <- releaseDone{n, h, o.release(n, h)}
	}()
}

// release drains shard n, then deletes its owner key, with the "released"
// marker if the drain succeeded, in one Txn guarded by the key's
// CreateRevision.
func (o *Owner) release(n int, h *holding) releaseKind {
	drained := false
	if o.opts.Drain != nil {
		ctx, cancel := context.WithTimeout(o.ctx, o.opts.DrainTimeout)
		err := o.opts.Drain(ctx, n)
		cancel()
		if err != nil {
			o.log.Warn("drain failed: handing over without the marker", "shard", n, "err", err)
		}
		drained = err == nil
	}
	if !drained {
		// The next owner's lock-delay runs from when it sees the key
		// go: nothing admitted here may still be sending after that,
		// so the contexts end before the key does.
		o.cancelContexts(n, nil, ErrLost)
	}
	owner := o.k.owner(n)
	ops := []clientv3.Op{clientv3.OpDelete(owner)}
	if drained {
		sv := stateValue{State: "released", ID: o.opts.ID}
		if wait := time.Duration(h.admitAfter - o.now()); wait > 0 {
			// Never admitted: the lock-delay goes on for the next owner.
			sv.WaitMs = (wait + time.Millisecond - 1).Milliseconds()
		}
		sval, _ := json.Marshal(sv)
		ops = append(ops, clientv3.OpPut(o.k.state(n), string(sval)))
	}
	for {
		if h.sess.lost.Load() || o.ctx.Err() != nil {
			return releaseLost
		}
		ctx, cancel := context.WithTimeout(o.ctx, o.opts.RequestTimeout)
		resp, err := o.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(owner), "=", h.epoch)).Then(ops...).Commit()
		cancel()
		switch {
		case err == nil && resp.Succeeded && drained:
			return releasedPlanned
		case err == nil && resp.Succeeded:
			return releasedUndrained
		case err == nil:
			return releaseLost
		}
		o.log.Warn("handover Txn failed; retrying", "shard", n, "err", err)
		select {
		case <-o.ctx.Done():
		case <-time.After(retryDelay):
		}
	}
}

func (o *Owner) finishRelease(st *loopState, rd releaseDone) {
	st.releasing--
	o.slots[rd.shard].h.CompareAndSwap(rd.h, nil)
	o.cancelContexts(rd.shard, nil, ErrLost)
	switch rd.kind {
	case releasedPlanned:
		o.stats.releasedPlanned.Add(1)
	case releasedUndrained:
		o.stats.releasedUndrained.Add(1)
	case releaseLost:
		o.stats.lost.Add(1)
	}
	o.log.Info("shard handed over", "shard", rd.shard, "epoch", rd.h.epoch, "marker", rd.kind == releasedPlanned)
}

func (o *Owner) notifyLoss(n int, h *holding) {
	if h.lossCalled {
		return
	}
	h.lossCalled = true
	if o.opts.OnLoss != nil {
		o.opts.OnLoss(n)
	}
}

// drop forgets shard n without a handover (its key went, the lease is lost).
func (o *Owner) drop(n int, h *holding) {
	o.slots[n].h.CompareAndSwap(h, nil)
	o.cancelContexts(n, nil, ErrLost)
	o.stats.lost.Add(1)
	o.notifyLoss(n, h)
}

// dropSession drops every shard held on s, except those being handed over
// (their goroutine sees the lost session and reports).
func (o *Owner) dropSession(s *session) {
	s.halt()
	for n := range o.slots {
		if h := o.slots[n].h.Load(); h != nil && h.sess == s && !h.releasing.Load() {
			o.drop(n, h)
		}
	}
}

// dropAll runs when the loop exits: nothing is held any more.
func (o *Owner) dropAll() {
	for n := range o.slots {
		if h := o.slots[n].h.Load(); h != nil {
			o.slots[n].h.Store(nil)
			o.cancelContexts(n, nil, ErrLost)
			o.notifyLoss(n, h)
		}
	}
}

// Close hands every shard over (Drain, then the marker), deregisters the
// replica and revokes its lease. When ctx ends first, the shards not handed
// over yet are dropped (their contexts cancelled) with the lease, and their
// next owners wait the lock-delay. OnLoss is called for every shard held. It returns ctx's
// error in that case, or the revoke's.
func (o *Owner) Close(ctx context.Context) error {
	if !o.closing.CompareAndSwap(false, true) {
		<-o.done
		return ErrClosed
	}
	o.poke()
	var err error
	select {
	case <-o.drained:
	case <-ctx.Done():
		err = fmt.Errorf("shard: close before every shard was handed over: %w", ctx.Err())
	}
	o.cancel()
	<-o.done
	o.workers.Wait()
	s := o.sess.Load()
	s.halt()
	if !s.lost.Load() {
		rctx, cancel := context.WithTimeout(context.Background(), o.opts.RequestTimeout)
		_, rerr := o.cli.Revoke(rctx, s.lease)
		cancel()
		if rerr != nil && !errors.Is(rerr, rpctypes.ErrLeaseNotFound) {
			err = errors.Join(err, fmt.Errorf("shard: revoke the lease: %w", rerr))
		}
	}
	o.log.Info("closed", "stats", fmt.Sprintf("%+v", o.Stats()))
	return err
}
