package badger

import (
	"errors"
	"sync"

	badgerdb "github.com/dgraph-io/badger/v4"
)

// ErrSnapshotReleased: MaxAtOpen was called after ReleaseOpenSnapshot or Close.
var ErrSnapshotReleased = errors.New("store/badger: the view of the store at open was released")

// openSnapshot is a read view of the store as it was at Open, kept for the
// start-up grace (see MaxAtOpen). It remembers no answers: every call reads
// the view (Badger's block cache keeps that cheap), so its memory does not
// grow with the resources written during the grace.
type openSnapshot struct {
	mu  sync.Mutex
	txn *badgerdb.Txn // nil once released
}

func newOpenSnapshot(db *badgerdb.DB) *openSnapshot {
	return &openSnapshot{txn: db.NewTransaction(false)}
}

// MaxAtOpen returns resource's maximum as it was when the store was opened,
// before any raise by this process, and whether it had a record then (a
// resource was given one by its first raise or MarkWritten). The fence's
// start-up grace uses it: writes forwarded by the previous process may still
// be in flight on a resource that had a record. Errors: ErrSnapshotReleased
// after ReleaseOpenSnapshot or Close; Badger read errors.
func (s *Store) MaxAtOpen(resource string) (max uint64, found bool, err error) {
	snap := s.open
	snap.mu.Lock()
	defer snap.mu.Unlock()
	if snap.txn == nil {
		return 0, false, ErrSnapshotReleased
	}
	err = s.withDB(func(*badgerdb.DB) error {
		_, gerr := snap.txn.Get(key(resource))
		if errors.Is(gerr, badgerdb.ErrKeyNotFound) {
			return nil
		}
		if gerr != nil {
			return gerr
		}
		found = true
		var rerr error
		max, rerr = s.read(snap.txn, resource)
		return rerr
	})
	if err != nil {
		return 0, false, s.wrap("read at open", resource, err)
	}
	return max, found, nil
}

// MarkWritten makes sure resource has a durable record, writing one with
// maximum 0 if it has none, before a write with token 0 (which raises
// nothing) is forwarded: so a resource without a record at start-up had no
// write forwarded at all. One synced write per resource; then answered from
// memory while its cache entry lasts, else by one Badger read.
// Errors as for Raise.
func (s *Store) MarkWritten(resource string) error {
	// Closed first: the cache outlives Close and would answer for it.
	if s.closed.Load() {
		return ErrClosed
	}
	if s.cache.hasRecord(resource) {
		return nil
	}
	if err := s.checkDir(); err != nil {
		return err
	}
	if err := s.space.check(); err != nil {
		return err
	}
	var err error
	for attempt := 1; ; attempt++ {
		err = s.withDB(func(db *badgerdb.DB) error {
			return db.Update(func(txn *badgerdb.Txn) error {
				_, err := txn.Get(key(resource))
				if errors.Is(err, badgerdb.ErrKeyNotFound) {
					return txn.Set(key(resource), encode(0))
				}
				return err // a record exists: nothing to write
			})
		})
		// A conflict is a concurrent MarkWritten or raise on the key: read again.
		if !errors.Is(err, badgerdb.ErrConflict) || attempt >= maxRaiseAttempts {
			break
		}
	}
	if err != nil {
		return s.wrap("mark", resource, err)
	}
	s.cache.mark(resource)
	return nil
}

// ReleaseOpenSnapshot drops the view that MaxAtOpen reads. Call it once the
// start-up grace is over: while a read transaction is open Badger keeps every
// older version of the keys it could see. Idempotent; Close calls it too.
func (s *Store) ReleaseOpenSnapshot() {
	snap := s.open
	snap.mu.Lock()
	defer snap.mu.Unlock()
	if snap.txn != nil {
		snap.txn.Discard()
		snap.txn = nil
	}
}
