package resign_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fenceproxy/fenceproxy/internal/s3backend"
	"github.com/fenceproxy/fenceproxy/s3/resign"
)

// workerPut is a worker's PUT to the proxy as it arrives (aws-sdk-go-v2 signs
// Accept-Encoding too, which GCS rewrites), with what a worker
// signs and what it must never pass on.
func workerPut(t *testing.T, target, body string) *http.Request {
	t.Helper()
	r, err := http.NewRequest(http.MethodPut, target, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(body))
	for k, v := range map[string]string{
		"Content-Type":         "text/plain",
		"X-Amz-Meta-Owner":     "worker1",
		"X-Amz-Content-Sha256": hex.EncodeToString(sum[:]),
		"X-Amz-Date":           "20261201T000000Z",
		"Authorization":        "AWS4-HMAC-SHA256 Credential=worker1/20261201/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00",
		"X-Amz-Security-Token": "worker-session",
		"X-Forwarded-For":      "10.0.0.1",
		"X-Fencing-Token":      "41",
		"X-Unsigned":           "not signed by the worker",
		"Accept-Encoding":      "gzip",
	} {
		r.Header.Set(k, v)
	}
	return r
}

var workerSigned = []string{"accept-encoding", "content-type", "host", "x-amz-content-sha256", "x-amz-date", "x-amz-meta-owner", "x-fencing-token", "x-amz-security-token"}

// sendTo sends out to the store at addr, whatever its Host says.
func sendTo(t *testing.T, addr string, out *http.Request) (int, string) {
	t.Helper()
	tr := &http.Transport{Proxy: nil, DisableCompression: true, DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}
	defer tr.CloseIdleConnections()
	out.RequestURI = ""
	res, err := tr.RoundTrip(out)
	if err != nil {
		t.Fatalf("%s %s: %v", out.Method, out.URL, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// TestRewriteToVersitygw: a worker's request, re-signed with the store's
// root credentials, is accepted by versitygw (which verifies every
// signature) in path and virtual-hosted style, with a key that needs
// escaping and presigned-URL parameters stripped; the object carries the
// metadata the worker signed; the outbound request carries nothing of the
// worker's credentials, the fencing headers, X-Forwarded-* or unsigned
// headers, and Accept-Encoding unsigned.
func TestRewriteToVersitygw(t *testing.T) {
	backend := s3backend.StartVirtualHosted(t, "localhost")
	backend.CreateBucket(t, "jobs")
	endpoint, _ := url.Parse(backend.URL)
	addr := endpoint.Host
	_, port, _ := net.SplitHostPort(addr)
	creds := credentials.NewStaticCredentialsProvider(backend.AccessKey, backend.SecretKey, "")
	dropped := func(name string) bool { return name == "x-fencing-token" || name == "x-fencing-token-signature" }
	ctx := context.Background()

	for _, c := range []struct {
		name    string
		virtual bool
		key     string
	}{
		{"path style", false, "dir/a b+c~!(x).txt"},
		{"virtual-hosted", true, "dir/ünï code/%41.txt"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := &resign.Signer{Region: s3backend.Region, Credentials: creds, VirtualHosted: c.virtual, Dropped: dropped}
			s.Endpoint, _ = url.Parse("http://localhost:" + port)
			in := workerPut(t, "http://proxy.internal:8080/jobs/x?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature=00&X-Fencing-Token=41", "body of "+c.name)
			out := in.Clone(ctx)
			if err := s.Rewrite(ctx, out, resign.Request{Bucket: "jobs", Key: c.key, SignedHeaders: workerSigned,
				PayloadHash: in.Header.Get("X-Amz-Content-Sha256")}); err != nil {
				t.Fatal(err)
			}
			for _, h := range []string{"X-Amz-Security-Token", "X-Forwarded-For", "X-Fencing-Token", "X-Unsigned"} {
				if v, ok := out.Header[h]; ok {
					t.Errorf("outbound %s: %q, want none", h, v)
				}
			}
			if strings.Contains(out.Header.Get("Authorization"), "worker1") || !strings.Contains(out.Header.Get("Authorization"), backend.AccessKey) {
				t.Errorf("outbound Authorization %q, want the store's key", out.Header.Get("Authorization"))
			}
			if strings.Contains(out.Header.Get("Authorization"), "accept-encoding") || out.Header.Get("Accept-Encoding") != "gzip" {
				t.Errorf("Accept-Encoding: %q, signed in %q; want it sent unsigned", out.Header.Get("Accept-Encoding"), out.Header.Get("Authorization"))
			}
			if q := out.URL.RawQuery; q != "" {
				t.Errorf("outbound query %q, want the presigned and fencing parameters gone", q)
			}
			status, body := sendTo(t, addr, out)
			if status != http.StatusOK {
				t.Fatalf("versitygw answered %d %s to the re-signed request (%s %s, Host %s)", status, body, out.Method, out.URL, out.Host)
			}
			head, err := backend.Client().HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("jobs"), Key: aws.String(c.key)})
			if err != nil {
				t.Fatalf("HeadObject %q at versitygw: %v", c.key, err)
			}
			if head.Metadata["owner"] != "worker1" || aws.ToString(head.ContentType) != "text/plain" {
				t.Errorf("stored metadata %v, Content-Type %q; want owner=worker1, text/plain", head.Metadata, aws.ToString(head.ContentType))
			}
		})
	}

	// A list with a prefix that needs escaping, a read with no body.
	s := &resign.Signer{Endpoint: endpoint, Region: s3backend.Region, Credentials: creds, Dropped: dropped}
	in, _ := http.NewRequest(http.MethodGet, "http://proxy.internal:8080/jobs?list-type=2&prefix=dir%2Fa%20b", nil)
	out := in.Clone(ctx)
	if err := s.Rewrite(ctx, out, resign.Request{Bucket: "jobs", SignedHeaders: []string{"host"}, PayloadHash: "UNSIGNED-PAYLOAD"}); err != nil {
		t.Fatal(err)
	}
	status, body := sendTo(t, addr, out)
	if status != http.StatusOK || !strings.Contains(body, "<Key>dir/a b+c~!(x).txt</Key>") {
		t.Errorf("list: %d %s; want the path-style object", status, body)
	}

	// The worker's own signature, sent to the store as it is, is refused:
	// only the proxy's credentials write.
	in = workerPut(t, backend.URL+"/jobs/direct", "direct")
	in.RequestURI = ""
	status, body = sendTo(t, addr, in)
	if status != http.StatusForbidden {
		t.Errorf("the worker's request straight to the store: %d %s, want 403", status, body)
	}
}

