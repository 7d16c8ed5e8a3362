package fence

import (
	"errors"
	"net/url"
	"strings"
	"testing"
)

func TestResourceKey(t *testing.T) {
	cases := []struct {
		target string // request target as sent
		depth  int
		want   string
		err    error
	}{
		{"/bkt/part-0/obj%41", 0, "bkt/part-0/objA", nil},
		{"/bkt/part-0/objA", 0, "bkt/part-0/objA", nil},
		{"/bkt/part-0/obj%41", 2, "bkt/part-0", nil},
		{"/bkt/part-0/obj%41", 1, "bkt", nil},
		{"/bkt/part-0/objA", 3, "bkt/part-0/objA", nil},
		{"/bkt/part-0/objA", 9, "bkt/part-0/objA", nil},
		{"/bkt", 2, "bkt", nil},           // README: a shorter path stays whole
		{"/bkt//x", 2, "bkt/", nil},       // README: an empty segment counts
		{"/bkt/a%2Fb", 0, "bkt/a/b", nil}, // S3 treats the encoded slash as a slash
		{"/bkt/a%2Fb", 2, "bkt/a", nil},
		{"/bkt/a%20b?uploadId=1&partNumber=2", 0, "bkt/a b", nil},
		{"/bkt/", 0, "bkt/", nil},
		{"/", 0, "", ErrBadResource},
		{"/bkt/../other", 0, "", ErrBadResource},
		{"/bkt/./x", 0, "", ErrBadResource},
		{"/bkt/%2e%2e/other", 0, "", ErrBadResource},
		{"/bkt/%2E/x", 0, "", ErrBadResource},
		{"/..", 1, "", ErrBadResource},
		{"/" + strings.Repeat("k", MaxResourceKey), 0, strings.Repeat("k", MaxResourceKey), nil},
		{"/" + strings.Repeat("k", MaxResourceKey+1), 0, "", ErrBadResource},
		{"/bkt/" + strings.Repeat("k", MaxResourceKey), 1, "bkt", nil},
	}
	for _, tc := range cases {
		t.Run(tc.target[:min(len(tc.target), 40)], func(t *testing.T) {
			u, err := url.ParseRequestURI(tc.target)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Resolver{Depth: tc.depth}.Key(u.Path)
			if !errors.Is(err, tc.err) || got != tc.want {
				t.Fatalf("Key(%q, depth %d) = %q, %v; want %q, %v", u.Path, tc.depth, got, err, tc.want, tc.err)
			}
		})
	}
}

// FuzzResourceKey: keys are prefixes of the decoded path without its leading
// slash, have at most depth segments, and two encodings of one path agree.
func FuzzResourceKey(f *testing.F) {
	for _, s := range []string{"/bkt/part-0/obj%41", "/a/b/c", "/", "/a/../b", "//x", "/%2e%2e"} {
		f.Add(s, 0)
		f.Add(s, 2)
	}
	f.Fuzz(func(t *testing.T, target string, depth int) {
		u, err := url.ParseRequestURI(target)
		if err != nil || depth < 0 || depth > 64 {
			return
		}
		key, err := Resolver{Depth: depth}.Key(u.Path)
		if err != nil {
			if !errors.Is(err, ErrBadResource) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		trimmed := strings.TrimPrefix(u.Path, "/")
		if !strings.HasPrefix(trimmed, key) || key == "" {
			t.Fatalf("key %q is not a non-empty prefix of %q", key, trimmed)
		}
		if depth > 0 && strings.Count(key, "/") >= depth {
			t.Fatalf("key %q has more than %d segments", key, depth)
		}
		if depth == 0 && key != trimmed {
			t.Fatalf("depth 0 key %q != path %q", key, trimmed)
		}
		// The same path, re-encoded, names the same resource.
		ru, err := url.ParseRequestURI((&url.URL{Path: u.Path}).EscapedPath())
		if err != nil {
			t.Fatalf("re-encoded path does not parse: %v", err)
		}
		if again, err := (Resolver{Depth: depth}).Key(ru.Path); err != nil || again != key {
			t.Fatalf("re-encoded path gives %q, %v; want %q", again, err, key)
		}
	})
}

// Names in API URLs are checked as write targets are, and must be keys some
// write can have: with a depth, at most that many segments (a lease's
// exactly that many).
func TestResolverNames(t *testing.T) {
	for _, tc := range []struct {
		raw         string
		depth       int
		name, lease string // "" for ErrBadResource
	}{
		{"bkt/obj%41", 0, "bkt/objA", "bkt/objA"},
		{"bkt/obj", 2, "bkt/obj", "bkt/obj"},
		{"bkt", 2, "bkt", ""},                    // a write to /bkt has this key; a lease must cover depth segments
		{"bkt/obj/more", 2, "", ""},              // no write has a key of three segments at depth 2
		{"bkt/part-0/x", 1, "", ""},              // the admin raise that would fence nothing
		{"bkt%2Fobj/x", 2, "", ""},               // decoded, three segments
		{"bkt/a%5Cb", 0, "bkt/a\\b", "bkt/a\\b"}, // encoded backslash: a key byte
		{"bkt/a\\b", 0, "", ""},                  // raw backslash: a slash to some parsers
		{"bkt/%2e%2e/x", 0, "", ""},
		{"bkt/%00", 0, "", ""},
		{"", 0, "", ""},
		{"bkt/%zz", 0, "", ""},
	} {
		r := Resolver{Depth: tc.depth}
		if got, err := r.Name(tc.raw); got != tc.name || (tc.name == "") != errors.Is(err, ErrBadResource) {
			t.Errorf("Name(%q) at depth %d = %q, %v; want %q", tc.raw, tc.depth, got, err, tc.name)
		}
		if got, err := r.LeaseName(tc.raw); got != tc.lease || (tc.lease == "") != errors.Is(err, ErrBadResource) {
			t.Errorf("LeaseName(%q) at depth %d = %q, %v; want %q", tc.raw, tc.depth, got, err, tc.lease)
		}
	}
}
