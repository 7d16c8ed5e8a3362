package shard

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fenceproxy/fenceproxy/internal/etcdtest"
)

// Test timings: etcd's minimum lease TTL with etcdtest's 1 s election
// timeout is 1.5 s, so 2 s.
const (
	testTTL       = 2 * time.Second
	testLockDelay = time.Second
)

// longValidity gives the tests that time a cut against the validity's end a
// validity far longer than any stall of a loaded machine (about 15 s left
// after any keepalive), renewed as often as with testTTL: "at once" and "at
// the validity's end" stay apart however slow the machine.
func longValidity(o *Options) {
	o.TTL, o.KeepAliveInterval = 20*time.Second, testTTL/4
}

func newClient(t *testing.T, endpoints []string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// recorder keeps every simulated request's admission, as the proxy would
// make them: per ownership (the grant's Epoch) the first admission and the
// last end of a request.
type recorder struct {
	mu      sync.Mutex
	windows map[int64]*window
}

type window struct {
	owner       string
	shard       int
	epoch       int64
	first, last time.Time
	maxValid    time.Time
	requests    int
}

func (r *recorder) request(owner string, g Grant, start, end time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.windows == nil {
		r.windows = map[int64]*window{}
	}
	w, ok := r.windows[g.Epoch]
	if !ok {
		w = &window{owner: owner, shard: g.Shard, epoch: g.Epoch, first: start, last: end}
		r.windows[g.Epoch] = w
	}
	if start.Before(w.first) {
		w.first = start
	}
	if end.After(w.last) {
		w.last = end
	}
	if g.ValidUntil.After(w.maxValid) {
		w.maxValid = g.ValidUntil
	}
	w.requests++
}

// overlaps returns, per shard, every pair of ownerships whose request
// windows [first admission, last end] overlap in time, and how many windows
// it checked.
func (r *recorder) overlaps() (bad []string, windows, requests int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	byShard := map[int][]*window{}
	for _, w := range r.windows {
		byShard[w.shard] = append(byShard[w.shard], w)
		windows++
		requests += w.requests
	}
	for shard, ws := range byShard {
		sort.Slice(ws, func(i, j int) bool { return ws[i].first.Before(ws[j].first) })
		for i, a := range ws {
			for _, b := range ws[i+1:] {
				if b.first.Before(a.last) {
					bad = append(bad, fmt.Sprintf("shard %d: %s (epoch %d) admitted until %s, %s (epoch %d) from %s: %v of overlap",
						shard, a.owner, a.epoch, a.last.Format("15:04:05.000"), b.owner, b.epoch, b.first.Format("15:04:05.000"), a.last.Sub(b.first)))
				}
			}
		}
	}
	return bad, windows, requests
}

// replica is one Owner with its own client and simulated proxy traffic.
type replica struct {
	name     string
	o        *Owner
	proxies  []*etcdtest.Proxy
	inflight []atomic.Int64
	stop     chan struct{}
	wg       sync.WaitGroup
	closed   bool
}

type cluster struct {
	t       *testing.T
	etcd    *etcdtest.Cluster
	shards  int
	rec     recorder
	longReq bool // some requests run up to 1.5 s (into the validity deadline)
	tweak   func(*Owner)
	opts    func(*Options)
}

// start runs a replica with id; viaProxy puts a TCP proxy in front of each
// etcd member for it, so that the test can cut it off.
func (c *cluster) start(id, name string, viaProxy bool) *replica {
	c.t.Helper()
	r := &replica{name: name, inflight: make([]atomic.Int64, c.shards), stop: make(chan struct{})}
	eps := c.etcd.Endpoints()
	if viaProxy {
		eps = nil
		for _, m := range c.etcd.Members {
			p := etcdtest.NewProxy(c.t, m.ClientURL)
			r.proxies = append(r.proxies, p)
			eps = append(eps, p.URL())
		}
	}
	cli := newClient(c.t, eps)
	opts := Options{
		Prefix: "/test/", Shards: c.shards, ID: id, Advertise: name + ":7000",
		TTL: testTTL, LockDelay: testLockDelay, RequestTimeout: time.Second,
		Drain: func(ctx context.Context, n int) error {
			for r.inflight[n].Load() != 0 {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(time.Millisecond):
				}
			}
			return nil
		},
	}
	if c.opts != nil {
		c.opts(&opts)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	o, err := start(ctx, cli, opts, c.tweak)
	if err != nil {
		c.t.Fatalf("start %s: %v", name, err)
	}
	r.o = o
	for range 4 {
		r.wg.Go(func() { c.traffic(r) })
	}
	c.t.Cleanup(func() { c.close(r, 2*time.Second) })
	return r
}

// traffic admits simulated writes on random shards as the proxy would:
// counted in flight before asking MayAdmit (so that Drain sees it), ended no
// later than the grant's ValidUntil.
func (c *cluster) traffic(r *replica) {
	for {
		select {
		case <-r.stop:
			return
		default:
		}
		n := rand.IntN(c.shards)
		r.inflight[n].Add(1)
		g, ok := r.o.MayAdmit(n)
		if !ok {
			r.inflight[n].Add(-1)
			time.Sleep(200 * time.Microsecond) // paces the load: a refused request's back-off
			continue
		}
		start := time.Now()
		d := time.Duration(rand.IntN(5000)) * time.Microsecond
		if c.longReq && rand.IntN(20) == 0 {
			d = time.Duration(500+rand.IntN(1000)) * time.Millisecond
		}
		end := start.Add(d)
		if end.After(g.ValidUntil) {
			end = g.ValidUntil
		}
		time.Sleep(time.Until(end)) // paces the load: the request's duration
		c.rec.request(r.name, g, start, time.Now())
		r.inflight[n].Add(-1)
	}
}

func (c *cluster) close(r *replica, timeout time.Duration) {
	if r.closed {
		return
	}
	r.closed = true
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := r.o.Close(ctx) // the traffic goes on while it hands over
	close(r.stop)
	r.wg.Wait()
	if err != nil {
		c.t.Logf("close %s: %v", r.name, err)
	}
}

// admitting returns, per replica, the shards it may admit now, and whether
// every shard is admitted by exactly one of them.
func admitting(shards int, rs ...*replica) (map[*replica][]int, bool) {
	out := map[*replica][]int{}
	ok := true
	for n := range shards {
		k := 0
		for _, r := range rs {
			if _, yes := r.o.MayAdmit(n); yes {
				out[r] = append(out[r], n)
				k++
			}
		}
		ok = ok && k == 1
	}
	return out, ok
}

func counts(m map[*replica][]int, rs ...*replica) []int {
	var out []int
	for _, r := range rs {
		out = append(out, len(m[r]))
	}
	slices.Sort(out)
	return out
}

// waitFor polls cond: the owners' state follows etcd, another process,
// which signals no event here.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > timeout {
			t.Fatalf("not within %v: %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond) // polled: no event (see above)
	}
	return time.Since(start)
}

