package pool

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/fence"
	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/store/badger"
)

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

type rig struct {
	t     *testing.T
	store *badger.Store
	m     *lease.Manager
	p     *Pools
	c     *clock
	dir   string
	lopts lease.Options // the manager's options (Now is the rig's clock)
}

func newRig(t *testing.T) *rig {
	t.Helper()
	r := &rig{t: t, dir: t.TempDir(), c: &clock{now: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}}
	r.open()
	t.Cleanup(func() { r.store.Close() })
	return r
}

// open opens (or reopens) the store and builds the manager and pools on it.
func (r *rig) open() {
	s, err := badger.Open(r.dir, badger.Options{})
	if err != nil {
		r.t.Fatal(err)
	}
	b, err := fence.New(s, fence.Options{DrainTimeout: time.Second})
	if err != nil {
		r.t.Fatal(err)
	}
	r.store = s
	lopts := r.lopts
	lopts.Now = r.c.Now
	r.m = lease.NewManager(s, b, lopts)
	r.p = New(s, r.m, Events{})
}

func (r *rig) define(pool string, spec Spec) {
	r.t.Helper()
	if _, err := r.p.Define(pool, spec); err != nil {
		r.t.Fatalf("Define(%s): %v", pool, err)
	}
}

func (r *rig) claim(pool, holder string) Claim {
	r.t.Helper()
	c, err := r.p.Claim(context.Background(), pool, holder, 10*time.Second, false)
	if err != nil {
		r.t.Fatalf("Claim(%s, %s): %v", pool, holder, err)
	}
	return c
}

// claimAll claims for holder until it gets no shard; it returns the shards.
func (r *rig) claimAll(pool, holder string) map[string]Claim {
	r.t.Helper()
	out := map[string]Claim{}
	for {
		c, err := r.p.Claim(context.Background(), pool, holder, 10*time.Second, false)
		if errors.Is(err, ErrNoShard) {
			return out
		}
		if err != nil {
			r.t.Fatalf("Claim(%s, %s): %v", pool, holder, err)
		}
		out[c.Shard] = c
	}
}

func TestDefineValidates(t *testing.T) {
	r := newRig(t)
	for _, bad := range []Spec{{}, {Shards: 2, Names: []string{"a"}}, {Shards: MaxShards + 1}, {Names: []string{"a", "a"}}, {Names: []string{"a/b"}}, {Shards: -1}} {
		if _, err := r.p.Define("p", bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("Define(%+v) = %v, want ErrInvalid", bad, err)
		}
	}
	if _, err := r.p.Define("a/b", Spec{Shards: 1}); !errors.Is(err, ErrInvalid) {
		t.Errorf("pool name with a slash: %v, want ErrInvalid", err)
	}
	names, err := r.p.Define("p", Spec{Shards: 3})
	if err != nil || fmt.Sprint(names) != "[0 1 2]" {
		t.Fatalf("Define = %v, %v", names, err)
	}
	if _, err := r.p.Claim(context.Background(), "nope", "w1", time.Second, false); !errors.Is(err, ErrNotFound) {
		t.Errorf("claim on an undefined pool: %v, want ErrNotFound", err)
	}
}

