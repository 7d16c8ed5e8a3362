// Package mem is an in-memory implementation of fenceproxy's storage
// contract (store.Store; store/storetest is its suite), for tests: fencing-token maxima, lease
// records, the start-up view and the clean-stop mark, with the semantics of
// badger.Store and optional fault injection.
//
// What a Badger store keeps on disk lives in a Disk, which outlives the Store
// open on it: Close it and Open the same Disk again for a restart. Every call
// is one step under one mutex, so whatever a call returned is "durable" at
// once, and a Close is as good as a crash.
package mem

import (
	"bytes"
	"errors"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fenceproxy/fenceproxy/fence"
	"github.com/fenceproxy/fenceproxy/store"
)

// The in-memory store implements the whole storage contract.
var _ store.Store = (*Store)(nil)

// Sentinel errors; callers test them with errors.Is.
var (
	// ErrLocked: Open of a Disk that another Store still has open.
	ErrLocked = errors.New("store/mem: disk in use by another open store")
	// ErrClosed: the Store was used after Close.
	ErrClosed = errors.New("store/mem: store closed")
	// ErrRange: a token above 2^63-1, the largest fencing token.
	ErrRange = errors.New("store/mem: token out of range (max 2^63-1)")
	// ErrSnapshotReleased: MaxAtOpen after ReleaseOpenSnapshot or Close.
	ErrSnapshotReleased = errors.New("store/mem: the view of the store at open was released")
)

// Disk is the durable state of a store, what survives Close: maxima, lease
// records, upload records and the clean-stop mark. Make one with NewDisk. One Store at a time
// may have it open. Safe for concurrent use.
type Disk struct {
	// mu guards the Disk and every Store's own fields: the one lock.
	mu        sync.Mutex
	fences    map[string]uint64 // resource -> maximum; present = it has a record
	leases    map[string][]byte // name -> lease record
	names     []string          // the keys of leases, sorted (LeasesFrom's seek)
	pools     map[string][]byte // pool -> pool record
	uploads   map[uploadKey]uploadRecord
	cleanStop bool // the clean-stop mark
	inUse     bool // a Store has it open
}

// NewDisk returns an empty Disk: fresh storage.
func NewDisk() *Disk {
	return &Disk{fences: map[string]uint64{}, leases: map[string][]byte{}, pools: map[string][]byte{}, uploads: map[uploadKey]uploadRecord{}}
}

// Options injects faults; every hook is optional (nil: none). A hook runs
// before the call takes the store's lock, so a hook that blocks holds up its
// own call only: a test holds a call there (e.g. a raise, while it checks
// what the barrier does meanwhile) and releases it by letting the hook
// return. A hook's non-nil error fails its call with that error as is,
// nothing read or written. Hooks may run concurrently.
type Options struct {
	// BeforeMax runs at the start of every Max.
	BeforeMax func(resource string) error
	// BeforeRaise runs at the start of every Raise whose t is in range.
	BeforeRaise func(resource string, t uint64) error
	// BeforeUpdateLease runs at the start of every UpdateLease, before fn.
	BeforeUpdateLease func(name string) error
	// BeforeMarkWritten runs at the start of every MarkWritten.
	BeforeMarkWritten func(resource string) error
}

// Store is the in-memory store open on a Disk. It is safe for concurrent use.
type Store struct {
	d    *Disk
	opts Options
	// Guarded by d.mu.
	closed bool
	atOpen map[string]uint64 // the Disk's fences at Open; nil once released
	empty  bool              // no record at Open
}

// Open opens d with no fault injection. It fails with an error wrapping
// ErrLocked while another Store has d open.
func Open(d *Disk) (*Store, error) {
	return OpenWith(d, Options{})
}

// OpenWith opens d with the faults of opts; errors as for Open.
func OpenWith(d *Disk, opts Options) (*Store, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.inUse {
		return nil, ErrLocked
	}
	d.inUse = true
	return &Store{d: d, opts: opts, atOpen: maps.Clone(d.fences), empty: len(d.fences) == 0 && len(d.leases) == 0}, nil
}

