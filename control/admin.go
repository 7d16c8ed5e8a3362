package control

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/fenceproxy/fenceproxy/fence"
	"github.com/fenceproxy/fenceproxy/wire"
)

// List page sizes: GET /v1/fences?limit=N.
const (
	defaultListLimit = 1000
	maxListLimit     = 10000
)

// raiseName is name for a call that raises the fence it names: a name
// ending in "/" that Options.PrefixFence refuses is refused, since it
// would fence nothing below it. fence.ErrBadResource.
func (s *server) raiseName(name func(string) (string, error)) func(string) (string, error) {
	if s.opts.PrefixFence == nil {
		return name
	}
	return func(raw string) (string, error) {
		n, err := name(raw)
		if err == nil && fence.IsPrefix(n) {
			err = s.opts.PrefixFence(n)
		}
		return n, err
	}
}

// adminRoutes registers the operator calls, all behind FENCEPROXY_ADMIN_TOKEN.
func (s *server) adminRoutes(r chi.Router) {
	admin := r.With(s.adminAuth)
	admin.Get("/v1/fences", handle(s, route{op: "fence.list", failed: fence.ErrStore, status: http.StatusOK}, s.listFences))
	admin.Put(FencePrefix+"*", handle(s, route{
		op: "fence.raise", prefix: FencePrefix, name: s.raiseName(s.resolver().Name),
		badBody: errBadFenceRequest, failed: fence.ErrStore, status: http.StatusOK,
	}, s.raiseFence))
	admin.Delete(FencePrefix+"*", handle(s, route{
		op: "fence.reset", prefix: FencePrefix, name: s.resolver().Name,
		failed: fence.ErrStore, status: http.StatusOK,
	}, s.resetFence))
	// Go's profiler, for "where does the CPU go" on a live proxy.
	admin.Get("/debug/pprof/*", profiler)
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

// adminAuth requires Authorization: Bearer $FENCEPROXY_ADMIN_TOKEN (constant
// time); while the token is unset every admin call is refused (403).
func (s *server) adminAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.opts.AdminToken == "" {
			s.fail(w, r, route{op: "admin"}, "", errAdminDisabled)
			return
		}
		if why := bearerMismatch(r, s.opts.AdminToken); why != "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="fenceproxy admin"`)
			s.fail(w, r, route{op: "admin"}, "", detailed(errUnauthorized, "admin calls need Authorization: Bearer <FENCEPROXY_ADMIN_TOKEN>; "+why))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// bearerMismatch returns why r does not carry "Authorization: Bearer want"
// (constant-time compare), "" when it does. The reason tells a missing
// header from a wrong token, and holds neither token.
func bearerMismatch(r *http.Request, want string) string {
	h := r.Header.Get("Authorization")
	got, ok := strings.CutPrefix(h, "Bearer ")
	switch {
	case h == "":
		return "the request has no Authorization header"
	case !ok:
		return "the Authorization header is not a Bearer token"
	case subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1:
		return "the bearer token sent does not match it"
	}
	return ""
}

// listFences: GET /v1/fences?prefix=P&after=R&limit=N (limit 1..10000,
// default 1000; P and R checked with fence.Prefix: 400 bad_resource). A full
// page carries next, the after of the next page. Records of token 0 and
// records whose keys are not valid UTF-8 (written before the proxy refused
// such paths) are left out.
func (s *server) listFences(_ context.Context, req request[none]) (wire.FenceList, error) {
	prefix, after, limit, err := listQuery(req.Query)
	if err != nil {
		return wire.FenceList{}, err
	}
	resource := func(r fence.Record) string { return r.Resource }
	skipKey := notUTF8(s.log, "fence listing", resource)
	records, next, err := page(func(after string, n int) ([]fence.Record, error) { return s.opts.Admin.List(prefix, after, n) },
		resource, after, limit, func(r fence.Record) bool {
			// A record of 0 (a write with token 0 marks its resource) fences
			// nothing, and GET /v1/fences/{resource} answers 404 for it.
			return r.Token == 0 || skipKey(r)
		})
	if err != nil {
		return wire.FenceList{}, err
	}
	out := wire.FenceList{Fences: make([]wire.Fence, 0, len(records)), Next: next}
	for _, f := range records {
		out.Fences = append(out.Fences, wire.Fence{Resource: f.Resource, Token: wire.Token(f.Token)})
	}
	return out, nil
}

// raiseFence: PUT /v1/fences/{resource} {"token": N} raises the fence to
// max(current, N) durably, for operators and external coordinators that
// fence ahead, and answers the maximum. N is above 0: a raise to 0 would
// change nothing and leave no fence to read or list.
func (s *server) raiseFence(ctx context.Context, req request[wire.RaiseRequest]) (wire.Fence, error) {
	switch {
	case req.Body.Token == nil:
		return wire.Fence{}, detailed(errBadFenceRequest, `send {"token": N} with N a fencing token`)
	case *req.Body.Token == 0:
		return wire.Fence{}, detailed(errBadFenceRequest, "token 0 is below every token, so raising a fence to it changes nothing; send a token above 0")
	}
	t := uint64(*req.Body.Token)
	m, err := s.opts.Admin.Raise(ctx, req.Name, t)
	switch {
	case err != nil && m > 0:
		// The raise took effect and stays; only the drain is unfinished.
		return wire.Fence{}, fmt.Errorf("the fence is raised to %d and stays: later writes below it are refused, but writes with "+
			"smaller tokens admitted earlier may still be in flight; repeat the call to wait for them: %w", m, err)
	case errors.Is(err, fence.ErrDrainTimeout):
		return wire.Fence{}, fmt.Errorf("another raise or reset of this resource did not finish within the drain timeout; "+
			"nothing changed, retry later: %w", err)
	case err != nil:
		return wire.Fence{}, err
	}
	s.log.LogAttrs(ctx, slog.LevelInfo, "fence raised by an operator", slog.String("resource", req.Name),
		slog.Uint64("requested", t), slog.Uint64("token", m))
	return wire.Fence{Resource: req.Name, Token: wire.Token(m)}, nil
}

// resetFence: DELETE /v1/fences/{resource}?confirm={resource} removes the
// fence and the lease record, the only way a maximum goes down, and answers
// the maximum removed. Logged.
func (s *server) resetFence(ctx context.Context, req request[none]) (wire.Fence, error) {
	confirm, given, err := queryValue(req.Query, "confirm")
	switch {
	case err != nil:
		return wire.Fence{}, err
	case !given:
		return wire.Fence{}, detailed(errConfirm,
			"?confirm= is missing: lowering a fence lets writes with smaller tokens through again; repeat the resource key as ?confirm=<resource>")
	case confirm == "":
		return wire.Fence{}, detailed(errConfirm, "?confirm= is empty: repeat the resource key as ?confirm=<resource>")
	case confirm != req.Name:
		return wire.Fence{}, detailed(errConfirm, fmt.Sprintf(
			"?confirm=%.128q does not match the resource %q: repeat the resource key exactly (percent-encoded as a query value)", confirm, req.Name))
	}
	removed, err := s.opts.Admin.Reset(ctx, req.Name)
	switch {
	case errors.Is(err, fence.ErrDrainTimeout):
		return wire.Fence{}, wrap(errResetInFlight, err)
	case err != nil:
		return wire.Fence{}, err
	case removed == 0:
		return wire.Fence{}, detailed(errUnknownResource, "no fence above 0 to reset")
	}
	s.log.LogAttrs(ctx, slog.LevelWarn, "fence reset by an operator: smaller tokens are admitted again",
		slog.String("resource", req.Name), slog.Uint64("removed_token", removed), slog.String("remote", req.Remote))
	return wire.Fence{Resource: req.Name, Token: wire.Token(removed)}, nil
}
