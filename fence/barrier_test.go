package fence_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fenceproxy/fenceproxy/fence"
	"github.com/fenceproxy/fenceproxy/store/mem"
)

// Barrier tests run in synctest bubbles: time stands still until every
// goroutine of the bubble is blocked, so a wait is observed as "blocked"
// (synctest.Wait) instead of slept for, and a timeout fires at exactly its
// virtual time.

const drain = 30 * time.Second

func open(t *testing.T, opts mem.Options) *mem.Store {
	t.Helper()
	s, err := mem.OpenWith(mem.NewDisk(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newBarrier(t *testing.T, s fence.Store, opts fence.Options) *fence.Barrier {
	t.Helper()
	if opts.DrainTimeout == 0 {
		opts.DrainTimeout = drain
	}
	b, err := fence.New(s, opts)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// admission is one Admit running in its own goroutine.
type admission struct {
	done    chan struct{}
	release func()
	err     error
	at      time.Time // when Admit returned
}

func admit(b *fence.Barrier, resources []string, t uint64, up *fence.Upload) *admission {
	return admitCtx(context.Background(), b, resources, t, up)
}

func admitCtx(ctx context.Context, b *fence.Barrier, resources []string, t uint64, up *fence.Upload) *admission {
	a := &admission{done: make(chan struct{})}
	go func() {
		defer close(a.done)
		a.release, a.err = b.Admit(ctx, resources, t, up)
		a.at = time.Now()
	}()
	return a
}

// finished reports whether Admit returned, once every goroutine is blocked.
func (a *admission) finished() bool {
	synctest.Wait()
	select {
	case <-a.done:
		return true
	default:
		return false
	}
}

func mustAdmit(t *testing.T, b *fence.Barrier, resource string, tok uint64, up *fence.Upload) func() {
	t.Helper()
	rel, err := b.Admit(context.Background(), []string{resource}, tok, up)
	if err != nil {
		t.Fatalf("Admit(%s, %d): %v", resource, tok, err)
	}
	return rel
}

// The admission rule: t < m stale, t == m admitted as is, t > m raised
// durably before it is admitted; a jump past MaxTokenJump refused.
func TestAdmissionRule(t *testing.T) {
	d := mem.NewDisk()
	s, err := mem.Open(d)
	if err != nil {
		t.Fatal(err)
	}
	b := newBarrier(t, s, fence.Options{MaxTokenJump: 100})
	if _, err := s.Raise("r", 41); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		tok     uint64
		err     error
		wantMax uint64
	}{
		{41, nil, 41},
		{42, nil, 42},
		{41, fence.ErrStale, 42},
		{0, fence.ErrStale, 42},
		{143, fence.ErrJump, 42},
		{142, nil, 142},
	} {
		rel, err := b.Admit(context.Background(), []string{"r"}, tc.tok, nil)
		if !errors.Is(err, tc.err) {
			t.Fatalf("token %d: %v, want %v", tc.tok, err, tc.err)
		}
		if err == nil {
			rel()
		} else if got := fence.ResourceOf(err); got != "r" {
			t.Fatalf("token %d: the error names resource %q, want r", tc.tok, got)
		}
		var stale *fence.StaleError
		if errors.As(err, &stale) && (stale.Token != tc.tok || stale.Current != tc.wantMax) {
			t.Fatalf("token %d: %+v", tc.tok, stale)
		}
		if m, _ := s.Max("r"); m != tc.wantMax {
			t.Fatalf("after token %d: maximum %d, want %d", tc.tok, m, tc.wantMax)
		}
	}
	// Check is the same rule without the barrier (observe mode).
	if err := b.Check("r", 141); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("Check(141): %v", err)
	}
	if err := b.Check("r", 150); err != nil {
		t.Fatal(err)
	}
	if m, _ := s.Max("r"); m != 150 {
		t.Fatalf("Check raised to %d, want 150", m)
	}
	// Token 0 raises nothing but gives the resource a record.
	if err := b.Check("zero", 0); err != nil {
		t.Fatal(err)
	}
	mustAdmit(t, b, "zero2", 0, nil)()
	s.Close()
	s, err = mem.Open(d)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, r := range []string{"zero", "zero2"} {
		if m, found, err := s.MaxAtOpen(r); m != 0 || !found || err != nil {
			t.Fatalf("%s after a token-0 write: %d, %v, %v; want a record with maximum 0", r, m, found, err)
		}
	}
}

// A store that fails fails closed: ErrStore, nothing admitted, no maximum lost.
func TestStoreFailureFailsClosed(t *testing.T) {
	broken := errors.New("disk on fire")
	var failMax, failRaise atomic.Bool
	s := open(t, mem.Options{
		BeforeMax: func(string) error {
			if failMax.Load() {
				return broken
			}
			return nil
		},
		BeforeRaise: func(string, uint64) error {
			if failRaise.Load() {
				return broken
			}
			return nil
		},
	})
	b := newBarrier(t, s, fence.Options{})
	mustAdmit(t, b, "r", 5, nil)()
	failRaise.Store(true)
	if _, err := b.Admit(context.Background(), []string{"r"}, 6, nil); !errors.Is(err, fence.ErrStore) || !errors.Is(err, broken) {
		t.Fatalf("failed raise: %v", err)
	}
	if _, err := b.Raise(context.Background(), "r", 6); !errors.Is(err, broken) {
		t.Fatalf("failed Raise: %v", err)
	}
	failRaise.Store(false)
	failMax.Store(true)
	if _, err := b.Admit(context.Background(), []string{"r"}, 5, nil); !errors.Is(err, fence.ErrStore) {
		t.Fatalf("failed read: %v", err)
	}
	failMax.Store(false)
	if n := b.InFlight("r"); n != 0 {
		t.Fatalf("%d in flight after refusals", n)
	}
	if m, _ := s.Max("r"); m != 5 {
		t.Fatalf("maximum %d, want 5", m)
	}
}

// Equal tokens run side by side; a larger one waits until every smaller one
// in flight has finished, then goes; it waits DrainTimeout at most.
func TestBarrierOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBarrier(t, open(t, mem.Options{}), fence.Options{})
		five := mustAdmit(t, b, "r", 5, nil)
		fiveAgain := mustAdmit(t, b, "r", 5, nil) // equal tokens do not wait
		six := admit(b, []string{"r"}, 6, nil)
		if six.finished() {
			t.Fatalf("6 admitted while 5 is in flight: %v", six.err)
		}
		if _, err := b.Admit(context.Background(), []string{"r"}, 5, nil); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("5 after 6 was raised: %v", err)
		}
		five()
		if six.finished() {
			t.Fatal("6 admitted while the second 5 is in flight")
		}
		fiveAgain()
		if !six.finished() || six.err != nil {
			t.Fatalf("6 after the 5s finished: %v", six.err)
		}
		six.release()

		// A smaller write that never finishes: the larger one gives up after
		// exactly DrainTimeout, and its raise stays.
		stuck := mustAdmit(t, b, "q", 1, nil)
		start := time.Now()
		two := admit(b, []string{"q"}, 2, nil)
		<-two.done
		if !errors.Is(two.err, fence.ErrDrainTimeout) || fence.ResourceOf(two.err) != "q" {
			t.Fatalf("2 behind a stuck 1: %v", two.err)
		}
		if waited := two.at.Sub(start); waited != drain {
			t.Fatalf("waited %s, want the drain timeout %s", waited, drain)
		}
		if m, _ := b.Max("q"); m != 2 {
			t.Fatalf("maximum %d after the timed-out 2, want 2", m)
		}
		stuck()
	})
}

