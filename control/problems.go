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

// problemRow is one row of the table: the answer and the log line of the
// errors that match err (errors.Is).
type problemRow struct {
	err    error // nil only in the last row, which takes any error
	status int
	reason string // the problem's "reason", a wire.Reason* value
	title  string
	retry  bool       // the answer carries Retry-After: 1
	level  slog.Level // of the log line
	// detail, when set, is the problem's detail instead of the error's
	// text, which may carry store internals (the log has it).
	detail string
}

// table maps every error of the control API to its answer and log level:
// the first row whose err matches wins, so the control API's own errors
// (which wrap a cause) come before the causes. An error no row matches
// takes the row of its route's failed error, else the last row.
var table = []problemRow{
	// The control API's own.
	{err: errUnauthorized, status: http.StatusUnauthorized, reason: wire.ReasonUnauthorized, title: "Unauthorized", level: slog.LevelInfo},
	{err: errAdminDisabled, status: http.StatusForbidden, reason: wire.ReasonAdminDisabled, title: "Admin API disabled", level: slog.LevelInfo,
		detail: "set FENCEPROXY_ADMIN_TOKEN to enable admin calls"},
	{err: errNoEndpoint, status: http.StatusNotFound, reason: wire.ReasonNotFound, title: "Not found", level: slog.LevelDebug},
	{err: errMethod, status: http.StatusMethodNotAllowed, reason: wire.ReasonMethod, title: "Method not allowed", level: slog.LevelDebug},
	{err: errUnknownResource, status: http.StatusNotFound, reason: wire.ReasonNotFound, title: "Unknown resource", level: slog.LevelDebug},
	{err: errBadLeaseName, status: http.StatusBadRequest, reason: wire.ReasonBadResource, title: "Bad lease name", level: slog.LevelDebug},
	{err: errBadFenceRequest, status: http.StatusBadRequest, reason: wire.ReasonBadRequest, title: "Bad fence request", level: slog.LevelDebug},
	{err: errBadLimit, status: http.StatusBadRequest, reason: wire.ReasonBadRequest, title: "Bad limit", level: slog.LevelDebug},
	{err: errBadQuery, status: http.StatusBadRequest, reason: wire.ReasonBadRequest, title: "Bad query parameter", level: slog.LevelDebug},
	{err: errConfirm, status: http.StatusBadRequest, reason: wire.ReasonBadRequest, title: "Confirmation required", level: slog.LevelDebug},
	{err: errBadForce, status: http.StatusBadRequest, reason: wire.ReasonBadRequest, title: "Bad force parameter", level: slog.LevelDebug},
	{err: errResetInFlight, status: http.StatusServiceUnavailable, reason: wire.ReasonDrainTimeout, title: "Writes still in flight",
		retry: true, level: slog.LevelWarn, detail: "writes on this resource did not finish within the drain timeout; nothing changed, retry later"},
	{err: errNotReady, status: http.StatusServiceUnavailable, reason: wire.ReasonUnavailable, title: "Not ready", level: slog.LevelWarn,
		detail: "shutting down, or the token store is closed, its directory is gone or its disk is below FENCEPROXY_MIN_FREE_SPACE"},
	{err: ErrShardUnavailable, status: http.StatusServiceUnavailable, reason: wire.ReasonShardUnavailable, title: "Shard unavailable",
		retry: true, level: slog.LevelWarn},
	{err: errLeaseStore, status: http.StatusServiceUnavailable, reason: wire.ReasonUnavailable, title: "Lease store unavailable",
		retry: true, level: slog.LevelError, detail: "the lease could not be read or written; nothing changed"},

	// The lease manager's.
	{err: lease.ErrHeld, status: http.StatusConflict, reason: wire.ReasonLeaseHeld, title: "Lease held", level: slog.LevelDebug},
	{err: lease.ErrLost, status: http.StatusConflict, reason: wire.ReasonLeaseLost, title: "Lease lost", level: slog.LevelDebug},
	{err: lease.ErrExhausted, status: http.StatusConflict, reason: wire.ReasonTokensExhausted, title: "Fencing tokens exhausted", level: slog.LevelWarn},
	{err: lease.ErrInvalid, status: http.StatusBadRequest, reason: wire.ReasonBadRequest, title: "Bad lease request", level: slog.LevelDebug},
	{err: lease.ErrNotFound, status: http.StatusNotFound, reason: wire.ReasonNotFound, title: "Unknown lease", level: slog.LevelDebug},

	// The pools'.
	{err: errBadPoolName, status: http.StatusBadRequest, reason: wire.ReasonBadResource, title: "Bad pool or shard name", level: slog.LevelDebug},
	{err: pool.ErrNoShard, status: http.StatusConflict, reason: wire.ReasonNoShard, title: "No shard to claim", level: slog.LevelDebug},
	{err: pool.ErrBusy, status: http.StatusConflict, reason: wire.ReasonPoolBusy, title: "Pool shards held", level: slog.LevelDebug},
	{err: pool.ErrDone, status: http.StatusConflict, reason: wire.ReasonShardDone, title: "Shard already done", level: slog.LevelDebug},
	{err: pool.ErrInvalid, status: http.StatusBadRequest, reason: wire.ReasonBadRequest, title: "Bad pool request", level: slog.LevelDebug},
	{err: pool.ErrNotFound, status: http.StatusNotFound, reason: wire.ReasonNotFound, title: "Unknown pool or shard", level: slog.LevelDebug},

	// The fencing core's.
	{err: fence.ErrBadResource, status: http.StatusBadRequest, reason: wire.ReasonBadResource, title: "Bad resource", level: slog.LevelDebug},
	// A raise (a lease grant's too) that timed out draining stays: the
	// operation's error says so.
	{err: fence.ErrDrainTimeout, status: http.StatusServiceUnavailable, reason: wire.ReasonDrainTimeout, title: "Smaller-token writes still in flight",
		retry: true, level: slog.LevelWarn},
	{err: fence.ErrStore, status: http.StatusServiceUnavailable, reason: wire.ReasonUnavailable, title: "Fencing store unavailable",
		retry: true, level: slog.LevelError, detail: "the token store could not be read or written; see the proxy's log"},

	// The client went away: nobody reads the answer; not the server's fault.
	{err: context.Canceled, status: 499, reason: wire.ReasonClientGone, title: "Client closed request", level: slog.LevelInfo},

	// Anything else on a route without a failed row: a bug.
	{status: http.StatusInternalServerError, reason: wire.ReasonInternal, title: "Internal error", level: slog.LevelError,
		detail: "an unexpected error; see the proxy's log"},
}

