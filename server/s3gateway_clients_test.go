package server_test

import (
	"context"
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fenceproxy/fenceproxy/internal/s3backend"
	"github.com/fenceproxy/fenceproxy/internal/servertest"
)

// The proxy key of the client suites in gateway mode, and the bucket that
// exists at the store but is granted to no key (it holds gwDeniedKey).
const (
	gwSuiteKey    = "suite"
	gwSuiteSecret = "suite-secret-0123456789abcdef"
	gwDenied      = "other"
	gwDeniedKey   = "secret.txt"
)

// gwSuite is the gateway rig of the client suites of the S3 issue:
// versitygw over HTTPS with a test CA and root keys no worker has, behind
// fenceproxy in resign mode over HTTPS whose S3 domain is localhost (the
// certificate covers localhost and {bucket}.localhost for each bucket), and
// the proxy key gwSuiteKey granted read and write on whole buckets.
type gwSuite struct {
	*gatewayRig
	certFile string            // the test CA: the proxy's and the store's certificate
	endpoint string            // https://localhost:PORT, the proxy
	port     string            // the proxy's port
	env      map[string]string // the proxy's configuration
}

// startGatewaySuite creates buckets (and gwDenied with gwDeniedKey) at a
// new versitygw and starts the gateway in front of it with extra settings;
// gwSuiteKey may read and write all of each bucket in granted (its
// bucket-level requests included: CreateBucket, a listing of the whole
// bucket). The store's root keys reach the proxy through the environment
// (the AWS default chain), so the calling test cannot be parallel.
func startGatewaySuite(t *testing.T, granted []string, extra map[string]string, buckets ...string) *gwSuite {
	t.Helper()
	var names []string
	for _, b := range append(append([]string{"localhost", gwDenied}, granted...), buckets...) {
		if b != "localhost" {
			b += ".localhost"
		}
		names = append(names, b)
	}
	certFile, keyFile, pool := servertest.TLSFilesFor(t, names...)
	backend := s3backend.StartTLS(t, certFile, keyFile, pool)
	for _, b := range append(buckets, gwDenied) {
		backend.CreateBucket(t, b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := backend.Client().PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(gwDenied), Key: aws.String(gwDeniedKey),
		Body: strings.NewReader("not for the workers")}); err != nil {
		t.Fatal(err)
	}
	yaml := "keys:\n  - access_key_id: " + gwSuiteKey + "\n    secret_access_key: \"" + gwSuiteSecret + "\"\n    grants:\n"
	for _, b := range granted {
		yaml += "      - {bucket: " + b + ", access: readwrite}\n"
	}
	keys := filepath.Join(t.TempDir(), "keys.yaml")
	if err := os.WriteFile(keys, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"AWS_ACCESS_KEY_ID": backend.AccessKey, "AWS_SECRET_ACCESS_KEY": backend.SecretKey,
		"AWS_CONFIG_FILE": "/dev/null", "AWS_SHARED_CREDENTIALS_FILE": "/dev/null", "AWS_EC2_METADATA_DISABLED": "true"} {
		t.Setenv(k, v)
	}
	env := servertest.Env(map[string]string{"FENCEPROXY_UPSTREAM": backend.URL, "FENCEPROXY_DATA_DIR": t.TempDir(),
		"FENCEPROXY_UPSTREAM_CA_FILE": certFile, "FENCEPROXY_TLS_CERT_FILE": certFile, "FENCEPROXY_TLS_KEY_FILE": keyFile,
		"FENCEPROXY_S3": "resign", "FENCEPROXY_S3_DOMAINS": "localhost", "FENCEPROXY_S3_CREDENTIALS_FILE": keys,
		"FENCEPROXY_S3_REGION": s3backend.Region}, extra)
	in := servertest.Start(t, env)
	_, port, err := net.SplitHostPort(in.Proxy)
	if err != nil {
		t.Fatal(err)
	}
	return &gwSuite{gatewayRig: &gatewayRig{backend: backend, in: in, pool: &tls.Config{RootCAs: pool}},
		certFile: certFile, endpoint: "https://localhost:" + port, port: port, env: env}
}

