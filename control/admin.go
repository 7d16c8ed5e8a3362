package control

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/fenceproxy/fenceproxy/fence"
)

// AdminStore is what the admin API reads and changes. Raise and Reset must
// go through the fence barrier (fence.Barrier's Raise and Reset over the
// store): a raise cuts off and drains the smaller-token writes in flight.
type AdminStore interface {
	// Raise makes max(current, t) resource's maximum, cuts off uploads below
	// it and waits until no write below it is in flight; it returns the
	// maximum (also with fence.ErrDrainTimeout, when it stays raised).
	Raise(ctx context.Context, resource string, t uint64) (uint64, error)
	// List returns up to limit fences after after whose resource starts with prefix.
	List(prefix, after string, limit int) ([]fence.Record, error)
	// Reset removes resource's fence and lease record once no write on it is
	// in flight; it returns the maximum removed (0: none).
	Reset(ctx context.Context, resource string) (uint64, error)
}

// admin serves the operator calls, all behind FENCEPROXY_ADMIN_TOKEN.
type admin struct {
	store AdminStore
	token string // "" = admin calls refused
	log   *slog.Logger
}

func (a *admin) routes(r chi.Router) {
	r.With(a.authorize).Get("/v1/fences", a.list)
	r.With(a.authorize).Put(FencePrefix+"*", a.raise)
	r.With(a.authorize).Delete(FencePrefix+"*", a.reset)
	// Go's profiler, for "where does the CPU go" on a live proxy.
	r.With(a.authorize).Get("/debug/pprof/*", profiler)
}

// profiler serves net/http/pprof: GET /debug/pprof/ lists the profiles,
// /debug/pprof/profile?seconds=N is a CPU profile, /debug/pprof/trace an
// execution trace, /debug/pprof/{heap,goroutine,allocs,...} the rest.
func profiler(w http.ResponseWriter, r *http.Request) {
	switch strings.TrimPrefix(r.URL.Path, "/debug/pprof/") {
	case "cmdline":
		pprof.Cmdline(w, r)
	case "profile":
		pprof.Profile(w, r)
	case "symbol":
		pprof.Symbol(w, r)
	case "trace":
		pprof.Trace(w, r)
	default:
		pprof.Index(w, r) // the list, or the named profile
	}
}

