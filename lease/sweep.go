package lease

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// RemovableAt returns the moment from which Sweep may remove l's record:
// its expiry (or release), then its grace, one more TTL and the retention.
// A lease held, suspect, in grace or within that time is never removed.
func (m *Manager) RemovableAt(l Lease) time.Time {
	return l.ExpiresAt.Add(m.grace(l.TTL) + l.TTL + m.opts.Retention)
}

// removable reports whether l's record may go at now.
func (m *Manager) removable(l Lease, now time.Time) bool {
	st := m.StateAt(l, now)
	return (st == StateExpired || st == StateReleased) && !now.Before(m.RemovableAt(l))
}

// Sweep reads up to batch (>= 1) stored records on from where the last
// Sweep stopped (from the first after the last one), and removes those of
// leases expired or released for longer than their grace, TTL and the
// retention (Options.Retention). Each removal is one atomic step of the
// store that checks the record again, unchanged, and leaves the fence: a
// record renewed or acquired meanwhile stays, and the next grant of the
// name takes a token above the fence, which holds every token the name was
// granted, so no token is ever issued twice. A record whose fence is below
// its token (never written so) is kept. It returns how many it removed.
func (m *Manager) Sweep(batch int) (removed int, err error) {
	m.sweepMu.Lock()
	defer m.sweepMu.Unlock()
	now := m.opts.Now()
	var candidates []string
	read, last := 0, ""
	err = m.store.LeasesFrom("", m.sweepAfter, batch, func(name string, rec []byte) error {
		read, last = read+1, name
		if m.opts.Watched != nil && !m.opts.Watched(name) {
			return nil
		}
		l, err := decode(name, rec)
		if err != nil {
			m.opts.Logger.Warn("lease record not swept", "lease", name, "error", err.Error())
			return nil // kept, and the next ones still swept
		}
		if m.removable(*l, now) {
			candidates = append(candidates, name)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	if read < batch {
		m.sweepAfter = "" // the end: the next pass starts again at the first
	} else {
		m.sweepAfter = last
	}
	// The removals run sweepParallel at a time: a durable store commits
	// concurrent writes in one sync (Badger's write batches, etcd's raft
	// batches), where one after another each waits for its own.
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, sweepParallel)
	for _, name := range candidates {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if m.remove(name, now) {
				mu.Lock()
				removed++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if removed > 0 {
		m.opts.Logger.Debug("expired lease records removed", "removed", removed, "read", read,
			"retention", m.opts.Retention.String())
	}
	return removed, nil
}

// sweepParallel is how many removals a Sweep runs at once.
const sweepParallel = 16

// remove removes name's record if it is still removable at now, in one
// atomic step of the store, and reports whether it did.
func (m *Manager) remove(name string, now time.Time) bool {
	var gone bool
	err := m.store.RemoveLease(name, func(rec []byte, fenceMax uint64) (bool, error) {
		gone = false
		l, err := decode(name, rec)
		if err != nil {
			return false, err
		}
		if fenceMax < l.Token {
			return false, fmt.Errorf("lease %q: its fence %d is below its token %d: record kept", name, fenceMax, l.Token)
		}
		gone = m.removable(*l, now)
		return gone, nil
	})
	if err != nil {
		m.opts.Logger.Warn("lease record not removed", "lease", name, "error", err.Error())
		return false
	}
	if gone {
		m.removed.Add(1)
	}
	return gone
}

// Clean runs Sweep with batch every interval until ctx is done, logging
// its errors.
func (m *Manager) Clean(ctx context.Context, every time.Duration, batch int) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := m.Sweep(batch); err != nil {
			m.opts.Logger.Error("lease sweep failed", "error", err.Error())
		}
	}
}

// Removed returns how many lease records Sweep removed in this process.
func (m *Manager) Removed() uint64 { return m.removed.Load() }
