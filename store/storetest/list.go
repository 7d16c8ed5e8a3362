package storetest

import (
	"fmt"
	"slices"
	"strings"

	"github.com/fenceproxy/fenceproxy/fence"
)

var listTests = []subtest{
	{"Paging", testListPaging},
	{"PrefixAndAfter", testListPrefixAfter},
	{"OnlyFences", testListOnlyFences},
	{"OddKeys", testListOddKeys},
}

// listFixture raises these resources (maximum = index+1, "a/zero" marked
// with maximum 0) and returns every record, sorted.
func listFixture(r *rig) []fence.Record {
	var want []fence.Record
	for i, res := range []string{"a/3", "a/1", "b/1", "a", "a/2", "ab", "a/3/x", "a/", "b", "a0", "c/d/e"} {
		r.raise(res, uint64(i+1))
		want = append(want, fence.Record{Resource: res, Token: uint64(i + 1)})
	}
	r.mark("a/zero")
	want = append(want, fence.Record{Resource: "a/zero"})
	slices.SortFunc(want, func(x, y fence.Record) int { return strings.Compare(x.Resource, y.Resource) })
	return want
}

// under returns the records of all whose resource starts with prefix and
// sorts after after.
func under(all []fence.Record, prefix, after string) []fence.Record {
	var out []fence.Record
	for _, rec := range all {
		if strings.HasPrefix(rec.Resource, prefix) && rec.Resource > after {
			out = append(out, rec)
		}
	}
	return out
}

// pages lists prefix page by page (limit each), after = the last resource of
// the page before, until a page comes back short.
func (r *rig) pages(prefix string, limit int) []fence.Record {
	r.t.Helper()
	var all []fence.Record
	after := ""
	for n := 0; ; n++ {
		if n > 1000 {
			r.t.Fatalf("List(%q, limit %d) did not end after 1000 pages", prefix, limit)
		}
		page := r.list(prefix, after, limit)
		if len(page) > limit {
			r.t.Fatalf("List(%q, %q, %d) returned %d records", prefix, after, limit, len(page))
		}
		all = append(all, page...)
		if len(page) < limit {
			return all
		}
		after = page[len(page)-1].Resource
	}
}

// Pages of every size put together are the full sorted set, a maximum of 0
// included, before and after a reopen.
func testListPaging(r *rig) {
	t := r.t
	all := listFixture(r)
	check := func(when string) {
		t.Helper()
		if got := r.list("", "", 1000); !slices.Equal(got, all) {
			t.Fatalf("%s: List(\"\", \"\", 1000) = %v, want %v", when, got, all)
		}
		for _, prefix := range []string{"", "a", "a/", "a/3", "b", "c/", "zzz"} {
			want := under(all, prefix, "")
			for _, limit := range []int{1, 2, 3, 5, len(want), len(want) + 1} {
				if limit < 1 {
					continue
				}
				if got := r.pages(prefix, limit); !slices.Equal(got, want) {
					t.Errorf("%s: pages of %d under %q = %v, want %v", when, limit, prefix, got, want)
				}
			}
		}
		for _, limit := range []int{0, -1} {
			if got := r.list("", "", limit); len(got) != 0 {
				t.Errorf("%s: List with limit %d = %v, want none", when, limit, got)
			}
		}
	}
	check("before reopen")
	r.restart()
	check("after reopen")
}

