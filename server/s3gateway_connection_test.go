package server_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fenceproxy/fenceproxy/client"
)

// TestS3GatewayConnectionNamesASignedHeader: a CopyObject signed by worker1,
// with "Connection: x-amz-copy-source" added after signing. A proxy drops
// the headers Connection names, so the request it would sign for the store
// would lack the copy source, which the worker signed: an empty PutObject
// over the target. In gateway mode a Connection header may hold only close
// or keep-alive: 400 hop_by_hop (InvalidRequest), nothing forwarded, the
// target and its fence as they were; the same request without it copies.
func TestS3GatewayConnectionNamesASignedHeader(t *testing.T) {
	g := startGateway(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	w := g.worker("worker1", gwSecret1)
	for k, v := range map[string]string{"w1/src": "source data", "w1/target": "original target"} {
		if _, err := w.PutObject(client.WithToken(ctx, 5), &s3.PutObjectInput{Bucket: aws.String("jobs"), Key: aws.String(k), Body: strings.NewReader(v)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, conn := range []string{"x-amz-copy-source", "close, X-Amz-Copy-Source", "x-amz-date", "content-type"} {
		r := g.signedRequest(t, "worker1", gwSecret1, "PUT", "/jobs/w1/target", nil, map[string]string{"X-Amz-Copy-Source": "/jobs/w1/src"}, "", 9, time.Now().UTC())
		r.Header.Set("Connection", conn) // after signing: not covered
		sent := g.fwd.quiet()
		status, code := g.send(t, r)
		if status != http.StatusBadRequest || code != "InvalidRequest" {
			t.Errorf("Connection: %s: %d %s; want 400 InvalidRequest", conn, status, code)
		}
		if n := g.fwd.Sent() - sent; n != 0 {
			t.Errorf("Connection: %s: %d bytes reached the store; want none", conn, n)
		}
		if got, _ := g.object(t, "jobs", "w1/target"); got != "original target" {
			t.Fatalf("Connection: %s: the store holds w1/target = %q; want it unchanged", conn, got)
		}
		if f := g.fence(t, "jobs/w1/target"); f != "5" {
			t.Errorf("Connection: %s: the fence of jobs/w1/target is %s; want 5", conn, f)
		}
	}
	for _, conn := range []string{"", "close", "keep-alive"} {
		r := g.signedRequest(t, "worker1", gwSecret1, "PUT", "/jobs/w1/target", nil, map[string]string{"X-Amz-Copy-Source": "/jobs/w1/src"}, "", 9, time.Now().UTC())
		if conn != "" {
			r.Header.Set("Connection", conn)
		}
		if status, code := g.send(t, r); status != http.StatusOK {
			t.Errorf("a copy with Connection %q: %d %s; want 200", conn, status, code)
		}
		if got, _ := g.object(t, "jobs", "w1/target"); got != "source data" {
			t.Errorf("after a copy with Connection %q the store holds w1/target = %q; want the source's", conn, got)
		}
	}
}
