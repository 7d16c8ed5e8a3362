package storetest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

var leasePageTests = []subtest{
	{"LeasesFromPaging", testLeasesFromPaging},
	{"LeasesFromFnError", testLeasesFromFnError},
	{"RemoveLease", testRemoveLease},
	{"RemoveLeaseSeesCurrent", testRemoveLeaseSeesCurrent},
}

// leaseNames are lease names of awkward shapes, and ones that share
// prefixes, in no order.
var leaseNames = []string{"job/b", "job/a", "job/a/1", "job/a/", "", "z", "job/ü", "job/with space",
	"job", "job0", "jo", "job/a/1/x", "pool/0", "pool/1", "pool/10", "pool/2", "%2F", "ab\x00c"}

// leasePages lists prefix's lease records page by page (limit each), after
// = the last name of the page before, until a page comes back short.
func (r *rig) leasePages(prefix string, limit int) []string {
	r.t.Helper()
	var all []string
	after := ""
	for n := 0; ; n++ {
		if n > 1000 {
			r.t.Fatalf("LeasesFrom(%q, limit %d) did not end after 1000 pages", prefix, limit)
		}
		page := r.leasesFrom(prefix, after, limit)
		if len(page) > limit {
			r.t.Fatalf("LeasesFrom(%q, %q, %d) gave %d records", prefix, after, limit, len(page))
		}
		all = append(all, page...)
		if len(page) < limit {
			return all
		}
		after = page[len(page)-1]
	}
}

// leasesFrom returns the names LeasesFrom gives, checking each record.
func (r *rig) leasesFrom(prefix, after string, limit int) []string {
	r.t.Helper()
	var names []string
	err := r.s.LeasesFrom(prefix, after, limit, func(name string, rec []byte) error {
		if want := "rec:" + name; string(rec) != want {
			r.t.Errorf("LeasesFrom: record of %q = %q, want %q", name, rec, want)
		}
		names = append(names, name)
		return nil
	})
	if err != nil {
		r.t.Fatalf("LeasesFrom(%q, %q, %d): %v", prefix, after, limit, err)
	}
	return names
}

// The pages of LeasesFrom, of every size, from every after, put together
// are the sorted names with the prefix after after, fences not included,
// before and after a reopen.
func testLeasesFromPaging(r *rig) {
	t := r.t
	for i, name := range leaseNames {
		r.setLease(name, []byte("rec:"+name), uint64(i+1))
	}
	r.raise("job/fence-only", 3)
	r.mark("job/marked-only")
	sorted := slices.Sorted(slices.Values(leaseNames))
	want := func(prefix, after string) []string {
		var out []string
		for _, n := range sorted {
			if strings.HasPrefix(n, prefix) && n > after {
				out = append(out, n)
			}
		}
		return out
	}
	check := func(when string) {
		t.Helper()
		afters := append([]string{"", "a", "job/a/0", "job/zz", "\xff"}, sorted...)
		for _, prefix := range []string{"", "job", "job/", "job/a", "job/a/", "pool/", "pool/1", "q", "\xff"} {
			for _, limit := range []int{1, 2, 3, 7, 100} {
				if got, w := r.leasePages(prefix, limit), want(prefix, ""); !slices.Equal(got, w) {
					t.Fatalf("%s: pages of LeasesFrom(%q, limit %d) = %q, want %q", when, prefix, limit, got, w)
				}
			}
			for _, after := range afters {
				w := want(prefix, after)
				if got := r.leasesFrom(prefix, after, 1000); !slices.Equal(got, w) {
					t.Fatalf("%s: LeasesFrom(%q, %q, 1000) = %q, want %q", when, prefix, after, got, w)
				}
				if got := r.leasesFrom(prefix, after, 2); !slices.Equal(got, w[:min(2, len(w))]) {
					t.Fatalf("%s: LeasesFrom(%q, %q, 2) = %q, want %q", when, prefix, after, got, w[:min(2, len(w))])
				}
			}
			for _, limit := range []int{0, -1} {
				if got := r.leasesFrom(prefix, "", limit); len(got) != 0 {
					t.Fatalf("%s: LeasesFrom(%q, \"\", %d) = %q, want none", when, prefix, limit, got)
				}
			}
		}
	}
	check("before reopen")
	r.restart()
	check("after reopen")
}

// fn's error stops LeasesFrom and comes back as is.
func testLeasesFromFnError(r *rig) {
	for i, name := range leaseNames {
		r.setLease(name, []byte("rec:"+name), uint64(i+1))
	}
	stop := errors.New("stop")
	calls := 0
	err := r.s.LeasesFrom("", "", 100, func(string, []byte) error {
		calls++
		if calls == 2 {
			return stop
		}
		return nil
	})
	if err != stop || calls != 2 {
		r.t.Fatalf("LeasesFrom with fn failing at the second record: %v after %d calls; want fn's error after 2", err, calls)
	}
}