// rowOf returns the table's row for err: the first row that matches err,
// else the first that matches failed (when not nil), else the last row.
func rowOf(err, failed error) problemRow {
	for _, e := range []error{err, failed} {
		if e == nil {
			continue
		}
		for _, row := range table[:len(table)-1] {
			if errors.Is(e, row.err) {
				return row
			}
		}
	}
	return table[len(table)-1]
}

// fail answers err, an error of route rt on name ("" if none), as the
// problem of its row (rowOf with rt.failed), and logs it at the row's
// level. A lease_held problem carries the lease and its holder. The one
// place that writes the control API's problems.
func (s *server) fail(w http.ResponseWriter, r *http.Request, rt route, name string, err error) {
	row := rowOf(err, rt.failed)
	p := wire.Problem{Status: row.status, Title: row.title, Reason: row.reason, Detail: row.detail}
	if p.Detail == "" {
		p.Detail = err.Error()
	}
	var held *lease.HeldError
	if row.reason == wire.ReasonLeaseHeld && errors.As(err, &held) {
		p.Name, p.Holder, p.ExpiresAt, p.GraceEnds = name, held.Holder, &held.ExpiresAt, &held.GraceEnds
	}
	var noShard *pool.NoShardError
	if row.reason == wire.ReasonNoShard && errors.As(err, &noShard) {
		p.Share, p.Held, p.AtShare, p.AllDone, p.Standby = &noShard.Share, &noShard.Held, noShard.AtShare, noShard.AllDone, noShard.Standby
		if !noShard.RetryAt.IsZero() {
			p.RetryAt = &noShard.RetryAt
		}
	}
	if row.retry {
		w.Header().Set("Retry-After", wire.RetryAfter(err))
	}
	if s.log.Enabled(r.Context(), row.level) {
		attrs := []slog.Attr{slog.String("op", rt.op), slog.Int("status", row.status), slog.String("reason", row.reason),
			slog.String("error", err.Error()), slog.String("method", r.Method), slog.String("remote", r.RemoteAddr)}
		if name != "" {
			attrs = append(attrs, slog.String("resource", name))
		}
		s.log.LogAttrs(r.Context(), row.level, "control call failed: "+row.title, attrs...)
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
