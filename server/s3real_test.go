package server_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/fenceproxy/fenceproxy/client"
	"github.com/fenceproxy/fenceproxy/internal/s3backend"
	"github.com/fenceproxy/fenceproxy/internal/servertest"
)

// startS3Real starts versitygw with bucket, and fenceproxy in front of it; it
// returns the backend and a path-style client of the proxy that signs for the
// proxy's address and sends client.WithToken's token (client.S3Fencing).
func startS3Real(t *testing.T, bucket string) (*s3backend.Server, *s3.Client) {
	t.Helper()
	backend := s3backend.Start(t)
	backend.CreateBucket(t, bucket)
	in := servertest.Start(t, map[string]string{
		"FENCEPROXY_UPSTREAM": backend.URL,
		"FENCEPROXY_DATA_DIR": t.TempDir(),
	})
	return backend, s3.New(backend.Options(in.ProxyURL()), client.S3Fencing(client.ContextToken))
}

// The takeover against a real S3 server that verifies signatures: the
// worker's SigV4 signature (over the proxy's Host and X-Fencing-Token)
// reaches versitygw unchanged and verifies, and the stale write never does.
func TestS3RealTakeover(t *testing.T) {
	const bucket, key = "jobs", "reports/daily.txt"
	backend, c := startS3Real(t, bucket)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	put := func(token uint64, body string) error {
		_, err := c.PutObject(client.WithToken(ctx, token), &s3.PutObjectInput{
			Bucket: aws.String(bucket), Key: aws.String(key), Body: strings.NewReader(body),
		})
		return err
	}
	if err := put(41, "from A (41)"); err != nil {
		t.Fatalf("PutObject with token 41: %v", err)
	}
	if err := put(42, "from B (42)"); err != nil {
		t.Fatalf("PutObject with token 42: %v", err)
	}
	err := put(41, "late from A (41)")
	var re *awshttp.ResponseError
	if !errors.As(err, &re) || re.HTTPStatusCode() != http.StatusConflict || re.Response.Header.Get("Fencing-Refused") != "stale" {
		t.Fatalf("late PutObject with token 41: %v; want 409 with Fencing-Refused: stale", err)
	}
	if stale, ok := client.AsStale(err); !ok || stale.Token != 41 || stale.Current != 42 || stale.Resource != bucket+"/"+key {
		t.Errorf("late PutObject with token 41: AsStale = %+v, %v; want token 41, current 42 on %s/%s", stale, ok, bucket, key)
	}

	// Read back through the proxy and straight from the backend.
	for name, rc := range map[string]*s3.Client{"proxy": c, "backend": backend.Client()} {
		if got := s3GetObject(ctx, t, rc, bucket, key); got != "from B (42)" {
			t.Errorf("GetObject via %s: %q, want B's %q", name, got, "from B (42)")
		}
	}
}

// A multipart upload with one token goes through the proxy and every call
// (create, parts, complete) verifies at the backend.
func TestS3RealMultipart(t *testing.T) {
	const bucket, key = "jobs", "shard-7/output.bin"
	backend, c := startS3Real(t, bucket)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tctx := client.WithToken(ctx, 7)

	created, err := c.CreateMultipartUpload(tctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		t.Fatalf("CreateMultipartUpload with token 7: %v", err)
	}
	// 5 MiB is S3's minimum for every part but the last.
	parts := [][]byte{bytes.Repeat([]byte("7"), 5<<20), []byte("tail of 7")}
	var done []s3types.CompletedPart
	for i, p := range parts {
		n := aws.Int32(int32(i + 1))
		out, err := c.UploadPart(tctx, &s3.UploadPartInput{
			Bucket: aws.String(bucket), Key: aws.String(key), UploadId: created.UploadId,
			PartNumber: n, Body: bytes.NewReader(p),
		})
		if err != nil {
			t.Fatalf("UploadPart %d with token 7: %v", *n, err)
		}
		done = append(done, s3types.CompletedPart{ETag: out.ETag, PartNumber: n})
	}
	if _, err := c.CompleteMultipartUpload(tctx, &s3.CompleteMultipartUploadInput{
		Bucket: aws.String(bucket), Key: aws.String(key), UploadId: created.UploadId,
		MultipartUpload: &s3types.CompletedMultipartUpload{Parts: done},
	}); err != nil {
		t.Fatalf("CompleteMultipartUpload with token 7: %v", err)
	}

	want := string(bytes.Join(parts, nil))
	if got := s3GetObject(ctx, t, backend.Client(), bucket, key); got != want {
		t.Errorf("backend object: %d bytes starting %q, want %d bytes", len(got), got[:min(len(got), 16)], len(want))
	}
	left, err := backend.Client().ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String(bucket)})
	if err != nil {
		t.Fatalf("ListMultipartUploads: %v", err)
	}
	if len(left.Uploads) != 0 {
		t.Errorf("backend still lists %d multipart uploads after complete", len(left.Uploads))
	}
}
