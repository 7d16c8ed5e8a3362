// Package control serves fenceproxy's control API (health, readiness and
// fences) on the control listener, never on the proxy listener.
package control

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fenceproxy/fenceproxy/fence"
)

// Store is what the control API reads (tokenstore.Store provides it).
type Store interface {
	// Max returns a resource's durable maximum, 0 if it was never raised.
	Max(resource string) (uint64, error)
	// Ready returns nil while the store is open.
	Ready() error
}

// FencePrefix is the URL prefix under which a resource key names its fence.
const FencePrefix = "/v1/fences/"

// Options adds optional parts to the control API.
type Options struct {
	Leases        Leases // serves /v1/leases/* when set
	LeaseToken    string // bearer token required by lease calls; "" = none
	ResourceDepth int    // lease names must have exactly this many segments when > 0
	Admin         AdminStore
	AdminToken    string              // bearer token of admin calls; "" = admin calls refused
	Metrics       prometheus.Gatherer // serves GET /metrics when set
	Warning       string              // shown on /readyz while ready (observe mode)
	// Signer turns on signed-token mode for the lease API: acquire and renew
	// answers carry the token's signature (X-Fencing-Token-Signature and
	// "token_signature"). nil: off.
	Signer Signer
}

// Handler returns the control API router:
//
//	GET /healthz          200 while the process serves
//	GET /readyz           200 while the store is open, else 503
//	GET /v1/fences/{key}  {"resource": key, "token": "<decimal string>"}; 404 if never raised
//	POST, PUT, DELETE, GET /v1/leases/{name}  acquire, renew, release, read (with Options.Leases)
//	GET /metrics          Prometheus metrics (with Options.Metrics)
//	GET /debug/pprof/...  Go profiles, e.g. profile?seconds=10 (with Options.Admin; admin bearer)
//
// Keys and names after the prefix are percent-decoded resource keys and may contain slashes.
func Handler(store Store, log *slog.Logger, opts Options) http.Handler {
	r := chi.NewRouter()
	if opts.Leases != nil {
		(&leaseAPI{leases: opts.Leases, token: opts.LeaseToken, adminToken: opts.AdminToken, depth: opts.ResourceDepth, signer: opts.Signer, log: log}).routes(r)
	}
	if opts.Metrics != nil {
		r.Method(http.MethodGet, "/metrics", promhttp.HandlerFor(opts.Metrics, promhttp.HandlerOpts{}))
	}
	if opts.Admin != nil {
		(&admin{store: opts.Admin, token: opts.AdminToken, log: log}).routes(r)
	}
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	r.Get("/readyz", func(w http.ResponseWriter, req *http.Request) {
		if err := store.Ready(); err != nil {
			log.LogAttrs(req.Context(), slog.LevelWarn, "not ready", slog.String("error", err.Error()))
			writeProblem(w, http.StatusServiceUnavailable, "Not ready", "shutting down, or the token store is closed, its directory is gone or its disk is below FENCEPROXY_MIN_FREE_SPACE")
			return
		}
		body := map[string]string{"status": "ready"}
		if opts.Warning != "" {
			body["warning"] = opts.Warning
		}
		writeJSON(w, http.StatusOK, body)
	})
	r.Get(FencePrefix+"*", func(w http.ResponseWriter, req *http.Request) {
		key, err := fence.Resolver{}.Name(rawAfter(req, FencePrefix))
		if err != nil {
			writeProblem(w, http.StatusNotFound, "Unknown resource", "name a resource key after "+FencePrefix)
			return
		}
		m, err := store.Max(key)
		if err != nil {
			log.LogAttrs(req.Context(), slog.LevelError, "fence lookup failed", slog.String("resource", key), slog.String("error", err.Error()))
			writeProblem(w, http.StatusServiceUnavailable, "Fencing store unavailable", "the maximum could not be read")
			return
		}
		if m == 0 {
			writeProblem(w, http.StatusNotFound, "Unknown resource", "no fencing token was ever admitted above 0 for this resource")
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"resource": key, "token": strconv.FormatUint(m, 10)})
	})
	r.NotFound(func(w http.ResponseWriter, _ *http.Request) {
		writeProblem(w, http.StatusNotFound, "Not found", "no such control endpoint")
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, _ *http.Request) {
		writeProblem(w, http.StatusMethodNotAllowed, "Method not allowed", "")
	})
	return r
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeProblem(w http.ResponseWriter, status int, title, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"type": "about:blank", "title": title, "status": status, "detail": detail})
}

// rawAfter returns the request target's path after prefix, as received
// (still percent-encoded): the resolver checks the bytes a write would carry.
func rawAfter(r *http.Request, prefix string) string {
	path, _, _ := strings.Cut(r.RequestURI, "?")
	if !strings.HasPrefix(path, "/") {
		path = r.URL.EscapedPath()
	}
	return strings.TrimPrefix(path, prefix)
}
