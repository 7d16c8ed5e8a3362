// Package control serves fenceproxy's control API on the control listener,
// never on the proxy listener: health, readiness and metrics, the fences
// (read, and the admin calls list, raise and reset) and the lease API.
//
// Every JSON call goes through one generic handler (handle): it resolves the
// resource key or lease name in the URL with fence.Resolver, decodes the
// request body strictly into its wire type, runs the operation, and answers
// with the operation's wire type, or with the problem that the one error
// table (table) gives for the operation's error.
package control

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fenceproxy/fenceproxy/fence"
	"github.com/fenceproxy/fenceproxy/wire"
)

// Fences is what the public fence read needs (the stores under store/ provide it).
type Fences interface {
	// Max returns resource's durable maximum, 0 if it was never raised. An
	// error is a store failure (503); its text is logged, not shown.
	Max(resource string) (uint64, error)
}

// Store is what Handler always needs: the fence read, and readiness.
type Store interface {
	Fences
	// Ready returns nil while the store is open and the process is not
	// shutting down (/readyz answers 503 otherwise). Its error is logged,
	// not shown.
	Ready() error
}

// AdminFences is what the admin fence calls need. Raise and Reset must go
// through the fence barrier (fence.Barrier's Raise and Reset over the
// store): a raise cuts off and drains the smaller-token writes in flight.
// Errors other than those named below are store failures (503); their text
// is logged, not shown.
type AdminFences interface {
	// List returns up to limit fences, in resource-key order, whose
	// resource sorts after after and starts with prefix.
	List(prefix, after string, limit int) ([]fence.Record, error)
	// Raise makes max(current, t) resource's maximum (t <= fence.MaxToken),
	// cuts off uploads below it and waits until no write below it is in
	// flight; it returns the maximum. With fence.ErrDrainTimeout or ctx's
	// cause it returns the maximum too when the raise took effect (it
	// stays), 0 when nothing changed.
	Raise(ctx context.Context, resource string, t uint64) (uint64, error)
	// Reset removes resource's fence and lease record once no write on it
	// is in flight; it returns the maximum removed (0: there was none).
	// With fence.ErrDrainTimeout or ctx's cause nothing changed.
	Reset(ctx context.Context, resource string) (uint64, error)
}

// FencePrefix is the URL prefix under which a resource key names its fence.
const FencePrefix = "/v1/fences/"

// Options adds optional parts to the control API.
type Options struct {
	// Leases serves /v1/leases/*; nil: no lease API.
	Leases Leases
	// Pools serves /v1/pools/* (with Leases); nil: no pool API. A renew
	// of a pool shard's lease then carries its hand-back list.
	Pools Pools
	// LeaseToken is the bearer token every lease and pool call needs; "": none.
	LeaseToken string
	// ResourceDepth is FENCEPROXY_RESOURCE_DEPTH: when > 0, lease names
	// must have exactly this many segments.
	ResourceDepth int
	// PrefixFence, when set, says whether a name ending in "/" is a prefix
	// fence here (fence.Barrier.CheckPrefix): a lease or raise of one that
	// is not, or a pool whose shards' lease names are not, is refused with
	// its error (400), since it would fence nothing below it. nil: every
	// such name is one.
	PrefixFence func(name string) error
	// Names maps a decoded fence, lease or pool shard name to the resource
	// key of the writes it names (fence.Resolver.Names; in S3 mode
	// s3.ResourceName, the key in its alias class). nil: names as spelt.
	Names func(name string) (string, error)
	// Admin serves the admin fence calls (GET /v1/fences, PUT and DELETE
	// /v1/fences/*) and Go's profiler; nil: none of them.
	Admin AdminFences
	// AdminToken is the bearer token of admin calls (also a lease
	// force-release); "": admin calls are refused (403).
	AdminToken string
	// Metrics serves GET /metrics; nil: no metrics.
	Metrics prometheus.Gatherer
	// Warning is shown on /readyz while ready (observe mode); "": none.
	Warning string
	// Signer turns on signed-token mode for the lease API: acquire and renew
	// answers carry the token's signature (X-Fencing-Token-Signature and
	// "token_signature"). nil: off.
	Signer Signer
	// Owner, in cluster mode, decides where a call that names a resource or
	// lease runs (every /v1/fences/{key} and /v1/leases/{name} call), once
	// the name is resolved and before the body is read: here (done is then
	// called when the call is over), on another replica (forward set: the
	// request goes to it whole and its answer is returned), or nowhere now
	// (an error wrapping ErrShardUnavailable: 503 with Retry-After). nil:
	// every call runs here (one process).
	Owner func(r *http.Request, name string) (done func(), forward http.Handler, err error)
}

