package etcd

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fenceproxy/fenceproxy/fence"
)

// List returns up to limit records whose resource starts with prefix and
// sorts strictly after after ("" = from the start), in resource (byte)
// order, from one linearizable range read; a maximum of 0 (MarkWritten) is
// listed too, lease and upload records are not. limit <= 0 returns none. A
// full page means there may be more: call again with after = its last
// resource. Errors: ErrClosed; ErrCorrupt; the client's, wrapped.
func (s *Store) List(prefix, after string, limit int) ([]fence.Record, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	if limit <= 0 {
		return nil, nil
	}
	base := s.prefix + kindFence
	from, end := base+prefix, clientv3.GetPrefixRangeEnd(base+prefix)
	if after >= prefix && after != "" {
		from = base + after + "\x00" // the smallest key above after
	}
	var out []fence.Record
	err := s.do(func(ctx context.Context) error {
		resp, err := s.kv.Get(ctx, from, clientv3.WithRange(end), clientv3.WithLimit(int64(limit)))
		if err != nil {
			return err
		}
		for _, kv := range resp.Kvs {
			m, err := decode(kv.Value)
			if err != nil {
				return err
			}
			out = append(out, fence.Record{Resource: string(kv.Key[len(base):]), Token: m})
		}
		return nil
	})
	if err != nil {
		return nil, s.wrap("list", prefix, err)
	}
	return out, nil
}

// Reset deletes resource's fence and lease records in one Txn ("if the
// maximum is above 0, delete both, returning the fence"), durable before it
// returns, and returns the maximum removed: 0 when there was none or only
// MarkWritten's, and then nothing is written. The one way a maximum goes
// down, for an operator after a coordinator's counter restarted.
// Errors: ErrClosed; ErrCorrupt; the client's, wrapped.
func (s *Store) Reset(resource string) (uint64, error) {
	if s.closed.Load() {
		return 0, ErrClosed
	}
	fk := s.fenceKey(resource)
	var removed uint64
	g, err := s.guard(resource)
	if err != nil {
		return 0, s.wrap("reset", resource, err)
	}
	err = s.do(func(ctx context.Context) error {
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.Value(fk), ">", encode(0))}
		var orElse []clientv3.Op
		if g != nil {
			cmps = append(cmps, g.cmp())
			orElse = append(orElse, clientv3.OpGet(g.key))
		}
		then := []clientv3.Op{
			clientv3.OpDelete(fk, clientv3.WithPrevKV()),
			clientv3.OpDelete(s.leaseKey(resource)),
		}
		if ik := s.prefixKey(resource); ik != "" {
			then = append(then, clientv3.OpDelete(ik))
		}
		resp, err := s.kv.Txn(ctx).If(cmps...).Then(then...).Else(orElse...).Commit()
		if err != nil {
			return err
		}
		if !resp.Succeeded {
			if g != nil && g.lost(resp.Responses[0].GetResponseRange()) {
				return fmt.Errorf("%w: its shard changed owner", ErrNotOwner)
			}
			return nil
		}
		prev := resp.Responses[0].GetResponseDeleteRange().GetPrevKvs()
		if len(prev) != 1 {
			return nil
		}
		removed, err = decode(prev[0].Value)
		return err
	})
	// Forget the resource whatever the outcome: a Txn that failed on the
	// way back may have committed.
	s.cache.drop(resource)
	if err != nil {
		return 0, s.wrap("reset", resource, err)
	}
	return removed, nil
}
