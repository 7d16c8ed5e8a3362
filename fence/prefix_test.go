package fence_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fenceproxy/fenceproxy/fence"
	"github.com/fenceproxy/fenceproxy/store/mem"
)

// The reproduction at the barrier: a raise of out/part-7/ refuses
// smaller tokens on every key below it, new keys included, at any depth,
// and names the prefix fence; keys beside it pass.
func TestPrefixFenceRefusesBelow(t *testing.T) {
	s := open(t, mem.Options{})
	b := newBarrier(t, s, fence.Options{})
	ctx := context.Background()
	mustAdmit(t, b, "out/part-7/f1", 1, nil)()
	if m, err := b.Raise(ctx, "out/part-7/", 2); m != 2 || err != nil {
		t.Fatalf("Raise(out/part-7/, 2): %d, %v", m, err)
	}
	for _, key := range []string{"out/part-7/f1", "out/part-7/f2", "out/part-7/a/b/c", "out/part-7//x"} {
		_, err := b.Admit(ctx, []string{key}, 1, nil)
		var stale *fence.StaleError
		if !errors.As(err, &stale) || stale.Resource != "out/part-7/" || stale.Current != 2 || stale.Token != 1 {
			t.Fatalf("token 1 on %s after the prefix raise to 2: %v, want stale naming out/part-7/ at 2", key, err)
		}
		if err := b.Check(key, 1); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("Check(%s, 1): %v", key, err)
		}
		mustAdmit(t, b, key, 2, nil)()
	}
	// Several resources (a COPY's destination below the prefix).
	if _, err := b.Admit(ctx, []string{"elsewhere", "out/part-7/copy"}, 1, nil); fence.ResourceOf(err) != "out/part-7/" {
		t.Fatalf("a COPY into the prefix with token 1: %v", err)
	}
	// Beside the prefix: not below it.
	for _, key := range []string{"out/part-7", "out/part-70/f", "out/part-", "other/part-7/f"} {
		mustAdmit(t, b, key, 1, nil)()
	}
	// The prefix's own resource is the prefix fence itself.
	if _, err := b.Admit(ctx, []string{"out/part-7/"}, 1, nil); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("token 1 on the prefix's own name: %v", err)
	}
	if name, m, err := b.Fence("out/part-7/f9"); name != "out/part-7/" || m != 2 || err != nil {
		t.Fatalf("Fence(out/part-7/f9) = %q, %d, %v", name, m, err)
	}
	// A key's own larger maximum decides over the prefix's.
	mustAdmit(t, b, "out/part-7/f1", 5, nil)()
	if name, m, _ := b.Fence("out/part-7/f1"); name != "out/part-7/f1" || m != 5 {
		t.Fatalf("Fence(out/part-7/f1) = %q, %d, want its own 5", name, m)
	}
	// Nested prefix fences: the larger maximum above refuses.
	if _, err := b.Raise(ctx, "out/", 3); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Admit(ctx, []string{"out/part-7/f2"}, 2, nil); fence.ResourceOf(err) != "out/" {
		t.Fatalf("token 2 below out/ (3) and out/part-7/ (2): %v, want refused by out/", err)
	}
	if n, bytes := b.PrefixFences(); n != 2 || bytes <= 0 {
		t.Fatalf("PrefixFences() = %d, %d bytes", n, bytes)
	}
}

// A prefix raise cuts the smaller-token uploads still sending to any key
// below it, new keys included, and returns only once none is in flight.
func TestPrefixRaiseCutsAndDrains(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBarrier(t, open(t, mem.Options{}), fence.Options{})
		var interrupted atomic.Int32
		sending := &fence.Upload{Interrupt: func() { interrupted.Add(1) }}
		relSending := mustAdmit(t, b, "out/part-7/new-key", 1, sending)
		sent := &fence.Upload{}
		relSent := mustAdmit(t, b, "out/part-7/deep/other", 1, sent)
		if !sent.Send() {
			t.Fatal("Send of an upload nobody cut")
		}
		beside := &fence.Upload{}
		relBeside := mustAdmit(t, b, "out/part-70/x", 1, beside)
		done := make(chan error, 1)
		go func() {
			_, err := b.Raise(context.Background(), "out/part-7/", 2)
			done <- err
		}()
		synctest.Wait()
		if sending.State() != fence.Cut || interrupted.Load() != 1 {
			t.Fatalf("the upload below the prefix still sending: %v, interrupted %d times; want cut, once", sending.State(), interrupted.Load())
		}
		if beside.State() != fence.Sending {
			t.Fatalf("an upload beside the prefix is %v: the raise must not touch it", beside.State())
		}
		relSending()
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("Raise returned (%v) while a write sent whole below the prefix is in flight", err)
		default:
		}
		relSent()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		relBeside()
	})
}

