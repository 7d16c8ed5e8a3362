package etcd

import (
	"context"
	"fmt"
	"hash/maphash"
	"math"

	clientv3 "go.etcd.io/etcd/client/v3"
)

var leaseSeed = maphash.MakeSeed()

// UpdateLease runs fn over name's lease record (nil when there is none) and
// name's fence maximum, read together in one Txn, and commits fn's next
// record (nil: leave it) and its raise of the fence (0 or not above the
// maximum: none) in one Txn guarded by both keys' ModRevision, durable in
// etcd before it returns. On a conflict (the fence was raised, or the record
// changed, in between) it reads and runs fn again: fn may run more than
// once, so it must have no side effects. Calls of this process on one name
// are serialised before they reach etcd.
// Errors: fn's, as is (nothing written); ErrRange when the raise is above
// 2^63-1 (nothing written); ErrConflict after maxAttempts conflicts;
// ErrClosed; ErrCorrupt; the client's, wrapped.
func (s *Store) UpdateLease(name string, fn func(record []byte, fenceMax uint64) (next []byte, raise uint64, err error)) error {
	if s.closed.Load() {
		return ErrClosed
	}
	mu := &s.leaseMu[maphash.String(leaseSeed, name)%uint64(len(s.leaseMu))]
	mu.Lock()
	defer mu.Unlock()
	fk, lk := s.fenceKey(name), s.leaseKey(name)
	for attempt := 1; attempt <= maxAttempts; attempt++ {
		ticket := s.cache.ticket()
		var fnErr error
		var done bool
		var result cacheEntry
		err := s.do(func(ctx context.Context) error {
			resp, err := s.kv.Txn(ctx).Then(clientv3.OpGet(fk), clientv3.OpGet(lk)).Commit()
			if err != nil {
				return err
			}
			var stored uint64
			var frev, lrev int64
			if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
				if stored, err = decode(kvs[0].Value); err != nil {
					return err
				}
				frev = kvs[0].ModRevision
				result.rec = true
			}
			var rec []byte
			if kvs := resp.Responses[1].GetResponseRange().GetKvs(); len(kvs) > 0 {
				rec = append([]byte{}, kvs[0].Value...)
				lrev = kvs[0].ModRevision
			}
			next, raise, err := fn(rec, stored)
			if err != nil {
				fnErr = err
				return nil
			}
			if raise > math.MaxInt64 {
				return ErrRange
			}
			result.max = stored
			var ops []clientv3.Op
			if next != nil {
				ops = append(ops, clientv3.OpPut(lk, string(next)))
			}
			if raise > stored {
				ops = append(ops, clientv3.OpPut(fk, encode(raise)))
				if ik := s.prefixKey(name); ik != "" {
					ops = append(ops, clientv3.OpPut(ik, encode(raise)))
				}
				result = cacheEntry{max: raise, rec: true}
			}
			if len(ops) == 0 {
				done = true // fn changed nothing: the read was one consistent view
				return nil
			}
			cmps := []clientv3.Cmp{
				clientv3.Compare(clientv3.ModRevision(fk), "=", frev),
				clientv3.Compare(clientv3.ModRevision(lk), "=", lrev),
			}
			g, err := s.guard(name)
			if err != nil {
				return err
			}
			var orElse []clientv3.Op
			if g != nil {
				cmps = append(cmps, g.cmp())
				orElse = append(orElse, clientv3.OpGet(g.key))
			}
			cresp, err := s.kv.Txn(ctx).If(cmps...).Then(ops...).Else(orElse...).Commit()
			if err != nil {
				return err
			}
			if !cresp.Succeeded && g != nil && g.lost(cresp.Responses[0].GetResponseRange()) {
				return fmt.Errorf("%w: its shard changed owner", ErrNotOwner)
			}
			done = cresp.Succeeded
			return nil
		})
		if fnErr != nil {
			return fnErr
		}
		if err != nil {
			return s.wrap("update lease", name, err)
		}
		if done {
			// fn saw a committed maximum, perhaps one whose Raise has not
			// cached it yet: cache it, so no Max after this call answers
			// below what fn was given.
			if result.rec {
				s.cache.wrote(name, result, ticket)
			}
			return nil
		}
	}
	return s.wrap("update lease", name, ErrConflict)
}

// Lease returns name's lease record, nil when there is none (one
// linearizable Get). Errors: ErrClosed; the client's, wrapped.
func (s *Store) Lease(name string) ([]byte, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	var rec []byte
	err := s.do(func(ctx context.Context) error {
		resp, err := s.kv.Get(ctx, s.leaseKey(name))
		if err == nil && len(resp.Kvs) > 0 {
			rec = append([]byte{}, resp.Kvs[0].Value...)
		}
		return err
	})
	if err != nil {
		return nil, s.wrap("lease", name, err)
	}
	return rec, nil
}

// EachLease calls fn with every lease record, in name (byte) order, from one
// consistent view: pages of listPage records, each page after the first read
// at the first page's revision. fn's error stops the walk and is returned as
// is. Errors: ErrClosed; the client's, wrapped (ErrCompacted's cause when
// etcd compacted that revision during a long walk).
func (s *Store) EachLease(fn func(name string, record []byte) error) error {
	return s.leaseRange("each lease", "", nil, math.MaxInt, fn)
}

