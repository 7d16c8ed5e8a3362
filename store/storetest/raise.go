package storetest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
)

// maxToken is the largest fencing token, 2^63-1.
const maxToken = math.MaxInt64

var raiseTests = []subtest{
	{"Maximum", testRaiseMaximum},
	{"OutOfRange", testRaiseOutOfRange},
	{"Concurrent", testRaiseConcurrent},
}

// Raise keeps max(stored, t) per resource, Max answers it, and both survive
// a reopen; resources never alias one another.
func testRaiseMaximum(r *rig) {
	t := r.t
	if m := r.max("bkt/obj"); m != 0 {
		t.Fatalf("Max of a resource never raised = %d, want 0", m)
	}
	for i, st := range []struct{ t, want uint64 }{{5, 5}, {3, 5}, {5, 5}, {0, 5}, {6, 6}} {
		if m := r.raise("bkt/obj", st.t); m != st.want {
			t.Fatalf("step %d: Raise(bkt/obj, %d) = %d, want %d", i, st.t, m, st.want)
		}
		if m := r.max("bkt/obj"); m != st.want {
			t.Fatalf("step %d: Max(bkt/obj) = %d after Raise(%d), want %d", i, m, st.t, st.want)
		}
	}
	// Neighbours by prefix or extension are other resources.
	for _, other := range []string{"bkt", "bkt/", "bkt/ob", "bkt/obj/", "bkt/obj0", "", "/bkt/obj"} {
		if m := r.max(other); m != 0 {
			t.Errorf("Max(%q) = %d after raising only bkt/obj, want 0", other, m)
		}
	}
	if m := r.raise("", 9); m != 9 {
		t.Fatalf("Raise of the empty resource key = %d, want 9", m)
	}
	if m := r.raise("top", maxToken); m != maxToken {
		t.Fatalf("Raise(top, 2^63-1) = %d, want 2^63-1", m)
	}
	if m := r.raise("top", maxToken); m != maxToken {
		t.Fatalf("Raise(top, 2^63-1) again = %d, want 2^63-1", m)
	}
	if m := r.raise("zero", 0); m != 0 {
		t.Fatalf("Raise(zero, 0) on a resource never raised = %d, want 0", m)
	}

	r.restart()
	for res, want := range map[string]uint64{"bkt/obj": 6, "": 9, "top": maxToken, "bkt": 0} {
		if m := r.max(res); m != want {
			t.Errorf("after reopen Max(%q) = %d, want %d", res, m, want)
		}
	}
	if m, found := r.atOpen("zero"); found || m != 0 {
		t.Errorf("Raise(zero, 0) left a record: MaxAtOpen after reopen = %d, found %v; want 0, false", m, found)
	}
	if m := r.raise("bkt/obj", 2); m != 6 {
		t.Errorf("after reopen Raise(bkt/obj, 2) = %d, want 6", m)
	}
}

// A token above 2^63-1 is refused and writes nothing, not even a record.
func testRaiseOutOfRange(r *rig) {
	t := r.t
	r.raise("kept", 4)
	for _, tok := range []uint64{maxToken + 1, math.MaxUint64} {
		for _, res := range []string{"fresh", "kept"} {
			if m, err := r.s.Raise(res, tok); err == nil {
				t.Errorf("Raise(%s, %d) = %d, nil; want an error", res, tok, m)
			}
		}
	}
	if m := r.max("fresh"); m != 0 {
		t.Errorf("Max(fresh) = %d after refused raises, want 0", m)
	}
	if m := r.max("kept"); m != 4 {
		t.Errorf("Max(kept) = %d after refused raises, want 4", m)
	}
	r.restart()
	if m, found := r.atOpen("fresh"); found || m != 0 {
		t.Errorf("a refused raise left a record: MaxAtOpen(fresh) = %d, %v; want 0, false", m, found)
	}
	if m := r.max("kept"); m != 4 {
		t.Errorf("after reopen Max(kept) = %d, want 4", m)
	}
	if m := r.raise("fresh", 7); m != 7 {
		t.Errorf("Raise(fresh, 7) after refusals = %d, want 7", m)
	}
}

// Many goroutines raise random tokens on a few resources, beside Max, lease
// raises and MarkWritten: every Raise returns >= its token and >= every
// maximum returned before it began; Max and a lease's fn never see less;
// one goroutine never sees a maximum go down; the final maximum is the
// largest token asked for, also after a reopen.
func testRaiseConcurrent(r *rig) {
	t, s := r.t, r.s
	const (
		resources = 4
		workers   = 16
		ops       = 100
	)
	var names [resources]string
	for i := range names {
		names[i] = fmt.Sprintf("bkt/hot-%d", i)
	}
	// acked: the largest maximum returned per resource; asked: the largest
	// token asked for.
	var acked, asked [resources]atomic.Uint64
	lift := func(a *atomic.Uint64, v uint64) {
		for cur := a.Load(); v > cur && !a.CompareAndSwap(cur, v); cur = a.Load() {
		}
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 0x5eed))
			var seen [resources]uint64 // this goroutine's last observation
			<-start
			for range ops {
				i := rng.IntN(resources)
				res, tok := names[i], 1+rng.Uint64N(1<<20)
				floor := acked[i].Load()
				var got uint64
				switch op := rng.IntN(10); {
				case op < 6:
					lift(&asked[i], tok)
					m, err := s.Raise(res, tok)
					if err != nil {
						t.Errorf("Raise(%s, %d): %v", res, tok, err)
						return
					}
					if m < tok || m < floor {
						t.Errorf("Raise(%s, %d) = %d; want >= the token and >= %d, returned before it began", res, tok, m, floor)
					}
					got = m
				case op < 8:
					m, err := s.Max(res)
					if err != nil {
						t.Errorf("Max(%s): %v", res, err)
						return
					}
					if m < floor {
						t.Errorf("Max(%s) = %d, below %d, returned before it began", res, m, floor)
					}
					got = m
				case op < 9:
					lift(&asked[i], tok)
					var saw, raised uint64
					err := s.UpdateLease(res, func(_ []byte, fenceMax uint64) ([]byte, uint64, error) {
						saw, raised = fenceMax, max(fenceMax, tok)
						return []byte("holder"), raised, nil
					})
					if err != nil {
						t.Errorf("UpdateLease(%s): %v", res, err)
						return
					}
					if saw < floor {
						t.Errorf("UpdateLease(%s): fn saw fence %d, below %d, returned before it began", res, saw, floor)
					}
					got = raised
				default:
					if err := s.MarkWritten(res); err != nil {
						t.Errorf("MarkWritten(%s): %v", res, err)
						return
					}
					continue
				}
				if got < seen[i] {
					t.Errorf("one goroutine saw %s's maximum go down: %d, then %d", res, seen[i], got)
				}
				seen[i] = max(seen[i], got)
				lift(&acked[i], got)
			}
		})
	}
	close(start)
	wg.Wait()
	if t.Failed() {
		return
	}
	for i, res := range names {
		if m, want := r.max(res), asked[i].Load(); m != want {
			t.Errorf("Max(%s) = %d after the race, want %d, the largest token raised", res, m, want)
		}
	}
	r.restart()
	for i, res := range names {
		if m, want := r.max(res), asked[i].Load(); m != want {
			t.Errorf("after reopen Max(%s) = %d, want %d", res, m, want)
		}
	}
}
