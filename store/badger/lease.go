package badger

import (
	"errors"
	"math"

	badgerdb "github.com/dgraph-io/badger/v4"
)

// leasePrefix namespaces lease records beside the fences (see keyPrefix).
const leasePrefix = "lease/"

// UpdateLease runs fn in one transaction over the lease record of name and
// name's fence maximum, and commits both durably (fsynced) before it
// returns: a token counter, a lease state and a fence raise can never be
// torn apart by a crash.
//
// fn gets the stored record (nil when there is none) and the fence maximum,
// and returns the record to store (nil: leave it as is) and a token to raise
// the fence to (0: no raise). It may run more than once (on transaction
// conflicts), so it must have no side effects; its error aborts without
// writing and is returned as is. Other errors: ErrRange when raise is above
// 2^63-1; ErrClosed after Close; ErrDirGone; ErrNoSpace below
// Options.MinFreeSpace (checked before fn runs: every lease change writes);
// Badger errors.
func (s *Store) UpdateLease(name string, fn func(record []byte, fenceMax uint64) (next []byte, raise uint64, err error)) error {
	lk := []byte(leasePrefix + name)
	var seen, raised uint64
	err := s.update(func(txn *badgerdb.Txn) error {
		seen, raised = 0, 0
		stored, err := s.read(txn, name)
		if err != nil {
			return err
		}
		seen = stored
		rec, err := readRaw(txn, lk)
		if err != nil {
			return err
		}
		next, raise, err := fn(rec, stored)
		if err != nil {
			return err
		}
		if raise > math.MaxInt64 {
			return ErrRange
		}
		if next != nil {
			if err := txn.Set(lk, next); err != nil {
				return err
			}
		}
		if raise > stored {
			raised = raise
			return setMax(txn, name, raise)
		}
		return nil
	})
	if err == nil {
		// fn saw a committed maximum, perhaps one whose Raise has not
		// cached it yet: cache it too, so that no Max after this call
		// answers below what fn was given.
		if v := max(seen, raised); v > 0 {
			s.cache.raise(name, v)
		}
	}
	return err
}

// update runs fn in one read-write transaction, committed durably, after
// the checks every write makes (closed, the directory, free space), again
// on a transaction conflict (at most maxRaiseAttempts times in all). fn may
// run more than once; its error aborts without writing.
func (s *Store) update(fn func(txn *badgerdb.Txn) error) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if err := s.checkDir(); err != nil {
		return err
	}
	if err := s.space.check(); err != nil {
		return err
	}
	for attempt := 1; ; attempt++ {
		err := s.withDB(func(db *badgerdb.DB) error { return db.Update(fn) })
		if err == nil {
			return nil
		}
		if !errors.Is(err, badgerdb.ErrConflict) || attempt >= maxRaiseAttempts {
			if errors.Is(err, ErrClosed) {
				return ErrClosed
			}
			return err
		}
	}
}

// Lease returns the stored lease record of name, nil when there is none.
// Errors: ErrClosed after Close; Badger read errors.
func (s *Store) Lease(name string) ([]byte, error) { return s.record(leasePrefix, name) }

// record returns a copy of the record of kind prefix named name, nil when
// there is none.
func (s *Store) record(prefix, name string) ([]byte, error) {
	var rec []byte
	err := s.withDB(func(db *badgerdb.DB) error {
		return db.View(func(txn *badgerdb.Txn) error {
			var err error
			rec, err = readRaw(txn, []byte(prefix+name))
			return err
		})
	})
	return rec, err
}

// readRaw returns a copy of the value at k, nil when absent.
func readRaw(txn *badgerdb.Txn, k []byte) ([]byte, error) {
	item, err := txn.Get(k)
	if errors.Is(err, badgerdb.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return item.ValueCopy(nil)
}

// EachLease calls fn with every lease record, in name order, from one
// consistent snapshot; fn's error stops the walk and is returned.
// Errors: ErrClosed after Close; Badger read errors.
func (s *Store) EachLease(fn func(name string, record []byte) error) error {
	return s.eachRecord(leasePrefix, fn)
}

// eachRecord calls fn with every record of kind prefix, in name order, from
// one snapshot; fn's error stops the walk and is returned as is.
func (s *Store) eachRecord(prefix string, fn func(name string, record []byte) error) error {
	return s.withDB(func(db *badgerdb.DB) error {
		return db.View(func(txn *badgerdb.Txn) error {
			opts := badgerdb.DefaultIteratorOptions
			opts.Prefix = []byte(prefix)
			it := txn.NewIterator(opts)
			defer it.Close()
			for it.Rewind(); it.Valid(); it.Next() {
				rec, err := it.Item().ValueCopy(nil)
				if err != nil {
					return err
				}
				if err := fn(string(it.Item().Key()[len(prefix):]), rec); err != nil {
					return err
				}
			}
			return nil
		})
	})
}

// LeasesFrom calls fn with up to limit lease records whose name starts with
// prefix and sorts strictly after after, in name order, from one snapshot:
// the iterator seeks to the first such name, so a page reads its own
// records only. fn's error stops the walk and is returned as is.
// Errors: ErrClosed after Close; Badger read errors.
func (s *Store) LeasesFrom(prefix, after string, limit int, fn func(name string, record []byte) error) error {
	if limit <= 0 {
		return nil
	}
	return s.withDB(func(db *badgerdb.DB) error {
		return db.View(func(txn *badgerdb.Txn) error {
			opts := badgerdb.DefaultIteratorOptions
			opts.Prefix = []byte(leasePrefix + prefix)
			opts.PrefetchSize = min(limit, opts.PrefetchSize)
			it := txn.NewIterator(opts)
			defer it.Close()
			start := opts.Prefix
			if after >= prefix {
				start = []byte(leasePrefix + after + "\x00") // the first name strictly after after
			}
			n := 0
			for it.Seek(start); it.Valid() && n < limit; it.Next() {
				rec, err := it.Item().ValueCopy(nil)
				if err != nil {
					return err
				}
				if err := fn(string(it.Item().Key()[len(leasePrefix):]), rec); err != nil {
					return err
				}
				n++
			}
			return nil
		})
	})
}

// RemoveLease runs fn in one transaction over name's lease record and
// name's fence maximum, and deletes the record, durably, when fn returns
// true; the fence record stays. No record: fn is not called. A conflict
// with a concurrent UpdateLease runs it again. Errors: fn's, as is
// (nothing written); ErrClosed; ErrDirGone; ErrNoSpace; Badger errors.
func (s *Store) RemoveLease(name string, fn func(record []byte, fenceMax uint64) (remove bool, err error)) error {
	lk := []byte(leasePrefix + name)
	var fnErr error
	err := s.update(func(txn *badgerdb.Txn) error {
		fnErr = nil
		rec, err := readRaw(txn, lk)
		if err != nil || rec == nil {
			return err
		}
		stored, err := s.read(txn, name)
		if err != nil {
			return err
		}
		remove, err := fn(rec, stored)
		if err != nil {
			fnErr = err
			return err
		}
		if !remove {
			return nil
		}
		return txn.Delete(lk)
	})
	if fnErr != nil {
		return fnErr
	}
	return err
}
