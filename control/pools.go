package control

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/fenceproxy/fenceproxy/fence"
	"github.com/fenceproxy/fenceproxy/pool"
	"github.com/fenceproxy/fenceproxy/wire"
)

// PoolPrefix is the URL prefix of the pool API.
const PoolPrefix = "/v1/pools/"

// Pools is what the pool API needs (pool.Pools provides it). Errors are
// pool.ErrNotFound, pool.ErrInvalid, pool.ErrBusy, pool.ErrDone,
// pool.ErrNoShard (a *pool.NoShardError), the lease manager's (Leases) and
// store failures (503).
type Pools interface {
	// Define creates or resizes pool; it returns the shard names.
	Define(pool string, spec pool.Spec) ([]string, error)
	// Claim grants holder a lease for ttl on one shard of pool.
	Claim(ctx context.Context, pool, holder string, ttl time.Duration, standby bool) (pool.Claim, error)
	// Status returns pool's shards and live holders.
	Status(pool string) (pool.Status, error)
	// Done marks shard complete with holder's token; it returns the
	// shard's lease name.
	Done(pool, shard, holder string, token uint64) (string, error)
	// HandBack returns the pool and shard whose lease name is name (pool
	// "": no shard of a defined pool, nil shards) and the shards the
	// holder must hand back.
	HandBack(name, holder string) (pool, shard string, shards []string, err error)
}

// poolRoutes registers /v1/pools/{pool}, .../claim and
// .../shards/{shard}/done, with the lease calls' bearer. Pool and shard
// names are single path segments of [A-Za-z0-9._-]; the lease of a shard
// is pool.ShardName's, "{pool}/{shard}" or the pool's prefix with the
// shard, which must be a lease name (with FENCEPROXY_RESOURCE_DEPTH N:
// "{pool}/{shard}" needs N 2; a prefix N-1 segments before its final "/").
// In cluster mode a call runs on the owner of the pool's name, and a
// prefix whose shards' names are no prefix fences there (PrefixFence) is
// refused.
func (s *server) poolRoutes(r chi.Router) {
	pr := func(op, suffix string, status int) route {
		return route{
			op: op, prefix: PoolPrefix, name: s.poolName(suffix), owner: poolOf,
			badName: errBadPoolName, badBody: pool.ErrInvalid, failed: errLeaseStore, status: status,
		}
	}
	pools := r.With(s.leaseAuth)
	pools.Put(PoolPrefix+"{pool}", handle(s, pr("pool.define", "", http.StatusOK), s.definePool))
	pools.Get(PoolPrefix+"{pool}", handle(s, pr("pool.get", "", http.StatusOK), s.getPool))
	pools.Post(PoolPrefix+"{pool}/claim", handle(s, pr("pool.claim", "/claim", http.StatusCreated), s.claim))
	pools.Post(PoolPrefix+"{pool}/shards/{shard}/done", handle(s, pr("pool.done", "/done", http.StatusOK), s.done))
}

var errBadPoolName = errors.New("bad pool or shard name")

// poolOf is the name a pool call is routed by: the pool's.
func poolOf(name string) string {
	p, _, _ := strings.Cut(name, "/")
	return p
}

// poolName returns the route's name reader: the pool ("p"), or for the
// done route "p/s" (from "p/shards/s/done"; the pool is what routes it,
// the shard's lease name is the pool's to say).
func (s *server) poolName(suffix string) func(raw string) (string, error) {
	return func(raw string) (string, error) {
		rest, ok := strings.CutSuffix(raw, suffix)
		if !ok {
			return "", fmt.Errorf("%w: want %s{pool}%s", pool.ErrInvalid, PoolPrefix, suffix)
		}
		name := rest
		if suffix == "/done" {
			p, sh, ok := strings.Cut(rest, "/shards/")
			if !ok {
				return "", fmt.Errorf("%w: want %s{pool}/shards/{shard}/done", pool.ErrInvalid, PoolPrefix)
			}
			if err := pool.CheckName("shard", sh); err != nil {
				return "", err
			}
			rest, name = p, p+"/"+sh
		}
		if err := pool.CheckName("pool", rest); err != nil {
			return "", err
		}
		return name, nil
	}
}

