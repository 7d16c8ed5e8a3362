package tokenstore

import (
	"errors"
	"sync"

	"github.com/dgraph-io/badger/v4"
)

// ErrSnapshotReleased: MaxAtOpen was called after ReleaseOpenSnapshot or Close.
var ErrSnapshotReleased = errors.New("tokenstore: the view of the store at open was released")

// openSnapshot is a read view of the store as it was at Open, kept for the
// start-up grace (see MaxAtOpen).
type openSnapshot struct {
	mu   sync.Mutex
	txn  *badger.Txn       // nil once released
	seen map[string]uint64 // answers already read from txn
}

func newOpenSnapshot(db *badger.DB) *openSnapshot {
	return &openSnapshot{txn: db.NewTransaction(false), seen: make(map[string]uint64)}
}

// MaxAtOpen returns resource's maximum as it was when the store was opened,
// before any raise by this process (0 if it had none). The fence's start-up
// grace uses it: a token above it waits, since writes forwarded by the
// previous process with smaller tokens may still be in flight. Errors:
// ErrSnapshotReleased after ReleaseOpenSnapshot or Close; Badger read errors.
func (s *Store) MaxAtOpen(resource string) (uint64, error) {
	snap := s.open
	snap.mu.Lock()
	defer snap.mu.Unlock()
	if m, ok := snap.seen[resource]; ok {
		return m, nil
	}
	if snap.txn == nil {
		return 0, ErrSnapshotReleased
	}
	var m uint64
	err := s.withDB(func(*badger.DB) error {
		var err error
		m, err = s.read(snap.txn, resource)
		return err
	})
	if err != nil {
		return 0, s.wrap("read at open", resource, err)
	}
	snap.seen[resource] = m
	return m, nil
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
		snap.seen = nil
	}
}