// A waiter wakes and checks again from the start: a larger token admitted
// meanwhile makes it stale.
func TestBarrierWakeRechecks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBarrier(t, open(t, mem.Options{}), fence.Options{})
		five := mustAdmit(t, b, "r", 5, nil)
		six := admit(b, []string{"r"}, 6, nil)
		if six.finished() {
			t.Fatalf("6 admitted while 5 is in flight: %v", six.err)
		}
		seven := admit(b, []string{"r"}, 7, nil)
		if !six.finished() || !errors.Is(six.err, fence.ErrStale) {
			t.Fatalf("the waiting 6 after 7 was raised: %v, want stale at once", six.err)
		}
		if seven.finished() {
			t.Fatal("7 admitted while 5 is in flight")
		}
		five()
		if !seven.finished() || seven.err != nil {
			t.Fatalf("7 after 5 finished: %v", seven.err)
		}
		seven.release()
	})
}

// While a raise is being made durable, other writes on the resource wait for
// its outcome: refused when it succeeds, admitted when it fails.
func TestRaiseInProgress(t *testing.T) {
	for _, fail := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			hold := make(chan struct{})
			var held atomic.Bool
			s := open(t, mem.Options{BeforeRaise: func(_ string, tok uint64) error {
				if tok == 9 && held.CompareAndSwap(false, true) {
					<-hold
					if fail {
						return errors.New("raise failed")
					}
				}
				return nil
			}})
			b := newBarrier(t, s, fence.Options{})
			mustAdmit(t, b, "r", 5, nil)()
			nine := admit(b, []string{"r"}, 9, nil)
			synctest.Wait()
			five := admit(b, []string{"r"}, 5, nil)
			if five.finished() {
				t.Fatalf("5 decided while 9's raise is in progress: %v", five.err)
			}
			close(hold)
			<-nine.done
			<-five.done
			if fail {
				if !errors.Is(nine.err, fence.ErrStore) || five.err != nil {
					t.Fatalf("failed raise: 9 %v, 5 %v; want ErrStore, admitted", nine.err, five.err)
				}
				five.release()
				return
			}
			if nine.err != nil || !errors.Is(five.err, fence.ErrStale) {
				t.Fatalf("9 %v, 5 %v; want admitted, stale", nine.err, five.err)
			}
			nine.release()
		})
	}
}

