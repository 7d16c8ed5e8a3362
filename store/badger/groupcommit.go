package badger

import (
	"errors"

	badgerdb "github.com/dgraph-io/badger/v4"

	"github.com/fenceproxy/fenceproxy/store/internal/groupcommit"
)

// maxRaiseBatch bounds the raises committed in one transaction, far below
// Badger's transaction limits for 8-byte values.
const maxRaiseBatch = 256

// commitRaises raises every resource of batch to the largest token asked for
// it, in one synced transaction (the raises' group commit: one sync for the
// batch), and sets each request's answer.
func (s *Store) commitRaises(batch []*groupcommit.Request) {
	want := make(map[string]uint64, len(batch))
	for _, r := range batch {
		want[r.Resource] = max(want[r.Resource], r.Token)
	}
	var stored map[string]uint64
	var err error
	for attempt := 1; ; attempt++ {
		stored = make(map[string]uint64, len(want))
		err = s.withDB(func(db *badgerdb.DB) error {
			return db.Update(func(txn *badgerdb.Txn) error {
				for res, t := range want {
					m, err := s.read(txn, res)
					if err != nil {
						return err
					}
					stored[res] = max(m, t)
					if m < t {
						if err := setMax(txn, res, t); err != nil {
							return err
						}
					}
				}
				return nil // nothing set: read-only, nothing committed
			})
		})
		// A conflict is a lease or admin transaction on one of the keys.
		if !errors.Is(err, badgerdb.ErrConflict) || attempt >= maxRaiseAttempts {
			break
		}
	}
	for _, r := range batch {
		if err != nil {
			r.Err = s.wrap("raise", r.Resource, err)
		} else {
			r.Result = s.cache.raise(r.Resource, stored[r.Resource])
		}
	}
}
