package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/fenceproxy/fenceproxy/wire"
)

// Pool errors: ErrNoShard when a claim gets no shard now (the holder is at
// its share, or none is free), ErrShardDone when a shard was done with
// another token.
var (
	ErrNoShard   = errors.New("fenceproxy: no shard to claim now")
	ErrShardDone = errors.New("fenceproxy: shard already done")
)

// NoShardError is ErrNoShard with the server's word: the holder's share and
// count, when a held shard may free up, the shard it stands by for.
type NoShardError struct {
	AllDone bool // every shard of the pool is done (one-shot: nothing left)
	AtShare bool
	Share   int
	Held    int
	RetryAt time.Time // zero: unknown
	Standby string
	Detail  string
}

func (e *NoShardError) Error() string { return "fenceproxy: no shard to claim now: " + e.Detail }

// Is makes errors.Is(err, ErrNoShard) hold.
func (e *NoShardError) Is(target error) bool { return target == ErrNoShard }

// Shard is a claimed shard of a pool: its lease (Lease.Token its fencing
// token; Lease.Name the fence it raised: the resource key "{pool}/{shard}"
// to write to, or, for a pool defined with a prefix, the shard's prefix
// such as "reports/daily/3/", ending in "/": write the keys below it).
type Shard struct {
	Pool  string
	Shard string
	Lease Lease
}

// PoolEvent is what Pool.Run reports to Pool.Events: Kind is "claimed",
// "hand_back" (asked to hand the shard back: its context is cancelled),
// "released" (handed back, left, or its work ended), "done", "lost" (renew
// refused, or no renew within the TTL: its context is cancelled at once).
type PoolEvent struct {
	Kind  string
	Shard Shard
	Err   error // for "lost" and a failed release or done
	// WorkErr, for "released", is what the work function returned (a
	// failing task shows here; a hand-back or Run's end is usually its
	// context's error).
	WorkErr error
}

// Pool runs a holder's part of a shard pool: it claims shards up to the
// holder's share, renews each every TTL/3, hands back the shards a renew
// answer lists, and runs the worker's function once per claimed shard with
// a context cancelled when the shard is lost (a renew refused, or no renew
// acknowledged within the TTL, counted from when the last successful renew
// was sent), must be handed back, or Run's context ends.
type Pool struct {
	// Leases is the control listener (BaseURL, HTTP, Bearer).
	Leases *Leases
	// Name is the pool; Holder this holder's id (unique per process).
	Name, Holder string
	// TTL is each shard lease's TTL (renewed every TTL/3).
	TTL time.Duration
	// Standby asks, when no shard is free, to stand by for a suspect one.
	Standby bool
	// OneShot: each shard is a task; a work function returning nil marks it
	// done (never dispatched again), and Run returns nil once the pool has
	// no open shard left.
	OneShot bool
	// MaxShards, when above 0, bounds the shards Run holds at once (below
	// the holder's share: a worker that takes one task at a time).
	MaxShards int
	// Events, when set, is called with every event, from Run's goroutines.
	Events func(PoolEvent)
}

// Claim asks for one shard of the pool for holder with ttl (and a standby
// when none is free). Errors: a *NoShardError (ErrNoShard); ErrExhausted;
// an *APIError (404 unknown pool, 400, 401, 503).
func (p *Pool) Claim(ctx context.Context) (Shard, error) {
	var lj wire.Lease
	url := strings.TrimRight(p.Leases.BaseURL, "/") + "/v1/pools/" + p.Name + "/claim"
	h, err := send(ctx, p.Leases.HTTP, http.MethodPost, url, p.Leases.Bearer,
		&wire.PoolClaim{Holder: p.Holder, TTL: p.TTL.String(), Standby: p.Standby}, &lj)
	var apiErr *APIError
	switch {
	case err == nil:
		ttl, _ := time.ParseDuration(lj.TTL)
		sig := lj.TokenSignature
		if sig == "" {
			sig = h.Get(HeaderSignature)
		}
		return Shard{Pool: lj.Pool, Shard: lj.Shard, Lease: Lease{Name: lj.Name, Holder: lj.Holder, Token: uint64(lj.Token), TTL: ttl,
			AcquiredAt: lj.AcquiredAt, RenewedAt: lj.RenewedAt, ExpiresAt: lj.ExpiresAt, State: lj.State, TokenSignature: sig}}, nil
	case !errors.As(err, &apiErr):
		return Shard{}, fmt.Errorf("fenceproxy: claim in pool %q: %w", p.Name, err)
	case apiErr.Reason == wire.ReasonNoShard:
		pb := apiErr.problem
		ns := &NoShardError{AllDone: pb.AllDone, AtShare: pb.AtShare, Standby: pb.Standby, Detail: pb.Detail}
		if pb.Share != nil {
			ns.Share = *pb.Share
		}
		if pb.Held != nil {
			ns.Held = *pb.Held
		}
		if pb.RetryAt != nil {
			ns.RetryAt = *pb.RetryAt
		}
		return Shard{}, ns
	case apiErr.Reason == wire.ReasonTokensExhausted:
		return Shard{}, fmt.Errorf("%w: %w", ErrExhausted, apiErr)
	}
	return Shard{}, apiErr
}

