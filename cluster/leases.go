package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/fenceproxy/fenceproxy/control"
	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/wire"
)

// Leases is pool.Leases in cluster mode. A pool decides its claims in the
// owner of the pool's name, but each shard's lease ("{pool}/{shard}")
// belongs to the barrier of its own name's owner: Acquire and Release run
// here when this replica may admit that name now, else on its owner, over
// the peer listener's control API; the rest reads the store, as anywhere.
type Leases struct {
	c          *Cluster
	local      *lease.Manager
	leaseToken string // FENCEPROXY_LEASE_TOKEN, for the owner's lease API
	hc         *http.Client
}

// NewLeases returns the pool leases of c over this replica's lease manager;
// leaseToken is the lease API's bearer token ("" for none), sent to owners.
func NewLeases(c *Cluster, local *lease.Manager, leaseToken string) *Leases {
	return &Leases{c: c, local: local, leaseToken: leaseToken,
		hc: &http.Client{Transport: c.peer.Transport, Timeout: c.opts.DrainTimeout + 10*time.Second}}
}

// List, GraceEnds, Check and Now are the local lease manager's: they read
// the store, shared by every replica.
func (l *Leases) List(prefix, after string, limit int) ([]lease.Entry, error) {
	return l.local.List(prefix, after, limit)
}
func (l *Leases) GraceEnds(le lease.Lease) time.Time { return l.local.GraceEnds(le) }
func (l *Leases) Check(holder string, ttl time.Duration) error {
	return l.local.Check(holder, ttl)
}
func (l *Leases) Now() time.Time { return l.local.Now() }

// Acquire is lease.Manager.Acquire on the name's owner.
func (l *Leases) Acquire(ctx context.Context, name, holder string, ttl time.Duration) (lease.Lease, error) {
	// A new request of this replica's, even inside a call forwarded here.
	ctx = context.WithValue(ctx, fromPeerKey{}, nil)
	rt := l.c.enter(ctx, []string{name})
	if rt.local {
		defer l.c.leave(rt)
		return l.local.Acquire(ctx, name, holder, ttl)
	}
	return l.remote(ctx, rt, http.MethodPost, name, wire.LeaseRequest{Holder: holder, TTL: ttl.String()})
}

// Release is lease.Manager.Release on the name's owner.
func (l *Leases) Release(name, holder string, token uint64) (lease.Lease, error) {
	ctx := context.Background()
	rt := l.c.enter(ctx, []string{name})
	if rt.local {
		defer l.c.leave(rt)
		return l.local.Release(name, holder, token)
	}
	t := wire.Token(token)
	return l.remote(ctx, rt, http.MethodDelete, name, wire.LeaseRequest{Holder: holder, Token: &t})
}

// remote sends a lease call to the owner's control API over the peer
// listener and maps its answer back: 409 lease_held is lease.ErrHeld,
// lease_lost lease.ErrLost; no owner, or one that refused, is
// control.ErrShardUnavailable.
func (l *Leases) remote(ctx context.Context, rt placement, method, name string, body wire.LeaseRequest) (lease.Lease, error) {
	if rt.forward.Addr == "" {
		return lease.Lease{}, unavailable{fmt.Errorf("%w: %s", control.ErrShardUnavailable, rt.why), rt.wait}
	}
	resp, data, err := l.send(ctx, rt, method, name, body)
	if err != nil {
		return lease.Lease{}, err
	}
	if resp.StatusCode >= 300 {
		return lease.Lease{}, remoteError(rt, resp, data, method, name)
	}
	l.c.forwards.WithLabelValues("ok").Inc()
	l.c.log.Debug("pool lease call run on the owner replica", "method", method, "lease", name, "peer", rt.forward.ID)
	var wl wire.Lease
	if err := json.Unmarshal(data, &wl); err != nil {
		return lease.Lease{}, fmt.Errorf("the owner replica %s answered %s %s: %w", rt.forward.ID, method, name, err)
	}
	ttl, _ := time.ParseDuration(wl.TTL)
	return lease.Lease{Name: name, Holder: wl.Holder, Token: uint64(wl.Token), TTL: ttl, AcquiredAt: wl.AcquiredAt,
		RenewedAt: wl.RenewedAt, ExpiresAt: wl.ExpiresAt, Released: wl.State == string(lease.StateReleased)}, nil
}

// send makes the lease call on the owner's control API and reads its
// answer (at most 1 MiB); the owner unreachable is control.ErrShardUnavailable.
func (l *Leases) send(ctx context.Context, rt placement, method, name string, body wire.LeaseRequest) (*http.Response, []byte, error) {
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, method, "http://"+rt.forward.Addr+control.LeasePrefix+name, bytes.NewReader(b))
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(headerPeerSecret, l.c.opts.PeerSecrets[0])
	req.Header.Set(headerPeerTarget, "control")
	if l.leaseToken != "" {
		req.Header.Set("Authorization", "Bearer "+l.leaseToken)
	}
	resp, err := l.hc.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: the owner replica %s: %v", control.ErrShardUnavailable, rt.forward.ID, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp, data, nil
}

// remoteError is the error of an owner's refusal of a lease call.
func remoteError(rt placement, resp *http.Response, data []byte, method, name string) error {
	var p wire.Problem
	_ = json.Unmarshal(data, &p)
	switch {
	case p.Reason == wire.ReasonLeaseHeld:
		return fmt.Errorf("%w (on replica %s)", lease.ErrHeld, rt.forward.ID)
	case p.Reason == wire.ReasonLeaseLost:
		return fmt.Errorf("%w (on replica %s)", lease.ErrLost, rt.forward.ID)
	case resp.StatusCode == http.StatusServiceUnavailable || resp.Header.Get(headerPeerRefused) != "":
		return fmt.Errorf("%w: the owner replica %s answered %d: %s", control.ErrShardUnavailable, rt.forward.ID, resp.StatusCode, p.Detail)
	}
	return fmt.Errorf("the owner replica %s answered %s %s with %d: %s", rt.forward.ID, method, name, resp.StatusCode, p.Detail)
}
