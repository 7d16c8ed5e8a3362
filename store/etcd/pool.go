package etcd

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// UpdatePool runs fn over pool's record (nil when there is none), read in
// one Get, and commits fn's next record (nil: leave it) in one Txn guarded
// by the key's ModRevision, durable in etcd before it returns. On a
// conflict it reads and runs fn again: fn may run more than once, so it must
// have no side effects. Errors: fn's, as is (nothing written); ErrConflict
// after maxAttempts conflicts; ErrClosed; the client's, wrapped.
func (s *Store) UpdatePool(pool string, fn func(record []byte) (next []byte, err error)) error {
	if s.closed.Load() {
		return ErrClosed
	}
	k := s.poolKey(pool)
	return s.casRetry("update pool", pool, func(ctx context.Context) (done bool, fnErr, err error) {
		resp, err := s.kv.Get(ctx, k)
		if err != nil {
			return false, nil, err
		}
		var rec []byte
		var rev int64
		if len(resp.Kvs) > 0 {
			rec, rev = append([]byte{}, resp.Kvs[0].Value...), resp.Kvs[0].ModRevision
		}
		next, err := fn(rec)
		if err != nil {
			return true, err, nil
		}
		if next == nil {
			return true, nil, nil
		}
		cresp, err := s.kv.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", rev)).
			Then(clientv3.OpPut(k, string(next))).Commit()
		if err != nil {
			return false, nil, err
		}
		return cresp.Succeeded, nil, nil
	})
}

// Pool returns pool's record, nil when there is none (one linearizable
// Get). Errors: ErrClosed; the client's, wrapped.
func (s *Store) Pool(pool string) ([]byte, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	var rec []byte
	err := s.do(func(ctx context.Context) error {
		resp, err := s.kv.Get(ctx, s.poolKey(pool))
		if err == nil && len(resp.Kvs) > 0 {
			rec = append([]byte{}, resp.Kvs[0].Value...)
		}
		return err
	})
	if err != nil {
		return nil, s.wrap("pool", pool, err)
	}
	return rec, nil
}

// EachPool calls fn with every pool record, in name (byte) order, from one
// range read (pools are few). fn's error stops the walk and is returned as
// is. Errors: ErrClosed; the client's, wrapped.
func (s *Store) EachPool(fn func(pool string, record []byte) error) error {
	if s.closed.Load() {
		return ErrClosed
	}
	base := s.prefix + kindPool
	type kv struct {
		name string
		rec  []byte
	}
	var kvs []kv
	err := s.do(func(ctx context.Context) error {
		kvs = kvs[:0]
		resp, err := s.kv.Get(ctx, base, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
		if err != nil {
			return err
		}
		for _, e := range resp.Kvs {
			kvs = append(kvs, kv{string(e.Key[len(base):]), append([]byte{}, e.Value...)})
		}
		return nil
	})
	if err != nil {
		return s.wrap("each pool", "", err)
	}
	for _, e := range kvs {
		if err := fn(e.name, e.rec); err != nil {
			return err
		}
	}
	return nil
}