// Renew renews s's lease and returns it with the shards of the pool this
// holder must hand back (nil: none). ErrLost: stop writing to s.
func (p *Pool) Renew(ctx context.Context, s Shard) (Lease, []string, error) {
	t := wire.Token(s.Lease.Token)
	var lj wire.Lease
	h, err := send(ctx, p.Leases.HTTP, http.MethodPut, p.Leases.leaseURL(s.Lease.Name), p.Leases.Bearer,
		&wire.LeaseRequest{Holder: p.Holder, Token: &t}, &lj)
	if err != nil {
		var apiErr *APIError
		if errors.As(err, &apiErr) && apiErr.Reason == wire.ReasonLeaseLost {
			return Lease{}, nil, fmt.Errorf("%w: %q: %w", ErrLost, s.Lease.Name, apiErr)
		}
		return Lease{}, nil, err
	}
	l := s.Lease
	l.RenewedAt, l.ExpiresAt, l.State = lj.RenewedAt, lj.ExpiresAt, lj.State
	if sig := lj.TokenSignature; sig != "" {
		l.TokenSignature = sig
	} else if sig := h.Get(HeaderSignature); sig != "" {
		l.TokenSignature = sig
	}
	return l, lj.HandBack, nil
}

// Done marks s done with its token (one-shot pools): never dispatched
// again. ErrLost when this holder no longer holds it; ErrShardDone when it
// was done with another token.
func (p *Pool) Done(ctx context.Context, s Shard) error {
	t := wire.Token(s.Lease.Token)
	url := strings.TrimRight(p.Leases.BaseURL, "/") + "/v1/pools/" + p.Name + "/shards/" + s.Shard + "/done"
	var out wire.PoolShard
	_, err := send(ctx, p.Leases.HTTP, http.MethodPost, url, p.Leases.Bearer, &wire.LeaseRequest{Holder: p.Holder, Token: &t}, &out)
	var apiErr *APIError
	if errors.As(err, &apiErr) {
		switch apiErr.Reason {
		case wire.ReasonLeaseLost:
			return fmt.Errorf("%w: %q: %w", ErrLost, s.Lease.Name, apiErr)
		case wire.ReasonShardDone:
			return fmt.Errorf("%w: %q: %w", ErrShardDone, s.Lease.Name, apiErr)
		}
	}
	return err
}

// Define creates the pool or changes its shards (PUT /v1/pools/{pool}) and
// returns its state. spec.Prefix, when set, is the template of the shards'
// lease names ("reports/daily/{shard}/"): each claim's token then fences
// every key below the shard's prefix. Errors: an *APIError (400 bad
// definition or prefix, or a prefix in cluster mode; 409 pool_busy: shards
// to remove, or every shard on a prefix change, are held).
func (p *Pool) Define(ctx context.Context, spec wire.PoolSpec) (wire.Pool, error) {
	var out wire.Pool
	_, err := send(ctx, p.Leases.HTTP, http.MethodPut, strings.TrimRight(p.Leases.BaseURL, "/")+"/v1/pools/"+p.Name, p.Leases.Bearer, &spec, &out)
	return out, err
}

// Get returns the pool's state (GET /v1/pools/{pool}).
func (p *Pool) Get(ctx context.Context) (wire.Pool, error) {
	var out wire.Pool
	_, err := send(ctx, p.Leases.HTTP, http.MethodGet, strings.TrimRight(p.Leases.BaseURL, "/")+"/v1/pools/"+p.Name, p.Leases.Bearer, nil, &out)
	return out, err
}

// held is one shard Run keeps.
type held struct {
	shard    Shard
	cancel   context.CancelFunc
	handBack chan struct{} // closed when asked to hand the shard back
	once     sync.Once
}

