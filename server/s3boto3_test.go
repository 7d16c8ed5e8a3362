package server_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/s3backend"
	"github.com/fenceproxy/fenceproxy/internal/servertest"
)

// TestS3Boto3: boto3 with the shipped before-sign hook
// (examples/boto3/fenceproxy_token.py), through fenceproxy in pass mode, to
// versitygw, which verifies the signatures: the takeover with the proxy's
// S3 error code visible to boto3, a missing token, and a DeleteObjects
// refused whole for one stale key, then applied whole
// (testdata/boto3_takeover.py). Skipped without python3 and boto3, unless
// CI is set (.ci/run installs python3-boto3).
func TestS3Boto3(t *testing.T) {
	if err := exec.Command("python3", "-c", "import boto3").Run(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("python3 with boto3 is needed (apt-get install python3-boto3): %v", err)
		}
		t.Skipf("python3 with boto3 not found: %v", err)
	}
	backend := s3backend.Start(t)
	backend.CreateBucket(t, "jobs")
	in := servertest.Start(t, map[string]string{"FENCEPROXY_UPSTREAM": backend.URL, "FENCEPROXY_DATA_DIR": t.TempDir(),
		"FENCEPROXY_S3": "pass", "FENCEPROXY_S3_DOMAINS": "127.0.0.1"})
	examples, err := filepath.Abs("../examples/boto3")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("python3", "testdata/boto3_takeover.py")
	cmd.Env = append(os.Environ(), "ENDPOINT="+in.ProxyURL(), "BUCKET=jobs", "PYTHONPATH="+examples,
		"AWS_ACCESS_KEY_ID="+backend.AccessKey, "AWS_SECRET_ACCESS_KEY="+backend.SecretKey,
		"AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null")
	done := make(chan struct{})
	var out []byte
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("boto3 script still running after 60s:\n%s", out)
	}
	t.Logf("boto3:\n%s", out)
	if err != nil {
		t.Fatalf("boto3 script: %v\n%s", err, out)
	}
	for _, want := range []string{"refused StaleFencingToken current=42", "refused MissingFencingToken", "stale batch deleted nothing", "current batch deleted all"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("boto3 output lacks %q", want)
		}
	}
}
