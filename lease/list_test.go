package lease

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"
)

// List pages through the stored leases in name order, filtered by prefix,
// each with its state now.
func TestList(t *testing.T) {
	m, _, c := newTestManager(t, t.TempDir())
	ctx := context.Background()
	for _, name := range []string{"jobs/b", "jobs/a", "jobs/c", "jobz", "other/x", "job"} {
		if _, err := m.Acquire(ctx, name, "w-"+name, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	c.advance(6 * time.Second) // past the revoke threshold: suspect
	if _, err := m.ForceRelease("jobs/c"); err != nil {
		t.Fatal(err)
	}
	l, _, _ := m.Get("jobs/a")
	if _, err := m.Renew("jobs/a", "w-jobs/a", l.Token); err != nil {
		t.Fatal(err)
	}

	names := func(es []Entry) []string {
		var out []string
		for _, e := range es {
			out = append(out, fmt.Sprintf("%s %s %s", e.Name, e.Holder, e.State))
		}
		return out
	}
	for _, tc := range []struct {
		prefix, after string
		limit         int
		want          []string
	}{
		{"", "", 100, []string{"job w-job suspect", "jobs/a w-jobs/a held", "jobs/b w-jobs/b suspect", "jobs/c w-jobs/c released",
			"jobz w-jobz suspect", "other/x w-other/x suspect"}},
		{"jobs/", "", 100, []string{"jobs/a w-jobs/a held", "jobs/b w-jobs/b suspect", "jobs/c w-jobs/c released"}},
		{"jobs/", "", 2, []string{"jobs/a w-jobs/a held", "jobs/b w-jobs/b suspect"}},
		{"jobs/", "jobs/b", 2, []string{"jobs/c w-jobs/c released"}},
		{"jobs/", "jobs/c", 2, nil},
		{"", "jobz", 1, []string{"other/x w-other/x suspect"}},
		{"nothing/", "", 5, nil},
	} {
		got, err := m.List(tc.prefix, tc.after, tc.limit)
		if err != nil {
			t.Fatalf("List(%q, %q, %d): %v", tc.prefix, tc.after, tc.limit, err)
		}
		if !slices.Equal(names(got), tc.want) {
			t.Errorf("List(%q, %q, %d) = %q, want %q", tc.prefix, tc.after, tc.limit, names(got), tc.want)
		}
	}
}

// countingStore counts the records its store gives List: a page must ask
// for its own records only, from after on, never walk from the first.
type countingStore struct {
	Store
	each, from, records int
}

func (c *countingStore) EachLease(fn func(string, []byte) error) error {
	c.each++
	return c.Store.EachLease(func(name string, rec []byte) error { c.records++; return fn(name, rec) })
}

func (c *countingStore) LeasesFrom(prefix, after string, limit int, fn func(string, []byte) error) error {
	c.from++
	return c.Store.LeasesFrom(prefix, after, limit, func(name string, rec []byte) error { c.records++; return fn(name, rec) })
}

// A page of List costs its own records whatever its position: with 2,000
// leases, the page after 1,800 reads as many records as the first.
func TestListPageSeeks(t *testing.T) {
	m, s, _ := newTestManager(t, t.TempDir())
	ctx := context.Background()
	const n = 2000
	name := func(i int) string { return fmt.Sprintf("atk/%05d", i) }
	for i := range n {
		if _, err := m.Acquire(ctx, name(i), "atk", time.Second); err != nil {
			t.Fatal(err)
		}
	}
	cs := &countingStore{Store: s}
	counted := NewManager(cs, newBarrier(s), Options{})
	for _, at := range []int{0, n / 2, n * 9 / 10} {
		after := ""
		if at > 0 {
			after = name(at - 1)
		}
		cs.records, cs.each, cs.from = 0, 0, 0
		page, err := counted.List("atk/", after, 50)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) != 50 || page[0].Name != name(at) {
			t.Fatalf("page after %q: %d leases from %q, want 50 from %q", after, len(page), page[0].Name, name(at))
		}
		if cs.records != 50 || cs.each != 0 || cs.from != 1 {
			t.Fatalf("page after %d read %d records (%d walks of every record, %d seeks), want 50 in one seek", at, cs.records, cs.each, cs.from)
		}
	}
}
