// Package etcd keeps fenceproxy's durable state in etcd, with
// go.etcd.io/etcd/client/v3: the per-resource fencing-token maxima, lease
// records, S3 multipart upload records, the view at open and the clean-stop
// mark. It implements store.Store, as store/badger does on Badger, and passes
// store/storetest's conformance suite against a real etcd.
//
// In cluster mode (FENCEPROXY_STORE=etcd) every replica opens one Store on
// the same Prefix, and package shard makes sure that the maxima of a
// resource are raised by one replica at a time, its shard's owner, which
// calls Forget for the shard when it becomes the owner (another replica's
// raises never reached this cache). Without that ownership, no two processes
// may use one Prefix: a second one would raise beside this one's barrier and
// cache (a fence bypass).
//
// # Keys and values
//
// Every key is Options.Prefix (default "/fenceproxy/"), then a two-byte kind,
// then the kind's own part:
//
//	Prefix + "f/" + resource                             fence maximum: 8 bytes, big-endian
//	Prefix + "l/" + name                                 lease record: the record's bytes as given
//	Prefix + "u/" + uvarint(len(resource)) + resource + uploadID
//	                                                     upload record: token (8 bytes BE), expiry (Unix seconds, 8 bytes BE)
//	Prefix + "m/clean-stop"                              the clean-stop mark
//	Prefix + "p/" + pool                                 shard-pool record: the record's bytes as given
//	Prefix + "x/" + resource                             index of prefix fences: the fence's maximum, 8 bytes, big-endian
//	Prefix + "m/prefix-index"                            the index's marker: keys.PrefixIndexVersion
//
// The kind comes before any byte of a name, so each kind is a range of its
// own whatever a resource key holds ("/"-heavy, empty, "f/...", non-ASCII):
// no name of one kind can spell a key of another. Within a kind a fence or
// lease key is the prefix plus the name, so key order is name order (List and
// EachLease read ranges); an upload key length-prefixes the resource, so no
// (resource, uploadID) pair spells another's. Two deployments sharing an etcd
// need prefixes neither of which starts with the other.
//
// Tokens are fixed-width (8 bytes, big-endian), so byte order is numeric
// order and etcd compares them itself: a raise is one Txn, "if Value(key) < t
// then Put(key, t)", in one round trip.
//
// A prefix fence (a resource whose name ends in "/") with a maximum above 0
// also has an entry in the index (kind "x/"), written in the same Txn as
// every raise of it and deleted in Reset's, so that Prefixes reads the index
// alone. A prefix written before the index has no marker: Open then builds
// the index once, from a scan of every fence record, and writes the marker
// (see buildPrefixIndex). A replica of an earlier version raises without
// the index, so every replica on a prefix must run this one before prefix
// fences are used; after an earlier version ran, delete the marker and the
// next Open builds the index again.
//
// # Transactions
//
//   - Raise: concurrent raises are group-committed: the first raiser commits
//     every raise queued beside it in one Txn of nested Txns, one per resource
//     (value compare then Put; a missing key is created; else Get), at most
//     Options.MaxTxnOps-2 resources a Txn (etcd's --max-txn-ops counts nested
//     operations against the same limit) and at most 1 MiB of request (below
//     etcd's default --max-request-bytes, 1.5 MiB; long names fill it
//     first). One round trip, no retry.
//   - UpdateLease: the lease record and the fence are read in one Txn, fn
//     runs, and the next record and the raise are committed in one Txn
//     guarded by both keys' ModRevision; on a conflict it reads and runs fn
//     again (fn may run more than once, as the contract allows).
//   - Reset: one Txn, "if Value(fence) > 0 then delete fence (returning it),
//     lease and index entry".
//   - MarkWritten: one Txn, "if the fence key does not exist, Put 0".
//
// etcd answers a write only once a quorum of members has it in its fsynced
// log, so what a method returned survives crashes of a minority of members,
// and of all of them (unless etcd runs with --unsafe-no-fsync).
//
// # The view at open
//
// Open reads, in one Txn, whether the prefix holds any fence or lease record
// (EmptyAtOpen), and remembers that Txn's revision. MaxAtOpen reads the fence
// key at that revision (a Get WithRev). If etcd compacted its history past
// that revision, MaxAtOpen fails with an error wrapping ErrCompacted, and its
// caller fails closed. Keep etcd's auto-compaction retention well above the
// start-up grace (the abandon grace, seconds): any periodic retention of
// minutes, or a revision retention above the writes of that grace, does.
//
// # Upload records
//
// An upload record's value holds its expiry, which Upload checks against this
// machine's clock (to the second): a record is gone from its expiry on. The
// key is also put with an etcd lease of the remaining time, which removes it
// from etcd some time after (etcd's minimum lease TTL, renewals of leases
// over a leader change).
//
// # Errors
//
// Every error of the etcd client is returned wrapped, with the operation and
// the resource: the caller treats it as "store unavailable" and fails closed.
// Each request has Options.RequestTimeout; Close cancels requests in flight.
// Sentinels: ErrClosed, ErrRange, ErrSnapshotReleased, ErrCompacted,
// ErrCorrupt, ErrConflict.
package etcd

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fenceproxy/fenceproxy/store"
	"github.com/fenceproxy/fenceproxy/store/internal/groupcommit"
	"github.com/fenceproxy/fenceproxy/store/internal/keys"
)