// settled waits until every shard is admitted by exactly one of rs and the
// counts are want (sorted).
func (c *cluster) settled(timeout time.Duration, want []int, rs ...*replica) time.Duration {
	c.t.Helper()
	var last []int
	return waitFor(c.t, timeout, fmt.Sprintf("settle to %v (last %v)", want, last), func() bool {
		m, ok := admitting(c.shards, rs...)
		last = counts(m, rs...)
		return ok && slices.Equal(last, want)
	})
}

func (c *cluster) checkExclusive(wantOverlap bool) []string {
	c.t.Helper()
	bad, windows, requests := c.rec.overlaps()
	c.t.Logf("exclusivity: %d ownership windows checked over %d admitted requests, %d overlaps", windows, requests, len(bad))
	if !wantOverlap {
		for _, b := range bad {
			c.t.Error(b)
		}
	}
	return bad
}

func sumStats(rs ...*replica) Stats {
	var s Stats
	for _, r := range rs {
		st := r.o.Stats()
		s.AcquiredPlanned += st.AcquiredPlanned
		s.AcquiredUnclean += st.AcquiredUnclean
		s.AcquiredNew += st.AcquiredNew
		s.ReleasedPlanned += st.ReleasedPlanned
		s.ReleasedUndrained += st.ReleasedUndrained
		s.Lost += st.Lost
		s.LockDelayWaits += st.LockDelayWaits
		s.LockDelayWaitTotal += st.LockDelayWaitTotal
	}
	return s
}

