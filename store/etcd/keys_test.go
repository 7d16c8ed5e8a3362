package etcd

import "testing"

// The keys as etcd clusters hold them: a change is a data migration.
func TestKeyBytes(t *testing.T) {
	s := &Store{prefix: DefaultPrefix}
	for _, c := range []struct{ got, want string }{
		{s.fenceKey("bkt/obj"), "/fenceproxy/f/bkt/obj"},
		{s.leaseKey("job-7"), "/fenceproxy/l/job-7"},
		{s.poolKey("nightly"), "/fenceproxy/p/nightly"},
		{s.cleanStopKey(), "/fenceproxy/m/clean-stop"},
		{s.uploadKey("bkt/obj", "2~abc"), "/fenceproxy/u/\x07bkt/obj2~abc"},
		{s.prefixKey("out/part-7/"), "/fenceproxy/x/out/part-7/"},
		{s.prefixKey("out/part-7"), ""}, // no prefix fence, no entry
		{s.prefixIndexKey(), "/fenceproxy/m/prefix-index"},
	} {
		if c.got != c.want {
			t.Errorf("key %q, want %q", c.got, c.want)
		}
	}
}
