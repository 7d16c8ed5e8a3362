package storetest

import (
	"fmt"
	"sync"
	"sync/atomic"
)

var startViewTests = []subtest{
	{"AnswersTheStateAtOpen", testStartViewAtOpen},
	{"MarkWritten", testStartViewMarkWritten},
	{"Release", testStartViewRelease},
}

var cleanStopTests = []subtest{
	{"MarkTakenOnce", testCleanStop},
	{"EmptyAtOpen", testEmptyAtOpen},
}

var lifecycleTests = []subtest{
	{"ReadyWhileOpen", testReady},
	{"AfterClose", testAfterClose},
	{"CloseDuringUse", testCloseDuringUse},
	{"Resources", testResources},
}

// MaxAtOpen answers the state at open, not what was raised, marked or reset
// since, whether it is first asked before or after the change.
func testStartViewAtOpen(r *rig) {
	t := r.t
	if m, found := r.atOpen("bkt/a"); found || m != 0 {
		t.Fatalf("MaxAtOpen on fresh storage = %d, %v; want 0, false", m, found)
	}
	r.raise("bkt/a", 5)
	if m, found := r.atOpen("bkt/a"); found || m != 0 {
		t.Fatalf("MaxAtOpen(bkt/a) after a raise in this open = %d, %v; want 0, false", m, found)
	}
	r.raise("bkt/b", 6)
	r.raise("bkt/reset", 7)
	r.setLease("job/raised", []byte("held"), 8)
	r.setLease("job/quiet", []byte("idle"), 0)
	r.restart()

	// Asked before the changes below.
	if m, found := r.atOpen("bkt/a"); !found || m != 5 {
		t.Fatalf("MaxAtOpen(bkt/a) = %d, %v; want 5, true", m, found)
	}
	r.raise("bkt/a", 50)
	r.raise("bkt/b", 60) // asked only after this raise
	r.raise("bkt/new", 9)
	r.mark("bkt/new-mark")
	if _, err := r.s.Reset("bkt/reset"); err != nil {
		t.Fatal(err)
	}
	for res, want := range map[string]struct {
		max   uint64
		found bool
	}{
		"bkt/a": {5, true}, "bkt/b": {6, true}, "bkt/reset": {7, true}, "job/raised": {8, true},
		"bkt/new": {0, false}, "bkt/new-mark": {0, false}, "job/quiet": {0, false}, "never": {0, false},
	} {
		if m, found := r.atOpen(res); m != want.max || found != want.found {
			t.Errorf("MaxAtOpen(%s) = %d, %v; want %d, %v", res, m, found, want.max, want.found)
		}
	}
	if m := r.max("bkt/b"); m != 60 {
		t.Errorf("Max(bkt/b) = %d, want 60: the view at open is not the current one", m)
	}
}

// MarkWritten gives a record with maximum 0, once, without lowering a
// maximum; the record is there at the next open.
func testStartViewMarkWritten(r *rig) {
	t := r.t
	r.mark("bkt/zero")
	r.mark("bkt/zero")
	r.raise("bkt/high", 4)
	r.mark("bkt/high")
	if m := r.max("bkt/zero"); m != 0 {
		t.Fatalf("Max of a marked resource = %d, want 0", m)
	}
	if m := r.max("bkt/high"); m != 4 {
		t.Fatalf("MarkWritten lowered a maximum: %d, want 4", m)
	}
	r.restart()
	for res, want := range map[string]uint64{"bkt/zero": 0, "bkt/high": 4} {
		if m, found := r.atOpen(res); !found || m != want {
			t.Errorf("MaxAtOpen(%s) = %d, %v; want %d, true", res, m, found, want)
		}
	}
	if m := r.raise("bkt/zero", 2); m != 2 {
		t.Errorf("Raise(bkt/zero, 2) after MarkWritten = %d, want 2", m)
	}
}