// authorize requires Authorization: Bearer $FENCEPROXY_ADMIN_TOKEN (constant
// time); while the token is unset every admin call is refused.
func (a *admin) authorize(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.token == "" {
			writeProblem(w, http.StatusForbidden, "Admin API disabled", "set FENCEPROXY_ADMIN_TOKEN to enable admin calls")
			return
		}
		if !bearer(r, a.token) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="fenceproxy admin"`)
			writeProblem(w, http.StatusUnauthorized, "Unauthorized", "admin calls need Authorization: Bearer <FENCEPROXY_ADMIN_TOKEN>")
			return
		}
		next.ServeHTTP(w, r)
	})
}

type fenceBody struct {
	Resource string `json:"resource"`
	Token    Token  `json:"token"`
}

// list: GET /v1/fences?prefix=P&after=R&limit=N (limit 1..10000, default 1000).
func (a *admin) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := 1000
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 10000 {
			writeProblem(w, http.StatusBadRequest, "Bad limit", "limit is a number from 1 to 10000")
			return
		}
		limit = n
	}
	fences, err := a.store.List(q.Get("prefix"), q.Get("after"), limit)
	if err != nil {
		a.storeFailed(w, r, "list", err)
		return
	}
	out := struct {
		Fences []fenceBody `json:"fences"`
		Next   string      `json:"next,omitempty"` // pass as after= for the next page
	}{Fences: make([]fenceBody, 0, len(fences))}
	for _, f := range fences {
		out.Fences = append(out.Fences, fenceBody{Resource: f.Resource, Token: Token(f.Token)})
	}
	if len(fences) == limit {
		out.Next = fences[len(fences)-1].Resource
	}
	writeJSON(w, http.StatusOK, out)
}

// raise: PUT /v1/fences/{resource} {"token": N} raises the fence to
// max(current, N) durably, for operators and external coordinators that fence ahead.
func (a *admin) raise(w http.ResponseWriter, r *http.Request) {
	resource, ok := a.resource(w, r)
	if !ok {
		return
	}
	var req struct {
		Token *Token `json:"token"`
	}
	if err := decodeStrict(r.Body, &req); err != nil || req.Token == nil {
		writeProblem(w, http.StatusBadRequest, "Bad fence request", `send {"token": N} with N a fencing token`)
		return
	}
	m, err := a.store.Raise(r.Context(), resource, uint64(*req.Token))
	if errors.Is(err, fence.ErrDrainTimeout) {
		a.log.LogAttrs(r.Context(), slog.LevelWarn, "fence raised by an operator; writes with smaller tokens still in flight",
			slog.String("resource", resource), slog.Uint64("requested", uint64(*req.Token)), slog.Uint64("token", m))
		w.Header().Set("Retry-After", "1")
		writeProblem(w, http.StatusServiceUnavailable, "Smaller-token writes still in flight",
			"the fence is raised to "+strconv.FormatUint(m, 10)+" and later writes below it are refused, but writes with smaller tokens "+
				"admitted earlier did not finish within the drain timeout; repeat the call to wait for them")
		return
	}
	if err != nil {
		a.storeFailed(w, r, "raise", err)
		return
	}
	a.log.LogAttrs(r.Context(), slog.LevelInfo, "fence raised by an operator", slog.String("resource", resource),
		slog.Uint64("requested", uint64(*req.Token)), slog.Uint64("token", m))
	writeJSON(w, http.StatusOK, fenceBody{Resource: resource, Token: Token(m)})
}

// reset: DELETE /v1/fences/{resource}?confirm={resource} removes the fence and
// the lease record: the only way a maximum goes down. Logged.
func (a *admin) reset(w http.ResponseWriter, r *http.Request) {
	resource, ok := a.resource(w, r)
	if !ok {
		return
	}
	if r.URL.Query().Get("confirm") != resource {
		writeProblem(w, http.StatusBadRequest, "Confirmation required",
			"lowering a fence lets writes with smaller tokens through again; repeat the resource key as ?confirm=<resource>")
		return
	}
	removed, err := a.store.Reset(r.Context(), resource)
	if errors.Is(err, fence.ErrDrainTimeout) {
		w.Header().Set("Retry-After", "1")
		writeProblem(w, http.StatusServiceUnavailable, "Writes still in flight",
			"writes on this resource did not finish within the drain timeout; nothing changed, retry later")
		return
	}
	if err != nil {
		a.storeFailed(w, r, "reset", err)
		return
	}
	if removed == 0 {
		writeProblem(w, http.StatusNotFound, "Unknown resource", "no fence above 0 to reset")
		return
	}
	a.log.LogAttrs(r.Context(), slog.LevelWarn, "fence reset by an operator: smaller tokens are admitted again",
		slog.String("resource", resource), slog.Uint64("removed_token", removed), slog.String("remote", r.RemoteAddr))
	writeJSON(w, http.StatusOK, fenceBody{Resource: resource, Token: Token(removed)})
}

func (a *admin) resource(w http.ResponseWriter, r *http.Request) (string, bool) {
	resource, err := fence.Resolver{}.Name(rawAfter(r, FencePrefix))
	if err != nil {
		writeProblem(w, http.StatusBadRequest, "Bad resource", "name a resource key after "+FencePrefix)
		return "", false
	}
	return resource, true
}

func (a *admin) storeFailed(w http.ResponseWriter, r *http.Request, op string, err error) {
	a.log.LogAttrs(r.Context(), slog.LevelError, "admin call failed", slog.String("op", op), slog.String("error", err.Error()))
	w.Header().Set("Retry-After", "1")
	writeProblem(w, http.StatusServiceUnavailable, "Fencing store unavailable", "nothing changed")
}