// A claim is a lease acquire: a new token, the fence raised to it; a holder
// alone gets every shard; grow adds shards, shrink needs them free; it all
// survives a reopen.
func TestClaimIsALeaseAndDefinitionIsDurable(t *testing.T) {
	r := newRig(t)
	r.define("p", Spec{Shards: 4})
	got := r.claimAll("p", "w1")
	if len(got) != 4 {
		t.Fatalf("a lone holder got %d of 4 shards", len(got))
	}
	for s, c := range got {
		if m, _ := r.store.Max("p/" + s); m != c.Lease.Token || c.Lease.Token == 0 {
			t.Errorf("shard %s: token %d, fence %d: want the fence at the token", s, c.Lease.Token, m)
		}
	}
	if _, err := r.p.Define("p", Spec{Shards: 2}); !errors.Is(err, ErrBusy) {
		t.Fatalf("shrinking over held shards: %v, want ErrBusy", err)
	}
	r.define("p", Spec{Shards: 6})
	if c := r.claim("p", "w1"); c.Shard != "4" && c.Shard != "5" {
		t.Fatalf("after growing, claimed %q", c.Shard)
	}
	for _, s := range []string{"2", "3"} {
		if _, err := r.m.Release("p/"+s, "w1", got[s].Lease.Token); err != nil {
			t.Fatal(err)
		}
	}
	r.store.Close()
	r.open()
	st, err := r.p.Status("p")
	if err != nil || len(st.Shards) != 6 {
		t.Fatalf("after reopen: %+v, %v", st, err)
	}
	if _, err := r.p.Define("p", Spec{Names: []string{"0", "1", "4", "5"}}); err != nil {
		t.Fatalf("shrinking over free shards: %v", err)
	}
}

// Fair: with two holders, each gets at most ceil(n/2); sticky: a holder
// that comes back gets the shards it held when they are free; rendezvous: a
// holder's claim order is stable.
func TestFairAndSticky(t *testing.T) {
	r := newRig(t)
	r.define("p", Spec{Shards: 10})
	// w2 claims first, so w1's share is 5.
	first := r.claim("p", "w2")
	a := r.claimAll("p", "w1")
	if len(a) != 5 {
		t.Fatalf("w1 got %d, want its share 5", len(a))
	}
	_, err := r.p.Claim(context.Background(), "p", "w1", 10*time.Second, false)
	var ns *NoShardError
	if !errors.As(err, &ns) || !ns.AtShare || ns.Share != 5 {
		t.Fatalf("w1 beyond its share: %v", err)
	}
	b := r.claimAll("p", "w2")
	if len(b) != 4 {
		t.Fatalf("w2 got %d more, want 4 (5 in all)", len(b))
	}
	// w1 crashes: its leases expire past their grace; it comes back and
	// gets the same shards back first.
	b[first.Shard] = first
	r.c.advance(5 * time.Second)
	for _, c := range b {
		if _, err := r.m.Renew("p/"+c.Shard, "w2", c.Lease.Token); err != nil {
			t.Fatal(err)
		}
	}
	r.c.advance(12 * time.Second)
	again := map[string]bool{}
	for range 5 {
		c := r.claim("p", "w1")
		if !c.Sticky {
			break
		}
		again[c.Shard] = true
	}
	for s := range a {
		if !again[s] {
			t.Errorf("w1 did not get back %s first (got %v)", s, again)
		}
	}
}

// Rebalance: a newcomer makes the holders above their share hand back the
// difference; released, they go to the newcomer's next claims at once.
func TestHandBackOnJoin(t *testing.T) {
	r := newRig(t)
	r.define("p", Spec{Shards: 8})
	w1 := r.claimAll("p", "w1")
	if len(w1) != 8 {
		t.Fatalf("w1 got %d", len(w1))
	}
	any1 := "p/0"
	if _, _, hb, err := r.p.HandBack(any1, "w1"); err != nil || hb != nil {
		t.Fatalf("hand-back alone: %v, %v", hb, err)
	}
	_, err := r.p.Claim(context.Background(), "p", "w2", 10*time.Second, false)
	var ns *NoShardError
	if !errors.As(err, &ns) || ns.AtShare || ns.RetryAt.IsZero() {
		t.Fatalf("newcomer's first claim: %v, want none free with a retry time", err)
	}
	_, _, hb, err := r.p.HandBack(any1, "w1")
	if err != nil || len(hb) != 4 {
		t.Fatalf("hand-back after a join: %v, %v; want 4 shards", hb, err)
	}
	_, _, hb2, _ := r.p.HandBack("p/3", "w1")
	if fmt.Sprint(hb) != fmt.Sprint(hb2) {
		t.Fatalf("hand-back lists differ between renews: %v vs %v", hb, hb2)
	}
	for _, s := range hb {
		if _, err := r.m.Release("p/"+s, "w1", w1[s].Lease.Token); err != nil {
			t.Fatal(err)
		}
	}
	got := r.claimAll("p", "w2")
	if len(got) != 4 {
		t.Fatalf("newcomer got %d after the hand-back, want 4", len(got))
	}
	for _, s := range hb {
		if _, ok := got[s]; !ok {
			t.Errorf("newcomer did not get handed-back shard %s", s)
		}
		if got[s].Lease.Token <= w1[s].Lease.Token {
			t.Errorf("shard %s: newcomer's token %d not above %d", s, got[s].Lease.Token, w1[s].Lease.Token)
		}
	}
	if _, _, hb, _ := r.p.HandBack(any1, "w1"); hb != nil {
		t.Fatalf("hand-back after rebalancing: %v", hb)
	}
	st, _ := r.p.Status("p")
	if len(st.Holders) != 2 || st.Holders[0].Shards != 4 || st.Holders[1].Shards != 4 || st.Share != 4 {
		t.Fatalf("status: %+v", st.Holders)
	}
}

