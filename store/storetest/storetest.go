// Package storetest is the conformance suite of fenceproxy's durable store:
// per-resource fencing-token maxima, lease records, shard-pool records, S3
// multipart upload records, the start-up view and the clean-stop mark. Every implementation
// (store/badger, store/etcd, and store/mem in memory for tests)
// must pass Run.
//
// Errors: the contract defines no sentinel errors. A consumer treats every
// error from the store as "store unavailable" and fails closed (the fence
// barrier answers 503), with two exceptions that it can match: the error of
// UpdateLease's and EachLease's fn comes back as is. Implementations document
// their own sentinels (badger.ErrClosed, mem.ErrClosed, ...), and
// the suite asserts only that an error is returned where one is due.
package storetest

import (
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/fence"
)

// Store is the whole storage contract, as one interface for the suite.
// Consumers own smaller interfaces, each a subset of it: fence.Store and
// fence.StartView (the fence barrier), lease.Store (leases), the admin API's
// store (List, Reset) and the control API's (Max, Ready). The methods below
// state the semantics that Run checks; a resource key is any string (empty,
// "/"-heavy, with spaces, '%' or non-ASCII UTF-8), a fencing token is at most
// 2^63-1, and a maximum only ever rises, except by Reset.
//
// A resource "has a record" once a raise above 0 (Raise or UpdateLease) or
// MarkWritten stored its maximum, until Reset removes it. What a method has
// returned is durable: a crash and a new open of the same storage keep it
// (the suite checks Close and a new open).
type Store interface {
	// Max returns resource's maximum, 0 for a resource without a record. It
	// never answers below a maximum that a Raise has returned.
	Max(resource string) (uint64, error)
	// Raise makes max(stored, t) resource's maximum, durably before it
	// returns, and returns it (>= t, and >= every maximum returned before the
	// call began). t <= the stored maximum writes nothing (Raise(r, 0) gives
	// r no record). t > 2^63-1 is refused with an error, nothing written.
	Raise(resource string, t uint64) (uint64, error)

	// MaxAtOpen answers from the state as it was when the store was opened,
	// whatever was raised, marked or reset since: the maximum then, and
	// whether the resource had a record then (found=false and 0 without
	// one). Errors once ReleaseOpenSnapshot or Close was called.
	MaxAtOpen(resource string) (max uint64, found bool, err error)
	// MarkWritten gives resource a record with maximum 0 if it has none,
	// durably before it returns; a maximum above 0 stays as it is.
	MarkWritten(resource string) error
	// ReleaseOpenSnapshot drops the view that MaxAtOpen reads; MaxAtOpen
	// fails from then on. Idempotent; Close implies it.
	ReleaseOpenSnapshot()

	// UpdateLease runs fn in one atomic step over name's lease record (nil
	// when there is none) and name's current fence maximum, and commits fn's
	// next record (nil: leave it as is) and its raise of the fence (0 or not
	// above the maximum: none) together, durably before it returns: the
	// record and the raise are never seen one without the other. fn may run
	// more than once (a retry), so it must have no side effects; its error
	// aborts, writes nothing and is returned as is. Concurrent calls on one
	// name serialise. A raise above 2^63-1 is refused with an error, nothing
	// written.
	UpdateLease(name string, fn func(record []byte, fenceMax uint64) (next []byte, raise uint64, err error)) error
	// Lease returns name's lease record, nil when there is none.
	Lease(name string) ([]byte, error)
	// EachLease calls fn with every lease record, in name (byte) order, from
	// one consistent view; fn's error stops the walk and is returned as is.
	EachLease(fn func(name string, record []byte) error) error

	// UpdatePool runs fn in one atomic step over pool's record (nil when
	// there is none; a shard pool's definition, package pool) and commits
	// fn's next record (nil: leave it as is) durably before it returns. fn
	// may run more than once, so it must have no side effects; its error
	// aborts, writes nothing and is returned as is. Concurrent calls on one
	// pool serialise. Pool records are a kind of their own: no fence, lease
	// or upload call reads or changes them (Reset and List included), and
	// they do not count for EmptyAtOpen.
	UpdatePool(pool string, fn func(record []byte) (next []byte, err error)) error
	// Pool returns pool's record, nil when there is none.
	Pool(pool string) ([]byte, error)
	// EachPool calls fn with every pool record, in name (byte) order; fn's
	// error stops the walk and is returned as is.
	EachPool(fn func(pool string, record []byte) error) error

	// PutUpload records durably, before it returns, that the S3 multipart
	// upload uploadID of resource was created with the fencing token token,
	// until expires (a time to the second; a record past it is gone) or
	// DeleteUpload. A second Put of the same resource and uploadID replaces
	// the first. Records of other resources or uploads are untouched, and
	// neither maxima, leases nor List see them. token > 2^63-1 is refused
	// with an error, nothing written.
	PutUpload(resource, uploadID string, token uint64, expires time.Time) error
	// Upload returns the token of resource's upload uploadID, found=false
	// when there is no record or it has expired.
	Upload(resource, uploadID string) (token uint64, found bool, err error)
	// DeleteUpload removes the record, durably; none is no error.
	DeleteUpload(resource, uploadID string) error

	// List returns up to limit records (resource and maximum, a maximum of 0
	// from MarkWritten included) whose resource starts with prefix and sorts
	// strictly after after ("" = from the start), in resource (byte) order.
	// limit <= 0 returns none. A full page means there may be more: call
	// again with after = its last resource. Lease records are not listed.
	List(prefix, after string, limit int) ([]fence.Record, error)
	// Reset deletes resource's fence record and its lease record together,
	// durably, and returns the maximum removed: the one way a maximum goes
	// down (an operator's, after a coordinator's counter restarted). A
	// maximum of 0 (no record, or only MarkWritten's) returns 0 and writes
	// nothing.
	Reset(resource string) (uint64, error)

	// TakeCleanStop reports whether the previous process on this storage
	// called MarkCleanStop before it closed, and removes the mark durably: a
	// mark is taken once. False on fresh storage and after a stop without a
	// mark. The mark survives opens until it is taken.
	TakeCleanStop() (bool, error)
	// MarkCleanStop records durably that this process stopped with no
	// forwarded write unfinished, for the next process's TakeCleanStop.
	MarkCleanStop() error
	// EmptyAtOpen reports whether the storage held no record (no fence
	// record, a maximum of 0 included, and no lease record) when this Store
	// was opened: then no earlier process forwarded a write through it, and
	// a missing clean-stop mark is no crash.
	EmptyAtOpen() bool

	// Ready returns nil while the store can serve, an error after Close.
	Ready() error
	// Close releases the storage, so that it can be opened again. Idempotent:
	// a second Close returns nil when the first did. Every other method
	// returns an error after Close (ReleaseOpenSnapshot and Resources return
	// nothing to check).
	Close() error
	// Resources returns how many resources with a maximum above 0 the store
	// holds in memory now (a gauge): never more than those that have one.
	Resources() int
}

