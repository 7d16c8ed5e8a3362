package server_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/fenceproxy/fenceproxy/internal/servertest"
)

// s3Refusal returns the proxy's Fencing-Refused reason and status for an
// SDK error ("" and 0 when the call succeeded or the backend answered).
func s3Refusal(err error) (string, int) {
	var re *awshttp.ResponseError
	if err == nil || !errors.As(err, &re) {
		return "", 0
	}
	return re.Response.Header.Get("Fencing-Refused"), re.HTTPStatusCode()
}

// TestS3BucketWrites: in S3 mode a job that creates its bucket first never
// raises the bucket's fence, so a second job with an unrelated token
// sequence creates it too; a write to a bucket's configuration follows
// FENCEPROXY_S3_BUCKET_WRITES: refused by default (nothing forwarded),
// forwarded unfenced with pass, fenced on the bucket with fence.
func TestS3BucketWrites(t *testing.T) {
	fake := gofakes3.New(s3mem.New()).Server()
	var mu sync.Mutex
	forwarded := 0
	count := func() int { mu.Lock(); defer mu.Unlock(); return forwarded }
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		forwarded++
		mu.Unlock()
		fake.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	policy := `{"Version":"2012-10-17","Statement":[]}`
	ctx := context.Background()

	for _, mode := range []string{"", "refuse", "pass", "fence"} {
		t.Run("BUCKET_WRITES="+mode, func(t *testing.T) {
			env := map[string]string{"FENCEPROXY_UPSTREAM": srv.URL, "FENCEPROXY_DATA_DIR": t.TempDir(),
				"FENCEPROXY_S3": "pass", "FENCEPROXY_S3_DOMAINS": "localhost"}
			if mode != "" {
				env["FENCEPROXY_S3_BUCKET_WRITES"] = mode
			}
			in := servertest.Start(t, env)
			_, port, _ := net.SplitHostPort(in.Proxy)
			client := s3HostClient("http://localhost:"+port, in.Proxy, true)
			bucket := "jobs-" + mode + "default"

			// Job 1 (tokens from 100) and job 2 (tokens from 5) each create the bucket first.
			_, err1 := client.CreateBucket(s3WithFencingToken(ctx, 100), &s3.CreateBucketInput{Bucket: aws.String(bucket)})
			_, err2 := client.CreateBucket(s3WithFencingToken(ctx, 5), &s3.CreateBucketInput{Bucket: aws.String(bucket)})
			r1, _ := s3Refusal(err1)
			r2, st2 := s3Refusal(err2)
			if mode == "fence" {
				if err1 != nil || r2 != "stale" {
					t.Errorf("fence: CreateBucket with 100: %v; with 5: %q %d, want stale", err1, r2, st2)
				}
			} else if err1 != nil || r1 != "" || r2 != "" {
				t.Errorf("CreateBucket: job 1 %v, job 2 refused %q %d; want both passed unfenced", err1, r2, st2)
			}
			if _, code := s3FenceOf(t, in, bucket); mode != "fence" && code != http.StatusNotFound {
				t.Errorf("the bucket %s has a fence (%d) after CreateBucket", bucket, code)
			}

			before := count()
			_, err := client.PutBucketPolicy(s3WithFencingToken(ctx, 100), &s3.PutBucketPolicyInput{Bucket: aws.String(bucket), Policy: aws.String(policy)})
			reason, status := s3Refusal(err)
			sent := count() > before
			switch mode {
			case "", "refuse":
				if reason != "unsupported" || status != http.StatusBadRequest || sent {
					t.Errorf("PutBucketPolicy: %q %d, forwarded %v; want 400 unsupported, nothing forwarded", reason, status, sent)
				}
			case "pass":
				if reason != "" || !sent {
					t.Errorf("PutBucketPolicy: refused %q %d, forwarded %v; want forwarded unfenced", reason, status, sent)
				}
			case "fence":
				if reason != "" || !sent {
					t.Errorf("PutBucketPolicy with 100: refused %q %d, forwarded %v; want forwarded", reason, status, sent)
				}
				_, err := client.PutBucketPolicy(s3WithFencingToken(ctx, 99), &s3.PutBucketPolicyInput{Bucket: aws.String(bucket), Policy: aws.String(policy)})
				if reason, _ := s3Refusal(err); reason != "stale" {
					t.Errorf("PutBucketPolicy with 99 after 100: %v, want stale", err)
				}
			}
		})
	}
}

// TestS3BucketWritesRefusedWithoutToken: BUCKET_WRITES=refuse refuses a
// bucket's configuration writes that carry no token too, when
// FENCEPROXY_REQUIRE_TOKEN=false forwards other tokenless writes unchecked:
// nothing is forwarded. CreateBucket and reads still pass.
func TestS3BucketWritesRefusedWithoutToken(t *testing.T) {
	fake := gofakes3.New(s3mem.New()).Server()
	var mu sync.Mutex
	var forwarded []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		forwarded = append(forwarded, r.Method+" "+r.URL.RequestURI())
		mu.Unlock()
		fake.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	in := servertest.Start(t, map[string]string{"FENCEPROXY_UPSTREAM": srv.URL, "FENCEPROXY_DATA_DIR": t.TempDir(),
		"FENCEPROXY_S3": "pass", "FENCEPROXY_S3_DOMAINS": "localhost", "FENCEPROXY_REQUIRE_TOKEN": "false"})
	_, port, _ := net.SplitHostPort(in.Proxy)
	client := s3HostClient("http://localhost:"+port, in.Proxy, true)
	ctx := context.Background()
	if _, err := client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("jobs")}); err != nil {
		t.Fatalf("tokenless CreateBucket: %v", err)
	}
	mu.Lock()
	forwarded = nil
	mu.Unlock()
	_, err := client.PutBucketPolicy(ctx, &s3.PutBucketPolicyInput{Bucket: aws.String("jobs"), Policy: aws.String(`{"Statement":[]}`)})
	if reason, status := s3Refusal(err); reason != "unsupported" || status != http.StatusBadRequest {
		t.Errorf("tokenless PutBucketPolicy: %v; want 400 unsupported", err)
	}
	_, err = client.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String("jobs")})
	if reason, status := s3Refusal(err); reason != "unsupported" || status != http.StatusBadRequest {
		t.Errorf("tokenless DeleteBucket: %v; want 400 unsupported", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(forwarded) != 0 {
		t.Errorf("forwarded %q, want nothing", forwarded)
	}
}
