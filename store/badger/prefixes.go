package badger

import (
	"bytes"
	"fmt"

	badgerdb "github.com/dgraph-io/badger/v4"

	"github.com/fenceproxy/fenceproxy/fence"
	"github.com/fenceproxy/fenceproxy/store/internal/keys"
)

const (
	// prefixesPrefix namespaces the index of prefix fences (names ending in
	// "/") with a maximum above 0. Key = prefixesPrefix + resource
	// (keys.PrefixIndex); value = the maximum, 8 bytes big-endian, as the
	// fence's. Every raise of such a fence writes it in its own
	// transaction, Reset deletes it in its own, so Prefixes reads it alone.
	prefixesPrefix = "prefixes/"
	// metaPrefix namespaces the store's own records; they are no fence,
	// lease or pool record and do not count for EmptyAtOpen.
	metaPrefix = "meta/"
	// prefixIndexMarker holds keys.PrefixIndexVersion once the index is
	// complete. Directories written before the index have none: Open builds
	// the index then (buildPrefixIndex).
	prefixIndexMarker = metaPrefix + "prefix-index"
)

func prefixKey(resource string) []byte { return keys.PrefixIndex(prefixesPrefix, resource) }

// setMax writes t as resource's maximum in txn, and its index entry when it
// is a prefix fence, so that the two never disagree.
func setMax(txn *badgerdb.Txn, resource string, t uint64) error {
	if err := txn.Set(key(resource), encode(t)); err != nil {
		return err
	}
	if t > 0 && keys.IsPrefix(resource) {
		return txn.Set(prefixKey(resource), encode(t))
	}
	return nil
}

// Prefixes returns up to limit prefix fences (names ending in "/") with a
// maximum above 0 that sort after after ("" = from the start), in resource
// (byte) order, read from the index alone. limit <= 0 returns none. A full
// page means there may be more: call again with after = the last resource.
// Errors: ErrClosed after Close; Badger read errors, and an index value
// that is not 8 bytes.
func (s *Store) Prefixes(after string, limit int) ([]fence.Record, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	if limit <= 0 {
		return nil, nil
	}
	var out []fence.Record
	err := s.withDB(func(db *badgerdb.DB) error {
		return db.View(func(txn *badgerdb.Txn) error {
			opts := badgerdb.DefaultIteratorOptions
			opts.Prefix = []byte(prefixesPrefix)
			it := txn.NewIterator(opts)
			defer it.Close()
			start := []byte(prefixesPrefix)
			if after != "" {
				start = append(prefixKey(after), 0) // the smallest key above after
			}
			for it.Seek(start); it.Valid() && len(out) < limit; it.Next() {
				resource := string(it.Item().Key()[len(prefixesPrefix):])
				var m uint64
				if err := it.Item().Value(func(v []byte) error {
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
	if err != nil {
		return nil, s.wrap("list prefixes after", after, err)
	}
	return out, nil
}

// buildPrefixIndex makes the index of prefix fences complete, once: when
// the marker is absent (a directory written before the index) or of another
// version, it drops every index entry, writes one for each prefix fence with
// a maximum above 0 (a scan of every fence record, this once), then the
// marker. Open runs it before any other call, under the directory's flock,
// so nothing raises meanwhile; a crash before the marker builds again.
func buildPrefixIndex(db *badgerdb.DB) error {
	var stale [][]byte
	fences := map[string][]byte{}
	done := false
	err := db.View(func(txn *badgerdb.Txn) error {
		mark, err := readRaw(txn, []byte(prefixIndexMarker))
		if err != nil {
			return err
		}
		if string(mark) == keys.PrefixIndexVersion {
			done = true
			return nil
		}
		opts := badgerdb.DefaultIteratorOptions
		opts.PrefetchValues = false
		opts.Prefix = []byte(prefixesPrefix)
		it := txn.NewIterator(opts)
		for it.Rewind(); it.Valid(); it.Next() {
			stale = append(stale, it.Item().KeyCopy(nil))
		}
		it.Close()
		opts.Prefix = []byte(keyPrefix)
		it = txn.NewIterator(opts)
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			k := it.Item().Key()
			if !bytes.HasSuffix(k, []byte("/")) {
				continue // only a name ending in "/" is a prefix fence; skip reading its value
			}
			resource := string(k[len(keyPrefix):])
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			m, err := decode(resource, v)
			if err != nil {
				return err
			}
			if m > 0 {
				fences[resource] = v
			}
		}
		return nil
	})
	if err != nil || done {
		return err
	}
	// A write batch splits itself below Badger's transaction limits.
	wb := db.NewWriteBatch()
	defer wb.Cancel()
	for _, k := range stale {
		if _, keep := fences[string(k[len(prefixesPrefix):])]; keep {
			continue // set below
		}
		if err := wb.Delete(k); err != nil {
			return err
		}
	}
	for resource, v := range fences {
		if err := wb.Set(prefixKey(resource), v); err != nil {
			return err
		}
	}
	if err := wb.Flush(); err != nil {
		return fmt.Errorf("build the index of prefix fences: %w", err)
	}
	// Last and synced: a marker means every entry before it is durable.
	return db.Update(func(txn *badgerdb.Txn) error {
		return txn.Set([]byte(prefixIndexMarker), []byte(keys.PrefixIndexVersion))
	})
}
