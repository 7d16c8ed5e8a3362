package lease

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fenceproxy/fenceproxy/fence"
	"github.com/fenceproxy/fenceproxy/store/badger"
)

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

func newTestManager(t *testing.T, dir string) (*Manager, *badger.Store, *clock) {
	t.Helper()
	s, err := badger.Open(dir, badger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	c := &clock{now: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)}
	return NewManager(s, newBarrier(s), Options{Now: c.Now, MinTTL: time.Second, MaxTTL: time.Hour}), s, c
}

// The second background document's timeline: w1 holds and renews, w2 cannot
// acquire; w1 stops renewing; w2 acquires only after TTL plus grace, with a
// larger token, and the fence already refuses w1's token.
func TestLeaseTimeline(t *testing.T) {
	m, store, c := newTestManager(t, t.TempDir())
	const ttl = 9 * time.Second // grace 6s, revoke threshold 4.5s
	w1, err := m.Acquire(context.Background(), "jobs/shard-1", "w1", ttl)
	if err != nil {
		t.Fatal(err)
	}
	if fence, _ := store.Max("jobs/shard-1"); fence != w1.Token {
		t.Fatalf("fence %d after acquire, want the new token %d", fence, w1.Token)
	}
	for range 5 { // w1 renews every TTL/3
		c.advance(3 * time.Second)
		if _, err := m.Renew("jobs/shard-1", "w1", w1.Token); err != nil {
			t.Fatalf("renew: %v", err)
		}
		var held *HeldError
		if _, err := m.Acquire(context.Background(), "jobs/shard-1", "w2", ttl); !errors.As(err, &held) || held.Holder != "w1" {
			t.Fatalf("w2 acquired while w1 renews: %v", err)
		}
	}
	// w1 stops renewing.
	c.advance(5 * time.Second)
	if _, st, _ := m.Get("jobs/shard-1"); st != StateSuspect {
		t.Fatalf("state %s after 5s of silence, want suspect", st)
	}
	c.advance(4 * time.Second) // expired: grace runs until +6s
	if _, st, _ := m.Get("jobs/shard-1"); st != StateGrace {
		t.Fatalf("state %s just after expiry, want grace", st)
	}
	if _, err := m.Acquire(context.Background(), "jobs/shard-1", "w2", ttl); !errors.Is(err, ErrHeld) {
		t.Fatalf("w2 acquired during the grace: %v", err)
	}
	c.advance(6 * time.Second)
	w2, err := m.Acquire(context.Background(), "jobs/shard-1", "w2", ttl)
	if err != nil {
		t.Fatalf("w2 after TTL plus grace: %v", err)
	}
	if w2.Token <= w1.Token {
		t.Fatalf("w2's token %d is not larger than w1's %d", w2.Token, w1.Token)
	}
	if fence, _ := store.Max("jobs/shard-1"); fence != w2.Token {
		t.Fatalf("fence %d, want w2's token %d (fence-ahead)", fence, w2.Token)
	}
	if _, err := m.Renew("jobs/shard-1", "w1", w1.Token); !errors.Is(err, ErrLost) {
		t.Fatalf("w1's late renew: %v, want ErrLost", err)
	}
}

func TestRenewDuringGraceKeepsLease(t *testing.T) {
	m, _, c := newTestManager(t, t.TempDir())
	l, _ := m.Acquire(context.Background(), "r", "w1", 3*time.Second)
	c.advance(4 * time.Second) // expired, within the 2s grace
	r, err := m.Renew("r", "w1", l.Token)
	if err != nil || r.Token != l.Token {
		t.Fatalf("renew in grace: %+v, %v; want the same token", r, err)
	}
	if _, st, _ := m.Get("r"); st != StateHeld {
		t.Fatalf("state %s after renew, want held", st)
	}
	c.advance(3*time.Second + 2*time.Second) // past expiry and grace
	if _, err := m.Renew("r", "w1", l.Token); !errors.Is(err, ErrLost) {
		t.Fatalf("renew after grace: %v, want ErrLost", err)
	}
}

