package storetest

import (
	"errors"
	"strconv"
	"sync"
)

var poolTests = []subtest{
	{"CommitsRecord", testPoolCommits},
	{"FnErrorWritesNothing", testPoolFnError},
	{"KindOfItsOwn", testPoolKindOfItsOwn},
	{"Concurrent", testPoolConcurrent},
}

func (r *rig) pool(name string) []byte {
	r.t.Helper()
	rec, err := r.s.Pool(name)
	if err != nil {
		r.t.Fatalf("Pool(%q): %v", name, err)
	}
	return rec
}

func (r *rig) setPool(name string, rec []byte) {
	r.t.Helper()
	if err := r.s.UpdatePool(name, func([]byte) ([]byte, error) { return rec, nil }); err != nil {
		r.t.Fatalf("UpdatePool(%q): %v", name, err)
	}
}

func (r *rig) pools() ([]string, map[string]string) {
	r.t.Helper()
	var names []string
	out := map[string]string{}
	err := r.s.EachPool(func(name string, rec []byte) error {
		names = append(names, name)
		out[name] = string(rec)
		return nil
	})
	if err != nil {
		r.t.Fatalf("EachPool: %v", err)
	}
	return names, out
}

// UpdatePool stores fn's record; nil leaves it; fn sees the stored record;
// EachPool walks in name order; all of it survives a reopen.
func testPoolCommits(r *rig) {
	t := r.t
	if rec := r.pool("jobs"); rec != nil {
		t.Fatalf("Pool of a name never written = %q, want nil", rec)
	}
	r.setPool("jobs", []byte(`{"v":1}`))
	var saw []byte
	if err := r.s.UpdatePool("jobs", func(rec []byte) ([]byte, error) { saw = append([]byte(nil), rec...); return nil, nil }); err != nil {
		t.Fatal(err)
	}
	if string(saw) != `{"v":1}` || string(r.pool("jobs")) != `{"v":1}` {
		t.Fatalf("fn saw %q, record %q; want {\"v\":1} twice", saw, r.pool("jobs"))
	}
	buf := []byte("b-1")
	r.setPool("b/é x", buf)
	copy(buf, "XXX")
	r.setPool("a", []byte("a-1"))
	r.restart()
	names, recs := r.pools()
	if want := []string{"a", "b/é x", "jobs"}; len(names) != 3 || names[0] != want[0] || names[1] != want[1] || names[2] != want[2] {
		t.Fatalf("EachPool after reopen: names %q, want %q", names, want)
	}
	if recs["b/é x"] != "b-1" || recs["jobs"] != `{"v":1}` {
		t.Fatalf("records after reopen %q", recs)
	}
	stop := errors.New("stop")
	n := 0
	if err := r.s.EachPool(func(string, []byte) error { n++; return stop }); err != stop || n != 1 {
		t.Fatalf("EachPool with fn's error = %v after %d calls, want it as is after 1", err, n)
	}
}

// fn's error aborts: nothing written, and it comes back as is.
func testPoolFnError(r *rig) {
	t := r.t
	boom := errors.New("boom")
	r.setPool("old", []byte("v1"))
	for _, name := range []string{"new", "old"} {
		if err := r.s.UpdatePool(name, func([]byte) ([]byte, error) { return []byte("x"), boom }); err != boom {
			t.Fatalf("UpdatePool(%s) = %v, want fn's error as is", name, err)
		}
	}
	r.restart()
	if rec := r.pool("new"); rec != nil {
		t.Errorf("new: %q after fn's error, want nil", rec)
	}
	if rec := r.pool("old"); string(rec) != "v1" {
		t.Errorf("old: %q after fn's error, want v1", rec)
	}
}

// Pool records are a kind of their own: a pool, a lease and a fence of one
// name do not see each other; Reset and List leave pools alone; a store
// holding only pool records is empty at open.
func testPoolKindOfItsOwn(r *rig) {
	t := r.t
	r.setPool("p", []byte("pool"))
	r.setPool("pool/p", []byte("pool2"))
	if rec := r.lease("p"); rec != nil {
		t.Fatalf("lease p = %q after a pool write", rec)
	}
	if m := r.max("p"); m != 0 {
		t.Fatalf("fence p = %d after a pool write", m)
	}
	if len(r.leases()) != 0 || len(r.list("", "", 10)) != 0 {
		t.Fatalf("pool records seen as leases %v or fences %v", r.leases(), r.list("", "", 10))
	}
	r.restart()
	if !r.s.EmptyAtOpen() {
		t.Errorf("EmptyAtOpen = false with only pool records")
	}
	r.setLease("p", []byte("lease"), 3)
	if _, err := r.s.Reset("p"); err != nil {
		t.Fatal(err)
	}
	if rec := r.pool("p"); string(rec) != "pool" {
		t.Errorf("pool p = %q after Reset(p), want pool", rec)
	}
}

// Concurrent read-modify-writes of one pool serialise: no update is lost.
func testPoolConcurrent(r *rig) {
	t := r.t
	const n = 16
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			err := r.s.UpdatePool("c", func(rec []byte) ([]byte, error) {
				v := 0
				if rec != nil {
					var err error
					if v, err = strconv.Atoi(string(rec)); err != nil {
						return nil, err
					}
				}
				return []byte(strconv.Itoa(v + 1)), nil
			})
			if err != nil {
				t.Errorf("UpdatePool: %v", err)
			}
		})
	}
	wg.Wait()
	if rec := r.pool("c"); string(rec) != strconv.Itoa(n) {
		t.Fatalf("after %d concurrent increments: %q", n, rec)
	}
}