// Three replicas over 16 shards settle to 5/5/6; a fourth joins and they
// settle to 4/4/4/4 by planned handovers; one leaves by Close and its
// shards are taken without waiting the TTL. Throughout, no two ownerships
// of a shard admit in overlapping windows.
func TestFairShare(t *testing.T) {
	c := &cluster{t: t, etcd: etcdtest.Start(t), shards: 16}
	r0 := c.start("r0", "r0", false)
	r1 := c.start("r1", "r1", false)
	r2 := c.start("r2", "r2", false)
	d := c.settled(20*time.Second, []int{5, 5, 6}, r0, r1, r2)
	t.Logf("3 replicas settled to 5/5/6 in %v", d.Round(time.Millisecond))

	// Every replica's view names the same owner of each shard, the one
	// admitting it (what forwarding to the owner will read).
	waitFor(t, 5*time.Second, "every view names the admitting owner", func() bool {
		for _, r := range []*replica{r0, r1, r2} {
			for _, owner := range []*replica{r0, r1, r2} {
				for _, n := range owner.o.Owned() {
					if m, ok := r.o.OwnerOf(n); !ok || m.ID != owner.o.opts.ID || m.Addr != owner.name+":7000" {
						return false
					}
				}
			}
		}
		return true
	})
	if r0.o.Shards() != 16 || r0.o.TTL() < testTTL || r0.o.Of("bkt/obj") != Of("bkt/obj", 16) {
		t.Errorf("Shards %d, TTL %v, Of(bkt/obj) %d; want 16, at least %v, %d", r0.o.Shards(), r0.o.TTL(), r0.o.Of("bkt/obj"), testTTL, Of("bkt/obj", 16))
	}

	before3 := sumStats(r0, r1, r2)
	r3 := c.start("r3", "r3", false)
	d = c.settled(20*time.Second, []int{4, 4, 4, 4}, r0, r1, r2, r3)
	st := sumStats(r0, r1, r2, r3)
	t.Logf("a 4th joined: settled to 4/4/4/4 in %v, %d planned handovers (%d since the first start); %+v",
		d.Round(time.Millisecond), st.AcquiredPlanned-before3.AcquiredPlanned, st.AcquiredPlanned, st)
	if st.AcquiredPlanned-before3.AcquiredPlanned < 4 || st.AcquiredUnclean != 0 || st.LockDelayWaits != 0 {
		t.Errorf("scale up: want at least 4 planned handovers and no unclean one: %+v", st)
	}

	before := r1.o.Owned()
	start := time.Now()
	c.close(r1, 10*time.Second)
	closeTook := time.Since(start)
	d = c.settled(20*time.Second, []int{5, 5, 6}, r0, r2, r3)
	took := time.Since(start)
	st = sumStats(r0, r2, r3)
	t.Logf("r1 left by Close (held %v; Close took %v): its shards admitted elsewhere %v after Close began; %+v",
		before, closeTook.Round(time.Millisecond), took.Round(time.Millisecond), st)
	if took >= testTTL {
		t.Errorf("a planned handover took %v, not below the TTL %v", took, testTTL)
	}
	if st.AcquiredUnclean != 0 || st.LockDelayWaits != 0 {
		t.Errorf("scale down: an unclean handover: %+v", st)
	}
	if got := r1.o.Stats().ReleasedPlanned; got < 4 {
		t.Errorf("r1 handed over %d shards with the marker, want >= 4", got)
	}
	for _, r := range []*replica{r0, r2, r3} {
		c.close(r, 10*time.Second)
	}
	c.checkExclusive(false)
}

