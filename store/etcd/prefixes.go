package etcd

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fenceproxy/fenceproxy/fence"
	"github.com/fenceproxy/fenceproxy/store/internal/keys"
)

// prefixKey is resource's entry in the index of prefix fences: Prefix +
// "x/" + resource (keys.PrefixIndex); "" for a name that is no prefix fence
// (not ending in "/"), which has none.
func (s *Store) prefixKey(resource string) string {
	if !keys.IsPrefix(resource) {
		return ""
	}
	return string(keys.PrefixIndex(s.prefix+kindPrefixes, resource))
}

// prefixIndexKey is the marker that the index of prefix fences is complete
// (value keys.PrefixIndexVersion).
func (s *Store) prefixIndexKey() string { return s.prefix + kindMeta + "prefix-index" }

// Prefixes returns up to limit prefix fences (names ending in "/") with a
// maximum above 0 that sort strictly after after ("" = from the start), in
// resource (byte) order, from one linearizable range read of the index
// alone. limit <= 0 returns none. A full page means there may be more: call
// again with after = its last resource. Errors: ErrClosed; ErrCorrupt; the
// client's, wrapped.
func (s *Store) Prefixes(after string, limit int) ([]fence.Record, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	if limit <= 0 {
		return nil, nil
	}
	base := s.prefix + kindPrefixes
	from, end := base, clientv3.GetPrefixRangeEnd(base)
	if after != "" {
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
		return nil, s.wrap("list prefixes after", after, err)
	}
	return out, nil
}

// indexed is a fence as buildPrefixIndex saw it: its maximum (the 8 bytes
// as stored) and the ModRevision of its key (0: absent).
type indexed struct {
	value string
	rev   int64
}

// buildPrefixIndex makes the index of prefix fences complete, once: Open
// calls it when the marker is absent (a prefix written before the index) or
// of another version. It reads the index, then every fence record in pages
// (this once), and writes each prefix fence's entry with a maximum above 0,
// and deletes each entry with no such fence, every change guarded by the
// ModRevision of the fence key it saw, then the marker. Replicas that open
// meanwhile and raise write the index themselves (their change moves the
// ModRevision, so this one's write is skipped), so a build beside them, or
// a second build at once, never undoes theirs.
func (s *Store) buildPrefixIndex() error {
	base := s.prefix + kindPrefixes
	var entries []string
	if err := s.eachKey(base, func(k, _ []byte, _ int64) {
		entries = append(entries, string(k[len(base):]))
	}); err != nil {
		return err
	}
	fbase := s.prefix + kindFence
	fences := map[string]indexed{}
	if err := s.eachKey(fbase, func(k, v []byte, rev int64) {
		resource := string(k[len(fbase):])
		if m, err := decode(v); keys.IsPrefix(resource) && err == nil && m > 0 {
			fences[resource] = indexed{string(v), rev}
		}
	}); err != nil {
		return err
	}
	var ops []sizedOp
	for resource, f := range fences {
		fk, ik := s.fenceKey(resource), s.prefixKey(resource)
		ops = append(ops, sizedOp{clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(fk), "=", f.rev)},
			[]clientv3.Op{clientv3.OpPut(ik, f.value)}, nil), len(fk) + len(ik) + 8 + 64})
	}
	for _, resource := range entries {
		if _, keep := fences[resource]; keep {
			continue
		}
		// The fence's ModRevision now; 0 when absent (etcd compares a
		// missing key's revisions as 0).
		var rev int64
		if err := s.do(func(ctx context.Context) error {
			resp, err := s.kv.Get(ctx, s.fenceKey(resource))
			if err == nil && len(resp.Kvs) == 1 {
				if m, derr := decode(resp.Kvs[0].Value); derr == nil && m > 0 && keys.IsPrefix(resource) {
					rev = -1 // raised since the scan: its raise wrote the entry
				} else {
					rev = resp.Kvs[0].ModRevision
				}
			}
			return err
		}); err != nil {
			return err
		}
		if rev < 0 {
			continue
		}
		fk, ik := s.fenceKey(resource), string(keys.PrefixIndex(base, resource))
		ops = append(ops, sizedOp{clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(fk), "=", rev)},
			[]clientv3.Op{clientv3.OpDelete(ik)}, nil), len(fk) + len(ik) + 64})
	}
	// In Txns within MaxTxnOps and maxTxnBytes, as raises are.
	for len(ops) > 0 {
		var batch []clientv3.Op
		size := 0
		for len(ops) > 0 && len(batch) < s.maxBatch && (len(batch) == 0 || size+ops[0].size <= maxTxnBytes) {
			batch = append(batch, ops[0].op)
			size += ops[0].size
			ops = ops[1:]
		}
		if err := s.do(func(ctx context.Context) error {
			_, err := s.kv.Txn(ctx).Then(batch...).Commit()
			return err
		}); err != nil {
			return err
		}
	}
	return s.do(func(ctx context.Context) error {
		_, err := s.kv.Put(ctx, s.prefixIndexKey(), keys.PrefixIndexVersion)
		return err
	})
}

// sizedOp is an operation and about what it takes in a request.
type sizedOp struct {
	op   clientv3.Op
	size int
}

// eachKey calls fn with every key under base, its value and ModRevision, in
// pages of listPage (each page at the revision of its read: buildPrefixIndex
// guards its writes per key, so it needs no view across pages).
func (s *Store) eachKey(base string, fn func(k, v []byte, rev int64)) error {
	end := clientv3.GetPrefixRangeEnd(base)
	from := base
	for {
		more := false
		err := s.do(func(ctx context.Context) error {
			resp, err := s.kv.Get(ctx, from, clientv3.WithRange(end), clientv3.WithLimit(listPage))
			if err != nil {
				return err
			}
			more = resp.More && len(resp.Kvs) > 0
			for _, kv := range resp.Kvs {
				fn(kv.Key, kv.Value, kv.ModRevision)
			}
			if more {
				from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
			}
			return nil
		})
		if err != nil || !more {
			return err
		}
	}
}