// TestRewriteVirtualHostedBucketName: in virtual-hosted style a bucket that
// cannot be a host name label is refused, nothing addressed; every
// X-Amz-* query parameter (a presigned URL's, X-Amz-Content-Sha256
// included) is the worker's and never reaches the store.
func TestRewriteVirtualHostedBucketName(t *testing.T) {
	endpoint, _ := url.Parse("https://s3.example.com")
	s := &resign.Signer{Endpoint: endpoint, Region: "us-east-1", VirtualHosted: true,
		Credentials: credentials.NewStaticCredentialsProvider("STORE", "store-secret", "")}
	for _, b := range []string{"evil.com:443/", "Caps", "a", "-x-", "x/y", "x@y"} {
		out, _ := http.NewRequest(http.MethodGet, "http://proxy/x", nil)
		if err := s.Rewrite(context.Background(), out, resign.Request{Bucket: b, Key: "k", SignedHeaders: []string{"host"}, PayloadHash: "UNSIGNED-PAYLOAD"}); !errors.Is(err, resign.ErrBucket) {
			t.Errorf("bucket %q: %v (URL %s); want ErrBucket", b, err, out.URL)
		}
	}
	out, _ := http.NewRequest(http.MethodGet, "http://proxy/jobs/k?X-Amz-Content-Sha256=x&x-amz-foo=1&versionId=v", nil)
	if err := s.Rewrite(context.Background(), out, resign.Request{Bucket: "jobs", Key: "k", SignedHeaders: []string{"host"}, PayloadHash: "UNSIGNED-PAYLOAD"}); err != nil {
		t.Fatal(err)
	}
	if out.URL.Host != "jobs.s3.example.com" || out.URL.RawQuery != "versionId=v" {
		t.Errorf("outbound %s: want host jobs.s3.example.com and only versionId in the query", out.URL)
	}
}
