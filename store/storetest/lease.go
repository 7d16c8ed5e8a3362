package storetest

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"strconv"
	"sync"
)

var leaseTests = []subtest{
	{"CommitsRecordAndRaise", testLeaseCommits},
	{"FnErrorWritesNothing", testLeaseFnError},
	{"FnSeesCurrentState", testLeaseFnSees},
	{"RaiseNeverLowers", testLeaseRaiseNeverLowers},
	{"OutOfRange", testLeaseOutOfRange},
	{"Concurrent", testLeaseConcurrent},
	{"EachLease", testEachLease},
}

// UpdateLease stores fn's record and raises the fence in one commit; a nil
// record or a zero raise leaves that part as it is; both survive a reopen.
func testLeaseCommits(r *rig) {
	t := r.t
	if rec := r.lease("job/a"); rec != nil {
		t.Fatalf("Lease of a name never written = %q, want nil", rec)
	}
	r.setLease("job/a", []byte("holder=w1"), 7)
	if rec, m := r.lease("job/a"), r.max("job/a"); string(rec) != "holder=w1" || m != 7 {
		t.Fatalf("after UpdateLease: record %q, fence %d; want holder=w1, 7", rec, m)
	}
	r.setLease("job/a", nil, 8) // raise only
	if rec, m := r.lease("job/a"), r.max("job/a"); string(rec) != "holder=w1" || m != 8 {
		t.Fatalf("after a raise-only update: record %q, fence %d; want holder=w1, 8", rec, m)
	}
	r.setLease("job/a", []byte("holder=w2"), 0) // record only
	if rec, m := r.lease("job/a"), r.max("job/a"); string(rec) != "holder=w2" || m != 8 {
		t.Fatalf("after a record-only update: record %q, fence %d; want holder=w2, 8", rec, m)
	}
	// A record without a raise gives the fence no record.
	r.setLease("job/quiet", []byte("idle"), 0)
	// The caller's buffer is its own again once UpdateLease returns.
	buf := []byte("holder=w3")
	r.setLease("job/b", buf, 3)
	copy(buf, "XXXXXXXXX")
	if rec := r.lease("job/b"); string(rec) != "holder=w3" {
		t.Fatalf("record %q changed with the caller's buffer, want holder=w3", rec)
	}
	r.restart()
	for name, want := range map[string]struct {
		rec string
		max uint64
	}{"job/a": {"holder=w2", 8}, "job/b": {"holder=w3", 3}, "job/quiet": {"idle", 0}} {
		if rec, m := r.lease(name), r.max(name); string(rec) != want.rec || m != want.max {
			t.Errorf("after reopen %s: record %q, fence %d; want %q, %d", name, rec, m, want.rec, want.max)
		}
	}
	if m, found := r.atOpen("job/a"); !found || m != 8 {
		t.Errorf("MaxAtOpen(job/a) = %d, %v; want 8, true", m, found)
	}
	if _, found := r.atOpen("job/quiet"); found {
		t.Errorf("a lease update without a raise gave the fence a record")
	}
}

// fn's error aborts: nothing written, neither record nor raise, and the
// error comes back as is.
func testLeaseFnError(r *rig) {
	t := r.t
	boom := errors.New("boom")
	refuse := func([]byte, uint64) ([]byte, uint64, error) { return []byte("x"), 9, boom }
	if err := r.s.UpdateLease("job/new", refuse); err != boom {
		t.Fatalf("UpdateLease = %v, want fn's error as is", err)
	}
	r.setLease("job/old", []byte("v1"), 4)
	if err := r.s.UpdateLease("job/old", refuse); err != boom {
		t.Fatalf("UpdateLease = %v, want fn's error as is", err)
	}
	check := func(when string) {
		t.Helper()
		if rec, m := r.lease("job/new"), r.max("job/new"); rec != nil || m != 0 {
			t.Errorf("%s: job/new record %q, fence %d; want nil, 0", when, rec, m)
		}
		if rec, m := r.lease("job/old"), r.max("job/old"); string(rec) != "v1" || m != 4 {
			t.Errorf("%s: job/old record %q, fence %d; want v1, 4", when, rec, m)
		}
	}
	check("after fn's error")
	r.restart()
	check("after reopen")
	if _, found := r.atOpen("job/new"); found {
		t.Errorf("a failed UpdateLease left a fence record")
	}
}