func TestAcquireRules(t *testing.T) {
	m, store, _ := newTestManager(t, t.TempDir())
	a, _ := m.Acquire(context.Background(), "r", "w1", 10*time.Second)
	again, err := m.Acquire(context.Background(), "r", "w1", 10*time.Second)
	if err != nil || again.Token != a.Token+1 {
		t.Fatalf("re-acquire by the same holder: %+v, %v; want a new token", again, err)
	}
	if _, err := m.Renew("r", "w1", a.Token); !errors.Is(err, ErrLost) {
		t.Fatalf("renew with the previous incarnation's token: %v", err)
	}
	if _, err := m.Release("r", "w1", again.Token); err != nil {
		t.Fatal(err)
	}
	b, err := m.Acquire(context.Background(), "r", "w2", 10*time.Second)
	if err != nil || b.Token != again.Token+1 {
		t.Fatalf("acquire after release: %+v, %v", b, err)
	}
	// Tokens start above a fence that writes already raised.
	if _, err := store.Raise("other", 500); err != nil {
		t.Fatal(err)
	}
	if o, err := m.Acquire(context.Background(), "other", "w1", 10*time.Second); err != nil || o.Token != 501 {
		t.Fatalf("acquire over fence 500: %+v, %v; want token 501", o, err)
	}
	// A fence raised past the lease's token (a writer or operator) loses it.
	if _, err := store.Raise("r", b.Token+10); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Renew("r", "w2", b.Token); !errors.Is(err, ErrLost) {
		t.Fatalf("renew below the fence: %v, want ErrLost", err)
	}
	// With the fence past its token the holder is cut off: another may acquire at once.
	c, err := m.Acquire(context.Background(), "r", "w3", 10*time.Second)
	if err != nil || c.Token != b.Token+11 {
		t.Fatalf("acquire of a fenced-out lease: %+v, %v; want token %d", c, err, b.Token+11)
	}
	for _, tc := range []struct {
		holder string
		ttl    time.Duration
	}{{"", time.Second}, {"  ", time.Second}, {"w\x00", time.Second}, {"w\xff", time.Second}, {"w\ufffd", time.Second}, {"w", 999 * time.Millisecond}, {"w", time.Hour + time.Second}} {
		if _, err := m.Acquire(context.Background(), "x", tc.holder, tc.ttl); !errors.Is(err, ErrInvalid) {
			t.Errorf("Acquire(%q, %s): %v, want ErrInvalid", tc.holder, tc.ttl, err)
		}
	}
	if _, _, err := m.Get("never"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get of an unknown lease: %v", err)
	}
}

func TestTokensExhausted(t *testing.T) {
	m, store, _ := newTestManager(t, t.TempDir())
	if _, err := store.Raise("r", math.MaxInt64); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Acquire(context.Background(), "r", "w1", 10*time.Second); !errors.Is(err, ErrExhausted) {
		t.Fatalf("acquire at 2^63-1: %v, want ErrExhausted", err)
	}
	if _, _, err := m.Get("r"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a failed acquire left a lease behind: %v", err)
	}
}

func TestTokensSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	s, err := badger.Open(dir, badger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	first, err := NewManager(s, newBarrier(s), Options{}).Acquire(context.Background(), "r", "w1", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = badger.Open(dir, badger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	m := NewManager(s, newBarrier(s), Options{Now: func() time.Time { return time.Now().Add(time.Hour) }})
	next, err := m.Acquire(context.Background(), "r", "w2", time.Second)
	if err != nil || next.Token <= first.Token {
		t.Fatalf("after restart: %+v, %v; want a token above %d", next, err, first.Token)
	}
	if fence, _ := s.Max("r"); fence != next.Token {
		t.Fatalf("fence %d, want %d", fence, next.Token)
	}
}

// 16 holders acquiring one lease at once: exactly one wins.
func TestConcurrentAcquireOneWinner(t *testing.T) {
	m, store, _ := newTestManager(t, t.TempDir())
	var wins atomic.Int32
	var wg sync.WaitGroup
	var winner atomic.Uint64
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := m.Acquire(context.Background(), "hot", string(rune('a'+i)), 10*time.Second)
			switch {
			case err == nil:
				wins.Add(1)
				winner.Store(l.Token)
			case !errors.Is(err, ErrHeld):
				t.Errorf("holder %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	if wins.Load() != 1 {
		t.Fatalf("%d winners, want 1", wins.Load())
	}
	if fence, _ := store.Max("hot"); fence != winner.Load() {
		t.Fatalf("fence %d, winner's token %d", fence, winner.Load())
	}
}

// A holder that stops renewing is reported as suspect before expiry: in its
// state, in the fenceproxy_leases{state="suspect"} gauge, and in one log line.
func TestSuspectReported(t *testing.T) {
	s, err := badger.Open(t.TempDir(), badger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := &clock{now: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)}
	logs := &logSink{}
	m := NewManager(s, newBarrier(s), Options{Now: c.Now, Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	if _, err := m.Acquire(context.Background(), "a", "w1", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Acquire(context.Background(), "b", "w2", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.Collector())
	gauge := func(state string) float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "fenceproxy_leases" {
				continue
			}
			for _, metric := range mf.GetMetric() {
				if metric.GetLabel()[0].GetValue() == state {
					return metric.GetGauge().GetValue()
				}
			}
		}
		return -1
	}
	if gauge("held") != 2 || gauge("suspect") != 0 {
		t.Fatalf("held %v suspect %v, want 2 and 0", gauge("held"), gauge("suspect"))
	}
	c.advance(6 * time.Second) // past TTL/2: a has not renewed, b renews now
	if _, err := m.Renew("b", "w2", 1); err != nil {
		t.Fatal(err)
	}
	if _, st, _ := m.Get("a"); st != StateSuspect {
		t.Fatalf("a is %s, want suspect", st)
	}
	if gauge("suspect") != 1 || gauge("held") != 1 {
		t.Fatalf("suspect %v held %v, want 1 and 1", gauge("suspect"), gauge("held"))
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Watch(ctx, 10*time.Millisecond); close(done) }()
	// The log once Watch has reported, or after 10 s.
	out := logs.wait(10*time.Second, func(out string) bool { return strings.Count(out, `"msg":"lease holder is suspect`) >= 2 })
	cancel()
	<-done
	if n := strings.Count(out, `"msg":"lease holder is suspect`); n < 2 { // Get logs once, Watch once
		t.Fatalf("suspect logged %d times:\n%s", n, out)
	}
	if strings.Count(out, `"lease":"a"`) == 0 || strings.Contains(out, `"msg":"lease holder is suspect: no renew within the revoke threshold","lease":"b"`) {
		t.Fatalf("wrong leases reported:\n%s", out)
	}
}

// logSink collects log lines written concurrently and wakes wait at each.
type logSink struct {
	mu      sync.Mutex
	b       strings.Builder
	written chan struct{} // closed (and dropped) by each Write
}

func (l *logSink) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.written != nil {
		close(l.written)
		l.written = nil
	}
	return l.b.Write(p)
}

func (l *logSink) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// wait returns the log once cond holds for it, checked at each line, or
// after d.
func (l *logSink) wait(d time.Duration, cond func(string) bool) string {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		l.mu.Lock()
		out := l.b.String()
		if l.written == nil {
			l.written = make(chan struct{})
		}
		written := l.written
		l.mu.Unlock()
		if cond(out) {
			return out
		}
		select {
		case <-written:
		case <-timer.C:
			return l.String()
		}
	}
}

// newBarrier is the fence barrier over s that grants raise through.
func newBarrier(s fence.Store) *fence.Barrier {
	b, err := fence.New(s, fence.Options{DrainTimeout: time.Second})
	if err != nil {
		panic(err)
	}
	return b
}

// drainingBarrier is the fence barrier with a drain the test scripts: after
// the grant, during runs (once) as if earlier writes were still draining.
type drainingBarrier struct {
	*fence.Barrier
	mu     sync.Mutex
	during func()
}

func (d *drainingBarrier) RaiseWith(ctx context.Context, resource string, raise func() error) (uint64, error) {
	m, err := d.Barrier.RaiseWith(ctx, resource, raise)
	d.mu.Lock()
	during := d.during
	d.during = nil
	d.mu.Unlock()
	if during != nil && err == nil {
		during()
	}
	return m, err
}

// The TTL runs from the grant. An acquire whose drain took more than a third
// of it runs the TTL from the end of the drain, so the holder never gets a
// lease that is about to expire, nor one taken over while earlier writes
// drained.
func TestAcquireAfterLongDrain(t *testing.T) {
	const ttl = 9 * time.Second // grace 6s
	for _, tc := range []struct {
		name      string
		drain     time.Duration
		rival     bool // another holder acquires during the drain
		wantErr   error
		renewedAt time.Duration // after the grant
	}{
		{"short drain: as granted", 2 * time.Second, false, nil, 0},
		{"long drain: renewed", 5 * time.Second, false, nil, 5 * time.Second},
		{"drain past expiry and grace, taken over", 16 * time.Second, true, ErrLost, 0},
		{"drain past expiry and grace, nobody else", 16 * time.Second, false, nil, 16 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := badger.Open(t.TempDir(), badger.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			c := &clock{now: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
			b := &drainingBarrier{Barrier: newBarrier(s)}
			m := NewManager(s, b, Options{Now: c.Now})
			granted := c.Now()
			b.during = func() {
				c.advance(tc.drain)
				if tc.rival {
					if _, err := m.Acquire(context.Background(), "r", "C", ttl); err != nil {
						t.Errorf("C's acquire during the drain: %v", err)
					}
				}
			}
			l, err := m.Acquire(context.Background(), "r", "B", ttl)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("B's acquire: %+v, %v; want %v", l, err, tc.wantErr)
			}
			if err != nil {
				if cur, _, _ := m.Get("r"); cur.Holder != "C" {
					t.Fatalf("the lease is %s's, want C's", cur.Holder)
				}
				return
			}
			if want := granted.Add(tc.renewedAt); !l.RenewedAt.Equal(want) || !l.ExpiresAt.Equal(want.Add(ttl)) {
				t.Fatalf("renewed at %s, expires at %s; want %s and %s", l.RenewedAt, l.ExpiresAt, want, want.Add(ttl))
			}
			if _, st, _ := m.Get("r"); st != StateHeld {
				t.Fatalf("state %s right after the acquire, want held", st)
			}
		})
	}
}

// With Options.Watched, Watch reports only the leases it accepts: in cluster
// mode each suspect holder is reported by its shard's owner alone.
func TestWatchOnlyWatched(t *testing.T) {
	s, err := badger.Open(t.TempDir(), badger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := &clock{now: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)}
	logs := &logSink{}
	m := NewManager(s, newBarrier(s), Options{Now: c.Now, Logger: slog.New(slog.NewJSONHandler(logs, nil)),
		Watched: func(name string) bool { return name == "mine" }})
	for _, name := range []string{"mine", "theirs"} {
		if _, err := m.Acquire(context.Background(), name, "w", 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	c.advance(6 * time.Second) // past TTL/2 without a renew: both suspect
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Watch(ctx, 5*time.Millisecond); close(done) }()
	logs.wait(10*time.Second, func(out string) bool {
		return strings.Contains(out, `suspect: no renew within the revoke threshold","lease":"mine"`)
	})
	time.Sleep(50 * time.Millisecond) // asserting nothing happens: ten more rounds report no "theirs"
	cancel()
	<-done
	out := logs.String()
	if !strings.Contains(out, `threshold","lease":"mine"`) || strings.Contains(out, `threshold","lease":"theirs"`) {
		t.Fatalf("Watch reported:\n%s\nwant mine and not theirs", out)
	}
}

// A call by another holder on a lease no one holds says so, not that the
// last holder "now holds" it.
func TestLostNamesAFreeLease(t *testing.T) {
	m, _, clk := newTestManager(t, t.TempDir())
	a, err := m.Acquire(context.Background(), "r", "w1", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Release("r", "w1", a.Token); err != nil {
		t.Fatal(err)
	}
	_, err = m.Renew("r", "w2", a.Token)
	if !errors.Is(err, ErrLost) || !strings.Contains(err.Error(), `is held by no one: "w1" released it`) {
		t.Errorf("renew of a released lease by another holder: %v", err)
	}
	b, err := m.Acquire(context.Background(), "r", "w1", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	clk.advance(time.Hour)
	if _, err := m.Renew("r", "w2", b.Token); !errors.Is(err, ErrLost) || !strings.Contains(err.Error(), "is held by no one") || strings.Contains(err.Error(), "now held by") {
		t.Errorf("renew of an expired lease by another holder: %v", err)
	}
}