// A prefix raise publishes its maximum before it drains: a smaller token
// below it is refused at once and a larger one passes, while the raise
// waits for the write in flight, and gives up after the drain timeout with
// the maximum raised.
func TestPrefixRaiseInProgress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBarrier(t, open(t, mem.Options{}), fence.Options{})
		stuck := mustAdmit(t, b, "p/stuck", 1, nil) // sent whole, never answered
		raised := make(chan error, 1)
		go func() {
			_, err := b.Raise(context.Background(), "p/", 2)
			raised <- err
		}()
		synctest.Wait()
		if _, err := b.Admit(context.Background(), []string{"p/late"}, 1, nil); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("token 1 below p/ during the raise's drain: %v, want stale", err)
		}
		mustAdmit(t, b, "p/new", 2, nil)()
		if err := <-raised; !errors.Is(err, fence.ErrDrainTimeout) || fence.ResourceOf(err) != "p/" {
			t.Fatalf("Raise with a write stuck below: %v, want drain timeout on p/", err)
		}
		stuck()
	})
}

// While a prefix raise is being made durable, writes below it wait for its
// outcome: refused if it succeeds, admitted if it fails.
func TestPrefixRaiseWaitsForOutcome(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := open(t, mem.Options{})
		b := newBarrier(t, s, fence.Options{})
		for _, fail := range []bool{false, true} {
			prefix := fmt.Sprintf("q-%v/", fail)
			gate := make(chan struct{})
			raised := make(chan error, 1)
			go func() {
				_, err := b.RaiseWith(context.Background(), prefix, func() error {
					<-gate
					if fail {
						return errors.New("store down")
					}
					_, err := s.Raise(prefix, 2)
					return err
				})
				raised <- err
			}()
			synctest.Wait()
			below := admit(b, []string{prefix + "new"}, 1, nil)
			if below.finished() {
				t.Fatalf("token 1 below %s answered (%v) while the raise is not durable yet", prefix, below.err)
			}
			close(gate)
			<-below.done
			err := <-raised
			switch {
			case !fail && (err != nil || !errors.Is(below.err, fence.ErrStale)):
				t.Fatalf("raise: %v; token 1 below it: %v, want refused", err, below.err)
			case fail && (err == nil || below.err != nil):
				t.Fatalf("failed raise: %v; token 1 below it: %v, want admitted", err, below.err)
			}
			if below.err == nil {
				below.release()
			}
		}
		if n, _ := b.PrefixFences(); n != 1 {
			t.Fatalf("%d prefix fences held, want 1: a failed first raise leaves none", n)
		}
	})
}

// Reset of a prefix fence waits for every write below it, then lets
// smaller tokens through again.
func TestPrefixReset(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := open(t, mem.Options{})
		b := newBarrier(t, s, fence.Options{})
		ctx := context.Background()
		if _, err := b.Raise(ctx, "p/", 5); err != nil {
			t.Fatal(err)
		}
		rel := mustAdmit(t, b, "p/k", 5, nil)
		done := make(chan error, 1)
		go func() {
			_, err := b.Reset(ctx, "p/", func() (uint64, error) { return s.Reset("p/") })
			done <- err
		}()
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("Reset returned (%v) with a write below the prefix in flight", err)
		default:
		}
		rel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		mustAdmit(t, b, "p/other", 1, nil)()
		if n, _ := b.PrefixFences(); n != 0 {
			t.Fatalf("%d prefix fences after the reset", n)
		}
	})
}