// after is exclusive and need not be a stored resource nor start with
// prefix: one sorting before every key under prefix lists them all, one
// sorting after every key under it lists none.
func testListPrefixAfter(r *rig) {
	t := r.t
	all := listFixture(r)
	for _, tc := range []struct{ prefix, after string }{
		{"", "a"}, {"", "a/2"}, {"", "a/25"}, {"", "a/3/x"}, {"", "c/d/e"}, {"", "zzz"},
		{"a/", "a/1"}, {"a/", "a/3"}, {"a/", "a/"}, {"a/", "a"}, {"a/", "a/\xff"},
		{"a/", ""}, {"a/", "0"}, // before every key under a/
		{"a/", "a0"}, {"a/", "b"}, {"a/", "zzz"}, // after every key under a/
		{"b", "a/3"}, {"b", "b"}, {"b", "b/0"},
		{"nothing/", ""}, {"nothing/", "a"},
	} {
		want := under(all, tc.prefix, tc.after)
		if got := r.list(tc.prefix, tc.after, 1000); !slices.Equal(got, want) {
			t.Errorf("List(%q, %q) = %v, want %v", tc.prefix, tc.after, got, want)
		}
	}
}

// Lease records are not fences: a lease without a raise is not listed, and
// one with a raise is listed once, as its fence.
func testListOnlyFences(r *rig) {
	t := r.t
	r.setLease("job/quiet", []byte("idle"), 0)
	r.setLease("job/raised", []byte("held"), 4)
	r.raise("job/plain", 2)
	want := []fence.Record{{Resource: "job/plain", Token: 2}, {Resource: "job/raised", Token: 4}}
	for _, prefix := range []string{"", "job/", "lease", "fence"} {
		exp := under(want, prefix, "")
		if got := r.list(prefix, "", 1000); !slices.Equal(got, exp) {
			t.Errorf("List(%q) = %v, want %v", prefix, got, exp)
		}
	}
}

// oddKeys are resource keys as a resolver may make them: spaces, '%',
// non-ASCII UTF-8, slashes everywhere, and names that look like a store's
// own key prefixes.
var oddKeys = []string{
	"with space", " leading", "trailing ", "100%", "per%20cent", "%2F",
	"ünïcödé/☃", "日本/語/キー", "emoji/🦀", "a//b///c/", "/leading", "trailing/", "//",
	strings.Repeat("x/", 200), "fence/looks-like-a-key", "lease/looks-like-a-lease",
	"bkt/part-0/objA", "tab\there", "new\nline", "quote\"s", "back\\slash", "~!@#$^&*()=+[]{};:',.<>?",
}

// Odd keys round-trip through Raise, Max, List, leases and a reopen.
func testListOddKeys(r *rig) {
	t := r.t
	var want []fence.Record
	leases := map[string]string{}
	for i, k := range oddKeys {
		tok := uint64(100 + i)
		r.raise(k, tok)
		want = append(want, fence.Record{Resource: k, Token: tok})
		rec := fmt.Sprintf("lease of %q", k)
		r.setLease(k, []byte(rec), 0)
		leases[k] = rec
	}
	slices.SortFunc(want, func(x, y fence.Record) int { return strings.Compare(x.Resource, y.Resource) })
	check := func(when string) {
		t.Helper()
		if got := r.list("", "", 1000); !slices.Equal(got, want) {
			t.Errorf("%s: List = %+v, want %+v", when, got, want)
		}
		if got := r.pages("", 3); !slices.Equal(got, want) {
			t.Errorf("%s: List in pages of 3 = %+v, want %+v", when, got, want)
		}
		for _, rec := range want {
			if m := r.max(rec.Resource); m != rec.Token {
				t.Errorf("%s: Max(%q) = %d, want %d", when, rec.Resource, m, rec.Token)
			}
			if got := r.list(rec.Resource, "", 1); len(got) != 1 || got[0] != rec {
				t.Errorf("%s: List(prefix %q, limit 1) = %+v, want %+v", when, rec.Resource, got, rec)
			}
			if got := string(r.lease(rec.Resource)); got != leases[rec.Resource] {
				t.Errorf("%s: Lease(%q) = %q, want %q", when, rec.Resource, got, leases[rec.Resource])
			}
		}
		if got := r.leases(); len(got) != len(leases) {
			t.Errorf("%s: EachLease gave %d records, want %d", when, len(got), len(leases))
		}
	}
	check("before reopen")
	r.restart()
	check("after reopen")
}