// Every raise goes through the barrier: Raise cuts the uploads below it
// still sending (never those sent whole), returns only once no smaller write
// is in flight, and newer smaller writes are refused from the moment it is
// made. Without the cut the stalled upload would be sent after the raise.
func TestRaiseCutsAndDrains(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBarrier(t, open(t, mem.Options{}), fence.Options{})
		var interrupted atomic.Int32
		sending := &fence.Upload{Interrupt: func() { interrupted.Add(1) }}
		relSending := mustAdmit(t, b, "r", 5, sending)
		sent := &fence.Upload{}
		relSent := mustAdmit(t, b, "r", 5, sent)
		if !sent.Send() {
			t.Fatal("Send of an upload nobody cut")
		}

		type result struct {
			m   uint64
			err error
		}
		done := make(chan result, 1)
		go func() {
			m, err := b.Raise(context.Background(), "r", 50)
			done <- result{m, err}
		}()
		synctest.Wait()
		if sending.State() != fence.Cut || interrupted.Load() != 1 {
			t.Fatalf("the upload still sending: %v, interrupted %d times; want cut, once", sending.State(), interrupted.Load())
		}
		if sending.Send() {
			t.Fatal("a cut upload may still be sent")
		}
		if sent.State() != fence.Sent {
			t.Fatalf("the upload sent whole is %v: a sent body cannot be recalled", sent.State())
		}
		if _, err := b.Admit(context.Background(), []string{"r"}, 5, nil); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("5 after the raise to 50: %v", err)
		}
		select {
		case r := <-done:
			t.Fatalf("Raise returned (%d, %v) while a write sent whole is in flight", r.m, r.err)
		default:
		}
		relSending() // the cut upload's exchange ends
		synctest.Wait()
		select {
		case r := <-done:
			t.Fatalf("Raise returned (%d, %v) while a write sent whole is in flight", r.m, r.err)
		default:
		}
		relSent() // the backend answered the write sent whole
		if r := <-done; r.m != 50 || r.err != nil {
			t.Fatalf("Raise: %d, %v", r.m, r.err)
		}
		// A raise below the maximum changes nothing and returns the maximum.
		if m, err := b.Raise(context.Background(), "r", 7); m != 50 || err != nil {
			t.Fatalf("Raise(7): %d, %v", m, err)
		}
	})
}

