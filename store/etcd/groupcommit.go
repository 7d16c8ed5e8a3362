package etcd

import (
	"context"
	"fmt"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fenceproxy/fenceproxy/store/internal/groupcommit"
)

// takeRaises is the size of the next batch of raises (see
// groupcommit.Group): requests from the head of queue while they name at
// most maxBatch distinct resources whose operations take at most
// maxTxnBytes; at least one.
func (s *Store) takeRaises(queue []*groupcommit.Request) int {
	seen := make(map[string]struct{}, min(len(queue), s.maxBatch))
	n, size := 0, 0
	for ; n < len(queue); n++ {
		r := queue[n].Resource
		if _, ok := seen[r]; !ok {
			cost := s.raiseOpBytes(r)
			if len(seen) == s.maxBatch || (len(seen) > 0 && size+cost > maxTxnBytes) {
				break
			}
			seen[r] = struct{}{}
			size += cost
		}
	}
	return n
}

// maxTxnBytes bounds the size of one raise Txn, below etcd's default
// --max-request-bytes (1.5 MiB): long resource names fill it before
// MaxTxnOps does (a raise names its key five times).
const maxTxnBytes = 1 << 20

// raiseOpBytes is about what raiseOp(key of resource) takes in a request:
// the key five times, two values and the framing, and a prefix fence's index
// key twice with two more values.
func (s *Store) raiseOpBytes(resource string) int {
	n := 5*(len(s.prefix)+len(kindFence)+len(resource)) + 2*8 + 64
	if ik := s.prefixKey(resource); ik != "" {
		n += 2*len(ik) + 2*8
	}
	return n
}

// raiseOp is the nested Txn that raises one fence key to t: if its value is
// below t (byte order of 8-byte big-endian tokens is numeric order), Put t;
// else, if the key does not exist (a value compare on a missing key fails),
// Put t; else Get it. A Put of a prefix fence puts its index key (ik, ""
// for none) too.
func raiseOp(key, ik string, t uint64) clientv3.Op {
	v := encode(t)
	put := []clientv3.Op{clientv3.OpPut(key, v)}
	if ik != "" {
		put = append(put, clientv3.OpPut(ik, v))
	}
	create := clientv3.OpTxn(
		[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0)},
		put,
		[]clientv3.Op{clientv3.OpGet(key)},
	)
	return clientv3.OpTxn(
		[]clientv3.Cmp{clientv3.Compare(clientv3.Value(key), "<", v)},
		put,
		[]clientv3.Op{create},
	)
}

// commitRaises raises every resource of batch to the largest token asked for
// it, in one Txn (the raises' group commit: one round trip and one raft
// entry for the batch), and sets each request's answer.
func (s *Store) commitRaises(batch []*groupcommit.Request) {
	want := make(map[string]uint64, len(batch))
	var order []string
	for _, r := range batch {
		if _, ok := want[r.Resource]; !ok {
			order = append(order, r.Resource)
		}
		want[r.Resource] = max(want[r.Resource], r.Token)
	}
	ops := make([]clientv3.Op, len(order))
	for i, res := range order {
		ops[i] = raiseOp(s.fenceKey(res), s.prefixKey(res), want[res])
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
			r.Err = s.wrap("raise", r.Resource, err)
		} else {
			r.Result = stored[r.Resource]
		}
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
