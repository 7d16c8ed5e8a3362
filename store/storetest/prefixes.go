package storetest

import (
	"slices"
	"strings"

	"github.com/fenceproxy/fenceproxy/fence"
)

var prefixesTests = []subtest{
	{"OnlyPrefixFences", testPrefixesOnly},
	{"Paging", testPrefixesPaging},
	{"RaiseAndLease", testPrefixesRaiseLease},
	{"MarkWritten", testPrefixesMarkWritten},
	{"Reset", testPrefixesReset},
}

// prefixesFixture raises prefix fences with odd bytes and their neighbours
// that are no prefix fence (no name ending in "/", a maximum of 0, a lease
// without a raise), and returns the prefix fences with a maximum above 0,
// sorted.
func prefixesFixture(r *rig) []fence.Record {
	var want []fence.Record
	for i, res := range []string{
		"out/part-7/", "a b/", "%/", "ü/", "/", "//", "a//b///c/", "日本/語/", "out/", "fence/", "x/" + strings.Repeat("y", 300) + "/",
	} {
		tok := uint64(10 + i)
		r.raise(res, tok)
		want = append(want, fence.Record{Resource: res, Token: tok})
	}
	for i, res := range []string{"out/part-7/obj", "out/part-7", "a b", "ü", "%2F", "out/ ", "/x", "trailing/ ", "slash\\"} {
		r.raise(res, uint64(100+i))
	}
	r.mark("marked/")
	r.setLease("leased/", []byte("held"), 0)
	slices.SortFunc(want, func(x, y fence.Record) int { return strings.Compare(x.Resource, y.Resource) })
	return want
}

// sortsAfter returns the records of all that sort after from.
func sortsAfter(all []fence.Record, from string) []fence.Record {
	var out []fence.Record
	for _, rec := range all {
		if rec.Resource > from {
			out = append(out, rec)
		}
	}
	return out
}

// prefixPages lists the prefix fences page by page (limit each), after = the
// last resource of the page before, until a page comes back short.
func (r *rig) prefixPages(limit int) []fence.Record {
	r.t.Helper()
	var all []fence.Record
	from := ""
	for n := 0; ; n++ {
		if n > 1000 {
			r.t.Fatalf("Prefixes(limit %d) did not end after 1000 pages", limit)
		}
		page := r.prefixes(from, limit)
		if len(page) > limit {
			r.t.Fatalf("Prefixes(%q, %d) returned %d records", from, limit, len(page))
		}
		all = append(all, page...)
		if len(page) < limit {
			return all
		}
		from = page[len(page)-1].Resource
	}
}

// Prefixes lists the names ending in "/" with a maximum above 0, odd bytes
// included, and nothing else, before and after a reopen.
func testPrefixesOnly(r *rig) {
	t := r.t
	if got := r.prefixes("", 100); len(got) != 0 {
		t.Fatalf("Prefixes of new storage = %v, want none", got)
	}
	want := prefixesFixture(r)
	check := func(when string) {
		t.Helper()
		if got := r.prefixes("", 1000); !slices.Equal(got, want) {
			t.Errorf("%s: Prefixes = %+v, want %+v", when, got, want)
		}
		for _, rec := range want {
			if m := r.max(rec.Resource); m != rec.Token {
				t.Errorf("%s: Max(%q) = %d, want %d", when, rec.Resource, m, rec.Token)
			}
		}
	}
	check("before reopen")
	r.restart()
	check("after reopen")
}

// Pages of every size put together are the full sorted set; after is
// exclusive and need not be a stored resource; limit <= 0 returns none.
func testPrefixesPaging(r *rig) {
	t := r.t
	all := prefixesFixture(r)
	check := func(when string) {
		t.Helper()
		for _, limit := range []int{1, 2, 3, 5, len(all), len(all) + 1} {
			if got := r.prefixPages(limit); !slices.Equal(got, all) {
				t.Errorf("%s: pages of %d = %+v, want %+v", when, limit, got, all)
			}
		}
		for _, from := range []string{"", "\x00", "/", "//", "0", "out/", "out/part-7", "out/part-7/", "out/part-7/obj", "ü", "ü/", "\xff", "zzz"} {
			if got, want := r.prefixes(from, 1000), sortsAfter(all, from); !slices.Equal(got, want) {
				t.Errorf("%s: Prefixes(%q) = %+v, want %+v", when, from, got, want)
			}
		}
		for _, limit := range []int{0, -1} {
			if got := r.prefixes("", limit); len(got) != 0 {
				t.Errorf("%s: Prefixes with limit %d = %v, want none", when, limit, got)
			}
		}
	}
	check("before reopen")
	r.restart()
	check("after reopen")
}

