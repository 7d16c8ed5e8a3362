package server_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/fenceproxy/fenceproxy/client"
	"github.com/fenceproxy/fenceproxy/internal/s3backend"
	"github.com/fenceproxy/fenceproxy/internal/servertest"
)

// TestS3PassMultipartAbortAfterTakeover, with aws-sdk-go-v2 through pass
// mode to versitygw: holder 41 creates a multipart upload and sends a part;
// while its second part is still uploading, holder 42 takes the object over,
// which cuts that part off (409, versitygw never gets it). 41's next part and
// its Complete are refused, but its AbortMultipartUpload of its own upload is
// forwarded and succeeds: versitygw lists no upload left, and 42's object is
// the one stored. 41 cannot abort 42's upload (below its creator); 42 can.
func TestS3PassMultipartAbortAfterTakeover(t *testing.T) {
	const bucket, key = "jobs", "shard-3/out.bin"
	backend := s3backend.Start(t)
	backend.CreateBucket(t, bucket)
	in := servertest.Start(t, map[string]string{"FENCEPROXY_UPSTREAM": backend.URL, "FENCEPROXY_DATA_DIR": t.TempDir(),
		"FENCEPROXY_S3": "pass", "FENCEPROXY_S3_DOMAINS": "127.0.0.1"})
	c := s3.New(backend.Options(in.ProxyURL()), client.S3Fencing(client.ContextToken))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	at := func(tok uint64) context.Context { return client.WithToken(ctx, tok) }

	created, err := c.CreateMultipartUpload(at(41), &s3.CreateMultipartUploadInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		t.Fatalf("CreateMultipartUpload with 41: %v", err)
	}
	id := created.UploadId
	part1, err := c.UploadPart(at(41), &s3.UploadPartInput{Bucket: aws.String(bucket), Key: aws.String(key), UploadId: id,
		PartNumber: aws.Int32(1), Body: bytes.NewReader(bytes.Repeat([]byte("1"), 5<<20))})
	if err != nil {
		t.Fatalf("UploadPart 1 with 41: %v", err)
	}

	// 41's second part stalls half sent; 42's takeover cuts it off.
	cut := s3StalledPart(t, backend, in.ProxyURL(), bucket, key, aws.ToString(id), 2, 41, 1<<20)
	if _, err := c.PutObject(at(42), &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key),
		Body: strings.NewReader("object of 42")}); err != nil {
		t.Fatalf("PutObject with 42 (the takeover): %v", err)
	}
	select {
	case status := <-cut:
		if status != http.StatusConflict {
			t.Errorf("41's part under way during the takeover: status %d, want 409 (cut off)", status)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("41's stalled part got no answer 20s after the takeover")
	}
	parts, err := backend.Client().ListParts(ctx, &s3.ListPartsInput{Bucket: aws.String(bucket), Key: aws.String(key), UploadId: id})
	if err != nil {
		t.Fatalf("ListParts at versitygw: %v", err)
	}
	if len(parts.Parts) != 1 || aws.ToInt32(parts.Parts[0].PartNumber) != 1 {
		for _, p := range parts.Parts {
			t.Logf("part %d: %d bytes", aws.ToInt32(p.PartNumber), aws.ToInt64(p.Size))
		}
		t.Errorf("versitygw holds %d parts of 41's upload; want part 1 only (part 2 was cut off)", len(parts.Parts))
	}

	// 41 wakes: more parts and the Complete are refused, its abort is not.
	_, err = c.UploadPart(at(41), &s3.UploadPartInput{Bucket: aws.String(bucket), Key: aws.String(key), UploadId: id,
		PartNumber: aws.Int32(2), Body: strings.NewReader("tail of 41")})
	s3AssertStaleRefusal(t, err, "42")
	_, err = c.CompleteMultipartUpload(at(41), &s3.CompleteMultipartUploadInput{Bucket: aws.String(bucket), Key: aws.String(key),
		UploadId: id, MultipartUpload: &s3types.CompletedMultipartUpload{Parts: []s3types.CompletedPart{{ETag: part1.ETag, PartNumber: aws.Int32(1)}}}})
	s3AssertStaleRefusal(t, err, "42")
	if _, err := c.AbortMultipartUpload(at(41), &s3.AbortMultipartUploadInput{Bucket: aws.String(bucket), Key: aws.String(key), UploadId: id}); err != nil {
		t.Fatalf("AbortMultipartUpload of its own upload by 41 after the takeover: %v", err)
	}

	// 42's own upload: 41 is below its creator; 42 aborts it.
	created42, err := c.CreateMultipartUpload(at(42), &s3.CreateMultipartUploadInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		t.Fatalf("CreateMultipartUpload with 42: %v", err)
	}
	_, err = c.AbortMultipartUpload(at(41), &s3.AbortMultipartUploadInput{Bucket: aws.String(bucket), Key: aws.String(key), UploadId: created42.UploadId})
	s3AssertStaleRefusal(t, err, "42")
	if _, err := c.AbortMultipartUpload(at(42), &s3.AbortMultipartUploadInput{Bucket: aws.String(bucket), Key: aws.String(key), UploadId: created42.UploadId}); err != nil {
		t.Fatalf("AbortMultipartUpload by 42 of its own upload: %v", err)
	}

	left, err := backend.Client().ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String(bucket)})
	if err != nil {
		t.Fatalf("ListMultipartUploads at versitygw: %v", err)
	}
	if len(left.Uploads) != 0 {
		t.Errorf("versitygw still lists %d multipart uploads, want none", len(left.Uploads))
	}
	if got := s3GetObject(ctx, t, backend.Client(), bucket, key); got != "object of 42" {
		t.Errorf("object at versitygw: %q, want 42's", got)
	}
}

