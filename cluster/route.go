package cluster

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/fenceproxy/fenceproxy/control"
	"github.com/fenceproxy/fenceproxy/proxy"
	"github.com/fenceproxy/fenceproxy/shard"
)

// drainPoll is how often a handover looks whether a shard's writes are done.
const drainPoll = 5 * time.Millisecond

// shardOf is the shard of resource.
func (c *Cluster) shardOf(resource string) int {
	return shard.Of(shard.Key(resource, c.opts.ShardDepth), c.opts.Shards)
}

// Owns reports whether this replica holds the shard of name now
// (lease.Options.Watched: a lease is watched on its owner only).
func (c *Cluster) Owns(name string) bool {
	if c.owner == nil {
		return false
	}
	_, ok := c.owner.State(c.shardOf(name))
	return ok
}

// drain is shard.Options.Drain: it returns once no write or named control
// call of shard n that passed its ownership check is running, and no write
// on the shard's resources is unfinished in the barrier (abandoned ones
// through their abandon grace).
func (c *Cluster) drain(ctx context.Context, n int) error {
	t := time.NewTicker(drainPoll)
	defer t.Stop()
	for c.inflight[n].Load() > 0 {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d requests of shard %d still running: %w", c.inflight[n].Load(), n, ctx.Err())
		case <-t.C:
		}
	}
	return c.barrier.WaitIdleWhere(ctx, func(r string) bool { return c.shardOf(r) == n }, drainPoll)
}

// placement is where the requests on a set of shards go.
type placement struct {
	shards  []int
	local   bool // this replica may admit them all now
	grants  []shard.Grant
	forward shard.Member  // local false: the owner of them all, when there is one
	why     string        // neither: why no replica may take them now
	wait    time.Duration // neither, in a lock-delay here: until it ends
}

// enter counts the request in flight on its shards and then decides where it
// goes: the count comes first, so that a handover that starts after the
// ownership check waits for the request. The counts are taken back unless
// the route is local; then leave must be called.
func (c *Cluster) enter(ctx context.Context, names []string) placement {
	rt := placement{shards: make([]int, 0, 1)}
	for _, name := range names {
		if n := c.shardOf(name); !slices.Contains(rt.shards, n) {
			rt.shards = append(rt.shards, n)
		}
	}
	for _, n := range rt.shards {
		c.inflight[n].Add(1)
	}
	rt.local = true
	for _, n := range rt.shards {
		g, ok := c.owner.MayAdmit(n)
		if !ok {
			rt.local = false
			break
		}
		rt.grants = append(rt.grants, g)
	}
	if rt.local {
		err := c.forgetOnce(rt.grants)
		if err == nil {
			return rt
		}
		c.leave(rt)
		rt.local, rt.grants = false, nil
		rt.why = fmt.Sprintf("this replica took shard %d over but could not read its prefix fences from etcd yet: %v", rt.shards[0], err)
		return rt
	}
	c.leave(rt)
	rt.grants = nil
	c.elsewhere(ctx, &rt)
	return rt
}

// elsewhere completes a placement this replica may not admit now: the
// owner to forward to, or why there is none.
func (c *Cluster) elsewhere(ctx context.Context, rt *placement) {
	held := false
	var owners []shard.Member
	for _, n := range rt.shards {
		if g, ok := c.owner.State(n); ok {
			held = true
			rt.wait = max(rt.wait, time.Until(g.AdmitAfter))
		}
		m, ok := c.owner.OwnerOf(n)
		if !ok {
			rt.why = fmt.Sprintf("shard %d has no owner now (a replica is taking it over)", n)
			return
		}
		if !slices.Contains(owners, m) {
			owners = append(owners, m)
		}
	}
	switch {
	case held:
		rt.why = fmt.Sprintf("this replica owns shard %d but may not admit its writes now (waiting out the lock-delay after an unclean handover, handing it over, or cut off from etcd)", rt.shards[0])
	case len(owners) > 1:
		rt.why = fmt.Sprintf("the request touches %d shards owned by different replicas; cluster mode fences a request in one replica (RESOURCE_DEPTH can put related keys in one resource)", len(rt.shards))
	case owners[0].ID == c.opts.ReplicaID:
		rt.why = "etcd names this replica the owner, but it does not hold the shard (its view is catching up)"
	case ctx.Value(fromPeerKey{}) != nil:
		rt.why = "forwarded by another replica, but this one no longer owns the shard (it moved)"
	default:
		rt.forward = owners[0]
	}
}

// leave ends what enter counted.
func (c *Cluster) leave(rt placement) {
	for _, n := range rt.shards {
		c.inflight[n].Add(-1)
	}
}

