package server

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/fenceproxy/fenceproxy/fence"
)

// readiness is the store as seen by /readyz: not ready once a stop begins,
// nor in cluster mode while the replica's etcd lease is unconfirmed, nor,
// with READY_NEEDS_UPSTREAM, while the upstream is unreachable.
type readiness struct {
	store
	cluster  func() error // nil: one process
	upstream func() error // nil: the upstream's state is not readiness's
	draining atomic.Bool
}

// store is what /readyz and the fence calls read.
type store interface {
	Ready() error
	Max(resource string) (uint64, error)
	List(prefix, after string, limit int) ([]fence.Record, error)
	Reset(resource string) (uint64, error)
}

var errDraining = errors.New("shutting down")

func (r *readiness) Ready() error {
	if r.draining.Load() {
		return errDraining
	}
	if err := r.store.Ready(); err != nil {
		return err
	}
	if r.cluster != nil {
		if err := r.cluster(); err != nil {
			return err
		}
	}
	if r.upstream != nil {
		return r.upstream()
	}
	return nil
}

// adminFences is the admin API's view of the fences: listed from the store,
// raised and reset through the fence barrier, so an operator's raise cuts
// off and drains the smaller-token writes in flight like a write's raise.
type adminFences struct {
	store store
	fence *fence.Barrier
}

func (a adminFences) Raise(ctx context.Context, resource string, t uint64) (uint64, error) {
	return a.fence.Raise(ctx, resource, t)
}

func (a adminFences) Reset(ctx context.Context, resource string) (uint64, error) {
	return a.fence.Reset(ctx, resource, func() (uint64, error) { return a.store.Reset(resource) })
}

func (a adminFences) List(prefix, after string, limit int) ([]fence.Record, error) {
	return a.store.List(prefix, after, limit)
}
