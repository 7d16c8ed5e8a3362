package gateway_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/fenceproxy/fenceproxy/s3"
	"github.com/fenceproxy/fenceproxy/s3/gateway"
	"github.com/fenceproxy/fenceproxy/s3/keyring"
	"github.com/fenceproxy/fenceproxy/s3/resign"
)

// BenchmarkGateway measures the gateway's work on one same-token 1 KiB
// PutObject signed with a hex payload hash: verification of the worker's
// signature, the grant check, and signing for the store.
func BenchmarkGateway(b *testing.B) {
	file := filepath.Join(b.TempDir(), "keys.yaml")
	if err := os.WriteFile(file, []byte(`keys:
  - access_key_id: bench
    secret_access_key: bench-worker-secret-0123
    grants: [{bucket: bkt, access: readwrite}]
`), 0o600); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	keys, err := keyring.Watch(ctx, file, time.Hour, nil)
	if err != nil {
		b.Fatal(err)
	}
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	endpoint, _ := url.Parse("http://store.invalid")
	g, err := gateway.New(gateway.Options{Keys: keys, Region: "us-east-1", Now: func() time.Time { return at },
		Signer: &resign.Signer{Endpoint: endpoint, Region: "us-east-1", Now: func() time.Time { return at },
			Credentials: aws.NewCredentialsCache(credentials{})}})
	if err != nil {
		b.Fatal(err)
	}
	body := strings.Repeat("x", 1024)
	sum := sha256.Sum256([]byte(body))
	hash := hex.EncodeToString(sum[:])
	signer := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })
	worker := aws.Credentials{AccessKeyID: "bench", SecretAccessKey: "bench-worker-secret-0123"}
	// Requests as the server reads them: RequestURI and headers as sent.
	reqs := make([]*http.Request, 100)
	for i := range reqs {
		r := httptest.NewRequest(http.MethodPut, fmt.Sprintf("http://127.0.0.1:8080/bkt/obj-%d", i), strings.NewReader(body))
		r.Header.Set("X-Fencing-Token", "7")
		r.Header.Set("Content-Type", "application/octet-stream")
		r.Header.Set("X-Amz-Content-Sha256", hash)
		if err := signer.SignHTTP(context.Background(), worker, r, hash, "s3", "us-east-1", at); err != nil {
			b.Fatal(err)
		}
		reqs[i] = r
	}
	put := s3.Operation{Name: "PutObject", Writes: s3.Object, Creates: true}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r := reqs[i%len(reqs)]
		c, err := g.Verify(r)
		if err != nil {
			b.Fatal(err)
		}
		if !c.Allowed("bkt", "obj", true) {
			b.Fatal("not allowed")
		}
		out := r.Clone(context.Background())
		req := s3.Request{Op: put, Bucket: "bkt", Key: fmt.Sprintf("obj-%d", i%len(reqs))}
		if err := c.Resign(context.Background(), out, req, "7"); err != nil {
			b.Fatal(err)
		}
	}
}

type credentials struct{}

func (credentials) Retrieve(context.Context) (aws.Credentials, error) {
	return aws.Credentials{AccessKeyID: "STORE", SecretAccessKey: "store-secret-0123456789", Source: "bench"}, nil
}