// fn gets the stored record and the fence's current maximum, whoever raised it.
func testLeaseFnSees(r *rig) {
	t := r.t
	var sawRec []byte
	var sawMax uint64
	look := func(rec []byte, m uint64) ([]byte, uint64, error) {
		sawRec, sawMax = append([]byte(nil), rec...), m
		return nil, 0, nil
	}
	if err := r.s.UpdateLease("job/a", look); err != nil {
		t.Fatal(err)
	}
	if sawRec != nil || sawMax != 0 {
		t.Fatalf("fn on a fresh name saw %q, %d; want nil, 0", sawRec, sawMax)
	}
	r.raise("job/a", 5)
	if err := r.s.UpdateLease("job/a", look); err != nil {
		t.Fatal(err)
	}
	if sawMax != 5 {
		t.Fatalf("fn saw fence %d after Raise(5), want 5", sawMax)
	}
	r.setLease("job/a", []byte("v1"), 6)
	r.raise("job/a", 10)
	r.restart()
	if err := r.s.UpdateLease("job/a", look); err != nil {
		t.Fatal(err)
	}
	if string(sawRec) != "v1" || sawMax != 10 {
		t.Fatalf("fn after reopen saw %q, %d; want v1, 10", sawRec, sawMax)
	}
}

// A lease's raise below the fence leaves the fence as it is and still
// stores the record.
func testLeaseRaiseNeverLowers(r *rig) {
	t := r.t
	r.raise("job/a", 10)
	r.setLease("job/a", []byte("v1"), 3)
	if rec, m := r.lease("job/a"), r.max("job/a"); string(rec) != "v1" || m != 10 {
		t.Fatalf("record %q, fence %d; want v1, 10 (a raise never lowers)", rec, m)
	}
	r.restart()
	if m := r.max("job/a"); m != 10 {
		t.Fatalf("after reopen fence %d, want 10", m)
	}
}

// A lease's raise above 2^63-1 is refused, nothing written.
func testLeaseOutOfRange(r *rig) {
	t := r.t
	r.setLease("job/a", []byte("v1"), 4)
	for _, name := range []string{"job/a", "job/new"} {
		err := r.s.UpdateLease(name, func([]byte, uint64) ([]byte, uint64, error) {
			return []byte("v2"), math.MaxInt64 + 1, nil
		})
		if err == nil {
			t.Fatalf("UpdateLease(%s) raising above 2^63-1 succeeded", name)
		}
	}
	r.restart()
	if rec, m := r.lease("job/a"), r.max("job/a"); string(rec) != "v1" || m != 4 {
		t.Errorf("job/a: record %q, fence %d; want v1, 4", rec, m)
	}
	if rec, m := r.lease("job/new"), r.max("job/new"); rec != nil || m != 0 {
		t.Errorf("job/new: record %q, fence %d; want nil, 0", rec, m)
	}
}

// Concurrent updates of one lease serialise: n goroutines each add one to a
// counter in the record and raise the fence to it; it ends at n, no update
// lost.
func testLeaseConcurrent(r *rig) {
	t := r.t
	const n = 16
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			err := r.s.UpdateLease("job/counter", func(rec []byte, fenceMax uint64) ([]byte, uint64, error) {
				c := uint64(0)
				if rec != nil {
					var err error
					if c, err = strconv.ParseUint(string(rec), 10, 64); err != nil {
						return nil, 0, err
					}
				}
				if c != fenceMax {
					return nil, 0, fmt.Errorf("record %d and fence %d torn apart", c, fenceMax)
				}
				return []byte(strconv.FormatUint(c+1, 10)), c + 1, nil
			})
			if err != nil {
				t.Errorf("UpdateLease: %v", err)
			}
		})
	}
	wg.Wait()
	if rec, m := r.lease("job/counter"), r.max("job/counter"); string(rec) != strconv.Itoa(n) || m != n {
		t.Fatalf("after %d increments: record %q, fence %d; want %d, %d", n, rec, m, n, n)
	}
}

// EachLease walks every lease record in name order, and only lease records;
// fn's error stops it and comes back as is.
func testEachLease(r *rig) {
	t := r.t
	want := map[string]string{}
	for i, name := range []string{"job/b", "job/a", "job/a/1", "", "z", "job/ü", "job/with space"} {
		rec := fmt.Sprintf("rec-%d", i)
		r.setLease(name, []byte(rec), uint64(i+1))
		want[name] = rec
	}
	r.raise("fence-only", 3)
	r.mark("marked-only")
	if got := r.leases(); !maps.Equal(got, want) {
		t.Fatalf("EachLease = %v, want %v", got, want)
	}
	stop := errors.New("stop")
	calls := 0
	err := r.s.EachLease(func(string, []byte) error {
		calls++
		if calls == 2 {
			return stop
		}
		return nil
	})
	if err != stop || calls != 2 {
		t.Fatalf("EachLease with fn failing at the second record: %v after %d calls; want fn's error after 2", err, calls)
	}
	r.restart()
	if got := r.leases(); !maps.Equal(got, want) {
		t.Fatalf("after reopen EachLease = %v, want %v", got, want)
	}
}