// TestS3GatewayBoto3: boto3 with the shipped hook and only the worker's
// proxy key (AWS_CA_BUNDLE trusting the proxy) runs the boto3 scripts of
// the S3 issue through the gateway to versitygw over HTTPS: the takeover
// (botocore's STREAMING-UNSIGNED-PAYLOAD-TRAILER uploads re-signed for the
// store), DeleteObjects, CopyObject, both addressing styles, presigned PUTs,
// a sync, a bucket per job, the multipart takeover; and the key outside its
// grant gets the proxy's 403 AccessDenied in ClientError, for a write, a
// read and a listing.
func TestS3GatewayBoto3(t *testing.T) {
	buckets := []string{"jobs", "parts", "copies", "styles", "uploads", "site"}
	g := startGatewaySuite(t, append(buckets, "nightly"), nil, buckets...)
	worker := []string{"AWS_CA_BUNDLE=" + g.certFile, "AWS_ACCESS_KEY_ID=" + gwSuiteKey, "AWS_SECRET_ACCESS_KEY=" + gwSuiteSecret}

	t.Run("takeover", func(t *testing.T) {
		out := s3RunBoto3(t, "testdata/boto3_takeover.py", g.endpoint, g.backend, append(worker, "OUTSIDE_GRANT="+gwDenied+"/"+gwDeniedKey)...)
		for _, want := range []string{"refused StaleFencingToken current=42", "refused MissingFencingToken", "stale batch deleted nothing",
			"current batch deleted all", "sent as PUT aws-chunked STREAMING-UNSIGNED-PAYLOAD-TRAILER x-amz-checksum-crc32", "sent as POST - hex-sha256 -",
			"PutObject of other/secret.txt outside the grant: 403 AccessDenied", "GetObject of other/secret.txt outside the grant: 403 AccessDenied",
			"ListObjectsV2 of other/secret.txt outside the grant: 403 AccessDenied"} {
			if !strings.Contains(out, want) {
				t.Errorf("boto3 output lacks %q", want)
			}
		}
		if body := s3GetObject(context.Background(), t, g.backend.Client(), gwDenied, gwDeniedKey); body != "not for the workers" {
			t.Errorf("the object outside the grant holds %q", body)
		}
	})

	t.Run("flows", func(t *testing.T) {
		out := s3RunBoto3(t, "testdata/boto3_flows.py", g.endpoint, g.backend, worker...)
		for _, want := range []string{
			"copy with 41 onto B's report: refused StaleFencingToken current=42",
			"path style with 41 after virtual-hosted 42: refused StaleFencingToken current=42",
			"virtual-hosted with 42 after path 43: refused StaleFencingToken current=43",
			"presigned PUT with 42: 200 (signed headers host)",
			"presigned PUT with 41: 409",
			"presigned PUT signed SigV2 (botocore's default): 400 InvalidRequest",
			"create bucket with 100: created", "create bucket with 5: the store's BucketAlreadyOwnedByYou",
			"sync with 41: put [] deleted [] errors ['StaleFencingToken', 'StaleFencingToken', 'StaleFencingToken']",
			"stale sync changed nothing",
			"all flows done",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("boto3 output lacks %q", want)
			}
		}
		for key, want := range map[string]string{"copies/staging/a.txt": "1", "copies/final/report.txt": "42", "styles/x": "43",
			"uploads/in/file.bin": "42", "site/new.js": "42", "site/old.js": "42", "site/a.css": "41"} {
			if tok, _ := s3FenceOf(t, g.in, key); tok != want {
				t.Errorf("fence of %s: %q, want %q", key, tok, want)
			}
		}
	})

	t.Run("multipart", func(t *testing.T) {
		out := s3RunBoto3(t, "testdata/boto3_multipart.py", g.endpoint, g.backend, append(worker, "BUCKET=parts")...)
		for _, want := range []string{"refused StaleFencingToken current=42", "41 aborted its own upload", "no upload left", "object holds 42's"} {
			if !strings.Contains(out, want) {
				t.Errorf("boto3 output lacks %q", want)
			}
		}
		if n := strings.Count(out, "refused StaleFencingToken"); n != 3 {
			t.Errorf("boto3 output has %d refusals, want 3 (part, Complete, abort of 42's upload)", n)
		}
	})
}
