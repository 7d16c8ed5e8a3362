package control

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/fenceproxy/fenceproxy/fence"
	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/wire"
)

// LeasePrefix is the URL prefix under which a lease name (a resource key) names its lease.
const LeasePrefix = "/v1/leases/"

// Leases is what the lease API needs (lease.Manager provides it).
type Leases interface {
	Acquire(ctx context.Context, name, holder string, ttl time.Duration) (lease.Lease, error)
	Renew(name, holder string, token uint64) (lease.Lease, error)
	Release(name, holder string, token uint64) (lease.Lease, error)
	Get(name string) (lease.Lease, lease.State, error)
	ForceRelease(name string) (lease.Lease, error)
}

// Signer signs a fencing token for a resource in signed-token mode
// (tokensig.Keys provides it): the proxy then forwards a write only with the
// signature of its token and resource in X-Fencing-Token-Signature.
type Signer interface {
	// Sign returns the signature of token for resource (a header-safe string).
	Sign(resource string, token uint64) string
}

// leaseAPI serves /v1/leases/*.
type leaseAPI struct {
	leases     Leases
	token      string // bearer token for lease calls; "" = open
	adminToken string // DELETE ...?force=true needs the admin bearer
	depth      int    // RESOURCE_DEPTH: a lease name must have exactly this many segments
	signer     Signer // signed-token mode: acquire and renew answers carry the signature; nil = off
	log        *slog.Logger
}

func (a *leaseAPI) routes(r chi.Router) {
	r.Route(LeasePrefix, func(r chi.Router) {
		r.Use(a.authorize)
		r.Post("/*", a.acquire)
		r.Put("/*", a.renew)
		r.Delete("/*", a.release)
		r.Get("/*", a.get)
	})
}

