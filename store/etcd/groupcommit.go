package etcd

import (
	"context"
	"fmt"
	"sync"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// raiseGroup commits concurrent raises together, in one etcd Txn (one round
// trip and one raft entry for all of them), as store/badger's raiseGroup does
// with Badger transactions. There is no background goroutine: the first
// raiser leads, commits what is queued (its own raise first, up to maxBatch
// resources), and hands the lead to the next queued raiser. A raise alone
// costs one Txn.
type raiseGroup struct {
	mu    sync.Mutex
	queue []*raiseReq
	busy  bool // a leader is committing

	// txns counts the raise Txns sent (tests compare it with the raises).
	txns int64
}

type raiseReq struct {
	resource string
	t        uint64
	lead     chan struct{} // closed when this raiser must lead the next batch
	done     chan struct{} // closed when result and err are set
	result   uint64
	err      error
}

// groupRaise makes max(stored, t) durable for resource along with the raises
// queued beside it, and returns the new maximum (>= t).
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
	// Take requests while they name at most maxBatch distinct resources
	// whose operations take at most maxTxnBytes.
	seen := make(map[string]struct{}, min(len(g.queue), s.maxBatch))
	n, size := 0, 0
	for ; n < len(g.queue); n++ {
		r := g.queue[n].resource
		if _, ok := seen[r]; !ok {
			cost := s.raiseOpBytes(r)
			if len(seen) == s.maxBatch || (len(seen) > 0 && size+cost > maxTxnBytes) {
				break
			}
			seen[r] = struct{}{}
			size += cost
		}
	}
	batch := g.queue[:n:n]
	g.queue = g.queue[n:]
	g.txns++
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

// maxTxnBytes bounds the size of one raise Txn, below etcd's default
// --max-request-bytes (1.5 MiB): long resource names fill it before
// MaxTxnOps does (a raise names its key five times).
const maxTxnBytes = 1 << 20

// raiseOpBytes is about what raiseOp(key of resource) takes in a request:
// the key five times, two values and the framing.
func (s *Store) raiseOpBytes(resource string) int {
	return 5*(len(s.prefix)+len(kindFence)+len(resource)) + 2*8 + 64
}

// raiseOp is the nested Txn that raises one fence key to t: if its value is
// below t (byte order of 8-byte big-endian tokens is numeric order), Put t;
// else, if the key does not exist (a value compare on a missing key fails),
// Put t; else Get it.
func raiseOp(key string, t uint64) clientv3.Op {
	v := encode(t)
	create := clientv3.OpTxn(
		[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0)},
		[]clientv3.Op{clientv3.OpPut(key, v)},
		[]clientv3.Op{clientv3.OpGet(key)},
	)
	return clientv3.OpTxn(
		[]clientv3.Cmp{clientv3.Compare(clientv3.Value(key), "<", v)},
		[]clientv3.Op{clientv3.OpPut(key, v)},
		[]clientv3.Op{create},
	)
}

// commitRaises raises every resource of batch to the largest token asked for
// it, in one Txn, then answers each request.
func (s *Store) commitRaises(batch []*raiseReq) {
	want := make(map[string]uint64, len(batch))
	var order []string
	for _, r := range batch {
		if _, ok := want[r.resource]; !ok {
			order = append(order, r.resource)
		}
		want[r.resource] = max(want[r.resource], r.t)
	}
	ops := make([]clientv3.Op, len(order))
	for i, res := range order {
		ops[i] = raiseOp(s.fenceKey(res), want[res])
	}
	// Cluster mode: the batch commits only while this replica owns the
	// shard of each of its resources (one compare per shard: at most one
	// per resource, within the Txn's operation count).
	var cmps []clientv3.Cmp
	var guardErr error
	seen := map[guarded]bool{}
	for _, res := range order {
		g, err := s.guard(res)
		if err != nil {
			guardErr = err
			break
		}
		if g != nil && !seen[*g] {
			seen[*g] = true
			cmps = append(cmps, g.cmp())
		}
	}
	ticket := s.cache.ticket()
	stored := make(map[string]uint64, len(order))
	err := guardErr
	if err == nil {
		err = s.do(func(ctx context.Context) error {
			resp, err := s.kv.Txn(ctx).If(cmps...).Then(ops...).Commit()
			if err != nil {
				return err
			}
			if !resp.Succeeded {
				return fmt.Errorf("%w: a shard of the batch changed owner", ErrNotOwner)
			}
			if len(resp.Responses) != len(order) {
				return fmt.Errorf("etcd answered %d operations, want %d", len(resp.Responses), len(order))
			}
			for i, res := range order {
				m, err := raised(resp.Responses[i], want[res])
				if err != nil {
					return err
				}
				stored[res] = m
			}
			return nil
		})
	}
	if err == nil {
		// Cached before any raiser returns (see maxCache).
		for _, res := range order {
			s.cache.wrote(res, cacheEntry{max: stored[res], rec: true}, ticket)
		}
	}
	for _, r := range batch {
		if err != nil {
			r.err = s.wrap("raise", r.resource, err)
		} else {
			r.result = stored[r.resource]
		}
		close(r.done)
	}
}

// raised reads the maximum after raiseOp to t from its response.
func raised(op *etcdserverpb.ResponseOp, t uint64) (uint64, error) {
	outer := op.GetResponseTxn()
	if outer == nil {
		return 0, fmt.Errorf("etcd answered a raise without its nested Txn")
	}
	if outer.Succeeded {
		return t, nil
	}
	inner := outer.Responses[0].GetResponseTxn()
	if inner == nil {
		return 0, fmt.Errorf("etcd answered a raise without its nested Txn")
	}
	if inner.Succeeded {
		return t, nil // created
	}
	kvs := inner.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) != 1 {
		return 0, fmt.Errorf("etcd answered a raise's read with %d keys, want 1", len(kvs))
	}
	m, err := decode(kvs[0].Value)
	if err != nil {
		return 0, err
	}
	if m < t {
		return 0, fmt.Errorf("%w: maximum %d not raised to %d", ErrCorrupt, m, t)
	}
	return m, nil
}
