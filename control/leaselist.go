package control

import (
	"context"
	"net/http"
	"net/url"

	"github.com/go-chi/chi/v5"

	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/wire"
)

// LeaseLister lists the stored leases (lease.Manager provides it). The
// lease API serves the admin listing GET /v1/leases when its Leases also
// implement LeaseLister.
type LeaseLister interface {
	// List returns up to limit leases, in name order, whose name sorts
	// after after and starts with prefix, each with its state now. An
	// error is a store failure (503); its text is logged, not shown.
	List(prefix, after string, limit int) ([]lease.Entry, error)
}

// leaseListRoute registers GET /v1/leases behind the admin bearer, when
// the lease API's Leases can list.
func (s *server) leaseListRoute(r chi.Router) {
	lister, ok := s.opts.Leases.(LeaseLister)
	if !ok {
		return
	}
	r.With(s.adminAuth).Get("/v1/leases", handle(s, route{op: "lease.list", failed: errLeaseStore, status: http.StatusOK},
		func(_ context.Context, req request[none]) (wire.LeaseList, error) {
			return s.listLeases(lister, req.Query)
		}))
}

// listLeases: GET /v1/leases?prefix=P&after=N&limit=L, the leases in name
// order with their state now, paged as GET /v1/fences pages fences.
func (s *server) listLeases(lister LeaseLister, q url.Values) (wire.LeaseList, error) {
	prefix, after, limit, err := listQuery(q)
	if err != nil {
		return wire.LeaseList{}, err
	}
	name := func(e lease.Entry) string { return e.Name }
	entries, next, err := page(func(after string, n int) ([]lease.Entry, error) { return lister.List(prefix, after, n) },
		name, after, limit, notUTF8(s.log, "lease listing", name))
	if err != nil {
		return wire.LeaseList{}, err
	}
	out := wire.LeaseList{Leases: make([]wire.Lease, 0, len(entries)), Next: next}
	for _, e := range entries {
		out.Leases = append(out.Leases, leaseOf(e.Lease, e.State))
	}
	return out, nil
}