// TestS3PassCutUploadNeverApplied: holder 41's PutObject (UNSIGNED-PAYLOAD,
// so versitygw cannot check its bytes) stalls half sent; an admin raise to 42
// cuts it off (409). versitygw must never apply it: the object keeps 40's
// data. versitygw v1.8.0 takes a connection closed mid-body for the body's
// end and stores the truncated object, after the takeover; the proxy resets
// the connection instead, which fails versitygw's read. A relay (cutRelay)
// between the proxy and versitygw makes the cut come after versitygw's
// connection got part of the body, and tells when versitygw is done with it.
//
// Its teeth: built with -tags upstreamteeth and run with
// FENCEPROXY_TEST_UPSTREAM_UNPROTECTED=reset, it finds the truncated body.
func TestS3PassCutUploadNeverApplied(t *testing.T) {
	const bucket, key = "jobs", "report.csv"
	backend := s3backend.Start(t)
	backend.CreateBucket(t, bucket)
	relay := startCutRelay(t, strings.TrimPrefix(backend.URL, "http://"))
	in := servertest.Start(t, map[string]string{"FENCEPROXY_UPSTREAM": "http://" + relay.addr(), "FENCEPROXY_DATA_DIR": t.TempDir(),
		"FENCEPROXY_S3": "pass", "FENCEPROXY_S3_DOMAINS": "127.0.0.1", "FENCEPROXY_ADMIN_TOKEN": "admin-secret"})
	c := s3.New(backend.Options(in.ProxyURL()), client.S3Fencing(client.ContextToken))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := c.PutObject(client.WithToken(ctx, 40), &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key),
		Body: strings.NewReader("object of 40")}); err != nil {
		t.Fatalf("PutObject with 40: %v", err)
	}

	snap := relay.snapshot()
	cut := s3StalledPut(t, backend, fmt.Sprintf("%s/%s/%s", in.ProxyURL(), bucket, key), 41, 1<<20)
	// Past the request's head (about 1 KiB), into the 64 KiB of body sent.
	carrier := relay.waitCarried(t, snap, 32<<10)
	ctl := &client.Control{BaseURL: in.ControlURL(), AdminBearer: "admin-secret"}
	if _, err := ctl.RaiseFence(ctx, bucket+"/"+key, 42); err != nil {
		t.Fatalf("admin raise to 42: %v", err)
	}
	select {
	case status := <-cut:
		if status != http.StatusConflict {
			t.Errorf("41's PutObject under way during the raise: status %d, want 409 (cut off)", status)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("41's stalled PutObject got no answer 20s after the raise")
	}
	select {
	case <-carrier.done: // versitygw answered and closed: it applied the body or failed
	case <-time.After(10 * time.Second):
		t.Fatalf("versitygw's connection did not end within 10s of the cut")
	}
	t.Logf("versitygw's connection got %d bytes of the request before the cut", carrier.up.Load())
	got := s3GetObject(ctx, t, backend.Client(), bucket, key)
	if upstreamUnprotected("reset") {
		// Teeth: the cut reached versitygw as a FIN; it stores the prefix.
		if len(got) == 0 || len(got) >= 1<<20 || strings.Trim(got, "2") != "" {
			t.Errorf("teeth: with the reset off versitygw holds %d bytes starting %q, want a truncated 41 body", len(got), got[:min(len(got), 16)])
		} else {
			t.Logf("teeth: with the reset off versitygw stored the first %d of %d bytes of the cut 41 body", len(got), 1<<20)
		}
		return
	}
	if got != "object of 40" {
		t.Errorf("versitygw applied the cut-off upload of 41 after the raise to 42: the object holds %d bytes starting %q, want 40's",
			len(got), got[:min(len(got), 16)])
	}
}