// Past PrefixBytes a new prefix fence is refused, nothing raised; raising
// one already held still works.
func TestPrefixLimit(t *testing.T) {
	s := open(t, mem.Options{})
	b := newBarrier(t, s, fence.Options{PrefixBytes: 2 * (96 + 3)})
	ctx := context.Background()
	for _, p := range []string{"a1/", "a2/"} {
		if _, err := b.Raise(ctx, p, 1); err != nil {
			t.Fatalf("Raise(%s): %v", p, err)
		}
	}
	if _, err := b.Raise(ctx, "a3/", 1); !errors.Is(err, fence.ErrPrefixLimit) {
		t.Fatalf("a third prefix fence past the limit: %v", err)
	}
	if m, _ := s.Max("a3/"); m != 0 {
		t.Fatalf("the refused prefix fence was raised to %d", m)
	}
	if _, err := b.Admit(ctx, []string{"a3/"}, 1, nil); !errors.Is(err, fence.ErrPrefixLimit) {
		t.Fatalf("a write to a new prefix past the limit: %v", err)
	}
	if _, err := b.Raise(ctx, "a1/", 2); err != nil {
		t.Fatal(err)
	}
}

// With PrefixOwnName (S3 mode) the prefix fence out/part-7/ also covers the
// resource out/part-7, the alias class of the directory marker out/part-7/:
// a smaller token is refused naming the prefix, Fence names it, and a raise
// cuts an upload still sending to it and waits for it. out/part-70 and
// out/part- stay beside it.
func TestPrefixOwnName(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBarrier(t, open(t, mem.Options{}), fence.Options{PrefixOwnName: true})
		ctx := context.Background()
		sending := &fence.Upload{}
		rel := mustAdmit(t, b, "out/part-7", 1, sending)
		done := make(chan error, 1)
		go func() {
			_, err := b.Raise(ctx, "out/part-7/", 2)
			done <- err
		}()
		synctest.Wait()
		if sending.State() != fence.Cut {
			t.Fatalf("an upload to out/part-7 during the raise of out/part-7/: %v, want cut", sending.State())
		}
		select {
		case err := <-done:
			t.Fatalf("Raise returned (%v) while a write to out/part-7 is in flight", err)
		default:
		}
		rel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if _, err := b.Admit(ctx, []string{"out/part-7"}, 1, nil); fence.ResourceOf(err) != "out/part-7/" || !errors.Is(err, fence.ErrStale) {
			t.Fatalf("token 1 on out/part-7 after the raise of out/part-7/ to 2: %v, want stale naming out/part-7/", err)
		}
		if _, err := b.Admit(ctx, []string{"elsewhere", "out/part-7"}, 1, nil); fence.ResourceOf(err) != "out/part-7/" {
			t.Fatalf("a batch with out/part-7 and token 1: %v, want stale naming out/part-7/", err)
		}
		if err := b.Check("out/part-7", 1); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("Check(out/part-7, 1): %v", err)
		}
		if name, m, err := b.Fence("out/part-7"); name != "out/part-7/" || m != 2 || err != nil {
			t.Fatalf("Fence(out/part-7) = %q, %d, %v", name, m, err)
		}
		for _, key := range []string{"out/part-70", "out/part-", "out"} {
			mustAdmit(t, b, key, 1, nil)()
		}
		mustAdmit(t, b, "out/part-7", 2, nil)()
	})
}

// With NoPrefixFences (cluster mode) a name ending in "/" fences only itself.
func TestNoPrefixFences(t *testing.T) {
	b := newBarrier(t, open(t, mem.Options{}), fence.Options{NoPrefixFences: true})
	if _, err := b.Raise(context.Background(), "p/", 5); err != nil {
		t.Fatal(err)
	}
	mustAdmit(t, b, "p/k", 1, nil)()
	if n, _ := b.PrefixFences(); n != 0 {
		t.Fatalf("%d prefix fences with NoPrefixFences", n)
	}
}

