package sigv4

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// serveTLS is serve over HTTPS; it returns the server's URL and a client
// that trusts it.
func serveTLS(t *testing.T, v *Verifier) (string, *http.Client, <-chan result) {
	t.Helper()
	ch := make(chan result, 64)
	srv := httptest.NewTLSServer(verifyHandler(v, ch))
	t.Cleanup(srv.Close)
	return srv.URL, srv.Client(), ch
}

// TestSDKClientRequestsVerify: the requests aws-sdk-go-v2's S3 client sends
// (PutObject, GetObject, ListObjectsV2, DeleteObject, and presigned GET and
// PUT) verify, over HTTP and over HTTPS, with the SDK's default checksums
// and with checksums only when required. It logs the payload hash of each.
func TestSDKClientRequestsVerify(t *testing.T) {
	for _, tc := range []struct {
		name     string
		tls      bool
		checksum aws.RequestChecksumCalculation
	}{
		{"http, checksums when required", false, aws.RequestChecksumCalculationWhenRequired},
		{"http, default checksums", false, aws.RequestChecksumCalculationWhenSupported},
		{"https, default checksums", true, aws.RequestChecksumCalculationWhenSupported},
		{"https, checksums when required", true, aws.RequestChecksumCalculationWhenRequired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := &Verifier{Secrets: testKeys, Region: testRegion}
			var endpoint string
			var hc *http.Client
			var results <-chan result
			if tc.tls {
				endpoint, hc, results = serveTLS(t, v)
			} else {
				var addr string
				addr, results = serve(t, v)
				endpoint, hc = "http://"+addr, &http.Client{Transport: &http.Transport{}}
			}
			client := s3.New(s3.Options{
				Region: testRegion, BaseEndpoint: aws.String(endpoint), UsePathStyle: true,
				Credentials:                credentials.NewStaticCredentialsProvider(testKey, testSecret, ""),
				Retryer:                    aws.NopRetryer{},
				RequestChecksumCalculation: tc.checksum,
				HTTPClient:                 hc,
			})
			ctx := context.Background()
			expect := func(op string, err error) *Auth {
				t.Helper()
				if err != nil {
					t.Fatalf("%s: %v", op, err)
				}
				select {
				case r := <-results:
					if r.err != nil {
						t.Fatalf("%s: %v", op, r.err)
					}
					t.Logf("%s: payload %s, signed %v", op, r.auth.PayloadHash, r.auth.SignedHeaders)
					return r.auth
				case <-time.After(10 * time.Second):
					t.Fatalf("%s: no request", op)
				}
				return nil
			}
			for _, key := range []string{"dir/a b+c~ü€.txt", "pct%2Fkey", "plain"} {
				_, err := client.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bucket"), Key: aws.String(key),
					Body: bytes.NewReader([]byte("hello world")), ContentType: aws.String("text/plain"),
					Metadata: map[string]string{"owner": "w1"}, ACL: "private"})
				expect("PutObject "+key, err)
				out, err := client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("bucket"), Key: aws.String(key), Range: aws.String("bytes=0-3")})
				if err == nil {
					out.Body.Close()
				}
				expect("GetObject "+key, err)
				_, err = client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("bucket"), Key: aws.String(key)})
				expect("DeleteObject "+key, err)
			}
			// An unseekable body: the SDK streams it (aws-chunked with a
			// trailer over HTTPS) or refuses to sign it over HTTP.
			_, err := client.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bucket"), Key: aws.String("stream"),
				Body: io.NopCloser(strings.NewReader("streamed body")), ContentLength: aws.Int64(13)})
			if tc.tls || err == nil {
				expect("PutObject unseekable", err)
			} else {
				t.Logf("PutObject unseekable over HTTP: %v", err)
			}
			_, err = client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("bucket"), Prefix: aws.String("a b/ü"), Delimiter: aws.String("/")})
			expect("ListObjectsV2", err)

			presign := s3.NewPresignClient(client)
			get, err := presign.PresignGetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("bucket"), Key: aws.String("dir/a b+ü.txt")},
				s3.WithPresignExpires(10*time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			put, err := presign.PresignPutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bucket"), Key: aws.String("up load"),
				ContentType: aws.String("text/plain"), Metadata: map[string]string{"owner": "w1"}})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range []struct {
				op   string
				url  string
				m    string
				h    http.Header
				body string
			}{{"presigned GetObject", get.URL, get.Method, get.SignedHeader, ""}, {"presigned PutObject", put.URL, put.Method, put.SignedHeader, "hello"}} {
				req, err := http.NewRequest(p.m, p.url, strings.NewReader(p.body))
				if err != nil {
					t.Fatal(err)
				}
				for k, vs := range p.h {
					if !strings.EqualFold(k, "Host") {
						req.Header[k] = vs
					}
				}
				resp, err := hc.Do(req)
				if err == nil {
					resp.Body.Close()
				}
				if a := expect(p.op, err); !a.Presigned || a.Expires <= 0 {
					t.Fatalf("%s: %+v", p.op, a)
				}
			}
		})
	}
}

