package badger

import (
	badgerdb "github.com/dgraph-io/badger/v4"
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
	k := []byte(poolPrefix + pool)
	return s.update(func(txn *badgerdb.Txn) error {
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
}

// Pool returns pool's record, nil when there is none. Errors: ErrClosed
// after Close; Badger read errors.
func (s *Store) Pool(pool string) ([]byte, error) { return s.record(poolPrefix, pool) }

// EachPool calls fn with every pool record, in name order, from one
// consistent snapshot; fn's error stops the walk and is returned as is.
// Errors: ErrClosed after Close; Badger read errors.
func (s *Store) EachPool(fn func(pool string, record []byte) error) error {
	return s.eachRecord(poolPrefix, fn)
}
