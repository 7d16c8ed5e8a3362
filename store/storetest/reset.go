package storetest

var resetTests = []subtest{
	{"RemovesFenceAndLease", testResetRemoves},
	{"NothingToReset", testResetNothing},
}

// Reset removes the fence and the lease record (no neighbour's), returns the
// maximum removed, lets a smaller token raise again, and all of it survives
// a reopen.
func testResetRemoves(r *rig) {
	t := r.t
	r.setLease("bkt/a", []byte("held"), 10)
	r.raise("bkt/a", 12)
	r.setLease("bkt/b", []byte("held"), 20)
	for _, n := range []string{"bkt", "bkt/a/x", "bkt/ab"} { // neighbours
		r.setLease(n, []byte("neighbour"), 5)
	}
	for res, want := range map[string]uint64{"bkt/a": 12, "bkt/b": 20} {
		removed, err := r.s.Reset(res)
		if err != nil || removed != want {
			t.Fatalf("Reset(%s) = %d, %v; want %d, nil", res, removed, err, want)
		}
	}
	check := func(when string) {
		t.Helper()
		for _, res := range []string{"bkt/a", "bkt/b"} {
			if m, rec := r.max(res), r.lease(res); m != 0 || rec != nil {
				t.Errorf("%s: %s fence %d, lease %q; want 0, nil", when, res, m, rec)
			}
		}
		for _, n := range []string{"bkt", "bkt/a/x", "bkt/ab"} {
			if m, rec := r.max(n), r.lease(n); m != 5 || string(rec) != "neighbour" {
				t.Errorf("%s: neighbour %s fence %d, lease %q; want 5, neighbour", when, n, m, rec)
			}
		}
		if got := r.list("bkt/", "", 100); len(got) != 2 || got[0].Resource != "bkt/a/x" || got[1].Resource != "bkt/ab" {
			t.Errorf("%s: List(bkt/) = %v, want the neighbours only", when, got)
		}
		if got := r.leases(); len(got) != 3 {
			t.Errorf("%s: EachLease = %v, want the neighbours only", when, got)
		}
	}
	check("after Reset")
	r.restart()
	check("after reopen")
	if m, found := r.atOpen("bkt/a"); found || m != 0 {
		t.Errorf("a reset resource had a record at the next open: %d, %v", m, found)
	}
	// A token below the old maximum raises again, and a second reset
	// removes that.
	if m := r.raise("bkt/a", 3); m != 3 {
		t.Fatalf("Raise(bkt/a, 3) after Reset = %d, want 3", m)
	}
	r.restart()
	if m := r.max("bkt/a"); m != 3 {
		t.Fatalf("after reopen Max(bkt/a) = %d, want 3", m)
	}
	if removed, err := r.s.Reset("bkt/a"); err != nil || removed != 3 {
		t.Fatalf("second Reset(bkt/a) = %d, %v; want 3, nil", removed, err)
	}
}

// Reset of a resource without a maximum above 0 returns 0 and writes
// nothing: MarkWritten's record stays.
func testResetNothing(r *rig) {
	t := r.t
	if removed, err := r.s.Reset("never"); err != nil || removed != 0 {
		t.Fatalf("Reset(never) = %d, %v; want 0, nil", removed, err)
	}
	r.mark("marked")
	if removed, err := r.s.Reset("marked"); err != nil || removed != 0 {
		t.Fatalf("Reset of a resource marked with maximum 0 = %d, %v; want 0, nil", removed, err)
	}
	r.restart()
	if m, found := r.atOpen("never"); found || m != 0 {
		t.Errorf("Reset(never) left a record: %d, %v", m, found)
	}
	if m := r.max("never"); m != 0 {
		t.Errorf("Max(never) = %d, want 0", m)
	}
	if m, found := r.atOpen("marked"); !found || m != 0 {
		t.Errorf("Reset of a marked resource removed its record: MaxAtOpen = %d, %v; want 0, true", m, found)
	}
}