// A raise that cannot drain gives up after DrainTimeout with the maximum
// raised; a failed raise function comes back as is, nothing cut.
func TestRaiseWithErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := open(t, mem.Options{})
		b := newBarrier(t, s, fence.Options{})
		up := &fence.Upload{}
		rel := mustAdmit(t, b, "r", 5, up)
		refused := errors.New("lease held")
		if m, err := b.RaiseWith(context.Background(), "r", func() error { return refused }); m != 0 || !errors.Is(err, refused) {
			t.Fatalf("RaiseWith of a refused grant: %d, %v", m, err)
		}
		if up.State() != fence.Sending {
			t.Fatalf("a refused grant cut the upload: %v", up.State())
		}
		up.Send()
		start := time.Now()
		m, err := b.RaiseWith(context.Background(), "r", func() error { _, err := s.Raise("r", 9); return err })
		if m != 9 || !errors.Is(err, fence.ErrDrainTimeout) || time.Since(start) != drain {
			t.Fatalf("RaiseWith behind a stuck write: %d, %v after %s", m, err, time.Since(start))
		}
		if got, _ := s.Max("r"); got != 9 {
			t.Fatalf("maximum %d after the timed-out raise, want 9 (it stays)", got)
		}
		rel()
		// A caller that goes away while the raise drains gets its context's
		// error, with the maximum raised.
		rel = mustAdmit(t, b, "r", 9, nil)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if m, err := b.Raise(ctx, "r", 10); m != 10 || !errors.Is(err, context.Canceled) {
			t.Fatalf("Raise with a cancelled context: %d, %v", m, err)
		}
		rel()
	})
}

// Reset waits until no write on the resource is in flight, holding new ones
// back; when it cannot, it changes nothing.
func TestReset(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := open(t, mem.Options{})
		b := newBarrier(t, s, fence.Options{})
		rel := mustAdmit(t, b, "r", 50, nil)
		reset := func() (uint64, error) { return s.Reset("r") }

		removed, err := b.Reset(context.Background(), "r", reset)
		if removed != 0 || !errors.Is(err, fence.ErrDrainTimeout) {
			t.Fatalf("Reset behind a stuck write: %d, %v", removed, err)
		}
		if m, _ := s.Max("r"); m != 50 {
			t.Fatalf("maximum %d after a reset that timed out, want 50", m)
		}

		done := make(chan error, 1)
		go func() { _, err := b.Reset(context.Background(), "r", reset); done <- err }()
		synctest.Wait()
		newcomer := admit(b, []string{"r"}, 3, nil)
		if newcomer.finished() {
			t.Fatalf("a write admitted while a reset waits: %v", newcomer.err)
		}
		rel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		<-newcomer.done
		if newcomer.err != nil {
			t.Fatalf("3 after the reset of 50: %v; smaller tokens pass again", newcomer.err)
		}
		newcomer.release()
	})
}

// A write the proxy gave up on after sending it whole holds its resource's
// barrier for the abandon grace; equal tokens do not wait.
func TestAbandonGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const grace = 5 * time.Second
		b := newBarrier(t, open(t, mem.Options{}), fence.Options{AbandonGrace: grace})
		up := &fence.Upload{}
		rel := mustAdmit(t, b, "r", 5, up)
		up.Send()
		up.Abandon()
		start := time.Now()
		rel()
		mustAdmit(t, b, "r", 5, nil)()
		six := admit(b, []string{"r"}, 6, nil)
		<-six.done
		if six.err != nil || six.at.Sub(start) != grace {
			t.Fatalf("6 after an abandoned 5: %v after %s, want admitted after %s", six.err, six.at.Sub(start), grace)
		}
		six.release()
		if err := b.WaitIdle(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

// After an unclean start, tokens above 0 on a resource that had a record at
// open wait out the start-up grace; fresh resources and token 0 do not.
func TestStartGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := mem.NewDisk()
		s, err := mem.Open(d)
		if err != nil {
			t.Fatal(err)
		}
		s.Raise("old", 5)
		s.MarkWritten("zero")
		s.Close()
		s, err = mem.Open(d)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		const grace = 5 * time.Second
		start := time.Now()
		b := newBarrier(t, s, fence.Options{StartGrace: grace})
		mustAdmit(t, b, "fresh", 3, nil)()
		mustAdmit(t, b, "zero", 0, nil)()
		if time.Since(start) != 0 {
			t.Fatalf("fresh resources waited %s", time.Since(start))
		}
		for _, tc := range []struct {
			resource string
			tok      uint64
		}{{"old", 5}, {"old", 6}, {"zero", 1}} {
			a := admit(b, []string{tc.resource}, tc.tok, nil)
			<-a.done
			if a.err != nil || a.at.Sub(start) != grace {
				t.Fatalf("%s with %d: %v after %s, want admitted after %s", tc.resource, tc.tok, a.err, a.at.Sub(start), grace)
			}
			a.release()
		}
		mustAdmit(t, b, "old", 7, nil)() // the grace is over
	})
}

