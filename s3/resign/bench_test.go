package resign_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/fenceproxy/fenceproxy/s3/resign"
)

// benchPut is a worker's 1 KiB PutObject as the server reads it (signed by
// aws-sdk-go-v2's S3 client, with a fencing token), and what verification
// found out about it.
func benchPut(b *testing.B) (*http.Request, resign.Request) {
	body := strings.Repeat("x", 1024)
	sum := sha256.Sum256([]byte(body))
	hash := hex.EncodeToString(sum[:])
	r, err := http.NewRequest(http.MethodPut, "http://127.0.0.1:8080/bkt/jobs/obj-1", strings.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	for k, v := range map[string]string{
		"Content-Type":         "application/octet-stream",
		"X-Amz-Content-Sha256": hash,
		"X-Amz-Date":           "20261201T120000Z",
		"Authorization": "AWS4-HMAC-SHA256 Credential=bench/20261201/us-east-1/s3/aws4_request, " +
			"SignedHeaders=amz-sdk-invocation-id;amz-sdk-request;content-length;content-type;host;x-amz-content-sha256;x-amz-date;x-fencing-token, " +
			"Signature=0000000000000000000000000000000000000000000000000000000000000000",
		"Amz-Sdk-Invocation-Id": "5f4e3c2b-1a09-4876-9f5e-4d3c2b1a0987",
		"Amz-Sdk-Request":       "attempt=1; max=3",
		"User-Agent":            "aws-sdk-go-v2/1.48.0 ua/2.1 os/linux lang/go#1.26 md/GOOS#linux md/GOARCH#amd64 api/s3#1.114.10",
		"Accept-Encoding":       "identity",
		"X-Fencing-Token":       "7",
	} {
		r.Header.Set(k, v)
	}
	return r, resign.Request{Bucket: "bkt", Key: "jobs/obj-1", PayloadHash: hash,
		SignedHeaders: []string{"amz-sdk-invocation-id", "amz-sdk-request", "content-length", "content-type", "host", "x-amz-content-sha256", "x-amz-date", "x-fencing-token"},
		Header:        http.Header{"X-Amz-Meta-Fencing-Token": {"7"}}}
}

// BenchmarkRewrite: Rewrite of one 1 KiB PutObject (from the copy of the
// worker's request the proxy makes, as httputil's ProxyRequest.Out) with
// aws-sdk-go-v2's signer and with the package's.
func BenchmarkRewrite(b *testing.B) {
	in, req := benchPut(b)
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	endpoint, _ := url.Parse("http://store.invalid:9000")
	creds := aws.NewCredentialsCache(credentials.NewStaticCredentialsProvider("STORE", "store-secret-0123456789", ""))
	ctx := context.Background()
	for _, sdk := range []bool{true, false} {
		name := "own"
		if sdk {
			name = "sdk"
		}
		b.Run(name, func(b *testing.B) {
			s := &resign.Signer{Endpoint: endpoint, Region: "us-east-1", Credentials: creds, Now: func() time.Time { return at },
				Dropped: func(name string) bool { return name == "x-fencing-token" }}
			if sdk {
				resign.UseSDKSigner(s)
			}
			b.ReportAllocs()
			for b.Loop() {
				out := in.Clone(ctx)
				if err := s.Rewrite(ctx, out, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSign: the signature alone, of the request Rewrite makes in
// BenchmarkRewrite.
func BenchmarkSign(b *testing.B) {
	in, _ := benchPut(b)
	in.URL, _ = url.Parse("http://store.invalid:9000/bkt/jobs/obj-1")
	in.Host = in.URL.Host
	for _, k := range []string{"Authorization", "User-Agent", "Accept-Encoding", "X-Fencing-Token"} {
		in.Header.Del(k)
	}
	creds := aws.Credentials{AccessKeyID: "STORE", SecretAccessKey: "store-secret-0123456789"}
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	hash := in.Header.Get("X-Amz-Content-Sha256")
	var own resign.OwnSigner
	for _, c := range []struct {
		name string
		sign func(*http.Request, aws.Credentials, string, string, string, time.Time) error
	}{{"sdk", resign.SDKSigner()}, {"own", own.Sign}} {
		b.Run(c.name, func(b *testing.B) {
			h := in.Header.Clone()
			b.ReportAllocs()
			for b.Loop() {
				// The headers the signer set, off again: no copy per round.
				delete(h, "Authorization")
				delete(h, "X-Amz-Date")
				r := *in
				r.Header = h
				if err := c.sign(&r, creds, hash, "s3", "us-east-1", at); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