// With PrefixSegments (cluster mode's SHARD_DEPTH) only names with that
// many segments are prefix fences; CheckPrefix says why the others are not.
func TestPrefixSegments(t *testing.T) {
	b := newBarrier(t, open(t, mem.Options{}), fence.Options{PrefixSegments: 2})
	for name, want := range map[string]bool{"out/": false, "out/part-7/": true, "out/part-7/x/": true, "out/part-7": false} {
		err := b.CheckPrefix(name)
		if b.IsPrefix(name) != want || (err == nil) != want {
			t.Errorf("%q: IsPrefix %v, CheckPrefix %v; want a prefix fence: %v", name, b.IsPrefix(name), err, want)
		}
		if err != nil && !errors.Is(err, fence.ErrBadResource) {
			t.Errorf("CheckPrefix(%q) = %v, want ErrBadResource", name, err)
		}
	}
	if err := b.CheckPrefix("out/"); err == nil || !strings.Contains(err.Error(), "FENCEPROXY_SHARD_DEPTH 2") {
		t.Errorf("CheckPrefix(out/) = %v, want it to name the depth", err)
	}
	ctx := context.Background()
	if _, err := b.Raise(ctx, "out/", 5); err != nil {
		t.Fatal(err)
	}
	mustAdmit(t, b, "out/k", 1, nil)() // out/ fences only itself
	if _, err := b.Raise(ctx, "out/part-7/", 5); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Admit(ctx, []string{"out/part-7/k"}, 4, nil); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("token 4 below out/part-7/ at 5: %v, want stale", err)
	}

	// Collection writes: checked below only where the collection has the
	// depth (the prefix fences below a shallower one are other shards').
	c := newBarrier(t, open(t, mem.Options{}), fence.Options{PrefixSegments: 2, Collections: true})
	if _, err := c.Raise(ctx, "out/part-7/", 5); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AdmitCollections(ctx, []string{"out/part-7"}, 3, nil); !errors.Is(err, fence.ErrStale) {
		t.Errorf("a collection write on out/part-7 with 3 below out/part-7/ at 5: %v, want stale", err)
	}
	mustAdmit(t, c, "out", 3, nil)() // out/ is shallower: not decided here
	rel, err := c.AdmitCollections(ctx, []string{"out"}, 3, nil)
	if err != nil {
		t.Errorf("a collection write on out with 3 (out/ shallower than the depth): %v, want admitted", err)
	} else {
		rel()
	}
}

// ReloadPrefixes replaces the matching prefix fences with the store's (a
// takeover in cluster mode): raises another barrier made on the store are
// seen, resets too, and the others stay as they were.
func TestReloadPrefixes(t *testing.T) {
	ctx := context.Background()
	store := open(t, mem.Options{})
	here := newBarrier(t, store, fence.Options{})
	if _, err := here.Raise(ctx, "a/gone/", 3); err != nil {
		t.Fatal(err)
	}
	if _, err := here.Raise(ctx, "b/kept/", 3); err != nil {
		t.Fatal(err)
	}
	// Another owner raises a/new/ and resets a/gone/, on the same store.
	other := newBarrier(t, store, fence.Options{})
	if _, err := other.Raise(ctx, "a/new/", 7); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Reset(ctx, "a/gone/", func() (uint64, error) { return store.Reset("a/gone/") }); err != nil {
		t.Fatal(err)
	}
	mustAdmit(t, here, "a/new/k", 1, nil)() // here has not seen it yet
	if err := here.ReloadPrefixes(func(name string) bool { return strings.HasPrefix(name, "a/") }); err != nil {
		t.Fatal(err)
	}
	if _, err := here.Admit(ctx, []string{"a/new/k"}, 6, nil); !errors.Is(err, fence.ErrStale) {
		t.Errorf("token 6 below a/new/ at 7 after the reload: %v, want stale", err)
	}
	mustAdmit(t, here, "a/gone/k", 1, nil)()
	if _, err := here.Admit(ctx, []string{"b/kept/k"}, 2, nil); !errors.Is(err, fence.ErrStale) {
		t.Errorf("token 2 below b/kept/ at 3: %v, want stale", err)
	}
	if n, _ := here.PrefixFences(); n != 2 {
		t.Errorf("%d prefix fences held after the reload, want 2 (a/new/, b/kept/)", n)
	}
}

