package control

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/wire"
)

// LeasePrefix is the URL prefix under which a lease name (a resource key) names its lease.
const LeasePrefix = "/v1/leases/"

// Leases is what the lease API needs (lease.Manager provides it). Errors are
// lease.ErrHeld (a *lease.HeldError), lease.ErrLost, lease.ErrExhausted,
// lease.ErrInvalid, lease.ErrNotFound, and from Acquire also
// fence.ErrDrainTimeout and ctx's cause (the lease may be granted then: the
// error says so); any other error is a store failure (503), its text logged,
// not shown.
type Leases interface {
	// Acquire grants name to holder for ttl with a new fencing token and
	// raises name's fence to it through the fence barrier.
	Acquire(ctx context.Context, name, holder string, ttl time.Duration) (lease.Lease, error)
	// Renew extends holder's lease on name by its TTL, keeping token.
	Renew(name, holder string, token uint64) (lease.Lease, error)
	// Release ends holder's lease on name at once.
	Release(name, holder string, token uint64) (lease.Lease, error)
	// Get returns name's lease and its state now.
	Get(name string) (lease.Lease, lease.State, error)
	// ForceRelease ends name's lease whoever holds it (an operator's call).
	ForceRelease(name string) (lease.Lease, error)
}

// Signer signs a fencing token for a resource in signed-token mode
// (tokensig.Keys provides it): the proxy then forwards a write only with the
// signature of its token and resource in X-Fencing-Token-Signature.
type Signer interface {
	// Sign returns the signature of token for resource (a header-safe string).
	Sign(resource string, token uint64) string
}

// leaseRoutes registers /v1/leases/*.
func (s *server) leaseRoutes(r chi.Router) {
	lr := func(op string, status int) route {
		return route{
			op: op, prefix: LeasePrefix, name: s.raiseName(s.resolver().LeaseName),
			badName: errBadLeaseName, badBody: lease.ErrInvalid, failed: errLeaseStore, status: status,
		}
	}
	leases := r.With(s.leaseAuth)
	leases.Post(LeasePrefix+"*", handle(s, lr("lease.acquire", http.StatusCreated), s.acquire))
	leases.Put(LeasePrefix+"*", handle(s, lr("lease.renew", http.StatusOK), s.renew))
	leases.Get(LeasePrefix+"*", handle(s, lr("lease.get", http.StatusOK), s.getLease))
	release := handle(s, lr("lease.release", http.StatusOK), s.release)
	forceRelease := s.adminAuth(handle(s, lr("lease.force_release", http.StatusOK), s.forceRelease))
	leases.Delete(LeasePrefix+"*", func(w http.ResponseWriter, r *http.Request) {
		force, err := forced(r)
		switch {
		case err != nil:
			s.fail(w, r, lr("lease.release", http.StatusOK), "", err)
		case force:
			forceRelease.ServeHTTP(w, r)
		default:
			release(w, r)
		}
	})
	s.leaseListRoute(r)
}

// forced reads DELETE's ?force: true selects the admin force-release.
func forced(r *http.Request) (bool, error) {
	v, given, err := queryValue(r.URL.Query(), "force")
	if err != nil || !given {
		return false, err
	}
	force, err := strconv.ParseBool(v)
	if err != nil {
		return false, detailed(errBadForce, "force is true or false")
	}
	return force, nil
}