// A Raise and an UpdateLease's raise of a prefix fence list it with its new
// maximum; a smaller raise and a lease change without a raise change
// nothing.
func testPrefixesRaiseLease(r *rig) {
	t := r.t
	r.raise("by/raise/", 5)
	r.raise("by/raise/", 3) // below: nothing written
	r.setLease("by/lease/", []byte("held"), 7)
	r.setLease("quiet/", []byte("idle"), 0)
	want := []fence.Record{{Resource: "by/lease/", Token: 7}, {Resource: "by/raise/", Token: 5}}
	if got := r.prefixes("", 100); !slices.Equal(got, want) {
		t.Fatalf("Prefixes = %v, want %v", got, want)
	}
	r.setLease("by/raise/", []byte("held"), 9) // a lease raise of a fence Raise made
	r.raise("by/lease/", 11)                   // a Raise of a fence a lease made
	r.setLease("by/lease/", []byte("renewed"), 0)
	want = []fence.Record{{Resource: "by/lease/", Token: 11}, {Resource: "by/raise/", Token: 9}}
	check := func(when string) {
		t.Helper()
		if got := r.prefixes("", 100); !slices.Equal(got, want) {
			t.Errorf("%s: Prefixes = %v, want %v", when, got, want)
		}
	}
	check("before reopen")
	r.restart()
	check("after reopen")
}

// MarkWritten (a maximum of 0) lists nothing; a later raise of the marked
// name does.
func testPrefixesMarkWritten(r *rig) {
	t := r.t
	r.mark("marked/")
	r.mark("leased/")
	if got := r.prefixes("", 100); len(got) != 0 {
		t.Fatalf("Prefixes after MarkWritten = %v, want none", got)
	}
	r.restart()
	if got := r.prefixes("", 100); len(got) != 0 {
		t.Fatalf("Prefixes after MarkWritten and a reopen = %v, want none", got)
	}
	r.raise("marked/", 3)
	r.setLease("leased/", []byte("held"), 4)
	want := []fence.Record{{Resource: "leased/", Token: 4}, {Resource: "marked/", Token: 3}}
	if got := r.prefixes("", 100); !slices.Equal(got, want) {
		t.Errorf("Prefixes after raising marked names = %v, want %v", got, want)
	}
}

// Reset removes a prefix fence from the listing, durably; a raise after it
// lists it again with its new, smaller maximum.
func testPrefixesReset(r *rig) {
	t := r.t
	r.raise("gone/", 20)
	r.setLease("gone/by/lease/", []byte("held"), 30)
	r.raise("stays/", 5)
	for res, want := range map[string]uint64{"gone/": 20, "gone/by/lease/": 30} {
		if removed, err := r.s.Reset(res); err != nil || removed != want {
			t.Fatalf("Reset(%s) = %d, %v; want %d, nil", res, removed, err, want)
		}
	}
	want := []fence.Record{{Resource: "stays/", Token: 5}}
	if got := r.prefixes("", 100); !slices.Equal(got, want) {
		t.Errorf("Prefixes after Reset = %v, want %v", got, want)
	}
	r.restart()
	if got := r.prefixes("", 100); !slices.Equal(got, want) {
		t.Errorf("Prefixes after Reset and a reopen = %v, want %v", got, want)
	}
	r.raise("gone/", 2)
	want = []fence.Record{{Resource: "gone/", Token: 2}, {Resource: "stays/", Token: 5}}
	if got := r.prefixes("", 100); !slices.Equal(got, want) {
		t.Errorf("Prefixes after a raise past Reset = %v, want %v", got, want)
	}
}