// Done: the holder's token marks a shard done once, it is never claimed
// again, a stale token is refused, a retry with the same token succeeds.
func TestDoneOneShot(t *testing.T) {
	r := newRig(t)
	r.define("p", Spec{Names: []string{"a", "b"}})
	c1 := r.claim("p", "w1")
	// w1 stalls; its lease expires past the grace and w2 takes the shard.
	r.c.advance(20 * time.Second)
	c2 := r.claim("p", "w2")
	for c2.Shard != c1.Shard {
		c2 = r.claim("p", "w2")
	}
	if _, err := r.p.Done("p", c1.Shard, "w1", c1.Lease.Token); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("stale done: %v, want lease.ErrLost", err)
	}
	if _, err := r.p.Done("p", c2.Shard, "w2", c2.Lease.Token); err != nil {
		t.Fatal(err)
	}
	if _, err := r.p.Done("p", c2.Shard, "w2", c2.Lease.Token); err != nil {
		t.Fatalf("retried done: %v", err)
	}
	if _, err := r.p.Done("p", c2.Shard, "w1", c1.Lease.Token); !errors.Is(err, ErrDone) {
		t.Fatalf("done with another token after done: %v, want ErrDone", err)
	}
	if _, err := r.p.Done("p", "zz", "w2", 1); !errors.Is(err, ErrNotFound) {
		t.Fatalf("done of an unknown shard: %v", err)
	}
	r.c.advance(time.Minute)
	for range 3 {
		c, err := r.p.Claim(context.Background(), "p", "w3", 10*time.Second, false)
		if err == nil && c.Shard == c2.Shard {
			t.Fatalf("a done shard was dispatched again")
		}
	}
	st, _ := r.p.Status("p")
	if st.Done != 1 || st.Open != 1 {
		t.Fatalf("status: done %d open %d", st.Done, st.Open)
	}
}

// Standby: a claim that finds none free stands by for a suspect shard and
// gets it first once its lease and grace end, before another claimer.
func TestStandbyForSuspect(t *testing.T) {
	r := newRig(t)
	r.define("p", Spec{Shards: 1})
	c1 := r.claim("p", "w1")
	r.c.advance(6 * time.Second) // not renewed for half the TTL: suspect
	_, err := r.p.Claim(context.Background(), "p", "w2", 10*time.Second, true)
	var ns *NoShardError
	if !errors.As(err, &ns) || ns.Standby != "0" {
		t.Fatalf("standby claim: %v", err)
	}
	st, _ := r.p.Status("p")
	if st.Shards[0].State != StateSuspect || st.Shards[0].Standby != "w2" {
		t.Fatalf("status: %+v", st.Shards[0])
	}
	r.c.advance(11 * time.Second) // past expiry and grace
	if _, err := r.p.Claim(context.Background(), "p", "w3", 10*time.Second, false); !errors.Is(err, ErrNoShard) {
		t.Fatalf("another claimer got the shard w2 stands by for: %v", err)
	}
	c2 := r.claim("p", "w2")
	if c2.Lease.Token <= c1.Lease.Token {
		t.Fatalf("token %d not above %d", c2.Lease.Token, c1.Lease.Token)
	}
}

