//go:build s3teeth

package s3diff_test

import (
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/s3diff"
)

// TestTeeth: with a protection of the proxy's reading switched off (the
// s3teeth build only: FENCEPROXY_TEST_S3_UNPROTECTED), the same run finds
// the bypass it closes. Against versitygw: the old reading of an encoded
// "/" in the bucket (a CreateBucket to the proxy, a PutObject to the store),
// and the old resource of "o/" apart from "o" (one file to its posix
// backend). Against SeaweedFS, for what it reads so and versitygw does not:
// a "\" as a "/", and the data written to a directory marker "a/b/" stored
// as the object a/b/b.
func TestTeeth(t *testing.T) {
	seed, requests := budget(t)
	for _, c := range []struct {
		store, protection string
		start             func(*testing.T) s3diff.Config
	}{
		{"versitygw", "encoded-slash", versitygwPass},
		{"versitygw", "trailing-slash", versitygwPass},
		{"SeaweedFS", "backslash", seaweedPass},
		{"SeaweedFS", "marker-data", seaweedPass},
	} {
		t.Run(c.store+"/"+c.protection, func(t *testing.T) {
			t.Setenv("FENCEPROXY_TEST_S3_UNPROTECTED", c.protection)
			cfg := c.start(t)
			cfg.Seed, cfg.Requests, cfg.StopAfter = seed, 5*requests, 1
			res := s3diff.Run(t, cfg)
			report(t, c.store+", pass, without "+c.protection, seed, res)
			if len(res.Violations) == 0 {
				t.Fatalf("without the %s protection, %d requests found no violation", c.protection, res.Requests)
			}
			t.Logf("found after %d requests: %s", res.Requests, res.Violations[0])
		})
	}
}