// The race the barrier closes: writers with token 1 on new keys below p/
// (each key written once) while p/ is raised to 2. No token-1 body may reach
// the backend whole after the raise returned. With the prefix drain off
// (the teeth build), the same test finds such writes.
func TestPrefixRaiseRace(t *testing.T) {
	const rounds = 200
	violations := 0
	for round := range rounds {
		b := newBarrier(t, open(t, mem.Options{}), fence.Options{DrainTimeout: 10 * time.Second})
		prefix := fmt.Sprintf("r%d/", round)
		var raisedAt atomic.Bool
		var late atomic.Int32
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; !raisedAt.Load() || i < 3; i++ {
					up := &fence.Upload{}
					rel, err := b.Admit(context.Background(), []string{fmt.Sprintf("%sw%d/k%d", prefix, w, i)}, 1, up)
					if err != nil {
						if !errors.Is(err, fence.ErrStale) {
							t.Error(err)
						}
						return
					}
					time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond) // the body on its way: random length
					if up.Send() && raisedAt.Load() {
						late.Add(1) // the backend gets it whole after the raise returned
					}
					rel()
				}
			}()
		}
		time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond) // writers in flight: a random point
		if _, err := b.Raise(context.Background(), prefix, 2); err != nil {
			t.Fatal(err)
		}
		raisedAt.Store(true)
		wg.Wait()
		violations += int(late.Load())
	}
	if prefixDrainOff() {
		if violations == 0 {
			t.Fatalf("with the prefix drain off, no token-1 write landed after the raise in %d rounds: the test has no teeth", rounds)
		}
		t.Logf("with the prefix drain off, %d token-1 writes landed after the raise returned, as they must", violations)
		return
	}
	if violations > 0 {
		t.Fatalf("%d token-1 writes reached the backend whole after the prefix raise to 2 returned", violations)
	}
}

// The barrier loads the prefix fences from the store at New: a restart
// keeps refusing below them.
func TestPrefixFencesLoadedAtNew(t *testing.T) {
	s := open(t, mem.Options{})
	for i := range 2500 { // more than a page of the load
		if _, err := s.Raise(fmt.Sprintf("p%04d/", i), 7); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Raise("plain", 9); err != nil {
		t.Fatal(err)
	}
	b := newBarrier(t, s, fence.Options{})
	if n, _ := b.PrefixFences(); n != 2500 {
		t.Fatalf("%d prefix fences loaded, want 2500", n)
	}
	if _, err := b.Admit(context.Background(), []string{"p2499/new"}, 6, nil); fence.ResourceOf(err) != "p2499/" {
		t.Fatalf("token 6 below p2499/ (7) after New: %v", err)
	}
	mustAdmit(t, b, "plain/x", 1, nil)()
}

// 100,000 prefix fences fit the default PrefixBytes, and what the barrier
// counts for each is not below what its index really takes on the heap.
func TestPrefixFencesMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("100,000 raises; skipped with -short")
	}
	const n = 100_000
	s := open(t, mem.Options{})
	for i := range n {
		if _, err := s.Raise(fmt.Sprintf("jobs/daily/part-%06d/", i), 1); err != nil {
			t.Fatal(err)
		}
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	b := newBarrier(t, s, fence.Options{})
	runtime.GC()
	runtime.ReadMemStats(&after)
	count, counted := b.PrefixFences()
	if count != n {
		t.Fatalf("%d prefix fences loaded, want %d", count, n)
	}
	heap := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("%d prefix fences: %d bytes counted (%.1f MiB of the default %d MiB), %d bytes on the heap (%.0f per fence)",
		n, counted, float64(counted)/(1<<20), fence.DefaultPrefixBytes>>20, heap, float64(heap)/n)
	if counted > fence.DefaultPrefixBytes {
		t.Errorf("100,000 prefix fences count %d bytes, over the default %d", counted, fence.DefaultPrefixBytes)
	}
	if heap > counted {
		t.Errorf("the index takes %d bytes on the heap, more than the %d counted: the limit would not bound memory", heap, counted)
	}
	runtime.KeepAlive(b)
}

