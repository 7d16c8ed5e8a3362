package control

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/fenceproxy/fenceproxy/fence"
	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/pool"
	"github.com/fenceproxy/fenceproxy/wire"
)

// The control API's own errors: rows of the table. Operations wrap them
// (wrap, detailed) with what the client should read.
var (
	errUnauthorized    = errors.New("unauthorized")
	errAdminDisabled   = errors.New("admin API disabled")
	errNoEndpoint      = errors.New("no such control endpoint")
	errMethod          = errors.New("this control endpoint does not take this method")
	errUnknownResource = errors.New("unknown resource")
	errBadLeaseName    = errors.New("bad lease name")
	errBadFenceRequest = errors.New("bad fence request")
	errBadLimit        = errors.New("bad limit")
	errBadQuery        = errors.New("bad query parameter")
	errConfirm         = errors.New("confirmation required")
	errBadForce        = errors.New("bad force parameter")
	errResetInFlight   = errors.New("writes still in flight")
	errNotReady        = errors.New("not ready")
	errLeaseStore      = errors.New("lease store unavailable")
)

// table maps every error of the control API to its answer and log level:
// the first row whose err matches wins, so the control API's own errors
// (which wrap a cause) come before the causes. An error no row matches
// takes the row of its route's failed error, else the last row.
var table = wire.Answers{
	// The control API's own.
	{Err: errUnauthorized, Status: http.StatusUnauthorized, Reason: wire.ReasonUnauthorized, Title: "Unauthorized", Level: slog.LevelInfo},
	{Err: errAdminDisabled, Status: http.StatusForbidden, Reason: wire.ReasonAdminDisabled, Title: "Admin API disabled", Level: slog.LevelInfo,
		Detail: "set FENCEPROXY_ADMIN_TOKEN to enable admin calls"},
	{Err: errNoEndpoint, Status: http.StatusNotFound, Reason: wire.ReasonNotFound, Title: "Not found", Level: slog.LevelDebug},
	{Err: errMethod, Status: http.StatusMethodNotAllowed, Reason: wire.ReasonMethod, Title: "Method not allowed", Level: slog.LevelDebug},
	{Err: errUnknownResource, Status: http.StatusNotFound, Reason: wire.ReasonNotFound, Title: "Unknown resource", Level: slog.LevelDebug},
	{Err: errBadLeaseName, Status: http.StatusBadRequest, Reason: wire.ReasonBadResource, Title: "Bad lease name", Level: slog.LevelDebug},
	{Err: errBadFenceRequest, Status: http.StatusBadRequest, Reason: wire.ReasonBadRequest, Title: "Bad fence request", Level: slog.LevelDebug},
	{Err: errBadLimit, Status: http.StatusBadRequest, Reason: wire.ReasonBadRequest, Title: "Bad limit", Level: slog.LevelDebug},
	{Err: errBadQuery, Status: http.StatusBadRequest, Reason: wire.ReasonBadRequest, Title: "Bad query parameter", Level: slog.LevelDebug},
	{Err: errConfirm, Status: http.StatusBadRequest, Reason: wire.ReasonBadRequest, Title: "Confirmation required", Level: slog.LevelDebug},
	{Err: errBadForce, Status: http.StatusBadRequest, Reason: wire.ReasonBadRequest, Title: "Bad force parameter", Level: slog.LevelDebug},
	{Err: errResetInFlight, Status: http.StatusServiceUnavailable, Reason: wire.ReasonDrainTimeout, Title: "Writes still in flight",
		Retry: true, Level: slog.LevelWarn, Detail: "writes on this resource did not finish within the drain timeout; nothing changed, retry later"},
	// The detail is the cause (shutting down, the store closed, its
	// directory gone or its disk full, cluster mode joining, the upstream
	// down): /readyz is where an operator asks why.
	{Err: errNotReady, Status: http.StatusServiceUnavailable, Reason: wire.ReasonUnavailable, Title: "Not ready", Level: slog.LevelWarn},
	{Err: ErrShardUnavailable, Status: http.StatusServiceUnavailable, Reason: wire.ReasonShardUnavailable, Title: "Shard unavailable",
		Retry: true, Level: slog.LevelWarn},
	{Err: errLeaseStore, Status: http.StatusServiceUnavailable, Reason: wire.ReasonUnavailable, Title: "Lease store unavailable",
		Retry: true, Level: slog.LevelError, Detail: "the lease could not be read or written; nothing changed"},

	// The lease manager's.
	{Err: lease.ErrHeld, Status: http.StatusConflict, Reason: wire.ReasonLeaseHeld, Title: "Lease held", Level: slog.LevelDebug},
	{Err: lease.ErrLost, Status: http.StatusConflict, Reason: wire.ReasonLeaseLost, Title: "Lease lost", Level: slog.LevelDebug},
	{Err: lease.ErrExhausted, Status: http.StatusConflict, Reason: wire.ReasonTokensExhausted, Title: "Fencing tokens exhausted", Level: slog.LevelWarn},
	{Err: lease.ErrInvalid, Status: http.StatusBadRequest, Reason: wire.ReasonBadRequest, Title: "Bad lease request", Level: slog.LevelDebug},
	{Err: lease.ErrNotFound, Status: http.StatusNotFound, Reason: wire.ReasonNotFound, Title: "Unknown lease", Level: slog.LevelDebug},

	// The pools'.
	{Err: errBadPoolName, Status: http.StatusBadRequest, Reason: wire.ReasonBadResource, Title: "Bad pool or shard name", Level: slog.LevelDebug},
	{Err: pool.ErrNoShard, Status: http.StatusConflict, Reason: wire.ReasonNoShard, Title: "No shard to claim", Level: slog.LevelDebug},
	{Err: pool.ErrBusy, Status: http.StatusConflict, Reason: wire.ReasonPoolBusy, Title: "Pool shards held", Level: slog.LevelDebug},
	{Err: pool.ErrDone, Status: http.StatusConflict, Reason: wire.ReasonShardDone, Title: "Shard already done", Level: slog.LevelDebug},
	{Err: pool.ErrInvalid, Status: http.StatusBadRequest, Reason: wire.ReasonBadRequest, Title: "Bad pool request", Level: slog.LevelDebug},
	{Err: pool.ErrNotFound, Status: http.StatusNotFound, Reason: wire.ReasonNotFound, Title: "Unknown pool or shard", Level: slog.LevelDebug},

	// The fencing core's.
	{Err: fence.ErrBadResource, Status: http.StatusBadRequest, Reason: wire.ReasonBadResource, Title: "Bad resource", Level: slog.LevelDebug},
	// A raise (a lease grant's too) that timed out draining stays: the
	// operation's error says so.
	{Err: fence.ErrDrainTimeout, Status: http.StatusServiceUnavailable, Reason: wire.ReasonDrainTimeout, Title: "Smaller-token writes still in flight",
		Retry: true, Level: slog.LevelWarn},
	{Err: fence.ErrPrefixLimit, Status: http.StatusInsufficientStorage, Reason: wire.ReasonPrefixLimit, Title: "Too many prefix fences",
		Level: slog.LevelError},
	{Err: fence.ErrStore, Status: http.StatusServiceUnavailable, Reason: wire.ReasonUnavailable, Title: "Fencing store unavailable",
		Retry: true, Level: slog.LevelError, Detail: "the token store could not be read or written; see the proxy's log"},

	// The client went away: nobody reads the answer; not the server's fault.
	{Err: context.Canceled, Status: 499, Reason: wire.ReasonClientGone, Title: "Client closed request", Level: slog.LevelInfo},

	// Anything else on a route without a failed row: a bug.
	{Status: http.StatusInternalServerError, Reason: wire.ReasonInternal, Title: "Internal error", Level: slog.LevelError,
		Detail: "an unexpected error; see the proxy's log"},
}

