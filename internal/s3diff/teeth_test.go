//go:build s3teeth

package s3diff_test

import (
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/s3diff"
)

// TestTeeth: with a protection of the proxy's reading switched off (the
// s3teeth build only: FENCEPROXY_TEST_S3_UNPROTECTED), the same run finds
// the bypass it closes: the old reading of an encoded "/" in the bucket
// (a CreateBucket to the proxy, a PutObject to versitygw), and the old
// resource of "o/" apart from "o" (one file to versitygw's posix backend).
func TestTeeth(t *testing.T) {
	seed, requests := budget(t)
	for _, protection := range []string{"encoded-slash", "trailing-slash"} {
		t.Run(protection, func(t *testing.T) {
			t.Setenv("FENCEPROXY_TEST_S3_UNPROTECTED", protection)
			cfg := versitygwPass(t)
			cfg.Seed, cfg.Requests, cfg.StopAfter = seed, 5*requests, 1
			res := s3diff.Run(t, cfg)
			report(t, "versitygw, pass, without "+protection, seed, res)
			if len(res.Violations) == 0 {
				t.Fatalf("without the %s protection, %d requests found no violation", protection, res.Requests)
			}
			t.Logf("found after %d requests: %s", res.Requests, res.Violations[0])
		})
	}
}

// TestTeethSeaweed: the same against SeaweedFS, for what it reads so and
// versitygw does not: a "\" as a "/" ("a\b" is a/b), and the data written to
// a directory marker "a/b/" stored as the object a/b/b.
func TestTeethSeaweed(t *testing.T) {
	seed, requests := budget(t)
	for _, protection := range []string{"backslash", "marker-data"} {
		t.Run(protection, func(t *testing.T) {
			t.Setenv("FENCEPROXY_TEST_S3_UNPROTECTED", protection)
			cfg := seaweedPass(t)
			cfg.Seed, cfg.Requests, cfg.StopAfter = seed, 5*requests, 1
			res := s3diff.Run(t, cfg)
			report(t, "SeaweedFS, pass, without "+protection, seed, res)
			if len(res.Violations) == 0 {
				t.Fatalf("without the %s protection, %d requests found no violation", protection, res.Requests)
			}
			t.Logf("found after %d requests: %s", res.Requests, res.Violations[0])
		})
	}
}
