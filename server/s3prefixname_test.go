package server_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/middleware"

	"github.com/fenceproxy/fenceproxy/client"
	"github.com/fenceproxy/fenceproxy/internal/s3backend"
	"github.com/fenceproxy/fenceproxy/internal/servertest"
)

const s3nAdmin = "s3n-adm1n"

// s3nWrite sends PUT path (as written) to the proxy at endpoint with token
// and the headers given in pairs; it returns the status, Fencing-Refused,
// Fencing-Current-Token and the body.
func s3nWrite(t *testing.T, endpoint, path, token string, header ...string) (status int, refused, current, body string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, endpoint+path, strings.NewReader("from "+token))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Fencing-Token", token)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("PUT %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Fencing-Refused"), resp.Header.Get("Fencing-Current-Token"), string(b)
}

// s3nStale checks that token's PUT of path is the proxy's 409 at current,
// naming the fence name in its S3 error message.
func s3nStale(t *testing.T, endpoint, path, token, current, name string) {
	t.Helper()
	status, refused, cur, body := s3nWrite(t, endpoint, path, token)
	if status != http.StatusConflict || refused != "stale" || cur != current || !strings.Contains(body, "resource &#34;"+name+"&#34;") {
		t.Errorf("PUT %s with %s: %d %q current %q %s; want 409 stale at %s naming %q", path, token, status, refused, cur, body, current, name)
	}
}

