package storetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/fence"
	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/pool"
)

var leaseSweepTests = []subtest{
	{"RemovedNameTokenRises", testSweepTokenRises},
	{"KeepsLiveAndRecent", testSweepKeeps},
	{"PoolShards", testSweepPoolShards},
	{"KeepsRecordAboveItsFence", testSweepKeepsAboveFence},
}

// A record whose token is above its name's fence (never written so by a
// grant, which raises the fence with it; a fence lost or reset apart from
// it) is the only trace of that token: the sweep keeps it, and the next
// grant passes it.
func testSweepKeepsAboveFence(r *rig) {
	t := r.t
	c := &clock{now: time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)}
	m := r.manager(c)
	rec := fmt.Sprintf(`{"holder":"w1","token":41,"ttl":10000000000,"acquired_at":%q,"renewed_at":%q,"expires_at":%q}`,
		c.Now().Format(time.RFC3339Nano), c.Now().Format(time.RFC3339Nano), c.Now().Add(10*time.Second).Format(time.RFC3339Nano))
	r.setLease("job/lost-fence", []byte(rec), 3) // the fence at 3, the record at 41
	c.advance(time.Hour)
	if n := sweepAll(r, m, 10); n != 0 {
		t.Fatalf("Sweep removed %d records, want 0: the record is above its fence", n)
	}
	if r.lease("job/lost-fence") == nil {
		t.Fatal("the record above its fence was removed")
	}
	if l := r.acquire(m, "job/lost-fence", "w2", 10*time.Second); l.Token != 42 {
		t.Fatalf("token %d after the record above its fence, want 42", l.Token)
	}
}

// retention is the sweep tests' Options.Retention.
const retention = 10 * time.Minute

// clock is a hand-driven clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// manager returns a lease manager over the rig's store (a fence barrier
// in front of it) on clock c, with the sweep tests' retention.
func (r *rig) manager(c *clock) *lease.Manager {
	r.t.Helper()
	b, err := fence.New(r.s, fence.Options{DrainTimeout: 5 * time.Second})
	if err != nil {
		r.t.Fatalf("fence.New: %v", err)
	}
	return lease.NewManager(r.s, b, lease.Options{Now: c.Now, Retention: retention})
}

func (r *rig) acquire(m *lease.Manager, name, holder string, ttl time.Duration) lease.Lease {
	r.t.Helper()
	l, err := m.Acquire(context.Background(), name, holder, ttl)
	if err != nil {
		r.t.Fatalf("Acquire(%q, %q): %v", name, holder, err)
	}
	return l
}

// sweepAll sweeps with batch until a whole round (from the first record to
// the last) removed nothing more, and returns how many went.
func sweepAll(r *rig, m *lease.Manager, batch int) int {
	r.t.Helper()
	total, idle := 0, 0
	for n := 0; idle < 2*(len(r.leases())/batch+2); n++ {
		if n > 10000 {
			r.t.Fatalf("Sweep did not settle")
		}
		got, err := m.Sweep(batch)
		if err != nil {
			r.t.Fatalf("Sweep: %v", err)
		}
		if got == 0 {
			idle++
		} else {
			idle = 0
		}
		total += got
	}
	return total
}

// A name whose expired record was swept away, acquired again (by another
// holder, or by the same one, after a reopen too), gets a token above
// every token granted before, and the fence never went down.
func testSweepTokenRises(r *rig) {
	t := r.t
	c := &clock{now: time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)}
	m := r.manager(c)
	const ttl = 10 * time.Second
	var top uint64
	for i := range 3 {
		l := r.acquire(m, "job/x", "w1", ttl)
		if l.Token <= top {
			t.Fatalf("grant %d: token %d, not above %d", i, l.Token, top)
		}
		top = l.Token
	}
	r.acquire(m, "job/y", "w1", ttl) // a neighbour that stays recent
	for round := range 3 {
		c.advance(ttl + ttl*2/3 + ttl + retention + time.Second)
		r.acquire(m, "job/y", "w1", ttl)
		if n := sweepAll(r, m, 1); n != 1 {
			t.Fatalf("round %d: Sweep removed %d records, want 1 (job/x)", round, n)
		}
		if rec := r.lease("job/x"); rec != nil {
			t.Fatalf("round %d: record of job/x %q after the sweep, want none", round, rec)
		}
		if _, _, err := m.Get("job/x"); err != lease.ErrNotFound {
			t.Fatalf("round %d: Get of a swept lease: %v, want ErrNotFound", round, err)
		}
		if f := r.max("job/x"); f != top {
			t.Fatalf("round %d: fence %d after the sweep, want %d (it stays)", round, f, top)
		}
		if round == 1 {
			r.restart()
			m = r.manager(c)
		}
		holder := []string{"w2", "w1", "w3"}[round]
		l := r.acquire(m, "job/x", holder, ttl)
		if l.Token <= top {
			t.Fatalf("round %d: token %d for %s after the sweep, want above %d", round, l.Token, holder, top)
		}
		top = l.Token
		if f := r.max("job/x"); f != top {
			t.Fatalf("round %d: fence %d, want the new token %d", round, f, top)
		}
		if _, err := m.Renew("job/x", holder, l.Token); err != nil {
			t.Fatalf("round %d: Renew after the re-acquire: %v", round, err)
		}
	}
	if rec := r.lease("job/y"); rec == nil {
		t.Fatalf("the held neighbour job/y was removed")
	}
}

