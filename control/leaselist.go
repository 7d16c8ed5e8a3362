package control

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/go-chi/chi/v5"

	"github.com/fenceproxy/fenceproxy/fence"
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
			return listLeases(lister, req.Query)
		}))
}

// listLeases: GET /v1/leases?prefix=P&after=N&limit=L, the leases in name
// order with their state now, paged as GET /v1/fences pages fences.
func listLeases(lister LeaseLister, q url.Values) (wire.LeaseList, error) {
	prefix, after, limit, err := listQuery(q)
	if err != nil {
		return wire.LeaseList{}, err
	}
	entries, err := lister.List(prefix, after, limit)
	if err != nil {
		return wire.LeaseList{}, err
	}
	out := wire.LeaseList{Leases: make([]wire.Lease, 0, len(entries))}
	for _, e := range entries {
		out.Leases = append(out.Leases, leaseOf(e.Lease, e.State))
	}
	if len(entries) == limit {
		out.Next = entries[len(entries)-1].Name
	}
	return out, nil
}

// listQuery reads a listing's query: limit 1..maxListLimit (default
// defaultListLimit; else errBadLimit, 400 bad_request), and prefix and
// after checked with fence.Prefix (400 bad_resource), as the fence listing
// reads its own.
func listQuery(q url.Values) (prefix, after string, limit int, err error) {
	limit = defaultListLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxListLimit {
			return "", "", 0, detailed(errBadLimit, fmt.Sprintf("limit is a number from 1 to %d", maxListLimit))
		}
		limit = n
	}
	prefix, after = q.Get("prefix"), q.Get("after")
	for _, v := range []string{prefix, after} {
		if err := fence.Prefix(v); err != nil {
			return "", "", 0, err
		}
	}
	return prefix, after, limit, nil
}
