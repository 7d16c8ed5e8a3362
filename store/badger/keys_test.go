package badger

import "testing"

// The keys as data directories hold them: a change is a data migration.
func TestKeyBytes(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{string(key("bkt/obj")), "fence/bkt/obj"},
		{leasePrefix + "job-7", "lease/job-7"},
		{poolPrefix + "nightly", "pool/nightly"},
		{string(uploadKey("bkt/obj", "2~abc")), "upload/\x07bkt/obj2~abc"},
		{string(prefixKey("out/part-7/")), "prefixes/out/part-7/"},
		{prefixIndexMarker, "meta/prefix-index"},
	} {
		if c.got != c.want {
			t.Errorf("key %q, want %q", c.got, c.want)
		}
	}
}