// Only records expired or released for longer than grace + TTL +
// retention go: held, suspect, in grace, renewed in grace, and expired or
// released within that time stay, whatever the batch.
func testSweepKeeps(r *rig) {
	t := r.t
	for _, batch := range []int{1, 3, 100} {
		t.Run(fmt.Sprint("batch ", batch), func(t *testing.T) {
			sub := newRigOn(t, r)
			sweepKeeps(sub, batch)
		})
	}
}

func sweepKeeps(r *rig, batch int) {
	t := r.t
	c := &clock{now: time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)}
	m := r.manager(c)
	const ttl = 60 * time.Second // grace 40s, revoke after 30s
	span := ttl*2/3 + ttl + retention
	// Old: expired or released long enough ago.
	r.acquire(m, "old/expired", "w", ttl)
	rel := r.acquire(m, "old/released", "w", ttl)
	if _, err := m.Release("old/released", "w", rel.Token); err != nil {
		t.Fatal(err)
	}
	c.advance(ttl + span + time.Second)
	// Recent: expired or released, within grace + TTL + retention.
	r.acquire(m, "recent/expired", "w", ttl)
	t1 := c.Now()
	// Renewed in its grace, then every 50s: its first expiry is long past
	// grace + TTL + retention by the end.
	rg := r.acquire(m, "live/renewed-in-grace", "w", ttl)
	c.advance(ttl + 10*time.Second)
	if _, err := m.Renew("live/renewed-in-grace", "w", rg.Token); err != nil {
		t.Fatal(err)
	}
	end := t1.Add(ttl + span - 2*time.Second) // recent/expired still within
	to := func(at time.Time) {
		for c.Now().Before(at) {
			c.advance(min(50*time.Second, at.Sub(c.Now())))
			if _, err := m.Renew("live/renewed-in-grace", "w", rg.Token); err != nil {
				t.Fatal(err)
			}
		}
	}
	to(end.Add(-ttl - 20*time.Second))
	r.acquire(m, "live/grace", "w", ttl)            // 20s into its grace at the end
	rel = r.acquire(m, "recent/released", "w", ttl) // released 80s before the end
	if _, err := m.Release("recent/released", "w", rel.Token); err != nil {
		t.Fatal(err)
	}
	to(end.Add(-ttl/2 - time.Second))
	r.acquire(m, "live/suspect", "w", ttl) // not renewed for 31s at the end
	to(end)
	r.acquire(m, "live/held", "w", ttl)
	want := map[string]lease.State{"live/held": lease.StateHeld, "live/suspect": lease.StateSuspect,
		"live/grace": lease.StateGrace, "live/renewed-in-grace": lease.StateHeld,
		"recent/expired": lease.StateExpired, "recent/released": lease.StateReleased}
	for name, st := range want {
		if _, got, err := m.Get(name); err != nil || got != st {
			t.Fatalf("%s: state %q (%v), want %q", name, got, err, st)
		}
	}
	if n := sweepAll(r, m, batch); n != 2 {
		t.Fatalf("Sweep removed %d records, want 2 (old/*)", n)
	}
	for _, name := range []string{"old/expired", "old/released"} {
		if rec := r.lease(name); rec != nil {
			t.Errorf("%s kept: %s", name, rec)
		}
	}
	for name := range want {
		if rec := r.lease(name); rec == nil {
			t.Errorf("%s removed, want it kept", name)
		}
	}
	if m.Removed() != 2 {
		t.Errorf("Removed() = %d, want 2", m.Removed())
	}
}

// A pool's shard leases ("{pool}/{shard}", and a prefix template's),
// swept once they lapsed, are claimed again with tokens above every one
// before, and the pool's status lists the shards.
func testSweepPoolShards(r *rig) {
	t := r.t
	c := &clock{now: time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)}
	m := r.manager(c)
	p := pool.New(r.s, m, pool.Events{})
	if _, err := p.Define("jobs", pool.Spec{Shards: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Define("reports", pool.Spec{Shards: 2, Prefix: "reports/{shard}/"}); err != nil {
		t.Fatal(err)
	}
	const ttl = 10 * time.Second
	tokens := map[string]uint64{} // lease name -> largest token granted
	claimAll := func(holder string) {
		t.Helper()
		for _, pl := range []string{"jobs", "reports"} {
			for range 2 {
				cl, err := p.Claim(context.Background(), pl, holder, ttl, false)
				if err != nil {
					t.Fatalf("Claim(%s, %s): %v", pl, holder, err)
				}
				if cl.Lease.Token <= tokens[cl.Lease.Name] {
					t.Fatalf("Claim(%s, %s): %s token %d, want above %d", pl, holder, cl.Lease.Name, cl.Lease.Token, tokens[cl.Lease.Name])
				}
				tokens[cl.Lease.Name] = cl.Lease.Token
			}
		}
	}
	claimAll("w1")
	if len(tokens) != 4 || tokens["reports/0/"] == 0 || tokens["jobs/0"] == 0 {
		t.Fatalf("shard leases %v, want jobs/0, jobs/1, reports/0/, reports/1/", tokens)
	}
	c.advance(ttl + ttl*2/3 + ttl + retention + time.Second)
	if n := sweepAll(r, m, 2); n != 4 {
		t.Fatalf("Sweep removed %d shard leases, want 4", n)
	}
	for name, tok := range tokens {
		if f := r.max(name); f != tok {
			t.Fatalf("fence of %s %d after the sweep, want %d", name, f, tok)
		}
	}
	claimAll("w2")
	st, err := p.Status("jobs")
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(st) == "" {
		t.Fatal("empty status")
	}
}