// RemoveLease: fn sees the record and the fence; false keeps the record,
// true removes it and only it (the fence stays, through a reopen); no
// record: fn is not called; fn's error removes nothing and comes back as
// is.
func testRemoveLease(r *rig) {
	t := r.t
	remove := func(name string, answer bool, ferr error) (called bool, rec []byte, fenceMax uint64, err error) {
		err = r.s.RemoveLease(name, func(got []byte, m uint64) (bool, error) {
			called, rec, fenceMax = true, got, m
			return answer, ferr
		})
		return
	}
	if called, _, _, err := remove("job/none", true, nil); err != nil || called {
		t.Fatalf("RemoveLease of a name without a record: fn called %v, error %v; want no call, nil", called, err)
	}
	r.raise("job/fence-only", 4)
	if called, _, _, err := remove("job/fence-only", true, nil); err != nil || called || r.max("job/fence-only") != 4 {
		t.Fatalf("RemoveLease of a fence without a lease record: fn called %v, error %v, fence %d; want no call, nil, 4", called, err, r.max("job/fence-only"))
	}
	r.setLease("job/a", []byte("rec-a"), 7)
	r.setLease("job/a/1", []byte("rec-a1"), 3)
	called, rec, m, err := remove("job/a", false, nil)
	if err != nil || !called || string(rec) != "rec-a" || m != 7 {
		t.Fatalf("RemoveLease(job/a) keeping: called %v, record %q, fence %d, error %v; want called, rec-a, 7, nil", called, rec, m, err)
	}
	if got := r.lease("job/a"); string(got) != "rec-a" {
		t.Fatalf("record %q after fn kept it, want rec-a", got)
	}
	boom := errors.New("boom")
	if _, _, _, err := remove("job/a", true, boom); err != boom {
		t.Fatalf("RemoveLease with fn failing = %v, want fn's error as is", err)
	}
	if got := r.lease("job/a"); string(got) != "rec-a" {
		t.Fatalf("record %q after fn failed, want rec-a", got)
	}
	if _, _, _, err := remove("job/a", true, nil); err != nil {
		t.Fatalf("RemoveLease(job/a): %v", err)
	}
	check := func(when string) {
		t.Helper()
		if got := r.lease("job/a"); got != nil {
			t.Fatalf("%s: record %q after RemoveLease, want nil", when, got)
		}
		if m := r.max("job/a"); m != 7 {
			t.Fatalf("%s: fence %d after RemoveLease, want 7 (the fence stays)", when, m)
		}
		if got := r.lease("job/a/1"); string(got) != "rec-a1" {
			t.Fatalf("%s: record of job/a/1 %q, want rec-a1 (untouched)", when, got)
		}
		if got := r.leases(); len(got) != 1 || got["job/a/1"] != "rec-a1" {
			t.Fatalf("%s: EachLease = %v, want only job/a/1", when, got)
		}
		if l, err := r.s.List("job/", "", 10); err != nil || len(l) != 3 || l[0].Resource != "job/a" || l[0].Token != 7 {
			t.Fatalf("%s: List(job/) = %v, %v; want the fences of job/a, job/a/1 and job/fence-only", when, l, err)
		}
		// The next UpdateLease of the name sees no record and the fence.
		err := r.s.UpdateLease("job/a", func(rec []byte, m uint64) ([]byte, uint64, error) {
			if rec != nil || m != 7 {
				return nil, 0, fmt.Errorf("UpdateLease after RemoveLease saw record %q, fence %d; want nil, 7", rec, m)
			}
			return nil, 0, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	check("before reopen")
	r.restart()
	check("after reopen")
	if r.s.EmptyAtOpen() {
		t.Fatalf("EmptyAtOpen with fences left")
	}
}

// RemoveLease decides on the record as it is when it removes: fn sees a
// record written after an earlier read, and one UpdateLease wrote just
// before is what fn gets.
func testRemoveLeaseSeesCurrent(r *rig) {
	t := r.t
	r.setLease("job/a", []byte("v1"), 1)
	r.setLease("job/a", []byte("v2"), 2)
	err := r.s.RemoveLease("job/a", func(rec []byte, m uint64) (bool, error) {
		return string(rec) == "v1", nil // remove only the old record
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := r.lease("job/a"); string(got) != "v2" {
		t.Fatalf("record %q, want v2 kept", got)
	}
}