// The etcd store implements the whole storage contract.
var _ store.Store = (*Store)(nil)

// Sentinel errors; callers test them with errors.Is.
var (
	// ErrClosed: the Store was used after Close.
	ErrClosed = errors.New("store/etcd: store closed")
	// ErrRange: a token above 2^63-1, the largest fencing token.
	ErrRange = errors.New("store/etcd: token out of range (max 2^63-1)")
	// ErrSnapshotReleased: MaxAtOpen after ReleaseOpenSnapshot or Close.
	ErrSnapshotReleased = errors.New("store/etcd: the view of the store at open was released")
	// ErrCompacted: etcd compacted its history past the revision at open,
	// so MaxAtOpen cannot answer (it also wraps the client's
	// rpctypes.ErrCompacted).
	ErrCompacted = errors.New("store/etcd: the revision at open was compacted")
	// ErrCorrupt: a value under the prefix that this package did not write
	// (a maximum that is not 8 bytes, an upload record that is not 16).
	ErrCorrupt = errors.New("store/etcd: corrupt value")
	// ErrConflict: UpdateLease lost the race for its keys too many times in
	// a row (maxAttempts).
	ErrConflict = errors.New("store/etcd: too many conflicting transactions")
	// ErrNotOwner: Options.Guard refused the write, or its key had another
	// CreateRevision in etcd (the shard changed owner): nothing was written.
	ErrNotOwner = errors.New("store/etcd: this process does not own the resource's shard")
)

const (
	// DefaultPrefix is Options.Prefix when it is empty.
	DefaultPrefix = "/fenceproxy/"
	// DefaultMaxTxnOps is etcd's default --max-txn-ops.
	DefaultMaxTxnOps = 128
	// DefaultRequestTimeout is Options.RequestTimeout when it is 0.
	DefaultRequestTimeout = 5 * time.Second

	kindFence    = "f/"
	kindLease    = "l/"
	kindUpload   = "u/"
	kindMeta     = "m/"
	kindPool     = "p/"
	kindPrefixes = "x/"

	// maxAttempts bounds UpdateLease's optimistic retries. Calls of one
	// process on one name are serialised before they reach etcd, so only a
	// raise of the same fence in between causes a retry.
	maxAttempts = 100
	// listPage is how many lease records EachLease reads per request.
	listPage = 512
)

// Options configures a Store; zero values get the documented defaults.
type Options struct {
	// Prefix is put before every key (DefaultPrefix when empty).
	Prefix string
	// MaxTxnOps is the etcd cluster's --max-txn-ops (DefaultMaxTxnOps when
	// 0; at least 3). One raise Txn carries at most MaxTxnOps-2 resources:
	// etcd counts each level of nested Txns against the limit. A value above
	// the cluster's makes full batches fail (rpctypes.ErrTooManyOps: every
	// raise of the batch fails, closed); one below it only makes batches
	// smaller.
	MaxTxnOps int
	// RequestTimeout bounds each request to etcd (DefaultRequestTimeout
	// when 0); past it the call fails.
	RequestTimeout time.Duration
	// CacheBytes bounds the memory of the maxima answered from memory,
	// counting each by its name's length plus 128 bytes (DefaultCacheBytes
	// when 0).
	CacheBytes int64
	// ObserveRequest, when set, is called with the duration of every
	// request to etcd (a Get or a Txn; failed ones too), after it. nil: none.
	ObserveRequest func(time.Duration)
	// Guard, in cluster mode, ties every write of a resource's maximum or
	// lease record (Raise, UpdateLease, Reset) to this process's ownership
	// of it: the write commits only if the key Guard names has the
	// CreateRevision rev (the owner key of the resource's shard, created
	// by this replica's acquisition), so a replica that lost the shard
	// while stalled cannot commit a raise the new owner would not see.
	// Such a write fails with ErrNotOwner, as does one for which Guard
	// returns an error (before any request). nil: no guard (one process per
	// prefix).
	Guard func(resource string) (key string, rev int64, err error)
}