// EmptyAtOpen reports whether the Disk held no fence and no lease record
// when this Store was opened.
func (s *Store) EmptyAtOpen() bool { return s.empty }

// Max returns resource's maximum, 0 for a resource without a record.
// Errors: BeforeMax's; ErrClosed after Close.
func (s *Store) Max(resource string) (uint64, error) {
	if h := s.opts.BeforeMax; h != nil {
		if err := h(resource); err != nil {
			return 0, err
		}
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if s.closed {
		return 0, ErrClosed
	}
	return s.d.fences[resource], nil
}

// Raise makes max(stored, t) resource's maximum and returns it (>= t);
// t <= the stored maximum writes nothing. Errors: ErrRange when t > 2^63-1
// (nothing written); BeforeRaise's; ErrClosed after Close.
func (s *Store) Raise(resource string, t uint64) (uint64, error) {
	if t > math.MaxInt64 {
		return 0, ErrRange
	}
	if h := s.opts.BeforeRaise; h != nil {
		if err := h(resource, t); err != nil {
			return 0, err
		}
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if s.closed {
		return 0, ErrClosed
	}
	if m := s.d.fences[resource]; t <= m {
		return m, nil
	}
	s.d.fences[resource] = t
	return t, nil
}

// MaxAtOpen returns resource's maximum when the store was opened, and whether
// it had a record then. Errors: ErrSnapshotReleased after ReleaseOpenSnapshot
// or Close.
func (s *Store) MaxAtOpen(resource string) (max uint64, found bool, err error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if s.atOpen == nil {
		return 0, false, ErrSnapshotReleased
	}
	max, found = s.atOpen[resource]
	return max, found, nil
}

// MarkWritten gives resource a record with maximum 0 if it has none.
// Errors: BeforeMarkWritten's; ErrClosed after Close.
func (s *Store) MarkWritten(resource string) error {
	if h := s.opts.BeforeMarkWritten; h != nil {
		if err := h(resource); err != nil {
			return err
		}
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if _, ok := s.d.fences[resource]; !ok {
		s.d.fences[resource] = 0
	}
	return nil
}

// ReleaseOpenSnapshot drops the view that MaxAtOpen reads. Idempotent.
func (s *Store) ReleaseOpenSnapshot() {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	s.atOpen = nil
}

// UpdateLease runs fn over name's lease record (a copy; nil when there is
// none) and name's fence maximum, and commits fn's next record (nil: leave it)
// and raise (0 or not above the maximum: none) together. fn runs once, with
// the store locked: it must not call the store. Errors: fn's, as is, nothing
// written; ErrRange when raise > 2^63-1, nothing written; BeforeUpdateLease's;
// ErrClosed after Close.
func (s *Store) UpdateLease(name string, fn func(record []byte, fenceMax uint64) (next []byte, raise uint64, err error)) error {
	if h := s.opts.BeforeUpdateLease; h != nil {
		if err := h(name); err != nil {
			return err
		}
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	m := s.d.fences[name]
	next, raise, err := fn(bytes.Clone(s.d.leases[name]), m)
	if err != nil {
		return err
	}
	if raise > math.MaxInt64 {
		return ErrRange
	}
	if next != nil {
		s.d.setLease(name, next)
	}
	if raise > m {
		s.d.fences[name] = raise
	}
	return nil
}

// Lease returns a copy of name's lease record, nil when there is none.
// Errors: ErrClosed after Close.
func (s *Store) Lease(name string) ([]byte, error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	return bytes.Clone(s.d.leases[name]), nil
}

// setLease stores name's lease record (a copy) and keeps names sorted.
func (d *Disk) setLease(name string, rec []byte) {
	if _, ok := d.leases[name]; !ok {
		i, _ := slices.BinarySearch(d.names, name)
		d.names = slices.Insert(d.names, i, name)
	}
	d.leases[name] = bytes.Clone(rec)
}

// deleteLease removes name's lease record, if any.
func (d *Disk) deleteLease(name string) {
	if _, ok := d.leases[name]; !ok {
		return
	}
	delete(d.leases, name)
	if i, found := slices.BinarySearch(d.names, name); found {
		d.names = slices.Delete(d.names, i, i+1)
	}
}

// LeasesFrom calls fn with up to limit lease records whose name starts with
// prefix and sorts after after, in name order, found by a binary search in
// the sorted names, from copies taken at the call (fn may call the store);
// fn's error stops the walk and is returned. Errors: ErrClosed after Close.
func (s *Store) LeasesFrom(prefix, after string, limit int, fn func(name string, record []byte) error) error {
	type kv struct {
		name string
		rec  []byte
	}
	s.d.mu.Lock()
	if s.closed {
		s.d.mu.Unlock()
		return ErrClosed
	}
	i, found := slices.BinarySearch(s.d.names, max(prefix, after))
	if found && after >= prefix {
		i++ // strictly after after
	}
	var page []kv
	for ; i < len(s.d.names) && len(page) < limit; i++ {
		name := s.d.names[i]
		if !strings.HasPrefix(name, prefix) {
			break
		}
		page = append(page, kv{name, bytes.Clone(s.d.leases[name])})
	}
	s.d.mu.Unlock()
	for _, e := range page {
		if err := fn(e.name, e.rec); err != nil {
			return err
		}
	}
	return nil
}

// RemoveLease runs fn over name's lease record (a copy) and fence maximum,
// with the store locked, and deletes the record when fn returns true; the
// fence stays. No record: fn is not called. Errors: fn's, as is, nothing
// written; ErrClosed after Close.
func (s *Store) RemoveLease(name string, fn func(record []byte, fenceMax uint64) (bool, error)) error {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	rec, ok := s.d.leases[name]
	if !ok {
		return nil
	}
	remove, err := fn(bytes.Clone(rec), s.d.fences[name])
	if err != nil {
		return err
	}
	if remove {
		s.d.deleteLease(name)
	}
	return nil
}

// EachLease calls fn with every lease record, in name order, from a copy
// taken at the call (fn may call the store); fn's error stops the walk and
// is returned. Errors: ErrClosed after Close.
func (s *Store) EachLease(fn func(name string, record []byte) error) error {
	s.d.mu.Lock()
	if s.closed {
		s.d.mu.Unlock()
		return ErrClosed
	}
	view := maps.Clone(s.d.leases)
	s.d.mu.Unlock()
	for _, name := range slices.Sorted(maps.Keys(view)) {
		if err := fn(name, view[name]); err != nil {
			return err
		}
	}
	return nil
}

// UpdatePool runs fn over pool's record (a copy; nil when there is none)
// and stores fn's next record (nil: leave it). fn runs once, with the store
// locked: it must not call the store. Errors: fn's, as is, nothing written;
// ErrClosed after Close.
func (s *Store) UpdatePool(pool string, fn func(record []byte) (next []byte, err error)) error {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	next, err := fn(bytes.Clone(s.d.pools[pool]))
	if err != nil {
		return err
	}
	if next != nil {
		s.d.pools[pool] = bytes.Clone(next)
	}
	return nil
}

// Pool returns a copy of pool's record, nil when there is none. Errors:
// ErrClosed after Close.
func (s *Store) Pool(pool string) ([]byte, error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	return bytes.Clone(s.d.pools[pool]), nil
}

// EachPool calls fn with every pool record, in name order, from a copy
// taken at the call; fn's error stops the walk and is returned. Errors:
// ErrClosed after Close.
func (s *Store) EachPool(fn func(pool string, record []byte) error) error {
	s.d.mu.Lock()
	if s.closed {
		s.d.mu.Unlock()
		return ErrClosed
	}
	view := maps.Clone(s.d.pools)
	s.d.mu.Unlock()
	for _, name := range slices.Sorted(maps.Keys(view)) {
		if err := fn(name, view[name]); err != nil {
			return err
		}
	}
	return nil
}

// uploadKey names an S3 multipart upload record.
type uploadKey struct{ resource, id string }

type uploadRecord struct {
	token   uint64
	expires int64 // Unix seconds: gone once the clock reaches it (as in Badger)
}

// PutUpload records that resource's multipart upload uploadID was created
// with token, until expires (to the second). Errors: ErrRange when token >
// 2^63-1, nothing written; ErrClosed after Close.
func (s *Store) PutUpload(resource, uploadID string, token uint64, expires time.Time) error {
	if token > math.MaxInt64 {
		return ErrRange
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.d.uploads[uploadKey{resource, uploadID}] = uploadRecord{token: token, expires: expires.Unix()}
	return nil
}

// Upload returns the token of resource's upload uploadID, found=false when
// there is no record or it has expired. Errors: ErrClosed after Close.
func (s *Store) Upload(resource, uploadID string) (token uint64, found bool, err error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if s.closed {
		return 0, false, ErrClosed
	}
	rec, ok := s.d.uploads[uploadKey{resource, uploadID}]
	if !ok || rec.expires <= time.Now().Unix() {
		return 0, false, nil
	}
	return rec.token, true, nil
}

// DeleteUpload removes the record, if any. Errors: ErrClosed after Close.
func (s *Store) DeleteUpload(resource, uploadID string) error {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	delete(s.d.uploads, uploadKey{resource, uploadID})
	return nil
}

// List returns up to limit records whose resource starts with prefix and
// sorts after after ("" = from the start), in resource order; a maximum of 0
// (MarkWritten) is listed too. Errors: ErrClosed after Close.
func (s *Store) List(prefix, after string, limit int) ([]fence.Record, error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	var names []string
	for r := range s.d.fences {
		if strings.HasPrefix(r, prefix) && r > after {
			names = append(names, r)
		}
	}
	slices.Sort(names)
	var out []fence.Record
	for _, r := range names[:min(len(names), max(limit, 0))] {
		out = append(out, fence.Record{Resource: r, Token: s.d.fences[r]})
	}
	return out, nil
}

// Prefixes returns up to limit prefix fences (names ending in "/") with a
// maximum above 0 that sort after after ("" = from the start), in resource
// order; limit <= 0 returns none. It filters every record: the memory
// store keeps no index. Errors: ErrClosed after Close.
func (s *Store) Prefixes(after string, limit int) ([]fence.Record, error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	var names []string
	for r, m := range s.d.fences {
		if strings.HasSuffix(r, "/") && m > 0 && r > after {
			names = append(names, r)
		}
	}
	slices.Sort(names)
	var out []fence.Record
	for _, r := range names[:min(len(names), max(limit, 0))] {
		out = append(out, fence.Record{Resource: r, Token: s.d.fences[r]})
	}
	return out, nil
}

// Reset deletes resource's fence record and lease record and returns the
// maximum removed; with a maximum of 0 (no record, or MarkWritten's) it
// returns 0 and writes nothing. Errors: ErrClosed after Close.
func (s *Store) Reset(resource string) (uint64, error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if s.closed {
		return 0, ErrClosed
	}
	m := s.d.fences[resource]
	if m == 0 {
		return 0, nil
	}
	delete(s.d.fences, resource)
	s.d.deleteLease(resource)
	return m, nil
}

// TakeCleanStop reports whether the previous Store on this Disk called
// MarkCleanStop, and removes the mark. Errors: ErrClosed after Close.
func (s *Store) TakeCleanStop() (bool, error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if s.closed {
		return false, ErrClosed
	}
	clean := s.d.cleanStop
	s.d.cleanStop = false
	return clean, nil
}

// MarkCleanStop leaves the clean-stop mark on the Disk for the next Store's
// TakeCleanStop. Errors: ErrClosed after Close.
func (s *Store) MarkCleanStop() error {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.d.cleanStop = true
	return nil
}

// Ready returns nil while the store is open, ErrClosed after Close.
func (s *Store) Ready() error {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	return nil
}

// Close releases the Disk for the next Open. Idempotent; always nil.
func (s *Store) Close() error {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if !s.closed {
		s.closed = true
		s.atOpen = nil
		s.d.inUse = false
	}
	return nil
}

// Resources returns how many resources have a maximum above 0 (all of them
// are in memory).
func (s *Store) Resources() int {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	n := 0
	for _, m := range s.d.fences {
		if m > 0 {
			n++
		}
	}
	return n
}