// definePool: PUT /v1/pools/{pool} {"shards": N} or {"names": [...]},
// optionally with "prefix". Each shard's lease name (pool.ShardName) must
// be a name the lease API takes: the resolver's rules, and with
// FENCEPROXY_RESOURCE_DEPTH N exactly N segments ("{pool}/{shard}": N 2; a
// prefix: N-1 segments and the final "/", "a/{shard}/" for N 3; N 1 takes
// no prefix). Each shard's name must be a prefix fence (PrefixFence: in
// cluster mode one with at least SHARD_DEPTH segments), else 400.
func (s *server) definePool(_ context.Context, req request[wire.PoolSpec]) (wire.Pool, error) {
	spec := pool.Spec{Shards: req.Body.Shards, Names: req.Body.Names, Prefix: req.Body.Prefix}
	names, err := spec.Check()
	if err != nil {
		return wire.Pool{}, err
	}
	for _, n := range names {
		name := pool.ShardName(req.Name, spec.Prefix, n)
		if spec.Prefix != "" && s.opts.PrefixFence != nil {
			if err := s.opts.PrefixFence(name); err != nil {
				return wire.Pool{}, fmt.Errorf("%w: prefix %q: shard %q's lease %q: %w", pool.ErrInvalid, spec.Prefix, n, name, err)
			}
		}
		key, err := s.resolver().LeaseName(name)
		if err == nil && key != name {
			// The pool acquires the shard's lease by its name as spelt.
			err = fmt.Errorf("%w: the writes it would fence resolve to %q: spell the prefix so", fence.ErrBadResource, key)
		}
		if err != nil {
			if d := s.opts.ResourceDepth; spec.Prefix != "" && d > 0 {
				fits := "no prefix fits: define the pool without one"
				if d > 1 {
					fits = fmt.Sprintf("a prefix needs %d segment(s) before its final \"/\", such as %q", d-1, strings.Repeat("seg/", d-2)+pool.ShardPlaceholder+"/")
				}
				return wire.Pool{}, fmt.Errorf("%w: shard %q's lease %q: %w; with FENCEPROXY_RESOURCE_DEPTH %d %s", pool.ErrInvalid, n, name, err, d, fits)
			}
			return wire.Pool{}, fmt.Errorf("%w: shard %q's lease %q: %w", pool.ErrInvalid, n, name, err)
		}
	}
	if _, err := s.opts.Pools.Define(req.Name, spec); err != nil {
		return wire.Pool{}, err
	}
	return s.poolState(req.Name)
}

// getPool: GET /v1/pools/{pool}.
func (s *server) getPool(_ context.Context, req request[none]) (wire.Pool, error) {
	return s.poolState(req.Name)
}

func (s *server) poolState(name string) (wire.Pool, error) {
	st, err := s.opts.Pools.Status(name)
	if err != nil {
		return wire.Pool{}, err
	}
	out := wire.Pool{Pool: st.Pool, Prefix: st.Prefix, Share: st.Share, Open: st.Open, Done: st.Done, Shards: []wire.PoolShard{}, Holders: []wire.PoolHolder{}}
	for _, sh := range st.Shards {
		ps := wire.PoolShard{Shard: sh.Shard, Name: sh.Name, State: sh.State, Holder: sh.Holder, Token: wire.Token(sh.Token), Standby: sh.Standby}
		if !sh.ExpiresAt.IsZero() && sh.State != pool.StateDone {
			ps.ExpiresAt, ps.GraceEnds = &sh.ExpiresAt, &sh.GraceEnds
		}
		out.Shards = append(out.Shards, ps)
	}
	for _, h := range st.Holders {
		out.Holders = append(out.Holders, wire.PoolHolder{Holder: h.Holder, Shards: h.Shards, HandBack: h.HandBack, Waiting: h.Waiting})
	}
	return out, nil
}

// claim: POST /v1/pools/{pool}/claim {"holder","ttl","standby"}; 201 with
// the shard's lease, as an acquire answers it.
func (s *server) claim(ctx context.Context, req request[wire.PoolClaim]) (wire.Lease, error) {
	ttl, err := time.ParseDuration(req.Body.TTL)
	if err != nil {
		return wire.Lease{}, detailed(pool.ErrInvalid, fmt.Sprintf("ttl %q: want a Go duration such as 10s", req.Body.TTL))
	}
	c, err := s.opts.Pools.Claim(ctx, req.Name, req.Body.Holder, ttl, req.Body.Standby)
	if err != nil {
		var ns *pool.NoShardError
		if errors.As(err, &ns) && !ns.RetryAt.IsZero() {
			secs := max(1, int(math.Ceil(time.Until(ns.RetryAt).Seconds())))
			req.Header.Set("Retry-After", strconv.Itoa(secs))
		}
		return wire.Lease{}, err
	}
	out := s.signed(req.Header, leaseOf(c.Lease, "held"))
	out.Pool, out.Shard = req.Name, c.Shard
	return out, nil
}

// done: POST /v1/pools/{pool}/shards/{shard}/done {"holder","token"}.
func (s *server) done(_ context.Context, req request[wire.LeaseRequest]) (wire.PoolShard, error) {
	if err := holderRequest(req.Body); err != nil {
		return wire.PoolShard{}, err
	}
	p, sh, _ := strings.Cut(req.Name, "/")
	name, err := s.opts.Pools.Done(p, sh, req.Body.Holder, uint64(*req.Body.Token))
	if err != nil {
		return wire.PoolShard{}, err
	}
	return wire.PoolShard{Shard: sh, Name: name, State: pool.StateDone, Holder: req.Body.Holder, Token: *req.Body.Token}, nil
}