// A write on two resources (a MOVE) is refused before anything is raised
// when it is stale on either; its waits share one drain timeout; on error
// none stays admitted.
func TestAdmitSeveral(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := open(t, mem.Options{})
		b := newBarrier(t, s, fence.Options{})
		s.Raise("dst", 9)
		if _, err := b.Admit(context.Background(), []string{"src", "dst"}, 5, nil); !errors.Is(err, fence.ErrStale) || fence.ResourceOf(err) != "dst" {
			t.Fatalf("stale on its Destination: %v", err)
		}
		if m, _ := s.Max("src"); m != 0 {
			t.Fatalf("src raised to %d by a refused write", m)
		}

		relA := mustAdmit(t, b, "a", 5, nil)
		mustAdmit(t, b, "b", 5, nil) // never released
		go func() {
			time.Sleep(drain * 4 / 5) // synctest's fake time: A leaves 4/5 into the drain
			relA()
		}()
		start := time.Now()
		both := admit(b, []string{"b", "a"}, 6, nil)
		<-both.done
		if !errors.Is(both.err, fence.ErrDrainTimeout) || both.at.Sub(start) != drain {
			t.Fatalf("two resources: %v after %s, want the one drain timeout %s", both.err, both.at.Sub(start), drain)
		}
		if n := b.InFlight("a"); n != 0 {
			t.Fatalf("a: %d in flight after the refusal", n)
		}
	})
}

// A waiter whose context ends leaves without being admitted or counted.
func TestAdmitCancelledWhileWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBarrier(t, open(t, mem.Options{}), fence.Options{})
		five := mustAdmit(t, b, "r", 5, nil)
		ctx, cancel := context.WithCancel(context.Background())
		six := admitCtx(ctx, b, []string{"r"}, 6, nil)
		synctest.Wait()
		cancel()
		<-six.done
		if !errors.Is(six.err, context.Canceled) {
			t.Fatalf("Admit = %v, want context.Canceled", six.err)
		}
		if n := b.InFlight("r"); n != 1 {
			t.Fatalf("in flight %d, want 1 (only 5)", n)
		}
		five()
		five() // release is idempotent
		if n := b.InFlight("r"); n != 0 {
			t.Fatalf("in flight %d after release, want 0", n)
		}
	})
}

// A client that left while its raise waited for the store is not admitted
// (nothing to forward, nobody to answer), and the raise it made stays and
// cuts a smaller upload still sending, as any raise does. Without the check
// its write would be forwarded after a read of the fence answered the old
// maximum, with no client waiting for it.
func TestAdmitCancelledDuringRaise(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hold := make(chan struct{})
		s := open(t, mem.Options{BeforeRaise: func(_ string, tok uint64) error {
			if tok == 6 {
				<-hold
			}
			return nil
		}})
		b := newBarrier(t, s, fence.Options{})
		var interrupted atomic.Int32
		sending := &fence.Upload{Interrupt: func() { interrupted.Add(1) }}
		release5 := mustAdmit(t, b, "r", 5, sending)
		ctx, cancel := context.WithCancel(context.Background())
		six := admitCtx(ctx, b, []string{"r"}, 6, nil)
		synctest.Wait()
		cancel()
		close(hold)
		<-six.done
		if !errors.Is(six.err, context.Canceled) {
			t.Fatalf("Admit = %v, want context.Canceled", six.err)
		}
		if n := b.InFlight("r"); n != 1 {
			t.Fatalf("in flight %d, want 1 (only 5)", n)
		}
		if m, err := b.Max("r"); err != nil || m != 6 {
			t.Fatalf("maximum %d %v, want 6", m, err)
		}
		if sending.State() == fence.Sending || interrupted.Load() != 1 {
			t.Fatalf("the token-5 upload is %v, interrupted %d times; want cut once", sending.State(), interrupted.Load())
		}
		release5()
	})
}

// The injected clock times the barrier: a drain timeout fires when the
// clock says so, not when the system clock does.
func TestInjectedClock(t *testing.T) {
	clock := newManualClock()
	b := newBarrier(t, open(t, mem.Options{}), fence.Options{Clock: clock, DrainTimeout: time.Hour})
	rel := mustAdmit(t, b, "r", 1, nil)
	defer rel()
	done := make(chan error, 1)
	go func() { _, err := b.Admit(context.Background(), []string{"r"}, 2, nil); done <- err }()
	clock.waitTimers(t, 1)
	clock.advance(time.Hour)
	if err := <-done; !errors.Is(err, fence.ErrDrainTimeout) {
		t.Fatalf("after the clock's hour: %v", err)
	}
}