// Store is the storage contract on etcd. It is safe for concurrent use by
// one process; see the package doc.
type Store struct {
	cli       *clientv3.Client
	kv        clientv3.KV
	lessor    clientv3.Lease
	prefix    string
	maxBatch  int
	timeout   time.Duration
	openRev   int64
	empty     bool
	cache     *maxCache
	observe   func(time.Duration)                                      // Options.ObserveRequest
	guardOf   func(resource string) (key string, rev int64, err error) // Options.Guard
	raises    *groupcommit.Group                                       // concurrent raises share a Txn
	leaseMu   [64]sync.Mutex                                           // UpdateLease calls on one name, serialised
	openMu    sync.Mutex
	released  bool // ReleaseOpenSnapshot was called; guarded by openMu
	ctx       context.Context
	cancel    context.CancelFunc
	closed    atomic.Bool
	mu        sync.RWMutex // held shared by requests, exclusively by Close
	closeOnce sync.Once
	closeErr  error
}

// Open connects to etcd with cfg (endpoints, TLS, user and password, dial
// options) and opens the store under opts.Prefix: it reads, in one Txn,
// whether the prefix holds any fence or lease record and the index's
// marker, and remembers that revision as the view at open; without the
// marker it builds the index of prefix fences first (buildPrefixIndex). The
// Store owns the client and closes it. Errors: a bad option; the client's,
// wrapped (etcd unreachable within RequestTimeout, authentication).
func Open(cfg clientv3.Config, opts Options) (*Store, error) {
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if opts.MaxTxnOps == 0 {
		opts.MaxTxnOps = DefaultMaxTxnOps
	}
	if opts.MaxTxnOps < 3 {
		return nil, fmt.Errorf("store/etcd: MaxTxnOps %d: at least 3", opts.MaxTxnOps)
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = DefaultRequestTimeout
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("store/etcd: etcd client: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Store{
		cli: cli, kv: cli.KV, lessor: cli.Lease, prefix: opts.Prefix,
		maxBatch: opts.MaxTxnOps - 2, timeout: opts.RequestTimeout,
		cache: newMaxCache(opts.CacheBytes), ctx: ctx, cancel: cancel, observe: opts.ObserveRequest, guardOf: opts.Guard,
	}
	s.raises = groupcommit.New(s.takeRaises, s.commitRaises)
	rctx, rcancel := s.reqCtx()
	defer rcancel()
	fences, leases := s.prefix+kindFence, s.prefix+kindLease
	resp, err := s.kv.Txn(rctx).Then(
		clientv3.OpGet(fences, clientv3.WithPrefix(), clientv3.WithCountOnly()),
		clientv3.OpGet(leases, clientv3.WithPrefix(), clientv3.WithCountOnly()),
		clientv3.OpGet(s.prefixIndexKey()),
	).Commit()
	if err != nil {
		cancel()
		_ = cli.Close()
		return nil, fmt.Errorf("store/etcd: open %q on %v: %w", s.prefix, cfg.Endpoints, err)
	}
	s.openRev = resp.Header.Revision
	s.empty = resp.Responses[0].GetResponseRange().Count == 0 && resp.Responses[1].GetResponseRange().Count == 0
	mark := resp.Responses[2].GetResponseRange().GetKvs()
	if len(mark) != 1 || string(mark[0].Value) != keys.PrefixIndexVersion {
		if err := s.buildPrefixIndex(); err != nil {
			cancel()
			_ = cli.Close()
			return nil, fmt.Errorf("store/etcd: index the prefix fences of %q on %v: %w", s.prefix, cfg.Endpoints, err)
		}
	}
	return s, nil
}

// reqCtx is the context of one request: cancelled by Close, and after
// RequestTimeout.
func (s *Store) reqCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(s.ctx, s.timeout)
}

// do runs fn with a request context while the store is open; Close waits for
// it (after cancelling its context).
func (s *Store) do(fn func(ctx context.Context) error) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return ErrClosed
	}
	ctx, cancel := s.reqCtx()
	defer cancel()
	if s.observe == nil {
		return fn(ctx)
	}
	start := time.Now()
	err := fn(ctx)
	s.observe(time.Since(start))
	return err
}

// guarded is a write's ownership guard: the compare to add to its Txn and
// the key to read back when the Txn fails (none without Options.Guard).
type guarded struct {
	key string
	rev int64
}

// guard returns resource's guard; ErrNotOwner (wrapped) when Guard refuses.
func (s *Store) guard(resource string) (*guarded, error) {
	if s.guardOf == nil {
		return nil, nil
	}
	key, rev, err := s.guardOf(resource)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotOwner, err)
	}
	return &guarded{key, rev}, nil
}