// TestS3Boto3Multipart: boto3 with the shipped hook, through pass mode to
// versitygw: 41's upload interrupted by 42's takeover, 41's next part and
// Complete refused with StaleFencingToken, 41's abort of its own upload
// applied, 41 refused on 42's upload, and no upload left
// (testdata/boto3_multipart.py).
func TestS3Boto3Multipart(t *testing.T) {
	backend := s3backend.Start(t)
	backend.CreateBucket(t, "jobs")
	in := servertest.Start(t, map[string]string{"FENCEPROXY_UPSTREAM": backend.URL, "FENCEPROXY_DATA_DIR": t.TempDir(),
		"FENCEPROXY_S3": "pass", "FENCEPROXY_S3_DOMAINS": "127.0.0.1"})
	out := s3RunBoto3(t, "testdata/boto3_multipart.py", in.ProxyURL(), backend)
	for _, want := range []string{"refused StaleFencingToken current=42", "41 aborted its own upload", "no upload left", "object holds 42's"} {
		if !strings.Contains(out, want) {
			t.Errorf("boto3 output lacks %q", want)
		}
	}
	if n := strings.Count(out, "refused StaleFencingToken"); n != 3 {
		t.Errorf("boto3 output has %d refusals, want 3 (part, Complete, abort of 42's upload)", n)
	}
}

// s3StalledPart sends an UploadPart of size bytes with token through the
// proxy, signed with the backend's key (UNSIGNED-PAYLOAD, so that it can
// stream), and stops after its first 64 KiB; it returns the status the
// client gets (0 if the exchange failed without one). The rest of the body is
// never sent.
func s3StalledPart(t *testing.T, backend *s3backend.Server, proxyURL, bucket, key, id string, n int, token uint64, size int) <-chan int {
	t.Helper()
	target := fmt.Sprintf("%s/%s/%s?partNumber=%d&uploadId=%s", proxyURL, bucket, key, n, url.QueryEscape(id))
	return s3StalledPut(t, backend, target, token, size)
}

// s3StalledPut sends a PUT of size bytes to target with token, signed with
// the backend's key (UNSIGNED-PAYLOAD, so that it can stream), and stops
// after its first 64 KiB; it returns the status the client gets (0 if the
// exchange failed without one). The rest of the body is never sent.
func s3StalledPut(t *testing.T, backend *s3backend.Server, target string, token uint64, size int) <-chan int {
	t.Helper()
	pr, pw := io.Pipe()
	req, err := http.NewRequest(http.MethodPut, target, pr)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = int64(size)
	req.Header.Set("X-Fencing-Token", fmt.Sprint(token))
	req.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
	creds := aws.Credentials{AccessKeyID: backend.AccessKey, SecretAccessKey: backend.SecretKey}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, "UNSIGNED-PAYLOAD", "s3", s3backend.Region, time.Now()); err != nil {
		t.Fatal(err)
	}
	sent := make(chan struct{})
	go func() {
		pw.Write(bytes.Repeat([]byte("2"), 64<<10))
		close(sent)
	}()
	status := make(chan int, 1)
	go func() {
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			status <- 0
			return
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		status <- res.StatusCode
	}()
	t.Cleanup(func() { pw.CloseWithError(io.ErrClosedPipe) })
	select {
	case <-sent:
	case <-time.After(10 * time.Second):
		t.Fatalf("the stalled part's first bytes were not read within 10s")
	}
	return status
}