// A shard count other than the stored one refuses to start, naming both.
func TestShardCountMismatch(t *testing.T) {
	e := etcdtest.Start(t)
	cli := newClient(t, e.Endpoints())
	ctx := context.Background()
	o, err := Start(ctx, cli, Options{Prefix: "/count/", Shards: 16, ID: "a", TTL: testTTL})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close(ctx)
	_, err = Start(ctx, cli, Options{Prefix: "/count/", Shards: 8, ID: "b", TTL: testTTL})
	var ce *CountError
	if !errors.Is(err, ErrShardCount) || !errors.As(err, &ce) || ce.Stored != 16 || ce.Configured != 8 {
		t.Fatalf("Start with 8 shards over 16: %v", err)
	}
	if !strings.Contains(err.Error(), "16") || !strings.Contains(err.Error(), " 8") {
		t.Errorf("error does not name both counts: %v", err)
	}
	t.Logf("refused: %v", err)
	// The same count starts.
	o2, err := Start(ctx, cli, Options{Prefix: "/count/", Shards: 16, ID: "b", TTL: testTTL})
	if err != nil {
		t.Fatal(err)
	}
	o2.Close(ctx)
}

// A shard depth other than the stored one refuses to start, naming both,
// as does a replica that does not know depths (it reads the count alone).
func TestShardDepthMismatch(t *testing.T) {
	e := etcdtest.Start(t)
	cli := newClient(t, e.Endpoints())
	ctx := context.Background()
	o, err := Start(ctx, cli, Options{Prefix: "/depth/", Shards: 16, Depth: 2, ID: "a", TTL: testTTL})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close(ctx)
	got, err := cli.Get(ctx, "/depth/shards/count")
	if err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "16 depth=2" {
		t.Fatalf("stored count: %v %v", got, err)
	}
	for _, depth := range []int{0, 3} {
		_, err = Start(ctx, cli, Options{Prefix: "/depth/", Shards: 16, Depth: depth, ID: "b", TTL: testTTL})
		var ce *CountError
		if !errors.Is(err, ErrShardCount) || !errors.As(err, &ce) || ce.StoredDepth != 2 || ce.ConfiguredDepth != depth {
			t.Fatalf("Start with depth %d over 2: %v", depth, err)
		}
		if !strings.Contains(err.Error(), "first 2 key segments") {
			t.Errorf("error does not name the stored depth: %v", err)
		}
		t.Logf("refused: %v", err)
	}
	o2, err := Start(ctx, cli, Options{Prefix: "/depth/", Shards: 16, Depth: 2, ID: "b", TTL: testTTL})
	if err != nil {
		t.Fatal(err)
	}
	o2.Close(ctx)
}

func TestKey(t *testing.T) {
	for _, c := range []struct {
		key   string
		depth int
		want  string
	}{
		{"out/part-7/f1", 0, "out/part-7/f1"},
		{"out/part-7/f1", 2, "out/part-7"},
		{"out/part-7/", 2, "out/part-7"},
		{"out/part-7", 2, "out/part-7"},
		{"out/", 2, "out/"},
		{"out", 2, "out"},
		{"a//b/c", 2, "a/"},
		{"a/b/c/d/e", 3, "a/b/c"},
	} {
		if got := Key(c.key, c.depth); got != c.want {
			t.Errorf("Key(%q, %d) = %q, want %q", c.key, c.depth, got, c.want)
		}
	}
	for _, v := range []string{"16 depth=0", "16 depth=x", "x", "16 depth=-1"} {
		if _, _, err := parseCount(v); err == nil {
			t.Errorf("parseCount(%q) passed", v)
		}
	}
}

