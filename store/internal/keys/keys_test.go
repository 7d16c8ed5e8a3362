package keys

import (
	"strings"
	"testing"
)

// The exact bytes of upload keys as both stores have always written them:
// existing data is read with these keys, so they never change.
func TestUploadBytes(t *testing.T) {
	long := strings.Repeat("r", 300) // uvarint(300) = 0xac 0x02
	for _, c := range []struct {
		kind, resource, id string
		want               string
	}{
		{"upload/", "bkt/obj", "2~abc", "upload/\x07bkt/obj2~abc"},
		{"upload/", "", "id", "upload/\x00id"},
		{"upload/", "r", "", "upload/\x01r"},
		{"/fenceproxy/u/", "bkt/a b/ü", "VXBsb2Fk", "/fenceproxy/u/\x0abkt/a b/üVXBsb2Fk"},
		{"/fenceproxy/u/", long, "x", "/fenceproxy/u/\xac\x02" + long + "x"},
	} {
		if got := string(Upload(c.kind, c.resource, c.id)); got != c.want {
			t.Errorf("Upload(%q, %.20q, %q) = %q, want %q", c.kind, c.resource, c.id, got, c.want)
		}
	}
}

// No two (resource, uploadID) pairs share a key.
func TestUploadUnique(t *testing.T) {
	pairs := [][2]string{{"a", "bc"}, {"ab", "c"}, {"abc", ""}, {"", "abc"}, {"a\x01", "b"}, {"a", "\x01b"}}
	seen := map[string][2]string{}
	for _, p := range pairs {
		k := string(Upload("upload/", p[0], p[1]))
		if q, dup := seen[k]; dup {
			t.Errorf("%q and %q share the key %q", p, q, k)
		}
		seen[k] = p
	}
}

// The exact bytes of prefix-index keys, and which names are prefix fences.
func TestPrefixIndexBytes(t *testing.T) {
	for _, c := range []struct{ kind, resource, want string }{
		{"prefixes/", "out/part-7/", "prefixes/out/part-7/"},
		{"prefixes/", "/", "prefixes//"},
		{"/fenceproxy/x/", "bkt/a b/ü/", "/fenceproxy/x/bkt/a b/ü/"},
	} {
		if got := string(PrefixIndex(c.kind, c.resource)); got != c.want {
			t.Errorf("PrefixIndex(%q, %q) = %q, want %q", c.kind, c.resource, got, c.want)
		}
	}
	if PrefixIndexVersion != "1" {
		t.Errorf("PrefixIndexVersion = %q, want \"1\"", PrefixIndexVersion)
	}
	for name, want := range map[string]bool{"a/": true, "/": true, "//": true, "%/": true, "ü/": true, "": false, "a": false, "a/b": false, "a/ ": false} {
		if IsPrefix(name) != want {
			t.Errorf("IsPrefix(%q) = %v, want %v", name, !want, want)
		}
	}
}