// cmp is the guard's compare.
func (g *guarded) cmp() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(g.key), "=", g.rev)
}

// lost reports, from a Get of the guard's key, that it no longer holds.
func (g *guarded) lost(r *etcdserverpb.RangeResponse) bool {
	kvs := r.GetKvs()
	return len(kvs) != 1 || kvs[0].CreateRevision != g.rev
}

func (s *Store) fenceKey(resource string) string { return s.prefix + kindFence + resource }
func (s *Store) leaseKey(name string) string     { return s.prefix + kindLease + name }
func (s *Store) cleanStopKey() string            { return s.prefix + kindMeta + "clean-stop" }
func (s *Store) poolKey(pool string) string      { return s.prefix + kindPool + pool }

func encode(t uint64) string {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], t)
	return string(b[:])
}

func decode(v []byte) (uint64, error) {
	if len(v) != 8 {
		return 0, fmt.Errorf("%w: a maximum of %d bytes, want 8", ErrCorrupt, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// wrap names the operation and resource in err, keeping ErrClosed as is.
func (s *Store) wrap(op, resource string, err error) error {
	if errors.Is(err, ErrClosed) || (s.closed.Load() && errors.Is(err, context.Canceled)) {
		return ErrClosed
	}
	return fmt.Errorf("store/etcd: %s %q: %w", op, resource, err)
}

// Max returns resource's maximum, 0 for a resource without a record. A
// maximum this process raised or read is answered from memory (see
// maxCache); otherwise one linearizable Get, and the answer is cached.
// Errors: ErrClosed; ErrCorrupt; the client's.
func (s *Store) Max(resource string) (uint64, error) {
	if s.closed.Load() {
		return 0, ErrClosed
	}
	if e, ok := s.cache.get(resource); ok {
		return e.max, nil
	}
	ticket := s.cache.ticket()
	var e cacheEntry
	err := s.do(func(ctx context.Context) error {
		resp, err := s.kv.Get(ctx, s.fenceKey(resource))
		if err != nil || len(resp.Kvs) == 0 {
			return err
		}
		e.rec = true
		e.max, err = decode(resp.Kvs[0].Value)
		return err
	})
	if err != nil {
		return 0, s.wrap("max", resource, err)
	}
	s.cache.read(resource, e, ticket)
	return e.max, nil
}

// Raise makes max(stored, t) resource's maximum, durable in etcd before it
// returns, and returns it (>= t). A cached maximum >= t answers without a
// round trip; t = 0 writes nothing and answers Max. Concurrent raises are
// committed together (store/internal/groupcommit, with commitRaises).
// Errors: ErrRange when t > 2^63-1, nothing written; ErrClosed; ErrCorrupt;
// the client's.
func (s *Store) Raise(resource string, t uint64) (uint64, error) {
	if t > math.MaxInt64 {
		return 0, ErrRange
	}
	if s.closed.Load() {
		return 0, ErrClosed
	}
	if t == 0 {
		return s.Max(resource)
	}
	if e, ok := s.cache.get(resource); ok && e.max >= t {
		return e.max, nil
	}
	if _, err := s.guard(resource); err != nil {
		return 0, s.wrap("raise", resource, err)
	}
	return s.raises.Raise(resource, t)
}

// Ready returns nil while the store is open, ErrClosed after Close. It does
// not ask etcd: a store that cannot reach etcd fails its calls.
func (s *Store) Ready() error {
	if s.closed.Load() {
		return ErrClosed
	}
	return nil
}

// Close cancels the requests in flight, waits for them, and closes the etcd
// client. Idempotent; every call returns the first one's result. Every other
// method returns ErrClosed afterwards.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		s.ReleaseOpenSnapshot()
		s.cancel()
		s.mu.Lock()
		defer s.mu.Unlock()
		if err := s.cli.Close(); err != nil && !errors.Is(err, context.Canceled) {
			s.closeErr = fmt.Errorf("store/etcd: close the etcd client: %w", err)
		}
	})
	return s.closeErr
}

// Forget drops what this process remembers of the maxima of every resource
// that match reports (called under the cache's lock: keep it cheap), so that
// the next Max of one reads etcd. In cluster mode a replica calls it when it
// becomes a shard's owner: while another replica owned the shard, that one
// raised maxima this cache never saw. Reads in flight when it runs are not
// cached afterwards (the epoch moves).
func (s *Store) Forget(match func(resource string) bool) { s.cache.forget(match) }

// Resources returns how many resources with a maximum above 0 this process
// holds in memory now.
func (s *Store) Resources() int { return int(s.cache.positive.Load()) }

// isCompacted reports the client's error for a read below the compacted
// revision.
func isCompacted(err error) bool { return errors.Is(err, rpctypes.ErrCompacted) }
