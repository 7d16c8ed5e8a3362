package resign_test

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fenceproxy/fenceproxy/internal/s3backend"
	"github.com/fenceproxy/fenceproxy/s3/keyring"
	"github.com/fenceproxy/fenceproxy/s3/resign"
)

// storeSigner is a path-style Signer for backend with its root credentials.
func storeSigner(backend *s3backend.Server) (*resign.Signer, string) {
	endpoint, _ := url.Parse(backend.URL)
	creds := credentials.NewStaticCredentialsProvider(backend.AccessKey, backend.SecretKey, "")
	return &resign.Signer{Endpoint: endpoint, Region: s3backend.Region, Credentials: creds}, endpoint.Host
}

// TestGrantedKeysStayInTheirPrefix: every key s3/keyring grants under "jobs/"
// is written by versitygw (posix) under jobs/, whatever dot segments or
// slashes it holds. versitygw resolves "jobs/../x" as a path and writes x,
// outside the grant.
func TestGrantedKeysStayInTheirPrefix(t *testing.T) {
	keys, err := keyring.Parse([]byte(`keys:
  - {access_key_id: w1, secret_access_key: "0123456789abcdef", grants: [{bucket: bkt, prefix: "jobs/", access: readwrite}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	backend := s3backend.Start(t)
	backend.CreateBucket(t, "bkt")
	s, addr := storeSigner(backend)
	ctx := context.Background()
	for _, key := range []string{"jobs/a", "jobs/../x", "jobs/./y", "jobs//z", "jobs/a/../../w", "jobs/..%2Fv", "jobs/.../u"} {
		if !keys.Allowed("w1", "bkt", key, true) {
			continue
		}
		in := workerPut(t, "http://proxy.internal:8080/bkt/k", "body of "+key)
		out := in.Clone(ctx)
		if err := s.Rewrite(ctx, out, resign.Request{Bucket: "bkt", Key: key, SignedHeaders: []string{"host"},
			PayloadHash: in.Header.Get("X-Amz-Content-Sha256")}); err != nil {
			t.Fatal(err)
		}
		status, body := sendTo(t, addr, out)
		t.Logf("granted %q: versitygw %d %.80s", key, status, body)
	}
	root := filepath.Join(backend.Dir, "bkt")
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		rel, _ := filepath.Rel(root, p)
		if err != nil || d.IsDir() || strings.HasPrefix(rel, ".sgwtmp") {
			return err
		}
		if !strings.HasPrefix(rel, "jobs/") {
			t.Errorf("versitygw wrote %q, outside the grant jobs/", rel)
		}
		return nil
	})
}

// TestRewriteRefusesRepeatedParameters: a repeated query parameter is
// refused. The signer sorts a parameter's values, so the proxy's check of
// prefix=jobs/ (the first) and versitygw's listing of prefix= (the first
// after sorting: the whole bucket) differed.
func TestRewriteRefusesRepeatedParameters(t *testing.T) {
	backend := s3backend.Start(t)
	backend.CreateBucket(t, "bkt")
	s, addr := storeSigner(backend)
	ctx := context.Background()
	for _, key := range []string{"jobs/a", "secret/b"} {
		in := workerPut(t, "http://proxy.internal:8080/bkt/k", "x")
		out := in.Clone(ctx)
		if err := s.Rewrite(ctx, out, resign.Request{Bucket: "bkt", Key: key, SignedHeaders: []string{"host"}, PayloadHash: in.Header.Get("X-Amz-Content-Sha256")}); err != nil {
			t.Fatal(err)
		}
		if status, body := sendTo(t, addr, out); status != http.StatusOK {
			t.Fatalf("PUT %s: %d %s", key, status, body)
		}
	}
	for _, q := range []string{"list-type=2&prefix=jobs/&prefix=", "list-type=2&prefix=jobs/&prefix=jobs/", "uploadId=b&uploadId=a", "list-type=2&list-type=2"} {
		in, _ := http.NewRequest(http.MethodGet, "http://proxy.internal:8080/bkt?"+q, nil)
		checked := in.URL.Query().Get("prefix")
		out := in.Clone(ctx)
		err := s.Rewrite(ctx, out, resign.Request{Bucket: "bkt", SignedHeaders: []string{"host"}, PayloadHash: "UNSIGNED-PAYLOAD"})
		if errors.Is(err, resign.ErrQuery) {
			continue
		}
		if err != nil {
			t.Fatalf("?%s: %v, want ErrQuery", q, err)
		}
		status, body := sendTo(t, addr, out)
		t.Errorf("?%s (prefix checked as %q) re-signed as ?%s; versitygw answered %d, listing %q",
			q, checked, out.URL.RawQuery, status, strings.Join(listed(body), " "))
	}
}

func listed(body string) []string {
	var keys []string
	for _, p := range strings.Split(body, "<Key>")[1:] {
		keys = append(keys, p[:strings.Index(p, "<")])
	}
	return keys
}

// TestRewriteDropsUnsignedHeadersOfTheBody: an HTTP trailer (never signed:
// S3's trailers travel inside an aws-chunked body) does not reach the store,
// and of an unsigned Content-Encoding only aws-chunked of a streaming payload
// does; a gzip the worker did not sign, or an aws-chunked on a payload that
// is not a stream, was stored as the object's Content-Encoding.
func TestRewriteDropsUnsignedHeadersOfTheBody(t *testing.T) {
	ctx := context.Background()
	t.Run("trailers", func(t *testing.T) {
		got := make(chan http.Header, 1)
		store := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			got <- r.Trailer
		}))
		defer store.Close()
		endpoint, _ := url.Parse(store.URL)
		s := &resign.Signer{Endpoint: endpoint, Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("store", "store-secret", "")}
		in := workerPut(t, "http://proxy.internal:8080/bkt/k", "body")
		// A chunked request, as one with trailers arrives.
		in.Body, in.ContentLength = io.NopCloser(strings.NewReader("body")), -1
		in.Trailer = http.Header{"X-Amz-Acl": {"public-read"}, "X-Amz-Meta-Evil": {"1"}}
		out := in.Clone(ctx)
		if err := s.Rewrite(ctx, out, resign.Request{Bucket: "bkt", Key: "k", SignedHeaders: []string{"host"}, PayloadHash: in.Header.Get("X-Amz-Content-Sha256")}); err != nil {
			t.Fatal(err)
		}
		if status, body := sendTo(t, endpoint.Host, out); status != http.StatusOK {
			t.Fatalf("%d %s", status, body)
		}
		if tr := <-got; len(tr) > 0 {
			t.Errorf("the store received the trailers %v, which nobody signed", tr)
		}
	})

	t.Run("content-encoding", func(t *testing.T) {
		backend := s3backend.Start(t)
		backend.CreateBucket(t, "bkt")
		s, addr := storeSigner(backend)
		for _, c := range []struct {
			sent, signed, want string // want: the stored Content-Encoding
		}{
			{"gzip", "", ""},
			{"gzip", "content-encoding", "gzip"},
			// aws-chunked is framing of a streaming payload only; on a hex
			// payload hash it was forwarded, signed by the proxy and stored.
			{"gzip, aws-chunked", "", ""},
			{"aws-chunked", "", ""},
		} {
			in := workerPut(t, "http://proxy.internal:8080/bkt/k", "body")
			in.Header.Set("Content-Encoding", c.sent)
			signed := []string{"host"}
			if c.signed != "" {
				signed = append(signed, c.signed)
			}
			out := in.Clone(ctx)
			if err := s.Rewrite(ctx, out, resign.Request{Bucket: "bkt", Key: "ce", SignedHeaders: signed, PayloadHash: in.Header.Get("X-Amz-Content-Sha256")}); err != nil {
				t.Fatal(err)
			}
			if status, body := sendTo(t, addr, out); status != http.StatusOK {
				t.Fatalf("%d %s", status, body)
			}
			head, err := backend.Client().HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("bkt"), Key: aws.String("ce")})
			if err != nil {
				t.Fatal(err)
			}
			if got := aws.ToString(head.ContentEncoding); got != c.want {
				t.Errorf("Content-Encoding %q sent, signed %v: stored %q, want %q", c.sent, c.signed != "", got, c.want)
			}
		}

		// The aws-chunked coding is framing: forwarded unsigned, the rest of
		// the list not.
		s.Endpoint, _ = url.Parse("http://store.invalid")
		in := workerPut(t, "http://proxy.internal:8080/bkt/k", "body")
		in.Header.Set("Content-Encoding", "gzip, aws-chunked")
		out := in.Clone(ctx)
		if err := s.Rewrite(ctx, out, resign.Request{Bucket: "bkt", Key: "k", SignedHeaders: []string{"host"}, PayloadHash: "STREAMING-UNSIGNED-PAYLOAD-TRAILER"}); err != nil {
			t.Fatal(err)
		}
		if got := out.Header.Values("Content-Encoding"); len(got) != 1 || got[0] != "aws-chunked" {
			t.Errorf("unsigned Content-Encoding gzip, aws-chunked: forwarded %q, want aws-chunked", got)
		}
	})
}
