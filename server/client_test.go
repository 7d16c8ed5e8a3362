package server_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/fenceproxy/fenceproxy/client"
	"github.com/fenceproxy/fenceproxy/internal/servertest"
)

// clBackendRequest is one request as the recording backend saw it.
type clBackendRequest struct {
	Method, Path, Token, Body string
}

// clBackend records every request; paths under /conflict/ get the backend's
// own 409 (no Fencing-Refused), all others 200.
type clBackend struct {
	srv  *httptest.Server
	mu   sync.Mutex
	reqs []clBackendRequest
}

func clStartBackend(t *testing.T) *clBackend {
	t.Helper()
	b := &clBackend{}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		b.mu.Lock()
		b.reqs = append(b.reqs, clBackendRequest{r.Method, r.URL.Path, r.Header.Get("X-Fencing-Token"), string(body)})
		b.mu.Unlock()
		if strings.HasPrefix(r.URL.Path, "/conflict/") {
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusConflict)
			io.WriteString(w, "backend's own conflict")
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(b.srv.Close)
	return b
}

func (b *clBackend) requests() []clBackendRequest {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]clBackendRequest(nil), b.reqs...)
}

// clPut sends PUT url with body through hc, with ctx's token (client.WithToken).
func clPut(ctx context.Context, t *testing.T, hc *http.Client, url, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("PUT %s: %v", url, err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func TestClientTransportAndCheckResponse(t *testing.T) {
	backend := clStartBackend(t)
	in := servertest.Start(t, map[string]string{
		"FENCEPROXY_UPSTREAM": backend.srv.URL,
		"FENCEPROXY_DATA_DIR": t.TempDir(),
	})
	hc := &http.Client{Transport: &client.Transport{Base: &http.Transport{Proxy: nil}}}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	obj := in.ProxyURL() + "/bkt/report.txt"

	// The holder writes with 41, a new holder takes over with 42.
	for _, w := range []struct {
		token uint64
		body  string
	}{{41, "from 41"}, {42, "from 42"}} {
		resp := clPut(client.WithToken(ctx, w.token), t, hc, obj, w.body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("PUT with token %d: status %d, want 200", w.token, resp.StatusCode)
		}
		if err := client.CheckResponse(resp); err != nil {
			t.Errorf("PUT with token %d: CheckResponse = %v, want nil", w.token, err)
		}
	}

	// The old holder wakes up: the proxy refuses it.
	resp := clPut(client.WithToken(ctx, 41), t, hc, obj, "late from 41")
	err := client.CheckResponse(resp)
	var stale *client.StaleError
	if !errors.As(err, &stale) {
		t.Fatalf("late PUT with 41: status %d, CheckResponse = %v (%T), want *StaleError", resp.StatusCode, err, err)
	}
	if stale.Current != 42 || stale.Token != 41 || stale.Resource != "bkt/report.txt" {
		t.Errorf("StaleError %+v, want Resource bkt/report.txt, Token 41, Current 42", *stale)
	}
	if !errors.Is(err, client.ErrStale) || !errors.Is(err, client.ErrRefused) {
		t.Errorf("errors.Is(%v, ErrStale/ErrRefused) = false", err)
	}
	if got, ok := client.AsStale(err); !ok || got != stale {
		t.Errorf("AsStale(CheckResponse error) = %v, %v", got, ok)
	}
	t.Logf("stale refusal: %v", err)

	// The backend's own 409 is passed on and is not a proxy refusal; its body
	// is left unread for the caller.
	resp = clPut(client.WithToken(ctx, 1), t, hc, in.ProxyURL()+"/conflict/x", "x")
	if resp.StatusCode != http.StatusConflict {
		t.Fatalf("PUT /conflict/x: status %d, want the backend's 409", resp.StatusCode)
	}
	if err := client.CheckResponse(resp); err != nil {
		t.Errorf("backend's own 409: CheckResponse = %v, want nil", err)
	}
	if _, ok := client.AsStale(client.CheckResponse(resp)); ok {
		t.Errorf("backend's own 409 reported as stale")
	}
	if body, _ := io.ReadAll(resp.Body); string(body) != "backend's own conflict" {
		t.Errorf("backend's 409 body after CheckResponse: %q", body)
	}

	// No token in the context: the request goes without one and the proxy
	// refuses it (428), a refusal that is not stale.
	resp = clPut(ctx, t, hc, obj, "no token")
	err = client.CheckResponse(resp)
	var refused *client.RefusedError
	if !errors.As(err, &refused) || refused.Status != http.StatusPreconditionRequired || refused.Reason != "missing" || refused.Detail == "" {
		t.Errorf("PUT without token: CheckResponse = %#v, want *RefusedError 428 missing with detail", err)
	}
	if errors.Is(err, client.ErrStale) || !errors.Is(err, client.ErrRefused) {
		t.Errorf("428 refusal: errors.Is ErrStale/ErrRefused wrong for %v", err)
	}

	// A token function that fails stops the request before it is sent; a
	// custom header name is used when set.
	boom := errors.New("no lease")
	failing := &http.Client{Transport: &client.Transport{Token: func(*http.Request) (uint64, error) { return 0, boom }}}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, obj, strings.NewReader("never"))
	if resp, err := failing.Do(req); !errors.Is(err, boom) {
		if resp != nil {
			resp.Body.Close()
		}
		t.Errorf("PUT with a failing token function: err = %v, want it to wrap %v", err, boom)
	}

	want := []clBackendRequest{
		{http.MethodPut, "/bkt/report.txt", "41", "from 41"},
		{http.MethodPut, "/bkt/report.txt", "42", "from 42"},
		{http.MethodPut, "/conflict/x", "1", "x"},
	}
	got := backend.requests()
	if len(got) != len(want) {
		t.Fatalf("backend got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("backend request %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

// clS3Client is an S3 client pointed at the proxy; opts add the fencing.
func clS3Client(endpoint string, opts ...func(*s3.Options)) *s3.Client {
	hc := &http.Client{Transport: &http.Transport{Proxy: nil, DisableCompression: true}}
	return s3.New(s3TestOptions(endpoint, hc), opts...)
}

// clHeaderOnly sets X-Fencing-Token from client.WithToken without the
// refusal middleware: AsStale must then dig through the SDK's response error.
func clHeaderOnly(stack *middleware.Stack) error {
	return stack.Build.Add(middleware.BuildMiddlewareFunc("clHeaderOnly",
		func(ctx context.Context, in middleware.BuildInput, next middleware.BuildHandler) (middleware.BuildOutput, middleware.Metadata, error) {
			if tok, ok := client.TokenFromContext(ctx); ok {
				in.Request.(*smithyhttp.Request).Header.Set("X-Fencing-Token", strconv.FormatUint(tok, 10))
			}
			return next.HandleBuild(ctx, in)
		}), middleware.After)
}

func TestClientS3Fencing(t *testing.T) {
	const bucket, key = "jobs", "reports/client.txt"
	_, upstream := startS3Gofakes3(t, bucket)
	in := servertest.Start(t, map[string]string{
		"FENCEPROXY_UPSTREAM": upstream,
		"FENCEPROXY_DATA_DIR": t.TempDir(),
	})
	fenced := clS3Client(in.ProxyURL(), client.S3Fencing(client.ContextToken))
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	put := func(c *s3.Client, token uint64, body string) error {
		_, err := c.PutObject(client.WithToken(ctx, token), &s3.PutObjectInput{
			Bucket: aws.String(bucket), Key: aws.String(key), Body: strings.NewReader(body),
		})
		return err
	}
	if err := put(fenced, 41, "from 41"); err != nil {
		t.Fatalf("PutObject with 41: %v", err)
	}
	if err := put(fenced, 42, "from 42"); err != nil {
		t.Fatalf("PutObject with 42: %v", err)
	}
	err := put(fenced, 41, "late from 41")
	if err == nil {
		t.Fatal("late PutObject with 41 succeeded")
	}
	t.Logf("late PutObject: %v", err)
	stale, ok := client.AsStale(err)
	if !ok {
		t.Fatalf("AsStale(%v) = false", err)
	}
	if stale.Current != 42 || stale.Token != 41 || stale.Resource != bucket+"/"+key {
		t.Errorf("StaleError %+v, want Resource %s/%s, Token 41, Current 42", *stale, bucket, key)
	}
	if !errors.Is(err, client.ErrStale) {
		t.Errorf("errors.Is(err, ErrStale) = false for %v", err)
	}
	// The SDK's own response error is still in the chain.
	var re *awshttp.ResponseError
	if !errors.As(err, &re) || re.HTTPStatusCode() != http.StatusConflict || re.Response.Header.Get("Fencing-Current-Token") != "42" {
		t.Errorf("late PutObject: no *awshttp.ResponseError 409 with Fencing-Current-Token 42 in %v", err)
	}
	// A call without a token in its context carries no header: the proxy refuses it as missing.
	_, err = fenced.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: strings.NewReader("x")})
	var refused *client.RefusedError
	if !errors.As(err, &refused) || refused.Status != http.StatusPreconditionRequired || refused.Reason != "missing" {
		t.Errorf("PutObject without token: %v, want *RefusedError 428 missing", err)
	}
	if _, ok := client.AsStale(err); ok {
		t.Errorf("AsStale of a 428 refusal = true")
	}
	// Reads are untouched and see the new holder's data.
	if got := s3GetObject(ctx, t, fenced, bucket, key); got != "from 42" {
		t.Errorf("object holds %q, want \"from 42\"", got)
	}

	// An S3 client that only sets the header: AsStale reads the SDK's
	// response error (headers and the sent request).
	plain := clS3Client(in.ProxyURL(), func(o *s3.Options) { o.APIOptions = append(o.APIOptions, clHeaderOnly) })
	err = put(plain, 40, "late from 40")
	stale, ok = client.AsStale(err)
	if !ok || stale.Current != 42 || stale.Token != 40 {
		t.Errorf("AsStale(%v) = %+v, %v; want Token 40, Current 42", err, stale, ok)
	}
	if got := s3GetObject(ctx, t, plain, bucket, key); got != "from 42" {
		t.Errorf("object holds %q, want \"from 42\"", got)
	}
}

func TestClientLeases(t *testing.T) {
	backend := clStartBackend(t)
	in := servertest.Start(t, map[string]string{
		"FENCEPROXY_UPSTREAM":      backend.srv.URL,
		"FENCEPROXY_DATA_DIR":      t.TempDir(),
		"FENCEPROXY_LEASE_MIN_TTL": "50ms",
		"FENCEPROXY_LEASE_TOKEN":   "lease-secret",
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const name = "bkt/leased/obj"
	leases := &client.Leases{BaseURL: in.ControlURL(), Bearer: "lease-secret"}

	// Without the bearer the call is refused with the API's 401.
	var apiErr *client.APIError
	if _, err := (&client.Leases{BaseURL: in.ControlURL()}).Acquire(ctx, name, "A", time.Second); !errors.As(err, &apiErr) || apiErr.Status != http.StatusUnauthorized {
		t.Errorf("acquire without bearer: %v, want *APIError 401", err)
	}
	if _, err := leases.Get(ctx, name); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("Get before any acquire: %v, want ErrNotFound", err)
	}

	const ttl = 300 * time.Millisecond
	a, err := leases.Acquire(ctx, name, "A", ttl)
	if err != nil {
		t.Fatalf("acquire A: %v", err)
	}
	if a.Name != name || a.Holder != "A" || a.Token == 0 || a.TTL != ttl || a.State != "held" || !a.ExpiresAt.After(time.Now().Add(-time.Second)) {
		t.Errorf("acquire A: %+v", a)
	}
	// A writes with its token through the proxy.
	hc := &http.Client{Transport: &client.Transport{Token: func(*http.Request) (uint64, error) { return a.Token, nil }}}
	if resp := clPut(ctx, t, hc, in.ProxyURL()+"/"+name, "from A"); resp.StatusCode != http.StatusOK || client.CheckResponse(resp) != nil {
		t.Fatalf("A's write: status %d", resp.StatusCode)
	}

	renewed, err := leases.Renew(ctx, name, "A", a.Token)
	if err != nil {
		t.Fatalf("renew A: %v", err)
	}
	if renewed.Token != a.Token || renewed.ExpiresAt.Before(a.ExpiresAt) {
		t.Errorf("renew A: %+v after %+v: want the same token and no earlier expiry", renewed, a)
	}

	// B is refused while A holds the lease.
	_, err = leases.Acquire(ctx, name, "B", ttl)
	var held *client.HeldError
	if !errors.As(err, &held) || !errors.Is(err, client.ErrHeld) {
		t.Fatalf("acquire B while A holds: %v, want *HeldError", err)
	}
	if held.Holder != "A" || held.ExpiresAt.IsZero() || held.GraceEnds.Before(held.ExpiresAt) {
		t.Errorf("HeldError %+v: want holder A with expiry and grace end", *held)
	}
	if got, err := leases.Get(ctx, name); err != nil || got.Holder != "A" || got.Token != a.Token {
		t.Errorf("Get while A holds: %+v, %v", got, err)
	}

	// A stops renewing; after its TTL and grace, B takes over.
	// The lease ends on the server's clock, which signals no event: retry.
	var b client.Lease
	servertest.Eventually(t, 10*time.Second, "B acquires after A's expiry", func() bool {
		b, err = leases.Acquire(ctx, name, "B", ttl)
		if err != nil && !errors.Is(err, client.ErrHeld) {
			t.Fatalf("acquire B after A's expiry: %v", err)
		}
		return err == nil
	})
	if b.Holder != "B" || b.Token <= a.Token {
		t.Fatalf("acquire B: %+v, want a token above A's %d", b, a.Token)
	}

	// A has lost the lease: its renew fails, and its write is stale at once
	// (the acquire raised the fence), before B has written anything.
	if _, err := leases.Renew(ctx, name, "A", a.Token); !errors.Is(err, client.ErrLost) {
		t.Errorf("renew A after takeover: %v, want ErrLost", err)
	} else if !errors.As(err, &apiErr) || apiErr.Status != http.StatusConflict {
		t.Errorf("renew A after takeover: %v does not wrap the API's 409", err)
	}
	resp := clPut(ctx, t, hc, in.ProxyURL()+"/"+name, "late from A")
	if stale, ok := client.AsStale(client.CheckResponse(resp)); !ok || stale.Current != b.Token || stale.Token != a.Token {
		t.Errorf("A's late write: status %d, stale %+v %v; want Current %d", resp.StatusCode, stale, ok, b.Token)
	}

	released, err := leases.Release(ctx, name, "B", b.Token)
	if err != nil || released.State != "released" {
		t.Fatalf("release B: %+v, %v", released, err)
	}
	if _, err := leases.Release(ctx, name, "B", b.Token); !errors.Is(err, client.ErrLost) {
		t.Errorf("release B twice: %v, want ErrLost", err)
	}
	if got, err := leases.Get(ctx, name); err != nil || got.State != "released" || got.Token != b.Token {
		t.Errorf("Get after release: %+v, %v", got, err)
	}
	// After the release, anyone may acquire at once, with a larger token.
	c, err := leases.Acquire(ctx, name, "C", time.Second)
	if err != nil || c.Token <= b.Token {
		t.Errorf("acquire C after release: %+v, %v", c, err)
	}

	for _, r := range backend.requests() {
		if r.Body == "late from A" {
			t.Errorf("A's late write reached the backend: %+v", r)
		}
	}
}
