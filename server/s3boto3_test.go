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

// s3RunBoto3 runs the Python script (a path under server/) with boto3 and
// the shipped hook (examples/boto3 on PYTHONPATH), the proxy's endpoint and
// the backend's credentials, and returns its output; a script that fails or
// runs past 60s fails t. Skipped without python3 and boto3, unless CI is set
// (.ci/run installs python3-boto3).
func s3RunBoto3(t *testing.T, script, endpoint string, backend *s3backend.Server, env ...string) string {
	t.Helper()
	if err := exec.Command("python3", "-c", "import boto3").Run(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("python3 with boto3 is needed (apt-get install python3-boto3): %v", err)
		}
		t.Skipf("python3 with boto3 not found: %v", err)
	}
	examples, err := filepath.Abs("../examples/boto3")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("python3", script)
	cmd.Env = append(os.Environ(), "ENDPOINT="+endpoint, "BUCKET=jobs", "PYTHONPATH="+examples,
		"AWS_ACCESS_KEY_ID="+backend.AccessKey, "AWS_SECRET_ACCESS_KEY="+backend.SecretKey,
		"AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null")
	cmd.Env = append(cmd.Env, env...)
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
	return string(out)
}

// TestS3Boto3: boto3 with the shipped before-sign hook
// (examples/boto3/fenceproxy_token.py), through fenceproxy in pass mode, to
// versitygw, which verifies the signatures: the takeover with the proxy's
// S3 error code visible to boto3, a missing token, and a DeleteObjects
// refused whole for one stale key, then applied whole
// (testdata/boto3_takeover.py).
func TestS3Boto3(t *testing.T) {
	backend := s3backend.Start(t)
	backend.CreateBucket(t, "jobs")
	in := servertest.Start(t, map[string]string{"FENCEPROXY_UPSTREAM": backend.URL, "FENCEPROXY_DATA_DIR": t.TempDir(),
		"FENCEPROXY_S3": "pass", "FENCEPROXY_S3_DOMAINS": "127.0.0.1"})
	out := s3RunBoto3(t, "testdata/boto3_takeover.py", in.ProxyURL(), backend)
	for _, want := range []string{"refused StaleFencingToken current=42", "refused MissingFencingToken", "stale batch deleted nothing", "current batch deleted all",
		"sent as PUT - hex-sha256 -", "sent as POST - hex-sha256 -"} {
		if !strings.Contains(out, want) {
			t.Errorf("boto3 output lacks %q", want)
		}
	}
}

// TestS3Boto3OverTLS: the same script over HTTPS (TLS from boto3 to the
// proxy and from the proxy to versitygw), where botocore sends its uploads
// as aws-chunked with a trailing checksum
// (STREAMING-UNSIGNED-PAYLOAD-TRAILER); versitygw verifies them.
func TestS3Boto3OverTLS(t *testing.T) {
	certFile, keyFile, pool := servertest.TLSFiles(t)
	backend := s3backend.StartTLS(t, certFile, keyFile, pool)
	backend.CreateBucket(t, "jobs")
	in := servertest.Start(t, map[string]string{"FENCEPROXY_UPSTREAM": backend.URL, "FENCEPROXY_DATA_DIR": t.TempDir(),
		"FENCEPROXY_UPSTREAM_CA_FILE": certFile, "FENCEPROXY_TLS_CERT_FILE": certFile, "FENCEPROXY_TLS_KEY_FILE": keyFile,
		"FENCEPROXY_S3": "pass", "FENCEPROXY_S3_DOMAINS": "127.0.0.1"})
	out := s3RunBoto3(t, "testdata/boto3_takeover.py", "https://"+in.Proxy, backend, "AWS_CA_BUNDLE="+certFile)
	for _, want := range []string{"refused StaleFencingToken current=42", "stale batch deleted nothing", "current batch deleted all",
		"sent as PUT aws-chunked STREAMING-UNSIGNED-PAYLOAD-TRAILER x-amz-checksum-crc32", "sent as POST - hex-sha256 -"} {
		if !strings.Contains(out, want) {
			t.Errorf("boto3 output lacks %q", want)
		}
	}
}

// TestS3Boto3Flows: the rest of a worker's flows with boto3 and the shipped
// hook through pass mode to versitygw (testdata/boto3_flows.py): a stale
// CopyObject refused on its destination and its source only read; one
// object in path and virtual-hosted style, the stale write in the other
// style refused; a presigned PUT whose URL carries the token (the hook puts
// it in the query, signed) and no header; a sync with deletions, and a stale
// holder's sync that changes nothing; a bucket created before each of two
// jobs with unrelated token sequences.
func TestS3Boto3Flows(t *testing.T) {
	p := startS3Pass(t, nil, "copies", "styles", "uploads", "site")
	out := s3RunBoto3(t, "testdata/boto3_flows.py", p.endpoint, p.backend)
	for _, want := range []string{
		"copy with 41 onto B's report: refused StaleFencingToken current=42",
		"path style with 41 after virtual-hosted 42: refused StaleFencingToken current=42",
		"virtual-hosted with 42 after path 43: refused StaleFencingToken current=43",
		"presigned PUT with 42: 200 (signed headers host)",
		"presigned PUT with 41: 409",
		"sync with 41: put [] deleted [] errors ['StaleFencingToken', 'StaleFencingToken', 'StaleFencingToken']",
		"stale sync changed nothing",
		"create bucket with 5: the store's BucketAlreadyOwnedByYou",
		"all flows done",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("boto3 output lacks %q", want)
		}
	}
	for key, want := range map[string]string{"copies/staging/a.txt": "1", "copies/final/report.txt": "42", "styles/x": "43",
		"uploads/in/file.bin": "42", "site/new.js": "42", "site/old.js": "42", "site/a.css": "41"} {
		if tok, _ := s3FenceOf(t, p.in, key); tok != want {
			t.Errorf("fence of %s: %q, want %q", key, tok, want)
		}
	}
}
