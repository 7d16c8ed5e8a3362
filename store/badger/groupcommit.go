package badger

import (
	"errors"
	"sync"

	badgerdb "github.com/dgraph-io/badger/v4"
)

// maxRaiseBatch bounds the raises committed in one transaction, far below
// Badger's transaction limits for 8-byte values.
const maxRaiseBatch = 256

// raiseGroup commits concurrent raises of different resources together, in
// one Badger transaction: Badger batches concurrent transactions but syncs
// its write-ahead log once per transaction, so one transaction per raise
// would cost one sync each. There is no background goroutine: the first
// raiser leads, commits everything queued (its own raise first), and hands
// the lead to the next queued raiser. A raise alone costs what it did.
type raiseGroup struct {
	mu    sync.Mutex
	queue []*raiseReq
	busy  bool // a leader is committing
}

type raiseReq struct {
	resource string
	t        uint64
	lead     chan struct{} // closed when this raiser must lead the next batch
	done     chan struct{} // closed when result and err are set
	result   uint64
	err      error
}

// groupRaise makes max(stored, t) durable for resource along with the
// raises queued beside it, and returns the new maximum (>= t).
func (s *Store) groupRaise(resource string, t uint64) (uint64, error) {
	g := &s.raises
	req := &raiseReq{resource: resource, t: t, lead: make(chan struct{}), done: make(chan struct{})}
	g.mu.Lock()
	g.queue = append(g.queue, req)
	leader := !g.busy
	g.busy = true
	g.mu.Unlock()
	if !leader {
		select {
		case <-req.done:
			return req.result, req.err
		case <-req.lead: // req is at the head of the queue
		}
	}
	g.mu.Lock()
	n := min(len(g.queue), maxRaiseBatch)
	batch := g.queue[:n:n]
	g.queue = g.queue[n:]
	g.mu.Unlock()

	s.commitRaises(batch)

	g.mu.Lock()
	if len(g.queue) > 0 {
		close(g.queue[0].lead)
	} else {
		g.busy = false
		g.queue = nil
	}
	g.mu.Unlock()
	<-req.done
	return req.result, req.err
}

// commitRaises raises every resource of batch to the largest token asked for
// it, in one synced transaction, then answers each request.
func (s *Store) commitRaises(batch []*raiseReq) {
	want := make(map[string]uint64, len(batch))
	for _, r := range batch {
		want[r.resource] = max(want[r.resource], r.t)
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
						if err := txn.Set(key(res), encode(t)); err != nil {
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
			r.err = s.wrap("raise", r.resource, err)
		} else {
			r.result = s.cache.raise(r.resource, stored[r.resource])
		}
		close(r.done)
	}
}
