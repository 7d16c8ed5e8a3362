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
		{"/bkt//x", 2, "bkt/", nil},       // without MergeSlashes an empty segment counts
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

// TestTargetPathParamsAndUTF8: a raw ";" is refused unless PathParams is set
// (servlet backends strip ";params"), encoded "%3B" is a key byte either way,
// and a decoded path that is not UTF-8 is refused whatever the depth.
func TestTargetPathParamsAndUTF8(t *testing.T) {
	cases := []struct {
		raw        string
		pathParams bool
		depth      int
		want       string // "" for ErrBadResource
	}{
		{"/c/obj;x=1", false, 0, ""},
		{"/b/..;/c/obj", false, 0, ""},
		{"/c;/obj", false, 0, ""},
		{"/c/obj;x=1", true, 0, "c/obj;x=1"},
		{"/c;/obj", true, 0, "c;/obj"},
		{"/b/..;/c/obj", true, 0, "b/..;/c/obj"}, // "..;" is not a dot segment to the fence once allowed
		{"/c/obj%3Bx=1", false, 0, "c/obj;x=1"},
		{"/u/%FF1", false, 0, ""},
		{"/u/%FF1", false, 1, ""}, // past the key, still one object under U+FFFD to some backends
		{"/u/%C3%A9", false, 0, "u/é"},
		{"/u/%EF%BF%BD1", false, 0, "u/\uFFFD1"}, // U+FFFD itself is valid UTF-8
		{"/u/%ED%A0%80", false, 0, ""},           // a UTF-16 surrogate
	}
	for _, tc := range cases {
		r := Resolver{Depth: tc.depth, PathParams: tc.pathParams}
		got, err := r.Target(tc.raw)
		if tc.want == "" {
			if !errors.Is(err, ErrBadResource) {
				t.Errorf("Resolver%+v.Target(%q) = %q, %v; want ErrBadResource", r, tc.raw, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Resolver%+v.Target(%q) = %q, %v; want %q", r, tc.raw, got, err, tc.want)
		}
	}
	// A name in an API URL may hold a raw ";": the key it names is one a
	// write reaches with "%3B", and the API has no servlet behind it.
	if got, err := (Resolver{}).Name("c;/obj"); err != nil || got != "c;/obj" {
		t.Errorf(`Name("c;/obj") = %q, %v`, got, err)
	}
	if _, err := (Resolver{}).Name("u/%FF1"); !errors.Is(err, ErrBadResource) {
		t.Errorf(`Name("u/%%FF1") = %v, want ErrBadResource`, err)
	}
}

// TestResourceKeyMergeSlashes: with MergeSlashes (S3 mode) a run of slashes
// in the decoded path is one slash, so /bkt//obj and /bkt/%2Fobj are the
// resource of /bkt/obj: versitygw (fasthttp) merges them and a DeleteObjects
// key "/obj" deletes bkt/obj. Without it an empty segment still counts.
func TestResourceKeyMergeSlashes(t *testing.T) {
	for _, tc := range []struct {
		path  string
		depth int
		want  string
	}{
		{"/bkt//obj", 0, "bkt/obj"},
		{"//bkt///obj", 0, "bkt/obj"},
		{"/bkt//obj/", 0, "bkt/obj/"},
		{"/bkt//x", 2, "bkt/x"},
		{"/bkt/obj", 0, "bkt/obj"},
	} {
		got, err := Resolver{Depth: tc.depth, MergeSlashes: true}.Key(tc.path)
		if err != nil || got != tc.want {
			t.Errorf("MergeSlashes Key(%q, depth %d) = %q, %v; want %q", tc.path, tc.depth, got, err, tc.want)
		}
	}
	if got, _ := (Resolver{MergeSlashes: true}).Target("/bkt/%2Fobj"); got != "bkt/obj" {
		t.Errorf("MergeSlashes Target(/bkt/%%2Fobj) = %q, want bkt/obj", got)
	}
	if got, _ := (Resolver{}).Key("/bkt//obj"); got != "bkt//obj" {
		t.Errorf("Key(/bkt//obj) without MergeSlashes = %q, want bkt//obj", got)
	}
}