// Run claims shards and runs work(ctx, shard) for each, in a goroutine of
// its own, until ctx ends (then every shard's context is cancelled, Run
// waits for the work functions, releases the shards still held and returns
// ctx's error), or, OneShot, until no open shard is left (nil). work must
// stop writing when its ctx is cancelled; what it returns decides: OneShot
// and nil marks the shard done; otherwise the shard is released (unless it
// was lost). Claims are tried every TTL/4 (with jitter) while the holder
// is below its share; errors of single calls are reported as events and
// retried, never returned.
func (p *Pool) Run(ctx context.Context, work func(ctx context.Context, s Shard) error) error {
	if p.TTL <= 0 || p.Leases == nil || p.Name == "" || p.Holder == "" {
		return errors.New("fenceproxy: Pool needs Leases, Name, Holder and a positive TTL")
	}
	var mu sync.Mutex
	shards := map[string]*held{}
	var wg sync.WaitGroup
	askBack := func(names []string) {
		mu.Lock()
		defer mu.Unlock()
		for _, n := range names {
			if h := shards[n]; h != nil {
				h.once.Do(func() {
					p.emit(PoolEvent{Kind: "hand_back", Shard: h.shard})
					close(h.handBack)
				})
			}
		}
	}
	every := p.TTL / 4
	for {
		for ctx.Err() == nil {
			mu.Lock()
			full := p.MaxShards > 0 && len(shards) >= p.MaxShards
			mu.Unlock()
			if full {
				break
			}
			s, err := p.Claim(ctx)
			var ns *NoShardError
			if errors.As(err, &ns) {
				// all_done; or, from a server before it, at_share with share 0.
				if p.OneShot && (ns.AllDone || ns.AtShare && ns.Share == 0) {
					wg.Wait()
					return nil // nothing open left
				}
				break
			}
			if err != nil {
				p.emit(PoolEvent{Kind: "claim_failed", Err: err})
				break
			}
			p.emit(PoolEvent{Kind: "claimed", Shard: s})
			h := &held{shard: s, handBack: make(chan struct{})}
			mu.Lock()
			shards[s.Shard] = h
			mu.Unlock()
			wg.Go(func() {
				p.keep(ctx, h, work, askBack)
				mu.Lock()
				delete(shards, s.Shard)
				mu.Unlock()
			})
		}
		select {
		case <-ctx.Done():
			wg.Wait()
			return ctx.Err()
		case <-time.After(every/2 + rand.N(every/2+1)):
		}
	}
}

func (p *Pool) emit(ev PoolEvent) {
	if p.Events != nil {
		p.Events(ev)
	}
}

// keep runs work on h's shard and renews its lease until work returns,
// then releases it (or marks it done), unless it was lost.
func (p *Pool) keep(parent context.Context, h *held, work func(context.Context, Shard) error, askBack func([]string)) {
	wctx, cancel := context.WithCancel(parent)
	defer cancel()
	s := h.shard
	// The local deadline: the TTL from when the grant's request was sent
	// would be safest; the answer's arrival is close enough below the
	// server's grace, and renews move it from their own send time.
	until := time.Now().Add(p.TTL)
	deadline := time.NewTimer(p.TTL)
	defer deadline.Stop()
	var workErr error
	finished := make(chan struct{})
	var cur sync.Mutex
	shard := func() Shard { cur.Lock(); defer cur.Unlock(); return s }
	go func(s Shard) { // a copy taken here: renews below change s.Lease
		defer close(finished)
		workErr = work(wctx, s)
	}(s)
	tick := time.NewTicker(p.TTL / 3)
	defer tick.Stop()
	lost := false
	handBack := h.handBack
	for {
		select {
		case <-finished:
			p.finish(shard(), lost, workErr)
			return
		case <-handBack:
			handBack = nil
			cancel() // finish the current write, then hand back
		case <-deadline.C:
			if !lost {
				lost = true
				cancel()
				p.emit(PoolEvent{Kind: "lost", Shard: shard(), Err: errors.New("no renew acknowledged within the TTL")})
			}
		case <-tick.C:
			if lost {
				continue
			}
			// A renew that fails (not refused) is tried again within the
			// tick until the local deadline: a slow answer must not cost
			// the shard.
			for {
				sent := time.Now()
				rctx, rcancel := context.WithTimeout(context.Background(), p.TTL/2)
				l, back, err := p.Renew(rctx, shard())
				rcancel()
				if errors.Is(err, ErrLost) {
					lost = true
					cancel()
					p.emit(PoolEvent{Kind: "lost", Shard: shard(), Err: err})
					break
				}
				if err == nil {
					cur.Lock()
					s.Lease = l
					cur.Unlock()
					until = sent.Add(p.TTL)
					deadline.Reset(time.Until(until))
					askBack(back)
					break
				}
				if time.Since(sent) > p.TTL/3 || time.Now().After(until) {
					break // the next tick tries again; the deadline decides
				}
				time.Sleep(p.TTL / 20)
			}
		}
	}
}

// finish releases a shard whose work returned, or marks it done.
func (p *Pool) finish(s Shard, lost bool, workErr error) {
	if lost {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.TTL)
	defer cancel()
	if p.OneShot && workErr == nil {
		err := p.Done(ctx, s)
		p.emit(PoolEvent{Kind: "done", Shard: s, Err: err})
		return
	}
	_, err := p.Leases.Release(ctx, s.Lease.Name, p.Holder, s.Lease.Token)
	p.emit(PoolEvent{Kind: "released", Shard: s, Err: err, WorkErr: workErr})
}