// authorize requires FENCEPROXY_LEASE_TOKEN as a bearer token when it is set:
// anyone who can acquire can fence out the real holder.
func (a *leaseAPI) authorize(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A force-release is an admin call: forceRelease checks the admin bearer.
		if a.token != "" && !bearer(r, a.token) && !(r.Method == http.MethodDelete && r.URL.Query().Has("force")) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="fenceproxy leases"`)
			writeProblem(w, http.StatusUnauthorized, "Unauthorized", "lease calls need Authorization: Bearer <FENCEPROXY_LEASE_TOKEN>")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// bearer reports whether r carries "Authorization: Bearer want" (constant-time compare).
func bearer(r *http.Request, want string) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// name returns the lease name of r: the percent-decoded path after the prefix,
// a valid resource key with exactly RESOURCE_DEPTH segments when that is set.
func (a *leaseAPI) name(r *http.Request) (string, error) {
	return fence.Resolver{Depth: a.depth}.LeaseName(rawAfter(r, LeasePrefix))
}

// Token is a fencing token in JSON: written as a decimal string (64-bit
// integers lose precision in JavaScript), read from a string or a number.
type Token uint64

// MarshalJSON writes the token as a decimal string.
func (t Token) MarshalJSON() ([]byte, error) {
	return []byte(`"` + strconv.FormatUint(uint64(t), 10) + `"`), nil
}

// UnmarshalJSON reads "42" or 42, with the proxy's token rules.
func (t *Token) UnmarshalJSON(b []byte) error {
	s := string(bytes.TrimSpace(b))
	if unq, err := strconv.Unquote(s); err == nil {
		s = unq
	}
	v, err := fence.ParseToken(s)
	if err != nil {
		return err
	}
	*t = Token(v)
	return nil
}

type leaseRequest struct {
	Holder string `json:"holder"`
	TTL    string `json:"ttl"`
	Token  *Token `json:"token"`
}

type leaseBody struct {
	Name       string    `json:"name"`
	Holder     string    `json:"holder"`
	Token      Token     `json:"token"`
	State      string    `json:"state,omitempty"`
	TTL        string    `json:"ttl"`
	AcquiredAt time.Time `json:"acquired_at"`
	RenewedAt  time.Time `json:"renewed_at"`
	ExpiresAt  time.Time `json:"expires_at"`
	// TokenSignature is the token's signature in signed-token mode, on
	// acquire and renew answers only (the holder's proof, not for readers).
	TokenSignature string `json:"token_signature,omitempty"`
}

// signed adds the signature of the lease's token to an acquire or renew
// answer, in the X-Fencing-Token-Signature header and the body, when
// signed-token mode is on. The lease name is the resource key it fences.
func (a *leaseAPI) signed(w http.ResponseWriter, b leaseBody) leaseBody {
	if a.signer != nil {
		b.TokenSignature = a.signer.Sign(b.Name, uint64(b.Token))
		w.Header().Set(wire.HeaderSignature, b.TokenSignature)
	}
	return b
}

func body(l lease.Lease, st lease.State) leaseBody {
	return leaseBody{Name: l.Name, Holder: l.Holder, Token: Token(l.Token), State: string(st), TTL: l.TTL.String(),
		AcquiredAt: l.AcquiredAt, RenewedAt: l.RenewedAt, ExpiresAt: l.ExpiresAt}
}

// decode reads a small JSON body; unknown fields are errors.
func decodeRequest(r *http.Request) (leaseRequest, error) {
	var req leaseRequest
	return req, decodeStrict(r.Body, &req)
}

// decodeStrict reads exactly one small JSON object into v: unknown fields and
// trailing data are errors.
func decodeStrict(body io.Reader, v any) error {
	dec := json.NewDecoder(io.LimitReader(body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("body: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("body: data after the JSON object")
	}
	return nil
}

func (a *leaseAPI) acquire(w http.ResponseWriter, r *http.Request) {
	name, err := a.name(r)
	if err != nil {
		writeProblem(w, http.StatusBadRequest, "Bad lease name", err.Error())
		return
	}
	req, err := decodeRequest(r)
	if err == nil && req.Token != nil {
		err = errors.New("acquire takes holder and ttl, not a token")
	}
	var ttl time.Duration
	if err == nil {
		if ttl, err = time.ParseDuration(req.TTL); err != nil {
			err = fmt.Errorf("ttl %q: want a Go duration such as 10s", req.TTL)
		}
	}
	if err != nil {
		writeProblem(w, http.StatusBadRequest, "Bad lease request", err.Error())
		return
	}
	l, err := a.leases.Acquire(r.Context(), name, req.Holder, ttl)
	if err != nil {
		a.fail(w, r, name, err)
		return
	}
	writeJSON(w, http.StatusCreated, a.signed(w, body(l, lease.StateHeld)))
}

func (a *leaseAPI) renew(w http.ResponseWriter, r *http.Request) {
	a.holderCall(w, r, a.leases.Renew, true)
}

func (a *leaseAPI) release(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Has("force") {
		force, err := strconv.ParseBool(r.URL.Query().Get("force"))
		if err != nil {
			writeProblem(w, http.StatusBadRequest, "Bad force parameter", "force is true or false")
			return
		}
		if force {
			a.forceRelease(w, r)
			return
		}
	}
	a.holderCall(w, r, a.leases.Release, false)
}

// forceRelease: DELETE /v1/leases/{name}?force=true with the admin bearer
// ends a lease whoever holds it; its token stays spent, the fence stays.
func (a *leaseAPI) forceRelease(w http.ResponseWriter, r *http.Request) {
	(&admin{token: a.adminToken, log: a.log}).authorize(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, err := a.name(r)
		if err != nil {
			writeProblem(w, http.StatusBadRequest, "Bad lease name", err.Error())
			return
		}
		l, err := a.leases.ForceRelease(name)
		if err != nil {
			a.fail(w, r, name, err)
			return
		}
		writeJSON(w, http.StatusOK, body(l, lease.StateReleased))
	})).ServeHTTP(w, r)
}

// holderCall serves renew and release: both name the holder and its token.
// sign: the answer carries the token's signature (renew; a released token
// needs none).
func (a *leaseAPI) holderCall(w http.ResponseWriter, r *http.Request, call func(name, holder string, token uint64) (lease.Lease, error), sign bool) {
	name, err := a.name(r)
	if err != nil {
		writeProblem(w, http.StatusBadRequest, "Bad lease name", err.Error())
		return
	}
	req, err := decodeRequest(r)
	if err == nil && (req.Token == nil || req.Holder == "") {
		err = errors.New("holder and token are required")
	}
	if err == nil && req.TTL != "" {
		err = errors.New("ttl is fixed at acquire; renew and release take holder and token")
	}
	if err != nil {
		writeProblem(w, http.StatusBadRequest, "Bad lease request", err.Error())
		return
	}
	l, err := call(name, req.Holder, uint64(*req.Token))
	if err != nil {
		a.fail(w, r, name, err)
		return
	}
	st := lease.StateHeld
	if l.Released {
		st = lease.StateReleased
	}
	b := body(l, st)
	if sign && !l.Released {
		b = a.signed(w, b)
	}
	writeJSON(w, http.StatusOK, b)
}

func (a *leaseAPI) get(w http.ResponseWriter, r *http.Request) {
	name, err := a.name(r)
	if err != nil {
		writeProblem(w, http.StatusBadRequest, "Bad lease name", err.Error())
		return
	}
	l, st, err := a.leases.Get(name)
	if err != nil {
		a.fail(w, r, name, err)
		return
	}
	writeJSON(w, http.StatusOK, body(l, st))
}

// fail maps lease errors to HTTP: the one place for the lease API.
func (a *leaseAPI) fail(w http.ResponseWriter, r *http.Request, name string, err error) {
	var held *lease.HeldError
	switch {
	case errors.As(err, &held):
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusConflict)
		json.NewEncoder(w).Encode(map[string]any{"type": "about:blank", "title": "Lease held", "status": http.StatusConflict,
			"detail": held.Error(), "name": name, "holder": held.Holder, "expires_at": held.ExpiresAt, "grace_ends": held.GraceEnds})
	case errors.Is(err, lease.ErrLost):
		writeProblem(w, http.StatusConflict, "Lease lost", err.Error())
	case errors.Is(err, lease.ErrExhausted):
		writeProblem(w, http.StatusConflict, "Fencing tokens exhausted", err.Error())
	case errors.Is(err, lease.ErrInvalid):
		writeProblem(w, http.StatusBadRequest, "Bad lease request", err.Error())
	case errors.Is(err, fence.ErrDrainTimeout):
		w.Header().Set("Retry-After", "1")
		writeProblem(w, http.StatusServiceUnavailable, "Smaller-token writes still in flight", err.Error())
	case errors.Is(err, lease.ErrNotFound):
		writeProblem(w, http.StatusNotFound, "Unknown lease", "no lease of this name was ever acquired")
	default:
		a.log.LogAttrs(r.Context(), slog.LevelError, "lease call failed", slog.String("lease", name), slog.String("error", err.Error()))
		w.Header().Set("Retry-After", "1")
		writeProblem(w, http.StatusServiceUnavailable, "Lease store unavailable", "the lease could not be read or written; nothing changed")
	}
}
