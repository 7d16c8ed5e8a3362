package server_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/middleware"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/fenceproxy/fenceproxy/internal/servertest"
)

// s3HostClient returns an S3 client for endpoint (http://{domain}:{port})
// whose connections all go to addr, so that virtual-hosted names such as
// demo.localhost reach the proxy without DNS; pathStyle picks the style.
func s3HostClient(endpoint, addr string, pathStyle bool) *s3.Client {
	dial := func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	o := s3TestOptions(endpoint, &http.Client{Transport: &http.Transport{DialContext: dial, DisableCompression: true}})
	o.UsePathStyle = pathStyle
	o.APIOptions = []func(*middleware.Stack) error{s3AddFencingTokenHeader}
	return s3.New(o)
}

// TestS3PassOneResourcePerObject: with FENCEPROXY_S3=pass, an object has one
// resource key whether a client reaches it in virtual-hosted or path style,
// so the bypass (42 through demo.localhost, then 41 through
// localhost/demo) is refused; a Host that is no S3 domain of the proxy is
// refused and nothing is forwarded. In off mode the same two writes are two
// resources, which is the bypass this mode closes.
func TestS3PassOneResourcePerObject(t *testing.T) {
	backend := s3mem.New()
	if err := backend.CreateBucket("demo"); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var forwarded []string
	seen := func() []string { mu.Lock(); defer mu.Unlock(); return slices.Clone(forwarded) }
	fake := gofakes3.New(backend, gofakes3.WithHostBucketBase("localhost")).Server()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		forwarded = append(forwarded, r.Method+" "+r.Host+r.URL.Path)
		mu.Unlock()
		if h, _, err := net.SplitHostPort(r.Host); err == nil {
			r.Host = h // gofakes3 matches virtual hosts without the port
		}
		fake.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)

	for _, mode := range []string{"pass", "off"} {
		t.Run(mode, func(t *testing.T) {
			env := map[string]string{"FENCEPROXY_UPSTREAM": srv.URL, "FENCEPROXY_DATA_DIR": t.TempDir(), "FENCEPROXY_S3": mode}
			if mode == "pass" {
				env["FENCEPROXY_S3_DOMAINS"] = "localhost"
			}
			in := servertest.Start(t, env)
			_, port, _ := net.SplitHostPort(in.Proxy)
			endpoint := "http://localhost:" + port
			vhost, path := s3HostClient(endpoint, in.Proxy, false), s3HostClient(endpoint, in.Proxy, true)
			ctx := context.Background()
			key := "vh/x-" + mode

			if _, err := vhost.PutObject(s3WithFencingToken(ctx, 42), &s3.PutObjectInput{Bucket: aws.String("demo"), Key: aws.String(key), Body: strings.NewReader("from 42")}); err != nil {
				t.Fatalf("virtual-hosted PUT with 42: %v", err)
			}
			_, err := path.PutObject(s3WithFencingToken(ctx, 41), &s3.PutObjectInput{Bucket: aws.String("demo"), Key: aws.String(key), Body: strings.NewReader("from 41")})
			if mode == "off" {
				// The bypass: another resource key for the same object.
				if err != nil {
					t.Fatalf("off mode, path-style PUT with 41: %v; the test no longer shows the bypass", err)
				}
				if tok, _ := s3FenceOf(t, in, key); tok != "42" {
					t.Errorf("off mode: fence of %s = %q, want 42 (the virtual-hosted write's path)", key, tok)
				}
				return
			}
			s3AssertStaleRefusal(t, err, "42")
			if got := s3GetObject(s3WithFencingToken(ctx, 42), t, vhost, "demo", key); got != "from 42" {
				t.Errorf("object holds %q, want from 42", got)
			}
			if tok, _ := s3FenceOf(t, in, "demo/"+key); tok != "42" {
				t.Errorf("fence of demo/%s = %q, want 42", key, tok)
			}

			// A Host the proxy does not serve: 400, nothing forwarded.
			before := len(seen())
			for _, host := range []string{"other.example", "ab.localhost", "127.0.0.1:" + port} {
				req, _ := http.NewRequest(http.MethodGet, in.ProxyURL()+"/demo/"+key, nil)
				req.Host = host
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Fencing-Refused") != "bad_resource" {
					t.Errorf("GET with Host %q: %d %q, want 400 bad_resource", host, resp.StatusCode, resp.Header.Get("Fencing-Refused"))
				}
			}
			if after := seen(); len(after) != before {
				t.Errorf("requests with unknown hosts were forwarded: %q", after[before:])
			}
		})
	}
}
