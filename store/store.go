// Package store is fenceproxy's storage contract, written once: Store is
// what the server needs of its durable store, the union of what the fence
// barrier, leases, pools, the S3 multipart checks, the admin API and the
// server itself use. Its implementations are store/badger (embedded, one
// process), store/etcd (cluster mode) and store/mem (in memory, for tests);
// store/storetest is the conformance suite all three pass.
//
// Consumers own smaller interfaces, each a subset of Store: fence.Store,
// fence.StartView and fence.PrefixLister (the fence barrier), lease.Store, pool.Store,
// proxy.MultipartRecords, control.Store (Max, Ready) and the admin API's store
// (List, Reset).
//
// Shapes: a resource key, lease name or pool name is any string (empty,
// "/"-heavy, with spaces, '%' or non-ASCII UTF-8); a fencing token is a
// uint64 of at most 2^63-1 (fence.MaxToken); records of leases and pools are
// opaque bytes, owned by packages lease and pool. A resource "has a record"
// once a raise above 0 (Raise or UpdateLease) or MarkWritten stored its
// maximum, until Reset removes it. What a method has returned is durable: a
// crash and a new open of the same storage keep it.
//
// Errors: the contract defines no sentinel errors. A consumer treats every
// error from the store as "store unavailable" and fails closed (the fence
// barrier answers 503), with one exception that it can match: the error of
// the fn of UpdateLease, EachLease, UpdatePool and EachPool comes back as
// is. Implementations document their own sentinels (badger.ErrClosed,
// etcd.ErrClosed, mem.ErrClosed, ...).
package store

import (
	"time"

	"github.com/fenceproxy/fenceproxy/fence"
)

// Store is the whole storage contract. A maximum only ever rises, except by
// Reset. Every method but ReleaseOpenSnapshot and Resources returns an error
// after Close; all are safe for concurrent use.
type Store interface {
	Fences
	Leases
	Pools
	Uploads
	Lifecycle
}

// Fences are the per-resource maxima (fencing-token high-water marks).
type Fences interface {
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
	// Resources returns how many resources with a maximum above 0 the store
	// holds in memory now (a gauge): never more than those that have one.
	Resources() int
	// Prefixes returns up to limit records of prefix fences (resources
	// whose name ends in "/") with a maximum above 0, whose resource sorts
	// strictly after after ("" = from the start), in resource (byte) order.
	// limit <= 0 returns none. A full page means there may be more: call
	// again with after = its last resource. It reads an index of its own,
	// never every record, so that the barrier can load every prefix fence at
	// start: a maximum of 0 (MarkWritten) and lease records are not listed.
	Prefixes(after string, limit int) ([]fence.Record, error)
}

// Leases are the lease records (package lease), each beside the fence of
// the same name.
type Leases interface {
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
	// LeasesFrom calls fn with up to limit lease records whose name starts
	// with prefix and sorts strictly after after ("" = from the start), in
	// name (byte) order, from one consistent view; limit <= 0 calls it for
	// none. It starts reading at the first such name (a seek, not a walk from
	// the first record), so a page costs the records it returns, whatever
	// its position. fn's error stops the walk and is returned as is.
	LeasesFrom(prefix, after string, limit int, fn func(name string, record []byte) error) error
	// RemoveLease runs fn in one atomic step over name's lease record and
	// name's current fence maximum, and when fn returns true deletes the
	// record, durably before it returns; the fence record stays as it is (a
	// later grant's token passes it, so removing a record never lets a token
	// be issued twice). No record: fn is not called, nothing is written. fn
	// may run more than once (a retry), so it must have no side effects; its
	// error aborts, writes nothing and is returned as is. It serialises with
	// UpdateLease on the same name: a record changed after fn read it is
	// never removed.
	RemoveLease(name string, fn func(record []byte, fenceMax uint64) (remove bool, err error)) error
}

// Pools are the shard-pool records (package pool): a kind of their own, no
// fence, lease or upload call reads or changes them (Reset and List
// included), and they do not count for EmptyAtOpen.
type Pools interface {
	// UpdatePool runs fn in one atomic step over pool's record (nil when
	// there is none) and commits fn's next record (nil: leave it as is)
	// durably before it returns. fn may run more than once, so it must have
	// no side effects; its error aborts, writes nothing and is returned as
	// is. Concurrent calls on one pool serialise.
	UpdatePool(pool string, fn func(record []byte) (next []byte, err error)) error
	// Pool returns pool's record, nil when there is none.
	Pool(pool string) ([]byte, error)
	// EachPool calls fn with every pool record, in name (byte) order; fn's
	// error stops the walk and is returned as is.
	EachPool(fn func(pool string, record []byte) error) error
}

// Uploads are the S3 multipart upload records: which fencing token created
// each upload. Neither maxima, leases nor List see them.
type Uploads interface {
	// PutUpload records durably, before it returns, that the S3 multipart
	// upload uploadID of resource was created with the fencing token token,
	// until expires (a time to the second; a record past it is gone) or
	// DeleteUpload. A second Put of the same resource and uploadID replaces
	// the first; records of other resources or uploads are untouched.
	// token > 2^63-1 is refused with an error, nothing written.
	PutUpload(resource, uploadID string, token uint64, expires time.Time) error
	// Upload returns the token of resource's upload uploadID, found=false
	// when there is no record or it has expired.
	Upload(resource, uploadID string) (token uint64, found bool, err error)
	// DeleteUpload removes the record, durably; none is no error.
	DeleteUpload(resource, uploadID string) error
}

// Lifecycle is the store's own state: the clean-stop mark, readiness and
// Close.
type Lifecycle interface {
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
	// a second Close returns nil when the first did.
	Close() error
}

// The fence barrier's interfaces are subsets of Store.
var (
	_ fence.Store        = Store(nil)
	_ fence.StartView    = Store(nil)
	_ fence.PrefixLister = Store(nil)
)