// A replica restarted with the same ID takes back the same shards: after a
// Close (planned, at once) and after a crash (its lease left to expire:
// unclean, the lock-delay after it expired).
func TestStickyRestart(t *testing.T) {
	c := &cluster{t: t, etcd: etcdtest.Start(t), shards: 16}
	a := c.start("a", "a#1", true)
	b := c.start("b", "b", false)
	cc := c.start("c", "c", false)
	c.settled(20*time.Second, []int{5, 5, 6}, a, b, cc)
	want := a.o.Owned()

	c.close(a, 10*time.Second)
	c.settled(20*time.Second, []int{8, 8}, b, cc)
	a2 := c.start("a", "a#2", true)
	d := c.settled(20*time.Second, []int{5, 5, 6}, a2, b, cc)
	if got := a2.o.Owned(); !slices.Equal(got, want) {
		t.Errorf("after Close and restart, a owns %v, before %v", got, want)
	}
	if st := a2.o.Stats(); st.AcquiredPlanned != int64(len(want)) {
		t.Errorf("after Close and restart: %+v, want %d planned acquisitions", st, len(want))
	}
	t.Logf("restart after Close: a took back %v in %v", want, d.Round(time.Millisecond))

	// A crash: a2 is cut off from etcd and never comes back.
	for _, p := range a2.proxies {
		p.Cut()
	}
	crash := time.Now()
	a3 := c.start("a", "a#3", false)
	d = c.settled(30*time.Second, []int{5, 5, 6}, a3, b, cc)
	if got := a3.o.Owned(); !slices.Equal(got, want) {
		t.Errorf("after a crash and restart, a owns %v, before %v", got, want)
	}
	// a3's Start waited for a2's member key to expire with its lease: b
	// and c took the shards first (unclean) and handed them over within
	// the lock-delay, or a3 took them itself after the lease; either way
	// it waited the lock-delay after a2's validity.
	st := a3.o.Stats()
	if st.LockDelayWaits != int64(len(want)) {
		t.Errorf("after a crash: %+v, want %d acquisitions that waited the lock-delay", st, len(want))
	}
	for _, n := range want {
		old, ok1 := a2.o.State(n)
		g, ok2 := a3.o.State(n)
		if !ok1 || !ok2 || g.AdmitAfter.Sub(old.ValidUntil) < testLockDelay {
			t.Errorf("shard %d: a#3 admits from %s, a#2 was valid until %s: less than the lock-delay %v apart",
				n, g.AdmitAfter.Format("15:04:05.000"), old.ValidUntil.Format("15:04:05.000"), testLockDelay)
		}
	}
	t.Logf("restart after a crash: a took back %v %v after the crash (TTL %v + lock-delay %v after the old key went); %+v",
		want, time.Since(crash).Round(time.Millisecond), testTTL, testLockDelay, st)
	_ = d
	c.close(a2, time.Second)
	c.checkExclusive(false)
}

func TestOf(t *testing.T) {
	// FNV-1a 64: "" is the offset basis, "a" is 0xaf63dc4c8601ec8c.
	if got, want := Of("", 1<<30), int(uint64(fnvOffset)%(1<<30)); got != want {
		t.Errorf("Of(\"\") = %d, want %d", got, want)
	}
	if got, want := Of("a", 1000), int(uint64(0xaf63dc4c8601ec8c)%1000); got != want {
		t.Errorf("Of(\"a\") = %d, want %d", got, want)
	}
	hist := make([]int, 16)
	for i := range 16000 {
		hist[Of(fmt.Sprintf("bucket/object-%d", i), 16)]++
	}
	for n, k := range hist {
		if k < 800 || k > 1200 {
			t.Errorf("shard %d has %d of 16000 keys: %v", n, k, hist)
		}
	}
}

// The assignment gives every member floor or ceil of n/m shards, does not
// depend on the members' order, and moves few shards when one joins.
func TestAssign(t *testing.T) {
	for m := 1; m <= 12; m++ {
		for n := 1; n <= 64; n++ {
			var ids []string
			for i := range m {
				ids = append(ids, fmt.Sprintf("replica-%d", i))
			}
			got := assign(ids, n)
			per := map[string]int{}
			for _, id := range got {
				if id == "" {
					t.Fatalf("m=%d n=%d: a shard without owner", m, n)
				}
				per[id]++
			}
			for _, id := range ids {
				if k := per[id]; k < n/m || k > (n+m-1)/m {
					t.Fatalf("m=%d n=%d: %s gets %d", m, n, id, k)
				}
			}
			rev := slices.Clone(ids)
			slices.Reverse(rev)
			if !slices.Equal(assign(rev, n), got) {
				t.Fatalf("m=%d n=%d: depends on the members' order", m, n)
			}
		}
	}
	ids := []string{"a", "b", "c"}
	before := assign(ids, 256)
	after := assign(append(ids, "d"), 256)
	moved, between := 0, 0
	for i := range before {
		if before[i] != after[i] {
			moved++
			if after[i] != "d" {
				between++
			}
		}
	}
	// The bounded load moves a few shards between old members (where
	// the quotas change); plain rendezvous hashing moves none, but is not
	// fair within one shard.
	t.Logf("256 shards, 3 -> 4 members: %d moved (64 is the minimum), %d of them between old members", moved, between)
	if moved > 64+16 {
		t.Errorf("%d shards moved, want at most 80", moved)
	}
}

