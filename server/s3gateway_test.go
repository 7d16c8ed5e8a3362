package server_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/fenceproxy/fenceproxy/client"
	"github.com/fenceproxy/fenceproxy/internal/s3backend"
	"github.com/fenceproxy/fenceproxy/internal/servertest"
)

const (
	gwSecret1 = "worker1-secret-0123456789abcdef"
	gwSecret2 = "worker2-secret-0123456789abcdef"
	gwSecret4 = "worker4-secret-0123456789abcdef"
)

// gatewayRig is fenceproxy in S3 gateway mode (resign) in front of versitygw
// over HTTPS with a test CA; the store's root keys are the proxy's alone
// (the AWS default chain reads them from the environment), and the workers
// hold only their proxy keys.
type gatewayRig struct {
	backend *s3backend.Server
	in      *servertest.Instance
	pool    tlsPool
	// keys is the workers' credentials file; fwd counts the bytes the
	// proxy sends to the store (FENCEPROXY_UPSTREAM is fwd's address).
	keys string
	fwd  *countingForwarder
}

type tlsPool = *tls.Config

func startGateway(t *testing.T, extra map[string]string) *gatewayRig {
	t.Helper()
	certFile, keyFile, pool := servertest.TLSFiles(t)
	backend := s3backend.StartTLS(t, certFile, keyFile, pool)
	backend.CreateBucket(t, "jobs")
	backend.CreateBucket(t, "other")
	keys := filepath.Join(t.TempDir(), "keys.yaml")
	if err := os.WriteFile(keys, []byte(`keys:
  - access_key_id: worker1
    secret_access_key: "`+gwSecret1+`"
    grants:
      - {bucket: jobs, prefix: "w1/", access: readwrite}
  - access_key_id: worker2
    secret_access_key: "`+gwSecret2+`"
    grants:
      - {bucket: other, access: read}
  - access_key_id: worker4
    secret_access_key: "`+gwSecret4+`"
    grants:
      - {bucket: other, access: readwrite}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"AWS_ACCESS_KEY_ID": backend.AccessKey, "AWS_SECRET_ACCESS_KEY": backend.SecretKey,
		"AWS_CONFIG_FILE": "/dev/null", "AWS_SHARED_CREDENTIALS_FILE": "/dev/null", "AWS_EC2_METADATA_DISABLED": "true"} {
		t.Setenv(k, v)
	}
	fwd := newCountingForwarder(t, backend.URL)
	env := map[string]string{"FENCEPROXY_UPSTREAM": fwd.URL, "FENCEPROXY_DATA_DIR": t.TempDir(),
		"FENCEPROXY_UPSTREAM_CA_FILE": certFile, "FENCEPROXY_TLS_CERT_FILE": certFile, "FENCEPROXY_TLS_KEY_FILE": keyFile,
		"FENCEPROXY_S3": "resign", "FENCEPROXY_S3_DOMAINS": "127.0.0.1", "FENCEPROXY_S3_CREDENTIALS_FILE": keys,
		"FENCEPROXY_S3_REGION": s3backend.Region}
	env = servertest.Env(env, extra) // "" removes a setting
	return &gatewayRig{backend: backend, in: servertest.Start(t, env), pool: &tls.Config{RootCAs: pool}, keys: keys, fwd: fwd}
}

// worker returns an SDK client of the proxy (HTTPS, the SDK's default
// checksums) that signs with a worker's proxy key.
func (g *gatewayRig) worker(id, secret string) *s3.Client {
	return s3.New(s3.Options{
		Region:                     s3backend.Region,
		BaseEndpoint:               aws.String("https://" + g.in.Proxy),
		UsePathStyle:               true,
		Credentials:                credentials.NewStaticCredentialsProvider(id, secret, ""),
		Retryer:                    aws.NopRetryer{},
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenSupported,
		HTTPClient:                 &http.Client{Transport: &http.Transport{TLSClientConfig: g.pool}},
	}, client.S3Fencing(client.ContextToken))
}

// wantAPIError fails t unless err is an S3 error with code.
func wantAPIError(t *testing.T, what string, err error, code string) {
	t.Helper()
	var ae smithy.APIError
	if !errors.As(err, &ae) || ae.ErrorCode() != code {
		t.Errorf("%s: %v; want the S3 code %s", what, err, code)
	}
}

// TestS3GatewayResign: in gateway mode a worker with only its proxy key
// (aws-sdk-go-v2 defaults over TLS: aws-chunked with a CRC32 trailer) writes
// and reads through the proxy, which signs for versitygw with keys no worker
// has; the takeover is fenced; a key is held to its grants, for reads too; a
// wrong secret, an unknown key and no signature are refused and forward
// nothing and raise nothing; the worker's key sent straight to the store is
// refused there; with S3_TOKEN_METADATA the stored object names its token.
func TestS3GatewayResign(t *testing.T) {
	g := startGateway(t, map[string]string{"FENCEPROXY_S3_TOKEN_METADATA": "true"})
	w1 := g.worker("worker1", gwSecret1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	put := func(c *s3.Client, tok uint64, bucket, key, body string) error {
		_, err := c.PutObject(client.WithToken(ctx, tok), &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: strings.NewReader(body)})
		return err
	}
	stored := func(bucket, key string) (string, map[string]string) {
		t.Helper()
		out, err := g.backend.Client().GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
		if err != nil {
			return "", nil
		}
		defer out.Body.Close()
		b, _ := io.ReadAll(out.Body)
		return string(b), out.Metadata
	}

	// The takeover, through the gateway.
	big := strings.Repeat("42", 100<<10)
	for _, step := range []struct {
		tok  uint64
		body string
	}{{41, "from 41"}, {42, big}} {
		if err := put(w1, step.tok, "jobs", "w1/report.txt", step.body); err != nil {
			t.Fatalf("PutObject with %d through the gateway: %v", step.tok, err)
		}
	}
	wantAPIError(t, "stale PutObject with 41", put(w1, 41, "jobs", "w1/report.txt", "late 41"), "StaleFencingToken")
	if body, meta := stored("jobs", "w1/report.txt"); body != big || meta["fencing-token"] != "42" {
		t.Errorf("versitygw holds %d bytes with metadata %v; want 42's %d bytes and fencing-token=42", len(body), meta, len(big))
	}
	out, err := w1.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("jobs"), Key: aws.String("w1/report.txt")})
	if err != nil {
		t.Fatalf("GetObject through the gateway: %v", err)
	}
	got, _ := io.ReadAll(out.Body)
	out.Body.Close()
	if string(got) != big {
		t.Errorf("GetObject through the gateway: %d bytes, want %d", len(got), len(big))
	}
	if _, err := w1.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("jobs"), Prefix: aws.String("w1/")}); err != nil {
		t.Errorf("ListObjectsV2 of w1/: %v", err)
	}

	// Grants: worker1 may write and read jobs/w1/ only; worker2 may read other.
	wantAPIError(t, "worker1 writes jobs/x/a", put(w1, 50, "jobs", "x/a", "outside"), "AccessDenied")
	_, err = w1.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("other"), Key: aws.String("a")})
	wantAPIError(t, "worker1 reads other/a", err, "AccessDenied")
	_, err = w1.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("jobs")})
	wantAPIError(t, "worker1 lists all of jobs", err, "AccessDenied")
	w2 := g.worker("worker2", gwSecret2)
	wantAPIError(t, "worker2 (read only) writes other/a", put(w2, 60, "other", "a", "x"), "AccessDenied")

	// Forged: a wrong secret, an unknown key, no signature.
	wantAPIError(t, "wrong secret", put(g.worker("worker1", "not-the-secret-0123456789"), 70, "jobs", "w1/forged", "x"), "SignatureDoesNotMatch")
	wantAPIError(t, "unknown key", put(g.worker("nobody", gwSecret1), 70, "jobs", "w1/forged", "x"), "InvalidAccessKeyId")
	req, _ := http.NewRequest(http.MethodPut, "https://"+g.in.Proxy+"/jobs/w1/forged", strings.NewReader("anonymous"))
	req.Header.Set("X-Fencing-Token", "70")
	res, err := (&http.Client{Transport: &http.Transport{TLSClientConfig: g.pool}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusForbidden {
		t.Errorf("an unsigned PUT: %d, want 403", res.StatusCode)
	}
	if body, _ := stored("jobs", "w1/forged"); body != "" {
		t.Errorf("a refused request reached the store: %q", body)
	}
	if tok, status := s3FenceOf(t, g.in, "jobs/w1/forged"); status != http.StatusNotFound {
		t.Errorf("a refused request raised the fence of jobs/w1/forged to %q", tok)
	}

	// The worker's key straight to the store: the store does not know it.
	direct := s3.New(s3.Options{Region: s3backend.Region, BaseEndpoint: aws.String(g.backend.URL), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider("worker1", gwSecret1, ""), Retryer: aws.NopRetryer{},
		HTTPClient: &http.Client{Transport: &http.Transport{TLSClientConfig: g.pool}}})
	_, err = direct.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("jobs"), Key: aws.String("w1/direct"), Body: strings.NewReader("x")})
	if err == nil {
		t.Errorf("the worker's proxy key was accepted by the store itself")
	}
}
