package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/fenceproxy/fenceproxy/client"
)

// TestS3GatewayGrants holds worker1 (jobs, prefix w1/, readwrite) to its
// grant through aws-sdk-go-v2: a DeleteObjects with one key outside w1/,
// a CopyObject and an UploadPartCopy whose source it may not read, a
// listing of the whole bucket or of a prefix wider than w1/, CreateBucket,
// and keys with ".." segments (reads too) are each refused whole with 403
// AccessDenied (a DeleteObjects key with "..": 400 InvalidURI, as in pass
// mode), PutBucketPolicy and DeleteBucket too (the grant is checked before
// FENCEPROXY_S3_BUCKET_WRITES); worker4, granted all of bucket other, gets
// 400 NotImplemented for its PutBucketPolicy (refuse: bucket configuration
// is never forwarded, whatever the key); none forwards a byte, raises a
// fence or changes anything; a listing of w1/ passes.
func TestS3GatewayGrants(t *testing.T) {
	g := startGateway(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	w1, w4 := g.worker("worker1", gwSecret1), g.worker("worker4", gwSecret4)
	at := func(tok uint64) context.Context { return client.WithToken(ctx, tok) }
	root := g.backend.Client()
	for _, o := range []struct{ bucket, key string }{{"jobs", "x/b"}, {"jobs", "x/secret"}, {"other", "src"}} {
		if _, err := root.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(o.bucket), Key: aws.String(o.key),
			Body: strings.NewReader("root's " + o.key)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w1.PutObject(at(3), &s3.PutObjectInput{Bucket: aws.String("jobs"), Key: aws.String("w1/a"), Body: strings.NewReader("w1's a")}); err != nil {
		t.Fatalf("PutObject w1/a: %v", err)
	}
	created, err := w1.CreateMultipartUpload(at(3), &s3.CreateMultipartUploadInput{Bucket: aws.String("jobs"), Key: aws.String("w1/mp")})
	if err != nil {
		t.Fatalf("CreateMultipartUpload w1/mp: %v", err)
	}

	for _, row := range []struct {
		name, code string
		call       func() error
	}{
		{"DeleteObjects of w1/a and x/b", "AccessDenied", func() error {
			_, err := w1.DeleteObjects(at(9), &s3.DeleteObjectsInput{Bucket: aws.String("jobs"), Delete: &s3types.Delete{
				Objects: []s3types.ObjectIdentifier{{Key: aws.String("w1/a")}, {Key: aws.String("x/b")}}}})
			return err
		}},
		{"CopyObject to w1/ from other/src (no grant on other)", "AccessDenied", func() error {
			_, err := w1.CopyObject(at(9), &s3.CopyObjectInput{Bucket: aws.String("jobs"), Key: aws.String("w1/copy"), CopySource: aws.String("other/src")})
			return err
		}},
		{"CopyObject to w1/ from jobs/x/secret (outside the prefix)", "AccessDenied", func() error {
			_, err := w1.CopyObject(at(9), &s3.CopyObjectInput{Bucket: aws.String("jobs"), Key: aws.String("w1/copy"), CopySource: aws.String("jobs/x/secret")})
			return err
		}},
		{"UploadPartCopy from other/src", "AccessDenied", func() error {
			_, err := w1.UploadPartCopy(at(3), &s3.UploadPartCopyInput{Bucket: aws.String("jobs"), Key: aws.String("w1/mp"),
				UploadId: created.UploadId, PartNumber: aws.Int32(1), CopySource: aws.String("other/src")})
			return err
		}},
		{"ListObjectsV2 of all of jobs", "AccessDenied", func() error {
			_, err := w1.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("jobs")})
			return err
		}},
		{"ListObjectsV2 of jobs below w (wider than w1/)", "AccessDenied", func() error {
			_, err := w1.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("jobs"), Prefix: aws.String("w")})
			return err
		}},
		{"CreateBucket", "AccessDenied", func() error {
			_, err := w1.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("w1bucket")})
			return err
		}},
		// The grant before FENCEPROXY_S3_BUCKET_WRITES=refuse (NotImplemented):
		// a key learns nothing of a policy on what it may not do.
		{"PutBucketPolicy of jobs", "AccessDenied", func() error {
			_, err := w1.PutBucketPolicy(at(9), &s3.PutBucketPolicyInput{Bucket: aws.String("jobs"), Policy: aws.String(`{"Version":"2012-10-17","Statement":[]}`)})
			return err
		}},
		{"DeleteBucket of jobs", "AccessDenied", func() error {
			_, err := w1.DeleteBucket(at(9), &s3.DeleteBucketInput{Bucket: aws.String("jobs")})
			return err
		}},
		{"PutBucketPolicy of other by worker4 (all of other)", "NotImplemented", func() error {
			_, err := w4.PutBucketPolicy(at(9), &s3.PutBucketPolicyInput{Bucket: aws.String("other"), Policy: aws.String(`{"Version":"2012-10-17","Statement":[]}`)})
			return err
		}},
		{"PutObject w1/../x/b", "AccessDenied", func() error {
			_, err := w1.PutObject(at(9), &s3.PutObjectInput{Bucket: aws.String("jobs"), Key: aws.String("w1/../x/b"), Body: strings.NewReader("via ..")})
			return err
		}},
		{"GetObject w1/../x/secret", "AccessDenied", func() error {
			_, err := w1.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("jobs"), Key: aws.String("w1/../x/secret")})
			return err
		}},
		{"DeleteObjects of w1/../x/b", "InvalidURI", func() error {
			_, err := w1.DeleteObjects(at(9), &s3.DeleteObjectsInput{Bucket: aws.String("jobs"), Delete: &s3types.Delete{
				Objects: []s3types.ObjectIdentifier{{Key: aws.String("w1/../x/b")}}}})
			return err
		}},
	} {
		t.Run(row.name, func(t *testing.T) {
			sent := g.fwd.quiet()
			err := row.call()
			forwarded := g.fwd.Sent() - sent
			t.Logf("%s: %v; %d bytes forwarded", row.name, err, forwarded)
			wantAPIError(t, row.name, err, row.code)
			if row.code == "AccessDenied" && err != nil && strings.Contains(err.Error(), "(token ") {
				t.Errorf("%s: the refusal's message names the token: %v", row.name, err)
			}
			if forwarded != 0 {
				t.Errorf("%d bytes reached the store; want none", forwarded)
			}
			for _, o := range []struct{ bucket, key, body string }{{"jobs", "w1/a", "w1's a"}, {"jobs", "x/b", "root's x/b"}, {"jobs", "x/secret", "root's x/secret"}} {
				if got, _ := g.object(t, o.bucket, o.key); got != o.body {
					t.Errorf("%s/%s is %q; want %q", o.bucket, o.key, got, o.body)
				}
			}
			if _, ok := g.object(t, "jobs", "w1/copy"); ok {
				t.Errorf("jobs/w1/copy exists")
			}
			for resource, want := range map[string]string{"jobs/w1/a": "3", "jobs/x/b": "none", "jobs/w1/copy": "none", "jobs/w1/mp": "3", "jobs": "none"} {
				if f := g.fence(t, resource); f != want {
					t.Errorf("the fence of %s is %s; want %s", resource, f, want)
				}
			}
		})
	}
	if _, err := root.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String("w1bucket")}); err == nil {
		t.Errorf("bucket w1bucket exists")
	}
	parts, err := root.ListParts(ctx, &s3.ListPartsInput{Bucket: aws.String("jobs"), Key: aws.String("w1/mp"), UploadId: created.UploadId})
	if err != nil || len(parts.Parts) != 0 {
		t.Errorf("w1/mp's upload at the store: %v, err %v; want no parts", parts, err)
	}
	if _, err := w1.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("jobs"), Prefix: aws.String("w1/")}); err != nil {
		t.Errorf("ListObjectsV2 of jobs below w1/: %v", err)
	}
	if _, err := w1.AbortMultipartUpload(at(3), &s3.AbortMultipartUploadInput{Bucket: aws.String("jobs"), Key: aws.String("w1/mp"), UploadId: created.UploadId}); err != nil {
		t.Errorf("AbortMultipartUpload w1/mp: %v", err)
	}
	// The refusals are logged with the key that was refused; a read as a
	// request, a write as a write.
	logs := g.in.Logs.String()
	for _, want := range []string{`"msg":"request refused","reason":"forbidden","status":403`, `"msg":"write refused","reason":"forbidden","status":403`,
		`access denied: the key is not granted writes to bucket \"w1bucket\" itself`, `"key_id":"worker1"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("no log line holds %s", want)
		}
	}
}