// The fence barrier's interfaces are subsets of Store.
var (
	_ fence.Store     = Store(nil)
	_ fence.StartView = Store(nil)
)

// Opener opens the storage it was made for and returns a new Store on it. The
// suite calls it again only after closing the Store it returned last (a
// restart), and each Store must see what the previous ones made durable.
type Opener func() (Store, error)

// Run runs the conformance suite. newStorage returns an Opener over new,
// empty storage that lives until t ends (e.g. a t.TempDir() directory); the
// suite calls it once per subtest and closes every Store it opened.
func Run(t *testing.T, newStorage func(t *testing.T) Opener) {
	groups := []struct {
		name  string
		tests []subtest
	}{
		{"Raise", raiseTests},
		{"Lease", leaseTests},
		{"List", listTests},
		{"Reset", resetTests},
		{"Upload", uploadTests},
		{"Pool", poolTests},
		{"StartView", startViewTests},
		{"CleanStop", cleanStopTests},
		{"Lifecycle", lifecycleTests},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			for _, st := range g.tests {
				t.Run(st.name, func(t *testing.T) { st.fn(newRig(t, newStorage)) })
			}
		})
	}
}

// subtest is one leaf of the suite; it gets storage of its own.
type subtest struct {
	name string
	fn   func(r *rig)
}

