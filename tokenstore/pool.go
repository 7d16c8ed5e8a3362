package tokenstore

import (
	"errors"

	badger "github.com/dgraph-io/badger/v4"
)

// poolPrefix namespaces shard-pool records beside the fences, leases and
// uploads. Key = poolPrefix + pool name; value = the record's bytes as given.
const poolPrefix = "pool/"

// UpdatePool runs fn in one transaction over pool's record (nil when there
// is none) and commits fn's next record (nil: leave it as is) durably
// (fsynced) before it returns. fn may run more than once (on transaction
// conflicts), so it must have no side effects; its error aborts without
// writing and is returned as is. Errors: ErrClosed after Close; ErrDirGone;
// ErrNoSpace below Options.MinFreeSpace; Badger errors.
func (s *Store) UpdatePool(pool string, fn func(record []byte) (next []byte, err error)) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if err := s.checkDir(); err != nil {
		return err
	}
	if err := s.space.check(); err != nil {
		return err
	}
	k := []byte(poolPrefix + pool)
	for attempt := 1; ; attempt++ {
		err := s.withDB(func(db *badger.DB) error {
			return db.Update(func(txn *badger.Txn) error {
				rec, err := readRaw(txn, k)
				if err != nil {
					return err
				}
				next, err := fn(rec)
				if err != nil || next == nil {
					return err
				}
				return txn.Set(k, next)
			})
		})
		if err == nil {
			return nil
		}
		if !errors.Is(err, badger.ErrConflict) || attempt >= maxRaiseAttempts {
			if errors.Is(err, ErrClosed) {
				return ErrClosed
			}
			return err
		}
	}
}

// Pool returns pool's record, nil when there is none. Errors: ErrClosed
// after Close; Badger read errors.
func (s *Store) Pool(pool string) ([]byte, error) {
	var rec []byte
	err := s.withDB(func(db *badger.DB) error {
		return db.View(func(txn *badger.Txn) error {
			var err error
			rec, err = readRaw(txn, []byte(poolPrefix+pool))
			return err
		})
	})
	return rec, err
}

// EachPool calls fn with every pool record, in name order, from one
// consistent snapshot; fn's error stops the walk and is returned as is.
// Errors: ErrClosed after Close; Badger read errors.
func (s *Store) EachPool(fn func(pool string, record []byte) error) error {
	return s.withDB(func(db *badger.DB) error {
		return db.View(func(txn *badger.Txn) error {
			opts := badger.DefaultIteratorOptions
			opts.Prefix = []byte(poolPrefix)
			it := txn.NewIterator(opts)
			defer it.Close()
			for it.Rewind(); it.Valid(); it.Next() {
				rec, err := it.Item().ValueCopy(nil)
				if err != nil {
					return err
				}
				if err := fn(string(it.Item().Key()[len(poolPrefix):]), rec); err != nil {
					return err
				}
			}
			return nil
		})
	})
}