// LeasesFrom calls fn with up to limit lease records whose name starts with
// prefix and sorts strictly after after, in name (byte) order: ranges that
// begin at the key after after (never at the first record), of at most
// listPage records each, every one after the first read at the first one's
// revision. fn's error stops the walk and is returned as is. Errors:
// ErrClosed; the client's, wrapped (ErrCompacted's cause when etcd
// compacted that revision during a long walk).
func (s *Store) LeasesFrom(prefix, after string, limit int, fn func(name string, record []byte) error) error {
	return s.leaseRange("list leases", prefix, &after, limit, fn)
}

// leaseRange is LeasesFrom (after nil: from the first record on), its
// errors wrapped as op's.
func (s *Store) leaseRange(op, prefix string, after *string, limit int, fn func(name string, record []byte) error) error {
	if s.closed.Load() {
		return ErrClosed
	}
	base := s.prefix + kindLease
	end := clientv3.GetPrefixRangeEnd(base + prefix)
	from, rev := base+prefix, int64(0)
	if after != nil && *after >= prefix {
		from = base + *after + "\x00"
	}
	for limit > 0 {
		type kv struct {
			name string
			rec  []byte
		}
		var kvs []kv
		more := false
		err := s.do(func(ctx context.Context) error {
			opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(int64(min(limit, listPage)))}
			if rev != 0 {
				opts = append(opts, clientv3.WithRev(rev))
			}
			resp, err := s.kv.Get(ctx, from, opts...)
			if err != nil {
				return err
			}
			if rev == 0 {
				rev = resp.Header.Revision
			}
			more = resp.More
			for _, e := range resp.Kvs {
				kvs = append(kvs, kv{string(e.Key[len(base):]), append([]byte{}, e.Value...)})
			}
			return nil
		})
		if err != nil {
			return s.wrap(op, prefix, err)
		}
		for _, e := range kvs {
			if err := fn(e.name, e.rec); err != nil {
				return err
			}
		}
		limit -= len(kvs)
		if !more || len(kvs) == 0 {
			return nil
		}
		from = base + kvs[len(kvs)-1].name + "\x00"
	}
	return nil
}

// RemoveLease reads name's lease record and fence maximum in one Txn, runs
// fn, and when it returns true deletes the record in a Txn guarded by both
// keys' ModRevision (the fence record stays); on a conflict it reads and
// runs fn again. No record: fn is not called. Calls of this process on one
// name are serialised with its UpdateLease. Errors: fn's, as is (nothing
// written); ErrConflict after maxAttempts conflicts; ErrClosed; ErrCorrupt;
// the client's, wrapped.
func (s *Store) RemoveLease(name string, fn func(record []byte, fenceMax uint64) (remove bool, err error)) error {
	if s.closed.Load() {
		return ErrClosed
	}
	mu := &s.leaseMu[maphash.String(leaseSeed, name)%uint64(len(s.leaseMu))]
	mu.Lock()
	defer mu.Unlock()
	fk, lk := s.fenceKey(name), s.leaseKey(name)
	return s.casRetry("remove lease", name, func(ctx context.Context) (done bool, fnErr, err error) {
		resp, err := s.kv.Txn(ctx).Then(clientv3.OpGet(fk), clientv3.OpGet(lk)).Commit()
		if err != nil {
			return false, nil, err
		}
		kvs := resp.Responses[1].GetResponseRange().GetKvs()
		if len(kvs) == 0 {
			return true, nil, nil
		}
		rec, lrev := append([]byte{}, kvs[0].Value...), kvs[0].ModRevision
		var stored uint64
		var frev int64
		if fkvs := resp.Responses[0].GetResponseRange().GetKvs(); len(fkvs) > 0 {
			if stored, err = decode(fkvs[0].Value); err != nil {
				return false, nil, err
			}
			frev = fkvs[0].ModRevision
		}
		remove, err := fn(rec, stored)
		if err != nil || !remove {
			return true, err, nil
		}
		cresp, err := s.kv.Txn(ctx).If(
			clientv3.Compare(clientv3.ModRevision(fk), "=", frev),
			clientv3.Compare(clientv3.ModRevision(lk), "=", lrev),
		).Then(clientv3.OpDelete(lk)).Commit()
		if err != nil {
			return false, nil, err
		}
		return cresp.Succeeded, nil, nil
	})
}

// casRetry runs attempt, through do (so again while etcd is unavailable),
// until it reports done (its transaction committed, or there was nothing to
// write), at most maxAttempts times: each time it is not done, a guarded
// transaction lost to a concurrent change. fnErr is the caller's callback
// refusing, returned as is. Errors: fnErr; attempt's, wrapped as op's on
// name; ErrConflict, wrapped so, after maxAttempts attempts.
func (s *Store) casRetry(op, name string, attempt func(ctx context.Context) (done bool, fnErr, err error)) error {
	for range maxAttempts {
		var done bool
		var fnErr error
		err := s.do(func(ctx context.Context) error {
			var err error
			done, fnErr, err = attempt(ctx)
			return err
		})
		if fnErr != nil {
			return fnErr
		}
		if err != nil {
			return s.wrap(op, name, err)
		}
		if done {
			return nil
		}
	}
	return s.wrap(op, name, ErrConflict)
}