// A replica cut off from a 3-member etcd (a TCP proxy in front of each
// member stops forwarding: its keepalives hang, its lease is not revoked)
// stops admitting within its validity by itself; the others take its shards
// once its lease expired, each admitting no earlier than the cut replica's
// last validity deadline plus the lock-delay; no ownership windows overlap.
// When the cut heals, it finds its lease gone and takes back its shards by
// planned handovers.
func TestCutOffOwner(t *testing.T) {
	bad := runCutOff(t, false)
	if len(bad) != 0 {
		t.Errorf("%d overlaps", len(bad))
	}
}

// The same with the lock-delay forced to zero and the validity check
// switched off: the cut replica admits on, the new owners at once after its
// lease expired, and the checker finds the overlap.
func TestCutOffOwnerWithoutProtection(t *testing.T) {
	bad := runCutOff(t, true)
	if len(bad) == 0 {
		t.Fatal("without validity and lock-delay the checker found no overlap: the test has no teeth")
	}
	for _, b := range bad[:min(3, len(bad))] {
		t.Logf("found, as expected: %s", b)
	}
	t.Logf("%d overlapping ownership windows found without the protections", len(bad))
}

func runCutOff(t *testing.T, unprotected bool) []string {
	c := &cluster{t: t, etcd: etcdtest.StartCluster(t, 3), shards: 12, longReq: true}
	if unprotected {
		c.tweak = func(o *Owner) { o.noValidity, o.noLockWait = true, true }
	}
	a := c.start("a", "a", true)
	b := c.start("b", "b", false)
	cc := c.start("c", "c", false)
	c.settled(30*time.Second, []int{4, 4, 4}, a, b, cc)
	time.Sleep(500 * time.Millisecond) // paces the load: traffic before the cut
	cutShards := a.o.Owned()
	lastSent := a.o.Stats().LastKeepAliveSentAt

	// An upload in flight on a cut shard: its context ends with the
	// validity.
	uploadCtx, endUpload, err := a.o.Context(context.Background(), cutShards[0])
	if err != nil {
		t.Fatalf("Context on an admitting shard: %v", err)
	}
	defer endUpload()
	for _, p := range a.proxies {
		p.Cut()
	}
	cut := time.Now()
	if !unprotected {
		select {
		case <-uploadCtx.Done():
			t.Logf("an upload's context on the cut replica ended %v after the cut: %v", time.Since(cut).Round(time.Millisecond), context.Cause(uploadCtx))
			if !errors.Is(context.Cause(uploadCtx), ErrValidityEnded) {
				t.Errorf("the upload's context ended with %v, want ErrValidityEnded", context.Cause(uploadCtx))
			}
		case <-time.After(testTTL):
			t.Errorf("the upload's context on the cut replica still live a TTL after the cut")
		}
		if _, _, err := a.o.Context(context.Background(), cutShards[0]); !errors.Is(err, ErrNotAdmitting) {
			t.Errorf("Context after the validity ended: %v, want ErrNotAdmitting", err)
		}
		lapse := waitFor(t, 2*testTTL, "the cut replica stops admitting", func() bool {
			for _, n := range cutShards {
				if _, ok := a.o.MayAdmit(n); ok {
					return false
				}
			}
			return true
		})
		t.Logf("cut replica stopped admitting %v after the cut (last confirmed keepalive sent %v before the cut; TTL %v, margin %v)",
			lapse.Round(time.Millisecond), cut.Sub(lastSent).Round(time.Millisecond), testTTL, a.o.opts.Margin)
		if lapse > testTTL {
			t.Errorf("the cut replica admitted for %v after the cut, more than the TTL %v", lapse, testTTL)
		}
	}
	took := waitFor(t, 30*time.Second, "b and c admit every shard", func() bool {
		for n := range c.shards {
			_, ok1 := b.o.MayAdmit(n)
			_, ok2 := cc.o.MayAdmit(n)
			if !ok1 && !ok2 {
				return false
			}
		}
		return true
	})
	t.Logf("b and c admit all %d shards %v after the cut", c.shards, took.Round(time.Millisecond))
	if !unprotected {
		minGap := time.Duration(1 << 62)
		for _, n := range cutShards {
			old, ok := a.o.State(n)
			if !ok {
				t.Fatalf("the cut replica forgot shard %d while cut", n)
			}
			g, ok := b.o.State(n)
			if !ok {
				g, ok = cc.o.State(n)
			}
			if !ok {
				t.Fatalf("shard %d has no new owner", n)
			}
			gap := g.AdmitAfter.Sub(old.ValidUntil)
			minGap = min(minGap, gap)
			if gap < testLockDelay {
				t.Errorf("shard %d: new owner admits from %s, old owner valid until %s: gap %v below the lock-delay %v",
					n, g.AdmitAfter.Format("15:04:05.000"), old.ValidUntil.Format("15:04:05.000"), gap, testLockDelay)
			}
		}
		st := sumStats(b, cc)
		t.Logf("new owners' admit-after minus the old owner's last valid-until: at least %v (lock-delay %v); %+v", minGap.Round(time.Millisecond), testLockDelay, st)
		if st.AcquiredUnclean != int64(len(cutShards)) || st.LockDelayWaits != int64(len(cutShards)) {
			t.Errorf("want %d unclean acquisitions with lock-delay waits: %+v", len(cutShards), st)
		}
	}
	time.Sleep(500 * time.Millisecond) // paces the load: traffic before the restore

	for _, p := range a.proxies {
		p.Restore()
	}
	healed := time.Now()
	if !unprotected {
		d := c.settled(30*time.Second, []int{4, 4, 4}, a, b, cc)
		if got := a.o.Owned(); !slices.Equal(got, cutShards) {
			t.Errorf("after the cut healed, a owns %v, before %v", got, cutShards)
		}
		st := a.o.Stats()
		t.Logf("cut healed: a took back %v in %v; %+v", cutShards, d.Round(time.Millisecond), st)
		if st.Sessions != 2 || st.Lost != int64(len(cutShards)) || st.AcquiredPlanned != int64(len(cutShards)) {
			t.Errorf("a after the cut: want a second lease, %d shards lost and taken back by planned handovers: %+v", len(cutShards), st)
		}
	}
	_ = healed
	for _, r := range []*replica{a, b, cc} {
		c.close(r, 10*time.Second)
	}
	return c.checkExclusive(unprotected)
}

