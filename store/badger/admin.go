package badger

import (
	"bytes"

	badgerdb "github.com/dgraph-io/badger/v4"

	"github.com/fenceproxy/fenceproxy/fence"
	"github.com/fenceproxy/fenceproxy/store/internal/keys"
)

// List returns up to limit records whose resource starts with prefix and
// sorts after after ("" = from the start), in resource (byte) order, read
// from disk; a record with maximum 0 (MarkWritten) is listed too. A full page
// means there may be more: call again with after = the last resource.
// Errors: ErrClosed after Close; Badger read errors.
func (s *Store) List(prefix, after string, limit int) ([]fence.Record, error) {
	var out []fence.Record
	err := s.withDB(func(db *badgerdb.DB) error {
		return db.View(func(txn *badgerdb.Txn) error {
			opts := badgerdb.DefaultIteratorOptions
			opts.Prefix = key(prefix)
			it := txn.NewIterator(opts)
			defer it.Close()
			start := key(prefix)
			if after >= prefix && after != "" {
				start = append(key(after), 0) // the smallest key above after
			}
			for it.Seek(start); it.Valid() && len(out) < limit; it.Next() {
				item := it.Item()
				resource := string(bytes.TrimPrefix(item.Key(), []byte(keyPrefix)))
				var m uint64
				if err := item.Value(func(v []byte) error {
					var err error
					m, err = decode(resource, v)
					return err
				}); err != nil {
					return err
				}
				out = append(out, fence.Record{Resource: resource, Token: m})
			}
			return nil
		})
	})
	return out, err
}

// Reset deletes resource's fence and its lease record in one synced
// transaction, so the next token may start low again: the one way a maximum
// goes down, for an operator after a coordinator's counter restarted or
// tokens ran out. It returns the maximum that was removed (0: there was
// none, and nothing was written).
// Errors: ErrClosed after Close; ErrDirGone; Badger errors.
func (s *Store) Reset(resource string) (uint64, error) {
	if s.closed.Load() {
		return 0, ErrClosed // before checkDir, which fails on the closed lock file
	}
	if err := s.checkDir(); err != nil {
		return 0, err
	}
	if err := s.space.check(); err != nil {
		return 0, err // deletes are writes too
	}
	var removed uint64
	err := s.withDB(func(db *badgerdb.DB) error {
		return db.Update(func(txn *badgerdb.Txn) error {
			var err error
			if removed, err = s.read(txn, resource); err != nil || removed == 0 {
				return err // nothing to reset
			}
			if err := txn.Delete(key(resource)); err != nil {
				return err
			}
			if keys.IsPrefix(resource) {
				if err := txn.Delete(prefixKey(resource)); err != nil {
					return err
				}
			}
			return txn.Delete([]byte(leasePrefix + resource))
		})
	})
	if err != nil {
		return 0, s.wrap("reset", resource, err)
	}
	// Forget rather than cache 0: a raise that committed after the delete
	// may cache its maximum before this line. The mark goes too: a token-0
	// write must make a record again.
	s.cache.drop(resource)
	return removed, nil
}