// ErrShardUnavailable is wrapped by Options.Owner's errors when no replica
// may run calls on the name's shard now (503 shard_unavailable).
var ErrShardUnavailable = errors.New("no replica may run calls on this name's shard now")

// Handler returns the control API router:
//
//	GET /healthz          200 while the process serves
//	GET /readyz           200 while the store is ready, else 503
//	GET /v1/fences/{key}  wire.Fence; 404 if never raised
//	GET /v1/fences, PUT and DELETE /v1/fences/{key}  list, raise, reset (with Options.Admin; admin bearer)
//	POST, PUT, DELETE, GET /v1/leases/{name}  acquire, renew, release, read (with Options.Leases)
//	PUT, GET /v1/pools/{pool}  define, read a shard pool (with Options.Pools)
//	POST /v1/pools/{pool}/claim, POST /v1/pools/{pool}/shards/{shard}/done  claim a shard, mark it done
//	GET /v1/leases        wire.LeaseList (with Options.Leases when it is a LeaseLister; admin bearer)
//	GET /metrics          Prometheus metrics (with Options.Metrics)
//	GET /debug/pprof/...  Go profiles, e.g. profile?seconds=10 (with Options.Admin; admin bearer)
//
// Keys and names after the prefix are percent-decoded resource keys and may
// contain slashes. Every refusal is an application/problem+json wire.Problem
// with a reason (see table). store must not be nil.
func Handler(store Store, log *slog.Logger, opts Options) http.Handler {
	s := &server{store: store, log: log, opts: opts}
	r := chi.NewRouter()
	r.Use(func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			w.Header().Set(wire.HeaderListener, wire.ListenerControl)
			next.ServeHTTP(w, req)
		})
	})
	if opts.Leases != nil {
		s.leaseRoutes(r)
		if opts.Pools != nil {
			s.poolRoutes(r)
		}
	}
	if opts.Metrics != nil {
		r.Method(http.MethodGet, "/metrics", promhttp.HandlerFor(opts.Metrics, promhttp.HandlerOpts{}))
	}
	if opts.Admin != nil {
		s.adminRoutes(r)
	}
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		wire.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	r.Get("/readyz", s.readyz)
	r.Get(FencePrefix+"*", handle(s, route{
		op: "fence.get", prefix: FencePrefix, name: s.resolver().Name,
		badName: errUnknownResource, failed: fence.ErrStore, status: http.StatusOK,
	}, s.getFence))
	r.NotFound(func(w http.ResponseWriter, req *http.Request) {
		s.fail(w, req, route{op: "route"}, "", errNoEndpoint)
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, req *http.Request) {
		s.fail(w, req, route{op: "route"}, "", errMethod)
	})
	return r
}

// server holds what the routes share.
type server struct {
	store Store
	log   *slog.Logger
	opts  Options
}

// resolver reads the names of fence, lease and pool URLs: the proxy's rules
// for what a resource is (Names in S3 mode).
func (s *server) resolver() fence.Resolver {
	// Without Names (plain mode) a name is read as the proxy reads a path:
	// runs of slashes merged.
	return fence.Resolver{Depth: s.opts.ResourceDepth, Names: s.opts.Names, MergeSlashes: s.opts.Names == nil}
}

func (s *server) readyz(w http.ResponseWriter, r *http.Request) {
	if err := s.store.Ready(); err != nil {
		s.fail(w, r, route{op: "readyz"}, "", wrap(errNotReady, err))
		return
	}
	body := map[string]string{"status": "ready"}
	if s.opts.Warning != "" {
		body["warning"] = s.opts.Warning
	}
	wire.WriteJSON(w, http.StatusOK, body)
}

// getFence: GET /v1/fences/{resource}, the resource's maximum; 404 for one
// without a maximum above 0 (never raised, or reset).
func (s *server) getFence(_ context.Context, req request[none]) (wire.Fence, error) {
	m, err := s.store.Max(req.Name)
	if err != nil {
		return wire.Fence{}, err
	}
	if m == 0 {
		return wire.Fence{}, detailed(errUnknownResource, "no fencing token above 0 is stored for this resource")
	}
	return wire.Fence{Resource: req.Name, Token: wire.Token(m)}, nil
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