// fail answers err, an error of route rt on name ("" if none), as the
// problem of its row (table.Find with rt.failed), and logs it at the row's
// level. A lease_held problem carries the lease and its holder. The one
// place that writes the control API's problems.
func (s *server) fail(w http.ResponseWriter, r *http.Request, rt route, name string, err error) {
	row := table.Find(err, rt.failed)
	p := row.Problem(err)
	var held *lease.HeldError
	if row.Reason == wire.ReasonLeaseHeld && errors.As(err, &held) {
		p.Name, p.Holder, p.ExpiresAt, p.GraceEnds = name, held.Holder, &held.ExpiresAt, &held.GraceEnds
	}
	var noShard *pool.NoShardError
	if row.Reason == wire.ReasonNoShard && errors.As(err, &noShard) {
		p.Share, p.Held, p.AtShare, p.AllDone, p.Standby = &noShard.Share, &noShard.Held, noShard.AtShare, noShard.AllDone, noShard.Standby
		if !noShard.RetryAt.IsZero() {
			p.RetryAt = &noShard.RetryAt
		}
	}
	if row.Retry {
		w.Header().Set("Retry-After", wire.RetryAfter(err))
	}
	if s.log.Enabled(r.Context(), row.Level) {
		attrs := []slog.Attr{slog.String("op", rt.op), slog.Int("status", row.Status), slog.String("reason", row.Reason),
			slog.String("error", err.Error()), slog.String("method", r.Method), slog.String("remote", r.RemoteAddr)}
		if name != "" {
			attrs = append(attrs, slog.String("resource", name))
		}
		s.log.LogAttrs(r.Context(), row.Level, "control call failed: "+row.Title, attrs...)
	}
	wire.WriteProblem(w, p)
}

// wrap returns an error that matches both kind (a row of the table) and
// cause, and reads "kind: cause". A nil kind returns cause.
func wrap(kind, cause error) error {
	if kind == nil {
		return cause
	}
	return fmt.Errorf("%w: %w", kind, cause)
}

// detailed returns kind (a row of the table) with what the client should
// read: "kind: detail".
func detailed(kind error, detail string) error {
	return fmt.Errorf("%w: %s", kind, detail)
}