// leaseAuth requires FENCEPROXY_LEASE_TOKEN as a bearer token when it is
// set: anyone who can acquire can fence out the real holder. A
// force-release is an admin call instead: it needs the admin bearer.
func (s *server) leaseAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		why := ""
		if s.opts.LeaseToken != "" {
			why = bearerMismatch(r, s.opts.LeaseToken)
		}
		if why == "" {
			next.ServeHTTP(w, r)
			return
		}
		if force, err := forced(r); r.Method == http.MethodDelete && err == nil && force {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="fenceproxy leases"`)
		s.fail(w, r, route{op: "lease"}, "", detailed(errUnauthorized, "lease calls need Authorization: Bearer <FENCEPROXY_LEASE_TOKEN>; "+why))
	})
}

// acquire: POST /v1/leases/{name} {"holder","ttl"}.
func (s *server) acquire(ctx context.Context, req request[wire.LeaseRequest]) (wire.Lease, error) {
	if req.Body.Token != nil {
		return wire.Lease{}, detailed(lease.ErrInvalid, "acquire takes holder and ttl, not a token")
	}
	ttl, err := time.ParseDuration(req.Body.TTL)
	if err != nil {
		return wire.Lease{}, detailed(lease.ErrInvalid, fmt.Sprintf("ttl %q: want a Go duration such as 10s", req.Body.TTL))
	}
	l, err := s.opts.Leases.Acquire(ctx, req.Name, req.Body.Holder, ttl)
	if err != nil {
		return wire.Lease{}, err
	}
	return s.signed(req.Header, leaseOf(l, lease.StateHeld)), nil
}

// renew: PUT /v1/leases/{name} {"holder","token"}; the answer is signed.
func (s *server) renew(_ context.Context, req request[wire.LeaseRequest]) (wire.Lease, error) {
	if err := holderRequest(req.Body); err != nil {
		return wire.Lease{}, err
	}
	l, err := s.opts.Leases.Renew(req.Name, req.Body.Holder, uint64(*req.Body.Token))
	if err != nil {
		return wire.Lease{}, err
	}
	if l.Released {
		return leaseOf(l, stateOf(l)), nil
	}
	out := s.signed(req.Header, leaseOf(l, stateOf(l)))
	if s.opts.Pools != nil {
		// A pool shard's renew says which shards to hand back. Its failure
		// does not fail the renew, which took effect: the next one tells.
		// Only the renew of a shard of a defined pool carries pool and
		// shard: not any two-segment name.
		p, sh, hb, err := s.opts.Pools.HandBack(req.Name, req.Body.Holder)
		if err != nil {
			s.log.Warn("pool hand-back not computed", "lease", req.Name, "error", err.Error())
		} else if p != "" {
			out.Pool, out.Shard, out.HandBack = p, sh, hb
		}
	}
	return out, nil
}

// release: DELETE /v1/leases/{name} {"holder","token"}; a released token
// needs no signature.
func (s *server) release(_ context.Context, req request[wire.LeaseRequest]) (wire.Lease, error) {
	if err := holderRequest(req.Body); err != nil {
		return wire.Lease{}, err
	}
	l, err := s.opts.Leases.Release(req.Name, req.Body.Holder, uint64(*req.Body.Token))
	if err != nil {
		return wire.Lease{}, err
	}
	return leaseOf(l, stateOf(l)), nil
}

// holderRequest checks the body of a renew or release: holder and token.
func holderRequest(b wire.LeaseRequest) error {
	switch {
	case b.Token == nil || b.Holder == "":
		return detailed(lease.ErrInvalid, "holder and token are required")
	case b.TTL != "":
		return detailed(lease.ErrInvalid, "ttl is fixed at acquire; renew and release take holder and token")
	}
	return nil
}

// getLease: GET /v1/leases/{name}, the lease with its state now.
func (s *server) getLease(_ context.Context, req request[none]) (wire.Lease, error) {
	l, st, err := s.opts.Leases.Get(req.Name)
	if err != nil {
		return wire.Lease{}, err
	}
	return leaseOf(l, st), nil
}

// forceRelease: DELETE /v1/leases/{name}?force=true with the admin bearer
// ends a lease whoever holds it; its token stays spent, the fence stays.
func (s *server) forceRelease(_ context.Context, req request[none]) (wire.Lease, error) {
	l, err := s.opts.Leases.ForceRelease(req.Name)
	if err != nil {
		return wire.Lease{}, err
	}
	return leaseOf(l, lease.StateReleased), nil
}

// signed adds the signature of the lease's token to an acquire or renew
// answer, in the X-Fencing-Token-Signature header h and the body, when
// signed-token mode is on. The lease name is the resource key it fences.
func (s *server) signed(h http.Header, l wire.Lease) wire.Lease {
	if s.opts.Signer != nil {
		l.TokenSignature = s.opts.Signer.Sign(l.Name, uint64(l.Token))
		h.Set(wire.HeaderSignature, l.TokenSignature)
	}
	return l
}

// stateOf is the state of l as renew and release return it.
func stateOf(l lease.Lease) lease.State {
	if l.Released {
		return lease.StateReleased
	}
	return lease.StateHeld
}

// leaseOf is l in state st as the lease API answers it.
func leaseOf(l lease.Lease, st lease.State) wire.Lease {
	return wire.Lease{Name: l.Name, Holder: l.Holder, Token: wire.Token(l.Token), State: string(st), TTL: l.TTL.String(),
		AcquiredAt: l.AcquiredAt, RenewedAt: l.RenewedAt, ExpiresAt: l.ExpiresAt}
}
