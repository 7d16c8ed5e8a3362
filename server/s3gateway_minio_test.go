package server_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/fenceproxy/fenceproxy/client"
	"github.com/fenceproxy/fenceproxy/internal/s3backend"
)

// payloadForms records the x-amz-content-sha256 of each PUT it sends; with
// flipAt > 0 it changes the body's byte at that offset (after signing).
type payloadForms struct {
	next   http.RoundTripper
	flipAt int64
	mu     sync.Mutex
	seen   []string
}

func (p *payloadForms) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPut {
		p.mu.Lock()
		p.seen = append(p.seen, r.Header.Get("X-Amz-Content-Sha256"))
		p.mu.Unlock()
		if p.flipAt > 0 && r.Body != nil {
			r = r.Clone(r.Context())
			r.Body = &flipper{ReadCloser: r.Body, at: p.flipAt}
		}
	}
	return p.next.RoundTrip(r)
}

// flipper changes one byte of what it reads, at offset at.
type flipper struct {
	io.ReadCloser
	at, off int64
}

func (f *flipper) Read(b []byte) (int, error) {
	n, err := f.ReadCloser.Read(b)
	if f.at >= f.off && f.at < f.off+int64(n) {
		b[f.at-f.off] ^= 0x20
	}
	f.off += int64(n)
	return n, err
}

// TestS3GatewayMinioSignedStreaming: minio-go, an S3 SDK that signs each
// chunk of an upload when it speaks plain HTTP (STREAMING-AWS4-HMAC-SHA256-
// PAYLOAD; with TrailingHeaders and a checksum, the -TRAILER form with
// x-amz-checksum-crc32c), uploads 3 MiB through the gateway with worker1's
// proxy key (the token set by client.Transport, unsigned: only x-amz-*
// headers must be signed). Each chunk is verified and the payload framed
// again for versitygw, which stores exactly the payload (and checks the
// trailer's checksum); the stale holder's upload in the same form is
// refused with 409 StaleFencingToken and changes nothing; the same upload
// with one byte changed in its 25th chunk after minio-go signed it is cut
// (400 IncompleteBody) and the object stays; a wrong secret is refused with
// 403 SignatureDoesNotMatch.
func TestS3GatewayMinioSignedStreaming(t *testing.T) {
	// Plain HTTP to the proxy: minio-go signs chunks only there.
	g := startGateway(t, map[string]string{"FENCEPROXY_TLS_CERT_FILE": "", "FENCEPROXY_TLS_KEY_FILE": ""})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	payload := bytes.Repeat([]byte("0123456789abcdef"), 3<<16) // 3 MiB: 48 chunks of 64 KiB

	for _, c := range []struct {
		trailer bool
		form    string
	}{{false, "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"}, {true, "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"}} {
		t.Run(c.form, func(t *testing.T) {
			forms := &payloadForms{next: &client.Transport{Base: http.DefaultTransport}}
			mc, err := minio.New(g.in.Proxy, &minio.Options{
				Creds: credentials.NewStaticV4("worker1", gwSecret1, ""), Secure: false, Region: s3backend.Region,
				BucketLookup: minio.BucketLookupPath, TrailingHeaders: c.trailer, Transport: forms, MaxRetries: 1,
			})
			if err != nil {
				t.Fatal(err)
			}
			opts := minio.PutObjectOptions{DisableMultipart: true, ContentType: "application/octet-stream"}
			if c.trailer {
				opts.Checksum = minio.ChecksumCRC32C
			}
			key := "w1/minio-" + map[bool]string{false: "signed", true: "signed-trailer"}[c.trailer]
			if _, err := mc.PutObject(client.WithToken(ctx, 7), "jobs", key, bytes.NewReader(payload), int64(len(payload)), opts); err != nil {
				t.Fatalf("PutObject with 7: %v", err)
			}
			if got, _ := g.object(t, "jobs", key); got != string(payload) {
				t.Errorf("versitygw holds %d bytes of %s; want the %d bytes of the payload", len(got), key, len(payload))
			}

			_, err = mc.PutObject(client.WithToken(ctx, 6), "jobs", key, bytes.NewReader(bytes.Repeat([]byte("x"), len(payload))), int64(len(payload)), opts)
			var me minio.ErrorResponse
			if !errors.As(err, &me) || me.StatusCode != http.StatusConflict || me.Code != "StaleFencingToken" {
				t.Errorf("PutObject with 6 after 7: %v; want 409 StaleFencingToken", err)
			}
			if got, _ := g.object(t, "jobs", key); got != string(payload) {
				t.Errorf("after the stale upload versitygw holds %d bytes of %s; want the payload unchanged", len(got), key)
			}
			if f := g.fence(t, "jobs/"+key); f != "7" {
				t.Errorf("the fence of jobs/%s is %s; want 7", key, f)
			}
			forms.mu.Lock()
			defer forms.mu.Unlock()
			for _, f := range forms.seen {
				if f != c.form {
					t.Errorf("minio-go sent a PUT as %q; want %s (the test would not test the signed stream)", f, c.form)
				}
			}
			if len(forms.seen) != 2 {
				t.Errorf("%d PUTs sent; want 2", len(forms.seen))
			}
			forms.mu.Unlock()

			forms.flipAt = 25*(64<<10+100) + 10 // in the 25th chunk's data
			_, err = mc.PutObject(client.WithToken(ctx, 8), "jobs", key, bytes.NewReader(bytes.Repeat([]byte("y"), len(payload))), int64(len(payload)), opts)
			forms.flipAt = 0
			if !errors.As(err, &me) || me.StatusCode != http.StatusBadRequest || me.Code != "IncompleteBody" {
				t.Errorf("PutObject with a byte changed in the 25th chunk: %v; want 400 IncompleteBody", err)
			}
			if got, _ := g.object(t, "jobs", key); got != string(payload) {
				t.Errorf("after the changed upload versitygw holds %d bytes of %s; want the payload unchanged", len(got), key)
			}
			forms.mu.Lock()
		})
	}

	bad, err := minio.New(g.in.Proxy, &minio.Options{Creds: credentials.NewStaticV4("worker1", "not-"+gwSecret1, ""),
		Region: s3backend.Region, BucketLookup: minio.BucketLookupPath, Transport: &client.Transport{}, MaxRetries: 1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = bad.PutObject(client.WithToken(ctx, 9), "jobs", "w1/minio-signed", bytes.NewReader(payload), int64(len(payload)), minio.PutObjectOptions{DisableMultipart: true})
	var me minio.ErrorResponse
	if !errors.As(err, &me) || me.StatusCode != http.StatusForbidden || me.Code != "SignatureDoesNotMatch" {
		t.Errorf("PutObject with a wrong secret: %v; want 403 SignatureDoesNotMatch", err)
	}
}
