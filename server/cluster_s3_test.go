package server_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/fenceproxy/fenceproxy/client"
	"github.com/fenceproxy/fenceproxy/internal/etcdtest"
	"github.com/fenceproxy/fenceproxy/internal/s3backend"
	"github.com/fenceproxy/fenceproxy/internal/servertest"
)

// S3 pass mode across replicas, against a real S3 server that verifies
// every signature: aws-sdk-go-v2 writes through one replica, most keys are
// forwarded to their owners with the signature intact (versitygw stores
// them), a stale write through another replica is a 409 S3 error, and a
// multipart upload whose parts land on any replica completes.
func TestClusterS3Pass(t *testing.T) {
	const bucket = "jobs"
	c := etcdtest.Start(t)
	backend := s3backend.StartVirtualHosted(t, "localhost")
	backend.CreateBucket(t, bucket)
	reps := startReplicas(t, c, backend.URL, 3, map[string]string{"FENCEPROXY_S3": "pass", "FENCEPROXY_S3_DOMAINS": "localhost"})
	var clients []*s3.Client
	for _, r := range reps {
		_, port, _ := net.SplitHostPort(r.Proxy)
		clients = append(clients, s3.New(backend.Options("http://localhost:"+port), client.S3Fencing(client.ContextToken)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	put := func(c *s3.Client, key string, token uint64, body string) error {
		var err error
		// 503: shards still settling, which no event announces to a client.
		servertest.Eventually(t, 20*time.Second, "PutObject is not refused with 503", func() bool {
			_, err = c.PutObject(client.WithToken(ctx, token), &s3.PutObjectInput{
				Bucket: aws.String(bucket), Key: aws.String(key), Body: strings.NewReader(body)})
			var re *awshttp.ResponseError
			return err == nil || !errors.As(err, &re) || re.HTTPStatusCode() != http.StatusServiceUnavailable
		})
		return err
	}
	for i := range 12 {
		key := fmt.Sprintf("reports/%d.txt", i)
		if err := put(clients[0], key, 42, "from B (42)"); err != nil {
			t.Fatalf("PutObject %s with token 42 through replica 0: %v", key, err)
		}
		err := put(clients[1+i%2], key, 41, "late from A (41)")
		var re *awshttp.ResponseError
		if !errors.As(err, &re) || re.HTTPStatusCode() != http.StatusConflict || re.Response.Header.Get("Fencing-Refused") != "stale" {
			t.Fatalf("late PutObject %s with token 41 through replica %d: %v; want 409 stale", key, 1+i%2, err)
		}
		out, err := backend.Client().GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(out.Body)
		out.Body.Close()
		if string(b) != "from B (42)" {
			t.Fatalf("%s holds %q", key, b)
		}
	}
	if forwarded := metric(t, &http.Client{}, reps[0].Control, `fenceproxy_peer_forwards_total{result="ok"}`); forwarded == 0 {
		t.Fatal("no write was forwarded: the test shows nothing about the hop")
	}

	// A multipart upload: create, parts and complete through different replicas.
	const key = "big/object.bin"
	if err := put(clients[0], key, 7, "x"); err != nil {
		t.Fatal(err)
	}
	cr, err := clients[1].CreateMultipartUpload(client.WithToken(ctx, 7), &s3.CreateMultipartUploadInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		t.Fatalf("CreateMultipartUpload: %v", err)
	}
	part := strings.Repeat("p", 5<<20)
	var parts []s3types.CompletedPart
	for n := int32(1); n <= 2; n++ {
		up, err := clients[n%3].UploadPart(client.WithToken(ctx, 7), &s3.UploadPartInput{Bucket: aws.String(bucket), Key: aws.String(key),
			UploadId: cr.UploadId, PartNumber: aws.Int32(n), Body: strings.NewReader(part)})
		if err != nil {
			t.Fatalf("UploadPart %d: %v", n, err)
		}
		parts = append(parts, s3types.CompletedPart{ETag: up.ETag, PartNumber: aws.Int32(n)})
	}
	if _, err := clients[2].CompleteMultipartUpload(client.WithToken(ctx, 7), &s3.CompleteMultipartUploadInput{Bucket: aws.String(bucket),
		Key: aws.String(key), UploadId: cr.UploadId, MultipartUpload: &s3types.CompletedMultipartUpload{Parts: parts}}); err != nil {
		t.Fatalf("CompleteMultipartUpload: %v", err)
	}
	head, err := backend.Client().HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil || aws.ToInt64(head.ContentLength) != 2*5<<20 {
		t.Fatalf("the completed object: %v %v", head, err)
	}
}
