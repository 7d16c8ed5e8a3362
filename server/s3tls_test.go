package server_test

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/fenceproxy/fenceproxy/client"
	"github.com/fenceproxy/fenceproxy/internal/s3backend"
	"github.com/fenceproxy/fenceproxy/internal/servertest"
)

// TestS3RealSDKDefaultsOverTLS: aws-sdk-go-v2 with its default checksum
// settings over HTTPS sends its uploads as aws-chunked with a trailing
// checksum (STREAMING-UNSIGNED-PAYLOAD-TRAILER, as 2025+ SDKs do); through
// fenceproxy in pass mode (TLS on both sides) versitygw verifies signature
// and checksum, for a body the proxy reads ahead and one it streams, and the
// stale write is still refused. (A body of unknown length the SDK sends
// chunked, which versitygw refuses with or without the proxy: 411.)
func TestS3RealSDKDefaultsOverTLS(t *testing.T) {
	certFile, keyFile, pool := servertest.TLSFiles(t)
	backend := s3backend.StartTLS(t, certFile, keyFile, pool)
	backend.CreateBucket(t, "jobs")
	in := servertest.Start(t, map[string]string{"FENCEPROXY_UPSTREAM": backend.URL, "FENCEPROXY_DATA_DIR": t.TempDir(),
		"FENCEPROXY_UPSTREAM_CA_FILE": certFile, "FENCEPROXY_TLS_CERT_FILE": certFile, "FENCEPROXY_TLS_KEY_FILE": keyFile,
		"FENCEPROXY_S3": "pass", "FENCEPROXY_S3_DOMAINS": "127.0.0.1"})

	var encodings []string // Content-Encoding and x-amz-content-sha256 of each PutObject as sent
	record := middleware.FinalizeMiddlewareFunc("record", func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
		if r, ok := in.Request.(*smithyhttp.Request); ok {
			encodings = append(encodings, r.Header.Get("Content-Encoding")+" "+r.Header.Get("X-Amz-Content-Sha256")+" "+r.Header.Get("X-Amz-Trailer"))
		}
		return next.HandleFinalize(ctx, in)
	})
	opts := backend.Options("https://" + in.Proxy)
	opts.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenSupported // the SDK's default
	opts.HTTPClient = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	c := s3.New(opts, client.S3Fencing(client.ContextToken), func(o *s3.Options) {
		o.APIOptions = append(o.APIOptions, func(st *middleware.Stack) error { return st.Finalize.Add(record, middleware.After) })
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	big := strings.Repeat("0123456789abcdef", 80<<10/16) // 80 KiB: past the proxy's 64 KiB read-ahead
	for _, tc := range []struct {
		name  string
		body  io.Reader
		token uint64
	}{
		{"small (read ahead)", strings.NewReader("from 41"), 41},
		{"80 KiB (streamed)", strings.NewReader(big), 42},
	} {
		in := &s3.PutObjectInput{Bucket: aws.String("jobs"), Key: aws.String("out.txt"), Body: tc.body}
		if _, err := c.PutObject(client.WithToken(ctx, tc.token), in); err != nil {
			t.Fatalf("%s PutObject with %d: %v (sent as %q)", tc.name, tc.token, err, encodings)
		}
	}
	t.Logf("sent as (Content-Encoding, x-amz-content-sha256, x-amz-trailer): %q", encodings)
	for _, e := range encodings[:2] {
		if !strings.Contains(e, "aws-chunked") || !strings.Contains(e, "STREAMING-UNSIGNED-PAYLOAD-TRAILER") {
			t.Errorf("a PutObject went as %q, not as aws-chunked with a trailer: the test no longer covers that form", e)
		}
	}
	out, err := backend.Client().GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("jobs"), Key: aws.String("out.txt")})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(out.Body)
	out.Body.Close()
	if string(got) != big {
		t.Errorf("versitygw holds %d bytes, want the 80 KiB body's %d", len(got), len(big))
	}
	_, err = c.PutObject(client.WithToken(ctx, 41), &s3.PutObjectInput{Bucket: aws.String("jobs"), Key: aws.String("out.txt"), Body: strings.NewReader("late")})
	if se, ok := client.AsStale(err); !ok || se.Current != 42 {
		t.Errorf("late PutObject with 41: %v, want stale with current 42", err)
	}

	// DeleteObjects with the SDK's default checksum over TLS: its body is
	// read by the proxy for its keys, so it must not come aws-chunked.
	n := len(encodings)
	del := func(token uint64) error {
		_, err := c.DeleteObjects(client.WithToken(ctx, token), &s3.DeleteObjectsInput{Bucket: aws.String("jobs"),
			Delete: &s3types.Delete{Objects: []s3types.ObjectIdentifier{{Key: aws.String("out.txt")}}}})
		return err
	}
	if se, ok := client.AsStale(del(41)); !ok || se.Current != 42 {
		t.Errorf("DeleteObjects with 41: want stale with current 42")
	}
	if err := del(42); err != nil {
		t.Fatalf("DeleteObjects with 42: %v (sent as %q)", err, encodings[n:])
	}
	t.Logf("DeleteObjects sent as %q", encodings[n:])
	if _, err := backend.Client().HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("jobs"), Key: aws.String("out.txt")}); err == nil {
		t.Errorf("out.txt still exists after DeleteObjects with 42")
	}
}