// Concurrent claims of many holders never give one shard to two of them.
func TestConcurrentClaims(t *testing.T) {
	r := newRig(t)
	r.define("p", Spec{Shards: 32})
	var mu sync.Mutex
	owner := map[string]string{}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			h := fmt.Sprintf("w%d", i)
			for range 8 {
				c, err := r.p.Claim(context.Background(), "p", h, 10*time.Second, false)
				if errors.Is(err, ErrNoShard) {
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if o, ok := owner[c.Shard]; ok {
					t.Errorf("shard %s given to %s and %s", c.Shard, o, h)
				}
				owner[c.Shard] = h
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	st, _ := r.p.Status("p")
	for _, h := range st.Holders {
		if h.Shards > st.Share {
			t.Errorf("%s holds %d, share %d", h.Holder, h.Shards, st.Share)
		}
	}
}

// Fair within one: 64 shards over 5 holders, then a sixth joins; with the
// hand-backs done and claims made, the counts are 11,11,11,11,10,10 (not
// the newcomer left with the remainder, 9).
func TestFairWithinOneAfterJoin(t *testing.T) {
	r := newRig(t)
	r.define("p", Spec{Shards: 64})
	held := map[string]map[string]Claim{}
	holders := []string{"a", "b", "c", "d", "e"}
	for _, h := range holders {
		r.claim("p", h) // each claims once first, so all five are live
	}
	for _, h := range holders {
		held[h] = r.claimAll("p", h)
	}
	holders = append(holders, "f")
	held["f"] = map[string]Claim{}
	for round := range 6 {
		for _, h := range holders {
			for s, c := range r.claimAll("p", h) {
				held[h][s] = c
			}
			for _, c := range held[h] {
				_, _, hb, err := r.p.HandBack("p/"+c.Shard, h)
				if err != nil {
					t.Fatal(err)
				}
				for _, s := range hb {
					if _, err := r.m.Release("p/"+s, h, held[h][s].Lease.Token); err != nil {
						t.Fatalf("round %d: release %s of %s: %v", round, s, h, err)
					}
					delete(held[h], s)
				}
				break
			}
		}
	}
	st, _ := r.p.Status("p")
	var got []int
	for _, h := range st.Holders {
		got = append(got, h.Shards)
	}
	if fmt.Sprint(got) != "[11 11 11 11 10 10]" && fmt.Sprint(got) != "[11 11 11 10 11 10]" {
		sum := 0
		for _, n := range got {
			sum += n
			if n < 10 || n > 11 {
				t.Fatalf("counts %v: want each 10 or 11 (64 over 6)", got)
			}
		}
		if sum != 64 {
			t.Fatalf("counts %v: want 64 held", got)
		}
	}
	t.Logf("counts after the join: %v", got)
}

// A claim the lease manager would refuse (400) changes nothing, also when
// no shard is free: it neither waits nor stands by.
func TestClaimChecksHolderAndTTLFirst(t *testing.T) {
	r := newRig(t)
	r.store.Close()
	r.lopts = lease.Options{MinTTL: time.Second, MaxTTL: time.Hour}
	r.open()
	r.define("p", Spec{Shards: 1})
	r.claim("p", "w1")
	r.c.advance(6 * time.Second) // w1's lease is suspect
	before, err := r.store.Pool("p")
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct {
		holder string
		ttl    time.Duration
	}{{"w2", 2000000 * time.Hour}, {"w2", time.Millisecond}, {"w\n2", 10 * time.Second}, {" ", 10 * time.Second},
		{strings.Repeat("w", 257), 10 * time.Second}, {"w\xff", 10 * time.Second}} {
		for _, standby := range []bool{false, true} {
			if _, err := r.p.Claim(context.Background(), "p", bad.holder, bad.ttl, standby); !errors.Is(err, lease.ErrInvalid) {
				t.Errorf("Claim(%q, %s, standby %v) = %v, want lease.ErrInvalid", bad.holder, bad.ttl, standby, err)
			}
		}
	}
	after, err := r.store.Pool("p")
	if err != nil {
		t.Fatal(err)
	}
	if string(after) != string(before) {
		t.Errorf("refused claims changed the pool's record:\n%s\nto\n%s", before, after)
	}
	st, _ := r.p.Status("p")
	if len(st.Holders) != 1 || st.Share != 1 || st.Shards[0].Standby != "" {
		t.Errorf("status after refused claims: %+v", st)
	}
}

// A standby's reservation lapses no later than its claim's TTL plus that
// TTL's grace after the claim, however long the suspect lease runs.
func TestStandbyReservationBounded(t *testing.T) {
	r := newRig(t)
	r.define("p", Spec{Shards: 1})
	if _, err := r.p.Claim(context.Background(), "p", "w1", time.Hour, false); err != nil {
		t.Fatal(err)
	}
	r.c.advance(31 * time.Minute) // suspect until its expiry, then 40 min of grace
	if _, err := r.p.Claim(context.Background(), "p", "w2", 10*time.Second, true); !errors.Is(err, ErrNoShard) {
		t.Fatalf("standby claim: %v", err)
	}
	st, _ := r.p.Status("p")
	if st.Shards[0].Standby != "w2" {
		t.Fatalf("w2 does not stand by: %+v", st.Shards[0])
	}
	r.c.advance(10*time.Second + 10*time.Second*2/3 + time.Millisecond) // w2 never claims again
	st, _ = r.p.Status("p")
	if st.Shards[0].Standby != "" {
		t.Errorf("a dead standby's reservation outlives its claim's TTL plus grace: %+v", st.Shards[0])
	}
}

// Done is forever: a shrink that removes a done shard and a regrow that
// brings it back do not dispatch it again.
func TestDoneSurvivesShrinkAndRegrow(t *testing.T) {
	r := newRig(t)
	r.define("p", Spec{Names: []string{"a", "b"}})
	var cb Claim
	for s, c := range r.claimAll("p", "w1") {
		if s == "b" {
			cb = c
		}
	}
	if _, err := r.p.Done("p", "b", "w1", cb.Lease.Token); err != nil {
		t.Fatal(err)
	}
	r.define("p", Spec{Names: []string{"a"}})
	r.define("p", Spec{Names: []string{"a", "b"}})
	st, _ := r.p.Status("p")
	if st.Done != 1 || st.Open != 1 || st.Shards[1].State != StateDone {
		t.Fatalf("after shrink and regrow: done %d open %d, b %+v", st.Done, st.Open, st.Shards[1])
	}
	r.c.advance(time.Minute) // w1's lease on a lapses
	for _, h := range []string{"w1", "w2", "w3"} {
		if c, err := r.p.Claim(context.Background(), "p", h, 10*time.Second, false); err == nil && c.Shard == "b" {
			t.Fatalf("done shard b was dispatched again to %s", h)
		}
	}
}

// A repeated done answers only to the holder that marked it, with its token.
func TestDoneRetryOnlyByItsHolder(t *testing.T) {
	r := newRig(t)
	r.define("p", Spec{Shards: 1})
	c := r.claim("p", "w1")
	if _, err := r.p.Done("p", c.Shard, "w1", c.Lease.Token); err != nil {
		t.Fatal(err)
	}
	if _, err := r.p.Done("p", c.Shard, "w1", c.Lease.Token); err != nil {
		t.Fatalf("retry by the holder that marked it: %v", err)
	}
	if _, err := r.p.Done("p", c.Shard, "w2", c.Lease.Token); !errors.Is(err, ErrDone) {
		t.Fatalf("same token, another holder: %v, want ErrDone", err)
	}
}

// HandBack tells a shard of a defined pool from any other two-segment name.
func TestHandBackKnowsPoolShards(t *testing.T) {
	r := newRig(t)
	r.define("p", Spec{Shards: 2})
	for name, want := range map[string]bool{"p/0": true, "p/1": true, "p/2": false, "other/report.txt": false, "p": false} {
		if pl, _, _, err := r.p.HandBack(name, "w1"); err != nil || (pl != "") != want {
			t.Errorf("HandBack(%q) = pool %q, %v; want a shard: %v", name, pl, err, want)
		}
	}
}

// A pool with every shard done answers a claim with AllDone, not a share
// of 0.
func TestAllDoneAnswer(t *testing.T) {
	r := newRig(t)
	r.define("p", Spec{Shards: 1})
	c := r.claim("p", "w1")
	if _, err := r.p.Done("p", c.Shard, "w1", c.Lease.Token); err != nil {
		t.Fatal(err)
	}
	_, err := r.p.Claim(context.Background(), "p", "w2", 10*time.Second, false)
	var ns *NoShardError
	if !errors.As(err, &ns) || !ns.AllDone || ns.AtShare || err.Error() != "every shard of the pool is done" {
		t.Fatalf("claim on an all-done pool: %#v", err)
	}
}

// failStore is a Store whose UpdatePool fails while fail is set.
type failStore struct {
	Store
	mu   sync.Mutex
	fail bool
}

func (s *failStore) UpdatePool(pool string, fn func([]byte) ([]byte, error)) error {
	s.mu.Lock()
	fail := s.fail
	s.mu.Unlock()
	if fail {
		return errors.New("store failed")
	}
	return s.Store.UpdatePool(pool, fn)
}

// A claim whose record update fails after the grant releases the lease:
// the caller, told it failed, holds nothing.
func TestClaimReleasesLeaseWhenRecordFails(t *testing.T) {
	r := newRig(t)
	fs := &failStore{Store: r.store}
	r.p = New(fs, r.m, Events{})
	r.define("p", Spec{Shards: 1})
	c := r.claim("p", "w1")
	if _, err := r.p.Claim(context.Background(), "p", "w2", 10*time.Second, false); !errors.Is(err, ErrNoShard) {
		t.Fatalf("w2 waits: %v", err) // w2 is recorded as waiting: its next grant updates the record
	}
	if _, err := r.m.Release("p/"+c.Shard, "w1", c.Lease.Token); err != nil {
		t.Fatal(err)
	}
	fs.mu.Lock()
	fs.fail = true
	fs.mu.Unlock()
	if _, err := r.p.Claim(context.Background(), "p", "w2", 10*time.Second, false); err == nil {
		t.Fatal("claim with a failing record update succeeded")
	}
	l, st, err := r.m.Get("p/" + c.Shard)
	if err != nil || st != lease.StateReleased {
		t.Errorf("after the failed claim the lease is %+v %s (%v), want released", l, st, err)
	}
}

// Calls on pools that do not exist (and on ones that do) leave no lock
// behind.
func TestLocksDoNotGrow(t *testing.T) {
	r := newRig(t)
	r.define("p", Spec{Shards: 2})
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() {
			_, _ = r.p.Claim(context.Background(), fmt.Sprintf("nope-%d", i), "w1", 10*time.Second, false)
			_, _ = r.p.Done(fmt.Sprintf("nope-%d", i), "0", "w1", 1)
			_, _ = r.p.Claim(context.Background(), "p", fmt.Sprintf("w%d", i%3), 10*time.Second, false)
		})
	}
	wg.Wait()
	r.p.mu.Lock()
	n := len(r.p.locks)
	r.p.mu.Unlock()
	if n != 0 {
		t.Errorf("%d pool locks left after the calls, want 0", n)
	}
}