// forgetOnce drops the store's cached maxima of each granted shard, and
// reloads the barrier's prefix fences of it, once per ownership epoch,
// before the first request of that ownership reads them. One pass serves
// every shard held whose epoch is not done yet (a start takes many at
// once, and the prefix fences are read whole). Errors: the reload's (the
// shards stay to do).
func (c *Cluster) forgetOnce(grants []shard.Grant) error {
	for _, g := range grants {
		if c.forgotten[g.Shard].Load() == g.Epoch {
			continue
		}
		c.forgetMu.Lock()
		err := c.forget()
		c.forgetMu.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

// forget is forgetOnce's pass. Caller holds forgetMu.
func (c *Cluster) forget() error {
	epochs := make(map[int]int64)
	for n := range c.forgotten {
		if g, ok := c.owner.State(n); ok && c.forgotten[n].Load() != g.Epoch {
			epochs[n] = g.Epoch
		}
	}
	if len(epochs) == 0 {
		return nil
	}
	// Read after the grants: what the previous owners committed is there.
	match := func(r string) bool { _, ok := epochs[c.shardOf(r)]; return ok }
	c.store.Forget(match)
	if err := c.barrier.ReloadPrefixes(match); err != nil {
		return err
	}
	for n, e := range epochs {
		c.forgotten[n].Store(e)
	}
	return nil
}

// valid reports whether this replica still holds every grant, its validity
// not passed (shard.Owner.Holds: atomic loads and a boot-time clock read).
func (c *Cluster) valid(grants []shard.Grant) bool {
	for _, g := range grants {
		if !c.owner.Holds(g) {
			return false
		}
	}
	return true
}

// validUntil is when the first of grants' validities ends as they stand
// now (shard.Owner.ValidUntil), a moment already past once one no longer
// holds, the zero time when none ends (validity off).
func (c *Cluster) validUntil(grants []shard.Grant) time.Time {
	var end time.Time
	for _, g := range grants {
		u, ok := c.owner.ValidUntil(g)
		if !ok {
			return time.Now().Add(-time.Nanosecond)
		}
		if !u.IsZero() && (end.IsZero() || u.Before(end)) {
			end = u
		}
	}
	return end
}

// ProxyOwner is proxy.Options.Owner: the write's shards are admitted here
// (the upstream exchange then follows the ownership, never the client),
// forwarded whole to their owner, or refused (proxy.ErrShardUnavailable,
// with a Retry-After).
func (c *Cluster) ProxyOwner(r *http.Request, resources []string) (proxy.Ownership, error) {
	rt := c.enter(r.Context(), resources)
	switch {
	case rt.local:
	case rt.forward.Addr != "":
		return proxy.Ownership{Forward: c.forwardTo(rt.forward, "proxy", resources[0])}, nil
	default:
		return proxy.Ownership{}, unavailable{fmt.Errorf("%w: %s", proxy.ErrShardUnavailable, rt.why), rt.wait}
	}
	ctx, cancel, err := c.ownershipContext(context.WithoutCancel(r.Context()), rt.shards)
	if err != nil {
		c.leave(rt)
		return proxy.Ownership{}, fmt.Errorf("%w: %v", proxy.ErrShardUnavailable, err)
	}
	grants := rt.grants
	return proxy.Ownership{
		Context:    ctx,
		Valid:      func() bool { return c.valid(grants) },
		ValidUntil: func() time.Time { return c.validUntil(grants) },
		Done: func() {
			cancel()
			c.leave(rt)
		},
	}, nil
}

// ownershipContext is ctx ended when this replica's ownership of any of
// shards ends; cancel releases it.
func (c *Cluster) ownershipContext(ctx context.Context, shards []int) (context.Context, context.CancelFunc, error) {
	var cancels []context.CancelFunc
	cancel := func() {
		for _, f := range cancels {
			f()
		}
	}
	for _, n := range shards {
		sctx, scancel, err := c.owner.Context(ctx, n)
		if err != nil {
			cancel()
			return nil, nil, err
		}
		ctx = sctx
		cancels = append(cancels, scancel)
	}
	return ctx, cancel, nil
}

// ControlOwner is control.Options.Owner: a named call runs here (done ends
// it), goes to the name's owner (forward), or is refused
// (control.ErrShardUnavailable, with a Retry-After).
func (c *Cluster) ControlOwner(r *http.Request, name string) (done func(), forward http.Handler, err error) {
	rt := c.enter(r.Context(), []string{name})
	switch {
	case rt.local:
		return func() { c.leave(rt) }, nil, nil
	case rt.forward.Addr != "":
		return nil, c.forwardTo(rt.forward, "control", name), nil
	default:
		return nil, nil, unavailable{fmt.Errorf("%w: %s", control.ErrShardUnavailable, rt.why), rt.wait}
	}
}

// unavailable is a refusal while no replica may admit a shard's writes,
// with how long until this replica may (a lock-delay), for Retry-After.
type unavailable struct {
	err  error
	wait time.Duration
}

func (u unavailable) Error() string             { return u.err.Error() }
func (u unavailable) Unwrap() error             { return u.err }
func (u unavailable) RetryAfter() time.Duration { return u.wait }