// manualClock is a fence.Clock the test advances.
type manualClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []manualTimer
	added  chan struct{}
}

type manualTimer struct {
	at time.Time
	ch chan time.Time
	f  func()
}

func newManualClock() *manualClock {
	return &manualClock{now: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC), added: make(chan struct{}, 64)}
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) After(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	c.add(manualTimer{at: c.Now().Add(d), ch: ch})
	return ch
}

func (c *manualClock) AfterFunc(d time.Duration, f func()) {
	c.add(manualTimer{at: c.Now().Add(d), f: f})
}

func (c *manualClock) add(tm manualTimer) {
	c.mu.Lock()
	c.timers = append(c.timers, tm)
	c.mu.Unlock()
	c.added <- struct{}{}
}

// waitTimers waits until n timers were set (a gate, not a sleep).
func (c *manualClock) waitTimers(t *testing.T, n int) {
	t.Helper()
	for range n {
		<-c.added
	}
}

func (c *manualClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []manualTimer
	rest := c.timers[:0]
	for _, tm := range c.timers {
		if !tm.at.After(c.now) {
			due = append(due, tm)
		} else {
			rest = append(rest, tm)
		}
	}
	c.timers = rest
	now := c.now
	c.mu.Unlock()
	for _, tm := range due {
		if tm.ch != nil {
			tm.ch <- now
		} else {
			go tm.f()
		}
	}
}

// A change on the resource during the start-up grace (another raise of it)
// wakes the waiters, but is not the end of the grace: they keep waiting. A
// reset waits the grace out too.
func TestStartGraceOutlastsChanges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := mem.NewDisk()
		s, err := mem.Open(d)
		if err != nil {
			t.Fatal(err)
		}
		s.MarkWritten("zero")
		s.Raise("old", 5)
		s.Close()
		if s, err = mem.Open(d); err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		const grace = 5 * time.Second
		start := time.Now()
		b := newBarrier(t, s, fence.Options{StartGrace: grace})
		one := admit(b, []string{"zero"}, 1, nil)
		if one.finished() {
			t.Fatalf("1 admitted during the start-up grace: %v", one.err)
		}
		go b.Raise(context.Background(), "zero", 1) // a change on the resource, well before the grace ends
		if one.finished() {
			t.Fatalf("1 admitted %s after start, when another raise of its resource was made; the grace is %s", one.at.Sub(start), grace)
		}
		<-one.done
		if one.err != nil || one.at.Sub(start) != grace {
			t.Fatalf("1: %v after %s, want admitted after the %s grace", one.err, one.at.Sub(start), grace)
		}
		one.release()

		b2 := newBarrier(t, s, fence.Options{StartGrace: grace})
		start = time.Now()
		removed, err := b2.Reset(context.Background(), "old", func() (uint64, error) { return s.Reset("old") })
		if removed != 5 || err != nil || time.Since(start) != grace {
			t.Fatalf("Reset after an unclean start: %d, %v after %s; want 5 after the %s grace", removed, err, time.Since(start), grace)
		}
	})
}

// WaitIdleWhere waits for the matching resources only, abandoned writes
// through their abandon grace included, and not for the others.
func TestWaitIdleWhere(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const grace = 5 * time.Second
		b := newBarrier(t, open(t, mem.Options{}), fence.Options{AbandonGrace: grace})
		inA := func(r string) bool { return strings.HasPrefix(r, "a/") }
		up := &fence.Upload{}
		relA := mustAdmit(t, b, "a/1", 5, up)
		relB := mustAdmit(t, b, "b/1", 5, nil)
		defer relB()
		up.Send()
		up.Abandon()
		start := time.Now()
		relA()
		if err := b.WaitIdleWhere(context.Background(), inA, 0); err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(start); waited < grace {
			t.Fatalf("WaitIdleWhere returned after %s, inside the abandon grace of a matching write (%s)", waited, grace)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := b.WaitIdleWhere(ctx, func(r string) bool { return !inA(r) }, 0); err == nil {
			t.Fatal("WaitIdleWhere returned nil with a matching write in flight")
		}
	})
}