// After ReleaseOpenSnapshot MaxAtOpen fails, for resources asked before and
// not; everything else works on.
func testStartViewRelease(r *rig) {
	t := r.t
	r.raise("bkt/a", 3)
	r.restart()
	r.atOpen("bkt/a")
	r.s.ReleaseOpenSnapshot()
	r.s.ReleaseOpenSnapshot() // idempotent
	for _, res := range []string{"bkt/a", "bkt/other"} {
		if m, found, err := r.s.MaxAtOpen(res); err == nil {
			t.Errorf("MaxAtOpen(%s) after ReleaseOpenSnapshot = %d, %v, nil; want an error", res, m, found)
		}
	}
	if m := r.raise("bkt/a", 4); m != 4 {
		t.Errorf("Raise after ReleaseOpenSnapshot = %d, want 4", m)
	}
	r.mark("bkt/b")
	r.restart()
	if m, found := r.atOpen("bkt/b"); !found || m != 0 {
		t.Errorf("a new open has a new view: MaxAtOpen(bkt/b) = %d, %v; want 0, true", m, found)
	}
}

// The clean-stop mark: absent on fresh storage, taken once after a marked
// stop, kept across opens until taken, absent after an unmarked stop.
func testCleanStop(r *rig) {
	t := r.t
	take := func(want bool, when string) {
		t.Helper()
		if clean, err := r.s.TakeCleanStop(); err != nil || clean != want {
			t.Fatalf("%s: TakeCleanStop = %v, %v; want %v, nil", when, clean, err, want)
		}
	}
	take(false, "fresh storage")
	r.restart()
	take(false, "after a stop without a mark")
	if err := r.s.MarkCleanStop(); err != nil {
		t.Fatal(err)
	}
	r.restart()
	take(true, "after a marked stop")
	take(false, "taken a second time")
	r.restart()
	take(false, "after the next stop, unmarked")
	if err := r.s.MarkCleanStop(); err != nil {
		t.Fatal(err)
	}
	r.restart()
	r.restart()
	take(true, "after a marked stop and an open that did not take it")
	r.restart()
	take(false, "after it was taken")
}

// EmptyAtOpen: true on fresh storage and after opens that wrote nothing,
// false from the open after any record was made, until every record is gone.
func testEmptyAtOpen(r *rig) {
	t := r.t
	empty := func(want bool, when string) {
		t.Helper()
		if got := r.s.EmptyAtOpen(); got != want {
			t.Fatalf("%s: EmptyAtOpen = %v, want %v", when, got, want)
		}
	}
	empty(true, "fresh storage")
	r.restart()
	empty(true, "after an open that wrote nothing")
	r.mark("bkt/zero")
	empty(true, "in the open that made the first record")
	r.restart()
	empty(false, "after a maximum of 0 was marked")
	if _, err := r.s.Reset("bkt/zero"); err != nil {
		t.Fatal(err)
	}
	r.setLease("job/quiet", []byte("idle"), 0)
	r.restart()
	empty(false, "with a lease record only")
	r.raise("bkt/a", 5)
	r.restart()
	empty(false, "with a maximum")
}

func testReady(r *rig) {
	if err := r.s.Ready(); err != nil {
		r.t.Fatalf("Ready on an open store = %v, want nil", err)
	}
	r.raise("bkt/a", 1)
	if err := r.s.Ready(); err != nil {
		r.t.Fatalf("Ready after a raise = %v, want nil", err)
	}
}

