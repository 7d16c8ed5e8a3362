package etcd

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// MaxAtOpen returns resource's maximum as it was at Open, and whether it had
// a record then: a Get of its fence key at the revision of Open's Txn. The
// fence's start-up grace uses it. Errors: ErrSnapshotReleased after
// ReleaseOpenSnapshot or Close; an error wrapping ErrCompacted (and the
// client's rpctypes.ErrCompacted) when etcd compacted that revision: fail
// closed; ErrCorrupt; the client's, wrapped.
func (s *Store) MaxAtOpen(resource string) (max uint64, found bool, err error) {
	s.openMu.Lock()
	released := s.released
	s.openMu.Unlock()
	if released {
		return 0, false, ErrSnapshotReleased
	}
	err = s.do(func(ctx context.Context) error {
		resp, err := s.kv.Get(ctx, s.fenceKey(resource), clientv3.WithRev(s.openRev))
		if err != nil {
			if isCompacted(err) {
				return fmt.Errorf("%w (revision %d): %w", ErrCompacted, s.openRev, err)
			}
			return err
		}
		if len(resp.Kvs) == 0 {
			return nil
		}
		found = true
		max, err = decode(resp.Kvs[0].Value)
		return err
	})
	if err != nil {
		return 0, false, s.wrap("read at open", resource, err)
	}
	return max, found, nil
}

// ReleaseOpenSnapshot makes MaxAtOpen fail from now on (etcd keeps no
// per-client snapshot: there is nothing else to release). Idempotent; Close
// calls it.
func (s *Store) ReleaseOpenSnapshot() {
	s.openMu.Lock()
	defer s.openMu.Unlock()
	s.released = true
}

// EmptyAtOpen reports whether the prefix held no fence record (a maximum of
// 0 included) and no lease record at Open.
func (s *Store) EmptyAtOpen() bool { return s.empty }

// MarkWritten gives resource a record with maximum 0 if it has none, durably
// before it returns: one Txn, "if the fence key does not exist, Put 0". A
// resource this process knows to have a record is answered from memory.
// Errors: ErrClosed; the client's, wrapped.
func (s *Store) MarkWritten(resource string) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if e, ok := s.cache.get(resource); ok && e.rec {
		return nil
	}
	fk := s.fenceKey(resource)
	ticket := s.cache.ticket()
	e := cacheEntry{rec: true}
	err := s.do(func(ctx context.Context) error {
		resp, err := s.kv.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(fk), "=", 0)).
			Then(clientv3.OpPut(fk, encode(0))).Else(clientv3.OpGet(fk)).Commit()
		if err != nil || resp.Succeeded {
			return err
		}
		// The resource had a record: cache what it holds, not 0 (a cached
		// maximum below etcd's would answer Max wrongly).
		if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) == 1 {
			e.max, err = decode(kvs[0].Value)
		}
		return err
	})
	if err != nil {
		return s.wrap("mark", resource, err)
	}
	s.cache.wrote(resource, e, ticket)
	return nil
}

// MarkCleanStop records durably (one Put of Prefix+"m/clean-stop") that the
// process stopped with no forwarded write unfinished, for the next
// TakeCleanStop. Errors: ErrClosed; the client's, wrapped.
func (s *Store) MarkCleanStop() error {
	if s.closed.Load() {
		return ErrClosed
	}
	err := s.do(func(ctx context.Context) error {
		_, err := s.kv.Put(ctx, s.cleanStopKey(), "fenceproxy stopped with no forwarded write unfinished")
		return err
	})
	if err != nil {
		return s.wrap("mark a clean stop", "", err)
	}
	return nil
}

// TakeCleanStop reports whether the previous process marked a clean stop,
// and removes the mark in the same Txn ("if it exists, delete it"), so a
// mark is taken once. Errors: ErrClosed; the client's, wrapped (then treat
// the stop as unclean).
func (s *Store) TakeCleanStop() (bool, error) {
	if s.closed.Load() {
		return false, ErrClosed
	}
	k := s.cleanStopKey()
	var taken bool
	err := s.do(func(ctx context.Context) error {
		resp, err := s.kv.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), ">", 0)).
			Then(clientv3.OpDelete(k)).Commit()
		if err == nil {
			taken = resp.Succeeded
		}
		return err
	})
	if err != nil {
		return false, s.wrap("take the clean-stop mark", "", err)
	}
	return taken, nil
}
