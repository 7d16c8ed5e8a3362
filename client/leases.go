package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/fenceproxy/fenceproxy/wire"
)

// Lease API errors. Renew and Release fail with ErrLost once the lease is no
// longer the caller's (taken over, released, past its grace, or fenced past
// its token): the caller must stop writing. Acquire fails with a *HeldError
// (errors.Is ErrHeld) while another holder has the lease.
var (
	ErrHeld      = errors.New("fenceproxy: lease held by another holder")
	ErrLost      = errors.New("fenceproxy: lease lost")
	ErrNotFound  = errors.New("fenceproxy: unknown lease")
	ErrExhausted = errors.New("fenceproxy: fencing tokens exhausted")
)

// HeldError is ErrHeld with the current holder: nobody else may acquire the
// lease before GraceEnds (its expiry plus the grace period).
type HeldError struct {
	Name      string
	Holder    string
	ExpiresAt time.Time
	GraceEnds time.Time
	Detail    string // the server's message
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("fenceproxy: lease %q is held by %q until %s (others may acquire from %s)", e.Name, e.Holder,
		e.ExpiresAt.Format(time.RFC3339Nano), e.GraceEnds.Format(time.RFC3339Nano))
}

// Is makes errors.Is(err, ErrHeld) hold.
func (e *HeldError) Is(target error) bool { return target == ErrHeld }

// APIError is a refusal of the control API: its problem+json (400 bad
// request, 401 unauthorized, 404 not found, 503 store unavailable, ...). A
// failed lease call that is none of the lease errors above is one, and those
// wrap one, so errors.As finds the status and detail; every refusal of a
// Control call is one.
type APIError struct {
	Status int
	Title  string
	Detail string
	// Reason is the problem's "reason" (a wire.Reason* value, e.g.
	// "unavailable", "drain_timeout"); "" when the answer had none.
	Reason string

	problem wire.Problem // the whole body, for the lease_held members
}

func (e *APIError) Error() string {
	msg := fmt.Sprintf("fenceproxy: control API: %d %s", e.Status, e.Title)
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

// Lease is a lease as the control API reports it.
type Lease struct {
	Name       string
	Holder     string
	Token      uint64        // the fencing token of the current (or last) grant
	TTL        time.Duration // fixed at acquire
	AcquiredAt time.Time
	RenewedAt  time.Time
	ExpiresAt  time.Time
	State      string // held, suspect, grace, expired or released
	// TokenSignature is the signature of Token for the lease's resource when
	// the proxy runs in signed-token mode (FENCEPROXY_TOKEN_KEY): writes must
	// send it in X-Fencing-Token-Signature (WithLease does). Acquire and Renew
	// fill it (a renew after a key rotation signs with the new key: use the
	// latest); Get and Release leave it empty, as does a proxy without keys.
	TokenSignature string
}

// Leases calls the lease API of a fenceproxy control listener.
type Leases struct {
	// BaseURL is the control listener's base URL, e.g. http://127.0.0.1:9090.
	BaseURL string
	// HTTP sends the calls; nil means http.DefaultClient. Its CheckRedirect
	// is not used: the calls follow no redirect (ErrRedirect).
	HTTP *http.Client
	// Bearer, when set, is sent as "Authorization: Bearer <it>" (FENCEPROXY_LEASE_TOKEN).
	Bearer string
}

// Acquire takes the lease name (a resource key) for holder for ttl and
// returns it with a new fencing token; the proxy's fence for the resource is
// raised to that token at once. It fails with a *HeldError (ErrHeld) while
// another holder has the lease or it is in its grace period, and with an
// *APIError for a TTL outside the server's bounds.
func (l *Leases) Acquire(ctx context.Context, name, holder string, ttl time.Duration) (Lease, error) {
	if ttl <= 0 {
		return Lease{}, fmt.Errorf("fenceproxy: acquire %q: ttl %v must be positive", name, ttl)
	}
	return l.call(ctx, http.MethodPost, name, &wire.LeaseRequest{Holder: holder, TTL: ttl.String()})
}

// Renew extends holder's lease by its TTL, keeping the token. ErrLost means
// the holder must stop writing.
func (l *Leases) Renew(ctx context.Context, name, holder string, token uint64) (Lease, error) {
	return l.holderCall(ctx, http.MethodPut, name, holder, token)
}

// Release ends holder's lease so that others may acquire it at once; the
// returned lease has State "released". ErrLost as for Renew (also when
// released twice).
func (l *Leases) Release(ctx context.Context, name, holder string, token uint64) (Lease, error) {
	return l.holderCall(ctx, http.MethodDelete, name, holder, token)
}

// Get returns the lease with its state; ErrNotFound if it was never acquired.
func (l *Leases) Get(ctx context.Context, name string) (Lease, error) {
	return l.call(ctx, http.MethodGet, name, nil)
}

func (l *Leases) holderCall(ctx context.Context, method, name, holder string, token uint64) (Lease, error) {
	if _, err := formatToken(token); err != nil {
		return Lease{}, err
	}
	t := wire.Token(token)
	return l.call(ctx, method, name, &wire.LeaseRequest{Holder: holder, Token: &t})
}

// leaseURL is BaseURL/v1/leases/ followed by the name's segments, each escaped.
func (l *Leases) leaseURL(name string) string {
	return strings.TrimRight(l.BaseURL, "/") + "/v1/leases/" + escapeKey(name)
}

// call sends a lease call with body (nil: none) and decodes the answer: a
// wire.Lease, or a wire.Problem whose reason decides the error.
func (l *Leases) call(ctx context.Context, method, name string, body *wire.LeaseRequest) (Lease, error) {
	var lj wire.Lease
	var in any
	if body != nil {
		in = body
	}
	h, err := send(ctx, l.HTTP, method, l.leaseURL(name), l.Bearer, in, &lj)
	var apiErr *APIError
	switch {
	case err == nil:
		ttl, _ := time.ParseDuration(lj.TTL)
		sig := lj.TokenSignature
		if sig == "" {
			sig = h.Get(HeaderSignature)
		}
		return Lease{Name: lj.Name, Holder: lj.Holder, Token: uint64(lj.Token), TTL: ttl, AcquiredAt: lj.AcquiredAt,
			RenewedAt: lj.RenewedAt, ExpiresAt: lj.ExpiresAt, State: lj.State, TokenSignature: sig}, nil
	case !errors.As(err, &apiErr):
		return Lease{}, fmt.Errorf("fenceproxy: lease %s %q: %w", method, name, err)
	}
	switch apiErr.Reason {
	case wire.ReasonLeaseHeld:
		pb := apiErr.problem
		held := &HeldError{Name: name, Holder: pb.Holder, Detail: pb.Detail}
		if pb.ExpiresAt != nil {
			held.ExpiresAt = *pb.ExpiresAt
		}
		if pb.GraceEnds != nil {
			held.GraceEnds = *pb.GraceEnds
		}
		return Lease{}, held
	case wire.ReasonLeaseLost:
		return Lease{}, fmt.Errorf("%w: %q: %w", ErrLost, name, apiErr)
	case wire.ReasonTokensExhausted:
		return Lease{}, fmt.Errorf("%w: %q: %w", ErrExhausted, name, apiErr)
	case wire.ReasonNotFound:
		return Lease{}, fmt.Errorf("%w: %q: %w", ErrNotFound, name, apiErr)
	}
	return Lease{}, apiErr
}