// After Close every method fails, on resources the store held in memory
// too, a second Close returns nil, and the storage opens again with
// everything in it.
func testAfterClose(r *rig) {
	t := r.t
	r.raise("bkt/a", 5)
	r.mark("bkt/zero")
	r.setLease("job/a", []byte("held"), 6)
	if err := r.s.MarkCleanStop(); err != nil {
		t.Fatal(err)
	}
	s := r.s
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	r.s = nil
	if err := s.Close(); err != nil {
		t.Fatalf("second Close = %v, want nil", err)
	}
	fails := func(op string, err error) {
		t.Helper()
		if err == nil {
			t.Errorf("%s after Close succeeded, want an error", op)
		}
	}
	for _, res := range []string{"bkt/a", "bkt/zero", "never"} {
		_, err := s.Max(res)
		fails(fmt.Sprintf("Max(%s)", res), err)
		_, err = s.Raise(res, 1) // covered for bkt/a: no write needed
		fails(fmt.Sprintf("Raise(%s, 1)", res), err)
		_, err = s.Raise(res, 100)
		fails(fmt.Sprintf("Raise(%s, 100)", res), err)
		fails(fmt.Sprintf("MarkWritten(%s)", res), s.MarkWritten(res))
		_, _, err = s.MaxAtOpen(res)
		fails(fmt.Sprintf("MaxAtOpen(%s)", res), err)
		_, err = s.Reset(res)
		fails(fmt.Sprintf("Reset(%s)", res), err)
	}
	fails("UpdateLease", s.UpdateLease("job/a", func(rec []byte, m uint64) ([]byte, uint64, error) { return rec, m + 1, nil }))
	_, err := s.Lease("job/a")
	fails("Lease", err)
	fails("EachLease", s.EachLease(func(string, []byte) error { return nil }))
	_, err = s.List("", "", 10)
	fails("List", err)
	_, err = s.Prefixes("", 10)
	fails("Prefixes", err)
	_, err = s.TakeCleanStop()
	fails("TakeCleanStop", err)
	fails("MarkCleanStop", s.MarkCleanStop())
	fails("Ready", s.Ready())
	s.ReleaseOpenSnapshot() // no effect, no panic
	_ = s.Resources()

	r.s = r.mustOpen()
	if m := r.max("bkt/a"); m != 5 {
		t.Errorf("after reopen Max(bkt/a) = %d, want 5", m)
	}
	if rec, m := r.lease("job/a"), r.max("job/a"); string(rec) != "held" || m != 6 {
		t.Errorf("after reopen job/a: record %q, fence %d; want held, 6", rec, m)
	}
	if m, found := r.atOpen("bkt/zero"); !found || m != 0 {
		t.Errorf("after reopen MaxAtOpen(bkt/zero) = %d, %v; want 0, true", m, found)
	}
	if clean, err := r.s.TakeCleanStop(); err != nil || !clean {
		t.Errorf("the clean-stop mark did not survive calls after Close: %v, %v", clean, err)
	}
}

// Close while calls are in flight: each call succeeds or fails, none hangs,
// every call after Close returned fails, and every maximum a Raise returned
// is there after a reopen.
func testCloseDuringUse(r *rig) {
	t, s := r.t, r.s
	const workers = 8
	var acked [workers]atomic.Uint64
	going := make(chan struct{}, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			res := fmt.Sprintf("bkt/w%d", w)
			for i := uint64(1); ; i++ {
				var err error
				switch i % 4 {
				case 0:
					_, err = s.Max(res)
				case 1, 2:
					var m uint64
					if m, err = s.Raise(res, i); err == nil {
						acked[w].Store(m)
					}
				case 3:
					err = s.UpdateLease(res, func(_ []byte, m uint64) ([]byte, uint64, error) { return []byte("x"), m, nil })
				}
				if i == 8 {
					going <- struct{}{}
				}
				if err != nil {
					if i < 8 {
						going <- struct{}{}
					}
					return
				}
			}
		})
	}
	for range workers {
		<-going
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close during use: %v", err)
	}
	r.s = nil
	for w := range workers {
		if _, err := s.Raise(fmt.Sprintf("bkt/w%d", w), 1<<40); err == nil {
			t.Errorf("Raise after Close returned succeeded")
		}
	}
	wg.Wait()
	r.s = r.mustOpen()
	for w := range workers {
		res := fmt.Sprintf("bkt/w%d", w)
		if m, want := r.max(res), acked[w].Load(); m < want {
			t.Errorf("after reopen Max(%s) = %d, below %d, returned before Close", res, m, want)
		}
	}
}

// Resources never counts more resources than have a maximum above 0:
// marked, refused, zero and reset resources do not count.
func testResources(r *rig) {
	t := r.t
	check := func(when string, most int) {
		t.Helper()
		if n := r.s.Resources(); n < 0 || n > most {
			t.Errorf("%s: Resources() = %d, want 0..%d", when, n, most)
		}
	}
	check("fresh", 0)
	for _, res := range []string{"a", "b", "c"} {
		r.raise(res, 3)
	}
	r.mark("zero")
	r.raise("also-zero", 0)
	_, _ = r.s.Raise("refused", maxToken+1)
	check("after 3 raises", 3)
	if _, err := r.s.Reset("a"); err != nil {
		t.Fatal(err)
	}
	check("after a Reset", 2)
	r.restart()
	check("after reopen", 2)
}