// TestS3NamesMapToWrites: in S3 mode a fence, lease or X-Fencing-Prefix name
// is read with the writes' rules: the part after the bucket in its alias
// class. So an admin raise or a lease spelt with a run of "/" (raw or
// %2F%2F), a "\" (%5C) or a leading "/" after the bucket is the fence that
// the writes of those keys meet, and its answer names that fence; a name
// that maps to no write's resource is 400 naming the spelling to use.
//
// Before, each such name was a fence of its own ("demo/a//", "demo/c\\d/",
// "demo/f//g") that no write is ever resolved to: the writes below them
// with smaller tokens were applied (200), and X-Fencing-Prefix "demo/i//"
// was refused as not above its own key.
func TestS3NamesMapToWrites(t *testing.T) {
	in, ep := startS3ErrorsProxy(t, "pass", map[string]string{"FENCEPROXY_ADMIN_TOKEN": s3nAdmin})
	ctl := in.ControlURL()

	// Admin raises in four spellings, each then refusing 5 below it.
	for _, c := range []struct{ spelt, fence, write string }{
		{"demo/a//", "demo/a/", "/demo/a/x"},
		{"demo/b%2F%2F", "demo/b/", "/demo/b/x"},
		{"demo/c%5Cd/", "demo/c/d/", "/demo/c%5Cd/x"},
		{"demo//e/", "demo/e/", "/demo/e/x"},
		{"demo/o//p", "demo/o/p", "/demo/o//p"},
	} {
		status, out := servertest.Call(t, http.MethodPut, ctl+"/v1/fences/"+c.spelt, `{"token":10}`, s3nAdmin)
		if status != http.StatusOK || out["resource"] != c.fence || out["token"] != "10" {
			t.Errorf("admin raise of %s to 10: %d %v; want 200 on %q", c.spelt, status, out, c.fence)
		}
		s3nStale(t, ep, c.write, "5", "10", c.fence)
		if status, out := servertest.Call(t, http.MethodGet, ctl+"/v1/fences/"+c.spelt, "", ""); status != http.StatusOK || out["resource"] != c.fence {
			t.Errorf("GET /v1/fences/%s: %d %v; want %q", c.spelt, status, out, c.fence)
		}
	}

	// A lease on an object spelt with "//": the fence of its writes.
	status, out := servertest.Call(t, http.MethodPost, ctl+"/v1/leases/demo/f//g", `{"holder":"A","ttl":"1h"}`, "")
	if status != http.StatusCreated || out["name"] != "demo/f/g" {
		t.Fatalf("acquire demo/f//g: %d %v; want 201 named demo/f/g", status, out)
	}
	s3nStale(t, ep, "/demo/f/g", "0", out["token"].(string), "demo/f/g")
	// A lease on a prefix spelt %2F%2F, renewed and released in that spelling.
	status, out = servertest.Call(t, http.MethodPost, ctl+"/v1/leases/demo/h%2F%2F", `{"holder":"A","ttl":"1h"}`, "")
	if status != http.StatusCreated || out["name"] != "demo/h/" {
		t.Fatalf("acquire demo/h%%2F%%2F: %d %v; want 201 named demo/h/", status, out)
	}
	tok := out["token"].(string)
	s3nStale(t, ep, "/demo/h/x", "0", tok, "demo/h/")
	if status, out := servertest.Call(t, http.MethodPut, ctl+"/v1/leases/demo/h//", `{"holder":"A","token":"`+tok+`"}`, ""); status != http.StatusOK {
		t.Errorf("renew demo/h//: %d %v", status, out)
	}

	// X-Fencing-Prefix spelt with "//" raises the prefix its write is below.
	if status, refused, _, body := s3nWrite(t, ep, "/demo/i/x", "3", "X-Fencing-Prefix", "demo/i//"); status != http.StatusOK {
		t.Errorf("PUT /demo/i/x with 3 and X-Fencing-Prefix demo/i//: %d %q %s", status, refused, body)
	}
	if status, out := servertest.Call(t, http.MethodGet, ctl+"/v1/fences/demo/i/", "", ""); status != http.StatusOK || out["token"] != "3" {
		t.Errorf("GET /v1/fences/demo/i/ after the write: %d %v; want 3", status, out)
	}

	// Names that map to no write's resource: 400, naming what to write.
	for _, c := range []struct{ spelt, want string }{
		{"/demo/x/", `as in \"demo/x/\"`},        // no write has an empty first segment
		{"demo/%5C", `name the bucket \"demo\"`}, // the key names the bucket to some stores
		{"de%20mo/x", `is in no bucket name`},    // no bucket has a space
		{"demo/a%5C..", `dot segment`},           // a "\" that makes a dot segment
	} {
		req, _ := http.NewRequest(http.MethodPut, ctl+"/v1/fences/"+c.spelt, strings.NewReader(`{"token":10}`))
		req.Header.Set("Authorization", "Bearer "+s3nAdmin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), `"reason":"bad_resource"`) || !strings.Contains(string(b), c.want) {
			t.Errorf("admin raise of %s: %d %s; want 400 bad_resource saying %s", c.spelt, resp.StatusCode, b, c.want)
		}
	}
	// A pool's prefix is the key's bytes, never mapped: "//" is refused (it
	// was before this change too).
	if status, out := servertest.Call(t, http.MethodPut, ctl+"/v1/pools/demo", `{"shards":2,"prefix":"demo/k//{shard}/"}`, ""); status != http.StatusBadRequest {
		t.Errorf("a pool with the prefix demo/k//{shard}/: %d %v; want 400", status, out)
	}
	status, out = servertest.Call(t, http.MethodGet, ctl+"/v1/fences?prefix=demo", "", s3nAdmin)
	if status != http.StatusOK {
		t.Fatalf("GET /v1/fences?prefix=demo: %d %v", status, out)
	}
	for _, f := range out["fences"].([]any) {
		if r := f.(map[string]any)["resource"].(string); strings.Contains(r, "//") || strings.Contains(r, `\`) {
			t.Errorf("a fence %q that no write resolves to", r)
		}
	}
}

// TestS3SignedPrefixDirectoryMarker: in S3 signed-token mode the holder of
// the lease on demo/out/part-7/ writes the directory marker out/part-7/
// (whose resource is demo/out/part-7, covered by the prefix fence in S3
// mode) with its own token and signature, also spelt out/part-7 and with
// X-Fencing-Prefix naming its prefix; a key beside the prefix stays 403.
//
// Before, the signature of the prefix fence signed only the keys strictly
// below it: the marker was 403 signature, and with X-Fencing-Prefix 400.
func TestS3SignedPrefixDirectoryMarker(t *testing.T) {
	keyText, _ := sgKey(t)
	in, ep := startS3ErrorsProxy(t, "pass", map[string]string{"FENCEPROXY_TOKEN_KEY": keyText})
	l := sgAcquire(t, in, "demo/out/part-7/", "A")
	for _, w := range []struct {
		path   string
		header []string
	}{
		{"/demo/out/part-7/", nil},
		{"/demo/out/part-7", nil},
		{"/demo/out/part-7/f", nil},
		{"/demo/out/part-7/", []string{"X-Fencing-Prefix", "demo/out/part-7/"}},
	} {
		h := append([]string{"X-Fencing-Token-Signature", l.sig}, w.header...)
		if status, refused, _, body := s3nWrite(t, ep, w.path, l.token, h...); status != http.StatusOK {
			t.Errorf("the holder's PUT %s %v with its token %s and signature: %d %q %s; want 200", w.path, w.header, l.token, status, refused, body)
		}
	}
	if status, refused, _, _ := s3nWrite(t, ep, "/demo/out/part-70", l.token, "X-Fencing-Token-Signature", l.sig); status != http.StatusForbidden || refused != "signature" {
		t.Errorf("PUT /demo/out/part-70 (beside the prefix) with its signature: %d %q; want 403 signature", status, refused)
	}
}

// TestS3SignedPrefixDirectoryMarkerVersitygw: the same holder's directory
// marker through the proxy, signed with SigV4, lands at versitygw (read
// directly), which verifies every signature; before, it was 403 signature
// and versitygw had no marker.
func TestS3SignedPrefixDirectoryMarkerVersitygw(t *testing.T) {
	backend := s3backend.Start(t)
	backend.CreateBucket(t, s3pBucket)
	keyText, _ := sgKey(t)
	in := servertest.Start(t, map[string]string{"FENCEPROXY_UPSTREAM": backend.URL, "FENCEPROXY_DATA_DIR": t.TempDir(),
		"FENCEPROXY_S3": "pass", "FENCEPROXY_S3_DOMAINS": "127.0.0.1", "FENCEPROXY_TOKEN_KEY": keyText})
	l := sgAcquire(t, in, s3pFence, "A")
	r := s3pRaw(t, backend, in.ProxyURL(), http.MethodPut, "/"+s3pFence, servertest.MustUint(t, l.token), "",
		map[string]string{"X-Fencing-Token-Signature": l.sig})
	if r.status != http.StatusOK {
		t.Fatalf("the holder's PUT of the marker /%s with its signed token: %d %q %s; want 200", s3pFence, r.status, r.refused, r.body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, found := s3pObject(ctx, t, backend.Client(), s3pPrefix); !found {
		t.Errorf("versitygw has no marker %s after the holder's PUT", s3pPrefix)
	}
}

// TestS3StaleErrorNamesFence: the Go client's *StaleError names the fence
// that refused an S3 write, a prefix fence above its key included, through
// S3Fencing (the <Error> body), through a plain SDK client whose error
// AsStale digs out (the body consumed), and through CheckResponse; a name
// with bytes a header cannot carry as they are comes back decoded.
//
// Before, S3 mode's answer named the fence only in its message: Resource
// was "" in all three.
func TestS3StaleErrorNamesFence(t *testing.T) {
	in, ep := startS3ErrorsProxy(t, "pass", map[string]string{"FENCEPROXY_ADMIN_TOKEN": s3nAdmin})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctl := &client.Control{BaseURL: in.ControlURL(), AdminBearer: s3nAdmin}
	for _, name := range []string{"demo/out/part-7/", "demo/n ä/x"} {
		if _, err := ctl.RaiseFence(ctx, name, 2); err != nil {
			t.Fatalf("raise %s: %v", name, err)
		}
	}
	fenced := s3HostClient(ep, in.Proxy, true)
	o := fenced.Options()
	o.APIOptions = []func(*middleware.Stack) error{client.StackFencing("", nil)}
	withClient := s3.New(o)
	for _, c := range []struct{ key, fence string }{{"out/part-7/x", "demo/out/part-7/"}, {"n ä/x", "demo/n ä/x"}} {
		put := func(sc *s3.Client, ctx context.Context) error {
			_, err := sc.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("demo"), Key: aws.String(c.key), Body: strings.NewReader("late")})
			return err
		}
		check := func(how string, err error) {
			t.Helper()
			se, ok := client.AsStale(err)
			if !ok || se.Resource != c.fence || se.Current != 2 || se.Token != 1 {
				t.Errorf("%s: PutObject %s with 1: AsStale %+v %v (%v); want the fence %q at 2", how, c.key, se, ok, err, c.fence)
			}
		}
		err := put(withClient, client.WithToken(ctx, 1))
		var se *client.StaleError
		if !errors.As(err, &se) {
			t.Errorf("S3Fencing: PutObject %s with 1: %v; want a *client.StaleError", c.key, err)
		}
		check("S3Fencing", err)
		check("plain SDK", put(fenced, s3WithFencingToken(ctx, 1)))
	}
	status, _, _, _ := s3nWrite(t, ep, "/demo/out/part-7/y", "1")
	if status != http.StatusConflict {
		t.Fatalf("raw PUT with 1: %d", status)
	}
	req, _ := http.NewRequest(http.MethodPut, ep+"/demo/out/part-7/y", strings.NewReader("late"))
	req.Header.Set("X-Fencing-Token", "1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	se, ok := client.AsStale(client.CheckResponse(resp))
	resp.Body.Close()
	if !ok || se.Resource != "demo/out/part-7/" || !strings.Contains(se.Error(), `"demo/out/part-7/"`) {
		t.Errorf("CheckResponse of a raw stale PUT: %+v %v; want the fence demo/out/part-7/", se, ok)
	}
}