// botocoreRequest is one request signed by testdata/botocore_sign.py.
type botocoreRequest struct {
	Name    string      `json:"name"`
	Method  string      `json:"method"`
	URL     string      `json:"url"`
	Headers [][2]string `json:"headers"`
	Body    string      `json:"body"`
}

// TestBotocoreSignedVerify: requests signed by botocore's S3SigV4Auth and
// S3SigV4QueryAuth (python3, testdata/botocore_sign.py) verify as they are
// sent, and fail with their signature changed.
func TestBotocoreSignedVerify(t *testing.T) {
	if err := exec.Command("python3", "-c", "import botocore").Run(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("python3 with botocore: %v", err)
		}
		t.Skipf("python3 with botocore: %v", err)
	}
	addr, results := serve(t, &Verifier{Secrets: testKeys, Region: testRegion})
	out, err := exec.Command("python3", "testdata/botocore_sign.py", addr, testKey, testSecret, testRegion).Output()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		t.Fatalf("botocore_sign.py: %v: %s", err, exit.Stderr)
	} else if err != nil {
		t.Fatal(err)
	}
	var reqs []botocoreRequest
	if err := json.Unmarshal(out, &reqs); err != nil {
		t.Fatal(err)
	}
	if len(reqs) < 10 {
		t.Fatalf("botocore signed %d requests", len(reqs))
	}
	for _, br := range reqs {
		t.Run(br.Name, func(t *testing.T) {
			w := wireReq{method: br.Method, target: strings.TrimPrefix(br.URL, "http://"+addr), host: addr, body: []byte(br.Body)}
			for _, h := range br.Headers {
				if strings.EqualFold(h[0], "Host") {
					w.host = h[1]
					continue
				}
				w.header = append(w.header, h)
			}
			res := w.clone().send(t, addr, results)
			if res.err != nil {
				t.Fatalf("%s %s %v: %v", w.method, w.target, w.header, res.err)
			}
			presigned := strings.Contains(w.target, "X-Amz-Signature=")
			if res.auth.Presigned != presigned || res.auth.AccessKeyID != testKey {
				t.Fatalf("auth %+v", res.auth)
			}
			t.Logf("payload %s, signed %v", res.auth.PayloadHash, res.auth.SignedHeaders)

			// One path byte changed fails.
			bad := w.clone()
			bad.target = strings.Replace(bad.target, "/bucket", "/bucket/", 1)
			if !strings.HasPrefix(w.target, "/bucket") {
				bad.target = "/x" + bad.target
			}
			if res := bad.send(t, addr, results); !errors.Is(res.err, ErrSignatureMismatch) {
				t.Fatalf("a changed path: %v", res.err)
			}
		})
	}
}