// rig is one subtest's storage and the Store open on it.
type rig struct {
	t    *testing.T
	open Opener
	s    Store // nil between a Close and the next open
}

func newRig(t *testing.T, newStorage func(t *testing.T) Opener) *rig {
	t.Helper()
	r := &rig{t: t, open: newStorage(t)}
	r.s = r.mustOpen()
	// Registered after newStorage's cleanups, so it runs before them.
	t.Cleanup(func() {
		if r.s != nil {
			_ = r.s.Close()
		}
	})
	return r
}

func (r *rig) mustOpen() Store {
	r.t.Helper()
	s, err := r.open()
	if err != nil {
		r.t.Fatalf("open: %v", err)
	}
	if err := s.Ready(); err != nil {
		r.t.Fatalf("Ready after open: %v", err)
	}
	return s
}

// restart closes the store and opens its storage again.
func (r *rig) restart() {
	r.t.Helper()
	if err := r.s.Close(); err != nil {
		r.t.Fatalf("Close: %v", err)
	}
	r.s = nil
	r.s = r.mustOpen()
}

func (r *rig) max(resource string) uint64 {
	r.t.Helper()
	m, err := r.s.Max(resource)
	if err != nil {
		r.t.Fatalf("Max(%q): %v", resource, err)
	}
	return m
}

func (r *rig) raise(resource string, t uint64) uint64 {
	r.t.Helper()
	m, err := r.s.Raise(resource, t)
	if err != nil {
		r.t.Fatalf("Raise(%q, %d): %v", resource, t, err)
	}
	return m
}

func (r *rig) mark(resource string) {
	r.t.Helper()
	if err := r.s.MarkWritten(resource); err != nil {
		r.t.Fatalf("MarkWritten(%q): %v", resource, err)
	}
}

func (r *rig) atOpen(resource string) (uint64, bool) {
	r.t.Helper()
	m, found, err := r.s.MaxAtOpen(resource)
	if err != nil {
		r.t.Fatalf("MaxAtOpen(%q): %v", resource, err)
	}
	return m, found
}

func (r *rig) lease(name string) []byte {
	r.t.Helper()
	rec, err := r.s.Lease(name)
	if err != nil {
		r.t.Fatalf("Lease(%q): %v", name, err)
	}
	return rec
}

// setLease stores rec as name's lease record and raises its fence to raise.
func (r *rig) setLease(name string, rec []byte, raise uint64) {
	r.t.Helper()
	if err := r.s.UpdateLease(name, func([]byte, uint64) ([]byte, uint64, error) { return rec, raise, nil }); err != nil {
		r.t.Fatalf("UpdateLease(%q): %v", name, err)
	}
}

func (r *rig) list(prefix, after string, limit int) []fence.Record {
	r.t.Helper()
	page, err := r.s.List(prefix, after, limit)
	if err != nil {
		r.t.Fatalf("List(%q, %q, %d): %v", prefix, after, limit, err)
	}
	return page
}

func (r *rig) leases() map[string]string {
	r.t.Helper()
	out := map[string]string{}
	var names []string
	err := r.s.EachLease(func(name string, rec []byte) error {
		names = append(names, name)
		out[name] = string(rec)
		return nil
	})
	if err != nil {
		r.t.Fatalf("EachLease: %v", err)
	}
	for i := 1; i < len(names); i++ {
		if names[i-1] >= names[i] {
			r.t.Fatalf("EachLease out of name order: %q then %q", names[i-1], names[i])
		}
	}
	return out
}