// Options.Collections: a name ending in "/" passes every prefix fence below
// it, and with AdmitCollections a name without one passes those at or
// below its name + "/"; Admit on such a name (a PUT) and a barrier without
// Collections (S3 mode) do not look below.
func TestPrefixCollections(t *testing.T) {
	ctx := context.Background()
	s := open(t, mem.Options{})
	if _, err := s.Raise("dir/sub/", 5); err != nil {
		t.Fatal(err)
	}
	b := newBarrier(t, s, fence.Options{Collections: true})
	for _, tc := range []struct {
		resources []string
		trees     bool
		refused   string // the fence named, "" when admitted
	}{
		{[]string{"dir/"}, false, "dir/sub/"},
		{[]string{"dir/"}, true, "dir/sub/"},
		{[]string{"dir"}, true, "dir/sub/"},
		{[]string{"dir/sub"}, true, "dir/sub/"}, // the collection dir/sub/ itself
		{[]string{"a/x", "dir"}, true, "dir/sub/"},
		{[]string{"dir"}, false, ""},     // a PUT of the name itself
		{[]string{"dir/su"}, true, ""},   // beside
		{[]string{"dir/sub2"}, true, ""}, // beside
		{[]string{"other/"}, false, ""},
	} {
		admit := b.Admit
		if tc.trees {
			admit = b.AdmitCollections
		}
		rel, err := admit(ctx, tc.resources, 3, nil)
		if got := fence.ResourceOf(err); got != tc.refused || (tc.refused != "" && !errors.Is(err, fence.ErrStale)) {
			t.Errorf("token 3 on %v (collections %v): %v; want refused by %q", tc.resources, tc.trees, err, tc.refused)
		}
		if err == nil {
			rel()
		}
	}
	mustAdmit(t, b, "dir/", 5, nil)()
	// S3 mode: a directory marker changes nothing below it.
	s = open(t, mem.Options{})
	if _, err := s.Raise("dir/sub/", 5); err != nil {
		t.Fatal(err)
	}
	s3 := newBarrier(t, s, fence.Options{PrefixOwnName: true})
	rel, err := s3.AdmitCollections(ctx, []string{"dir/"}, 3, nil)
	if err != nil {
		t.Fatalf("token 3 on dir/ without Collections: %v", err)
	}
	rel()
}

// A raise of a prefix fence cuts and drains the collection writes above it
// in flight with smaller tokens (and names itself in the cut), but not a
// write of the name without "/" admitted as no collection write.
func TestPrefixCollectionsDrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		b := newBarrier(t, open(t, mem.Options{}), fence.Options{Collections: true})
		tree := &fence.Upload{}
		relTree, err := b.AdmitCollections(ctx, []string{"dir"}, 1, tree)
		if err != nil {
			t.Fatal(err)
		}
		plain := &fence.Upload{}
		relPlain := mustAdmit(t, b, "dir", 1, plain)
		slash := &fence.Upload{}
		relSlash := mustAdmit(t, b, "dir/", 1, slash)
		done := make(chan error, 1)
		go func() {
			_, err := b.Raise(ctx, "dir/sub/", 2)
			done <- err
		}()
		synctest.Wait()
		for name, up := range map[string]*fence.Upload{"DELETE dir": tree, "PUT dir/": slash} {
			if c := up.CutBy(); up.State() != fence.Cut || c == nil || c.Resource != "dir/sub/" || c.Current != 2 || c.Token != 1 {
				t.Errorf("%s after the raise of dir/sub/ to 2: %v, cut by %+v; want cut by dir/sub/ at 2", name, up.State(), c)
			}
		}
		if plain.State() != fence.Sending {
			t.Errorf("PUT dir after the raise of dir/sub/: %v, want still sending", plain.State())
		}
		relTree()
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("the raise returned (%v) while PUT dir/ was in flight", err)
		default:
		}
		relSlash()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		relPlain()
		// A reset waits for the collection writes above admitted under
		// the old maximum, as for those below.
		relTree, err = b.AdmitCollections(ctx, []string{"dir"}, 2, nil)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			_, err := b.Reset(ctx, "dir/sub/", func() (uint64, error) { return 2, nil })
			done <- err
		}()
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("the reset of dir/sub/ returned (%v) while DELETE dir with token 2 was in flight", err)
		default:
		}
		relTree()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}
