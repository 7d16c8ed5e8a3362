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
