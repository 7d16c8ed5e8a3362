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
