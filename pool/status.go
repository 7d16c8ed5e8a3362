package pool

import (
	"slices"
	"time"

	"github.com/fenceproxy/fenceproxy/lease"
)

// Shard states in a Status.
const (
	StateFree    = "free"    // no lease keeps others out: a claim may get it
	StateHeld    = "held"    // leased and renewed within the revoke threshold
	StateSuspect = "suspect" // leased, not renewed for the revoke threshold
	StateGrace   = "grace"   // the lease expired; only its holder may renew
	StateDone    = "done"    // marked done: never dispatched again
)

// ShardStatus is one shard of a Status.
type ShardStatus struct {
	Shard     string
	Name      string // the lease name and the fence it raises (ShardName): "{pool}/{shard}", or the pool's prefix with the shard
	State     string // one of the State* constants
	Holder    string // the lease's holder ("" if never leased); for a free shard, the last one
	Token     uint64 // the lease's token; for a done shard, the token that marked it
	ExpiresAt time.Time
	GraceEnds time.Time
	Standby   string // the holder first in line for it ("": none)
}

// HolderStatus is one live holder of a Status.
type HolderStatus struct {
	Holder   string
	Shards   int      // shards it holds (held, suspect or in grace)
	HandBack []string // shards it is asked to hand back
	Waiting  bool     // it found no shard free at its last claim
}

// Status is a pool's state at one moment.
type Status struct {
	Pool    string
	Prefix  string // the shards' lease name template ("": "{pool}/{shard}")
	Shards  []ShardStatus
	Holders []HolderStatus // live holders, by name
	Share   int            // ceil(open shards / live holders)
	Open    int            // shards not done
	Done    int
}

// Status returns pool's shards with their states and the live holders with
// their counts. Errors: ErrNotFound; store errors.
func (p *Pools) Status(pool string) (Status, error) {
	rec, err := p.read(pool)
	if err != nil {
		return Status{}, err
	}
	v, err := p.view(pool, rec)
	if err != nil {
		return Status{}, err
	}
	st := Status{Pool: pool, Prefix: rec.Prefix, Open: v.open, Done: len(v.order) - v.open}
	st.Share, _ = v.share("")
	for _, s := range v.order {
		sv := v.shards[s]
		ss := ShardStatus{Shard: s, Name: ShardName(pool, rec.Prefix, s), State: StateFree}
		if sb, ok := rec.Standby[s]; ok && sb.Until.After(v.now) {
			ss.Standby = sb.Holder
		}
		if sv.lease != nil {
			ss.Holder, ss.Token, ss.ExpiresAt = sv.lease.Holder, sv.lease.Token, sv.lease.ExpiresAt
			ss.GraceEnds = p.leases.GraceEnds(*sv.lease)
			switch sv.state {
			case lease.StateHeld:
				ss.State = StateHeld
			case lease.StateSuspect:
				ss.State = StateSuspect
			case lease.StateGrace:
				ss.State = StateGrace
			}
		}
		if sv.done {
			ss.State, ss.Token = StateDone, rec.Done[s]
		}
		st.Shards = append(st.Shards, ss)
	}
	holders := map[string]*HolderStatus{}
	for h, n := range v.counts {
		holders[h] = &HolderStatus{Holder: h, Shards: n, HandBack: v.handBack(h)}
	}
	for h := range v.waiting {
		if holders[h] == nil {
			holders[h] = &HolderStatus{Holder: h, Waiting: true}
		}
	}
	for _, h := range holders {
		st.Holders = append(st.Holders, *h)
	}
	slices.SortFunc(st.Holders, func(a, b HolderStatus) int {
		switch {
		case a.Holder < b.Holder:
			return -1
		case a.Holder > b.Holder:
			return 1
		}
		return 0
	})
	return st, nil
}

// Each calls fn with every pool's Status, in name order (for metrics).
// Errors: store errors, fn's.
func (p *Pools) Each(fn func(Status) error) error {
	var names []string
	if err := p.store.EachPool(func(name string, _ []byte) error {
		names = append(names, name)
		return nil
	}); err != nil {
		return err
	}
	for _, n := range names {
		st, err := p.Status(n)
		if err != nil {
			return err
		}
		if err := fn(st); err != nil {
			return err
		}
	}
	return nil
}