// The stored shard count deleted under a running replica: a replica started
// with another count refuses to start (the running one's keys are there),
// and the running one, seeing the count go, admits nothing more. Without
// both, a 4-shard and an 8-shard replica admitted one resource at once
// (bucket/obj-501 in shard 0 of 4 and shard 4 of 8).
func TestShardCountDeletedUnderARunningReplica(t *testing.T) {
	e := etcdtest.Start(t)
	cli := newClient(t, e.Endpoints())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	opts := func(id string, n int) Options {
		return Options{Prefix: "/count/", Shards: n, ID: id, TTL: testTTL, LockDelay: testLockDelay, RequestTimeout: time.Second}
	}
	a, err := Start(ctx, cli, opts("a", 4))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)
	waitFor(t, 10*time.Second, "a admits its 4 shards", func() bool { return len(a.Owned()) == 4 })
	if _, err := cli.Delete(ctx, "/count/shards/count"); err != nil {
		t.Fatal(err)
	}
	if b, err := Start(ctx, cli, opts("b", 8)); err == nil {
		b.Close(ctx)
		t.Fatal("a replica with 8 shards started beside a running one with 4, the count deleted")
	} else {
		t.Logf("refused: %v", err)
	}
	waitFor(t, 5*time.Second, "a admits nothing once the count is gone", func() bool {
		for n := range 4 {
			if _, ok := a.MayAdmit(n); ok {
				return false
			}
		}
		return true
	})
}
