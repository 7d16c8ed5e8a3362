package server_test

import (
	"context"
	"crypto/md5"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/fenceproxy/fenceproxy/client"
	"github.com/fenceproxy/fenceproxy/internal/s3backend"
	"github.com/fenceproxy/fenceproxy/internal/servertest"
)

// s3Pass is versitygw (virtual-hosted style on for the domain localhost)
// behind a whole fenceproxy in pass mode whose S3 domain is localhost.
type s3Pass struct {
	backend  *s3backend.Server
	in       *servertest.Instance
	endpoint string // http://localhost:PORT, the proxy
	// In gateway mode (TestS3GatewayRealSDK): the worker's proxy key the
	// clients sign with instead of the backend's, and the TLS configuration
	// trusting the proxy (endpoint is https://localhost:PORT).
	worker aws.CredentialsProvider
	tls    *tls.Config
}

// startS3Pass starts versitygw with buckets and fenceproxy (FENCEPROXY_S3=pass,
// S3_DOMAINS=localhost, with extra settings) in front of it.
func startS3Pass(t *testing.T, extra map[string]string, buckets ...string) *s3Pass {
	t.Helper()
	backend := s3backend.StartVirtualHosted(t, "localhost")
	for _, b := range buckets {
		backend.CreateBucket(t, b)
	}
	env := map[string]string{"FENCEPROXY_UPSTREAM": backend.URL, "FENCEPROXY_DATA_DIR": t.TempDir(),
		"FENCEPROXY_S3": "pass", "FENCEPROXY_S3_DOMAINS": "localhost"}
	maps.Copy(env, extra)
	in := servertest.Start(t, env)
	_, port, _ := net.SplitHostPort(in.Proxy)
	return &s3Pass{backend: backend, in: in, endpoint: "http://localhost:" + port}
}

// client returns an aws-sdk-go-v2 client of the proxy that signs with the
// backend's credentials (the worker's proxy key in gateway mode) for the
// proxy's host names and sends the token of client.WithToken
// (client.S3Fencing), in path or virtual-hosted style
// ({bucket}.localhost:PORT): its connections all go to the proxy, so no name
// needs DNS.
func (p *s3Pass) client(pathStyle bool, opts ...func(*s3.Options)) *s3.Client {
	o := p.backend.Options(p.endpoint)
	o.UsePathStyle = pathStyle
	o.HTTPClient = p.dialClient()
	if p.worker != nil {
		o.Credentials = p.worker
	}
	return s3.New(o, append([]func(*s3.Options){client.S3Fencing(client.ContextToken)}, opts...)...)
}

// objects returns the keys and contents of bucket, read from versitygw
// directly.
func (p *s3Pass) objects(ctx context.Context, t *testing.T, bucket string) map[string]string {
	t.Helper()
	c := p.backend.Client()
	out, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	if err != nil {
		t.Fatalf("versitygw: ListObjectsV2 %s: %v", bucket, err)
	}
	got := map[string]string{}
	for _, o := range out.Contents {
		got[aws.ToString(o.Key)] = s3GetObject(ctx, t, c, bucket, aws.ToString(o.Key))
	}
	return got
}

// s3WantCode fails t unless err is an HTTP answer with status whose S3
// error code, as the SDK reads it (smithy.APIError), is code.
func s3WantCode(t *testing.T, what string, err error, status int, code string) {
	t.Helper()
	var re *awshttp.ResponseError
	var ae smithy.APIError
	switch {
	case err == nil:
		t.Errorf("%s succeeded; want %d %s", what, status, code)
	case !errors.As(err, &re) || !errors.As(err, &ae):
		t.Errorf("%s: %T %v; want an SDK response error with an S3 code", what, err, err)
	case re.HTTPStatusCode() != status || ae.ErrorCode() != code:
		t.Errorf("%s: %d %s (%v); want %d %s", what, re.HTTPStatusCode(), ae.ErrorCode(), err, status, code)
	}
}

// s3Put is PutObject of body with token through c.
func s3Put(ctx context.Context, c *s3.Client, token uint64, bucket, key, body string) error {
	_, err := c.PutObject(client.WithToken(ctx, token), &s3.PutObjectInput{
		Bucket: aws.String(bucket), Key: aws.String(key), Body: strings.NewReader(body),
	})
	return err
}

// s3DeleteKeys is DeleteObjects of keys with token through c; an object
// the store could not delete is an error too.
func s3DeleteKeys(ctx context.Context, c *s3.Client, token uint64, bucket string, keys []string) error {
	objs := make([]s3types.ObjectIdentifier, len(keys))
	for i, k := range keys {
		objs[i] = s3types.ObjectIdentifier{Key: aws.String(k)}
	}
	out, err := c.DeleteObjects(client.WithToken(ctx, token), &s3.DeleteObjectsInput{
		Bucket: aws.String(bucket), Delete: &s3types.Delete{Objects: objs},
	})
	if err == nil && len(out.Errors) > 0 {
		err = errors.New(aws.ToString(out.Errors[0].Code) + " " + aws.ToString(out.Errors[0].Key))
	}
	return err
}

// TestS3PassRealSDK: aws-sdk-go-v2 with client.S3Fencing through a whole
// fenceproxy in pass mode to versitygw, which verifies every signature, in
// the flows a worker runs: the takeover (the S3 code in the SDK's error), a
// DeleteObjects batch, CopyObject, both addressing styles on one object, a
// presigned PUT with the token in its URL, a sync with deletions, and a
// bucket created before each of two jobs.
func TestS3PassRealSDK(t *testing.T) {
	testS3RealSDK(t, startS3Pass(t, nil, s3RealSDKBuckets...))
}

// s3RealSDKBuckets are the buckets testS3RealSDK needs at the store; it
// creates nightly itself.
var s3RealSDKBuckets = []string{"jobs", "batch", "copies", "styles", "uploads", "site"}

// TestS3GatewayRealSDK: TestS3PassRealSDK's flows through fenceproxy in
// gateway mode (resign) to versitygw over HTTPS, the SDK signing with the
// worker's proxy key only (granted every bucket the flows touch) and
// trusting the proxy's test CA.
func TestS3GatewayRealSDK(t *testing.T) {
	g := startGatewaySuite(t, append(slices.Clone(s3RealSDKBuckets), "nightly"), nil, s3RealSDKBuckets...)
	testS3RealSDK(t, &s3Pass{backend: g.backend, in: g.in, endpoint: g.endpoint,
		worker: credentials.NewStaticCredentialsProvider(gwSuiteKey, gwSuiteSecret, ""), tls: g.pool})
}

// testS3RealSDK runs the flows of TestS3PassRealSDK through p.
func testS3RealSDK(t *testing.T, p *s3Pass) {
	path, vhost := p.client(true), p.client(false)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()

	t.Run("takeover", func(t *testing.T) {
		if err := s3Put(ctx, path, 41, "jobs", "report.txt", "from A (41)"); err != nil {
			t.Fatalf("PutObject with 41: %v", err)
		}
		if err := s3Put(ctx, path, 42, "jobs", "report.txt", "from B (42)"); err != nil {
			t.Fatalf("PutObject with 42: %v", err)
		}
		err := s3Put(ctx, path, 41, "jobs", "report.txt", "late from A (41)")
		s3WantCode(t, "late PutObject with 41", err, http.StatusConflict, "StaleFencingToken")
		if se, ok := client.AsStale(err); !ok || se.Token != 41 || se.Current != 42 {
			t.Errorf("late PutObject with 41: AsStale %+v %v, want token 41, current 42", se, ok)
		}
		t.Logf("the SDK's error: %v", err)
		if got := p.objects(ctx, t, "jobs"); got["report.txt"] != "from B (42)" {
			t.Errorf("versitygw holds %q, want B's", got)
		}
	})

	t.Run("DeleteObjects", func(t *testing.T) {
		keys := []string{"a.txt", "b.txt", "sub/c.txt"}
		for _, k := range keys {
			if err := s3Put(ctx, path, 50, "batch", k, "from 50: "+k); err != nil {
				t.Fatalf("PutObject %s with 50: %v", k, err)
			}
		}
		if err := s3Put(ctx, path, 51, "batch", "b.txt", "from 51"); err != nil {
			t.Fatalf("PutObject b.txt with 51: %v", err)
		}
		// 50 is current for a.txt and sub/c.txt, stale for b.txt.
		s3WantCode(t, "DeleteObjects with 50", s3DeleteKeys(ctx, path, 50, "batch", keys), http.StatusConflict, "StaleFencingToken")
		if got := p.objects(ctx, t, "batch"); len(got) != 3 {
			t.Errorf("after the stale batch versitygw holds %v; want all three", slices.Sorted(maps.Keys(got)))
		}
		if err := s3DeleteKeys(ctx, path, 51, "batch", keys); err != nil {
			t.Fatalf("DeleteObjects with 51: %v", err)
		}
		if got := p.objects(ctx, t, "batch"); len(got) != 0 {
			t.Errorf("after the current batch versitygw holds %v; want none", slices.Sorted(maps.Keys(got)))
		}
	})

	t.Run("CopyObject", func(t *testing.T) {
		copyTo := func(token uint64, src, dst string) error {
			_, err := path.CopyObject(client.WithToken(ctx, token), &s3.CopyObjectInput{
				Bucket: aws.String("copies"), Key: aws.String(dst), CopySource: aws.String("copies/" + src),
			})
			return err
		}
		for _, w := range []struct {
			token     uint64
			key, body string
		}{{1, "staging/a.txt", "draft from A"}, {42, "final/report.txt", "from B (42)"}, {42, "staging/b.txt", "draft from B"}} {
			if err := s3Put(ctx, path, w.token, "copies", w.key, w.body); err != nil {
				t.Fatalf("PutObject %s with %d: %v", w.key, w.token, err)
			}
		}
		s3WantCode(t, "CopyObject with 41 onto B's report", copyTo(41, "staging/a.txt", "final/report.txt"), http.StatusConflict, "StaleFencingToken")
		if err := copyTo(42, "staging/b.txt", "final/report.txt"); err != nil {
			t.Fatalf("CopyObject with 42: %v", err)
		}
		want := map[string]string{"staging/a.txt": "draft from A", "staging/b.txt": "draft from B", "final/report.txt": "draft from B"}
		if got := p.objects(ctx, t, "copies"); !maps.Equal(got, want) {
			t.Errorf("versitygw holds %v, want %v", got, want)
		}
		// The sources were only read: their fences did not move.
		for src, want := range map[string]string{"copies/staging/a.txt": "1", "copies/staging/b.txt": "42"} {
			if tok, _ := s3FenceOf(t, p.in, src); tok != want {
				t.Errorf("fence of the source %s: %q, want %q", src, tok, want)
			}
		}
	})

	t.Run("addressing styles", func(t *testing.T) {
		// 42 in virtual-hosted style, then 41 in path style; then 43 in
		// path style and 42 in virtual-hosted style: the stale one refused
		// each time, because both styles name the resource styles/x.
		steps := []struct {
			c     *s3.Client
			style string
			token uint64
			stale bool
		}{{vhost, "virtual-hosted", 42, false}, {path, "path", 41, true}, {path, "path", 43, false}, {vhost, "virtual-hosted", 42, true}}
		for _, s := range steps {
			err := s3Put(ctx, s.c, s.token, "styles", "x", "from "+s.style+" "+strconv.FormatUint(s.token, 10))
			if s.stale {
				s3WantCode(t, s.style+" PutObject with a stale token", err, http.StatusConflict, "StaleFencingToken")
			} else if err != nil {
				t.Fatalf("%s PutObject with %d: %v", s.style, s.token, err)
			}
		}
		if got := p.objects(ctx, t, "styles"); !maps.Equal(got, map[string]string{"x": "from path 43"}) {
			t.Errorf("versitygw holds %v, want only x from the path-style write with 43", got)
		}
		for name, c := range map[string]*s3.Client{"path": path, "virtual-hosted": vhost} {
			if got := s3GetObject(ctx, t, c, "styles", "x"); got != "from path 43" {
				t.Errorf("GetObject in %s style: %q", name, got)
			}
		}
		if tok, _ := s3FenceOf(t, p.in, "styles/x"); tok != "43" {
			t.Errorf("fence of styles/x: %q, want 43", tok)
		}
	})

	t.Run("presigned PUT", func(t *testing.T) {
		presign := s3.NewPresignClient(p.client(true))
		upload := func(token uint64, body string) (*http.Response, []byte) {
			t.Helper()
			req, err := presign.PresignPutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("uploads"), Key: aws.String("in/file.bin")},
				s3.WithPresignExpires(15*time.Minute), s3.WithPresignClientFromClientOptions(s3QueryToken(token)))
			if err != nil {
				t.Fatalf("PresignPutObject: %v", err)
			}
			if !strings.Contains(req.URL, "X-Fencing-Token=") || strings.Contains(strings.ToLower(req.URL), "x-fencing-token%3b") {
				t.Fatalf("presigned URL %s: want the token in the query and not among the signed headers", req.URL)
			}
			// The uploader has the URL only: no header of its own.
			put, _ := http.NewRequest(http.MethodPut, req.URL, strings.NewReader(body))
			resp, err := p.dialClient().Do(put)
			if err != nil {
				t.Fatalf("PUT to the presigned URL: %v", err)
			}
			defer resp.Body.Close()
			msg, _ := io.ReadAll(resp.Body)
			return resp, msg
		}
		if resp, msg := upload(42, "from 42"); resp.StatusCode != http.StatusOK {
			t.Fatalf("presigned PUT with 42: %d %s", resp.StatusCode, msg)
		}
		resp, msg := upload(41, "late from 41")
		if resp.StatusCode != http.StatusConflict || !strings.Contains(string(msg), "<Code>StaleFencingToken</Code>") {
			t.Errorf("presigned PUT with 41 after 42: %d %s; want 409 StaleFencingToken", resp.StatusCode, msg)
		}
		if got := p.objects(ctx, t, "uploads"); got["in/file.bin"] != "from 42" {
			t.Errorf("versitygw holds %q, want from 42", got)
		}
	})

	t.Run("sync with deletions", func(t *testing.T) {
		v1 := map[string]string{"index.html": "v1 index", "a.css": "v1 css", "old.js": "v1 old", "logo.png": "logo"}
		v2 := map[string]string{"index.html": "v2 index", "a.css": "v1 css", "new.js": "v2 new", "logo.png": "logo"}
		runSync := func(token uint64, files map[string]string) s3SyncResult {
			t.Helper()
			r := s3Sync(client.WithToken(ctx, token), t, path, "site", files)
			t.Logf("sync with %d: put %v, deleted %v, errors %v", token, r.put, r.deleted, r.errs)
			return r
		}
		// A (41) syncs v1, then B (42) takes over and syncs v2.
		if r := runSync(41, v1); len(r.errs) != 0 || len(r.put) != 4 {
			t.Fatalf("A's first sync: %+v", r)
		}
		r := runSync(42, v2)
		if len(r.errs) != 0 || !slices.Equal(r.put, []string{"index.html", "new.js"}) || !slices.Equal(r.deleted, []string{"old.js"}) {
			t.Fatalf("B's sync: %+v; want index.html and new.js put, old.js deleted", r)
		}
		if got := p.objects(ctx, t, "site"); !maps.Equal(got, v2) {
			t.Fatalf("after B's sync versitygw holds %v, want v2", got)
		}
		// A, stale, syncs v1 again: every write it tries is refused.
		r = runSync(41, v1)
		if len(r.put) != 0 || len(r.deleted) != 0 || len(r.errs) != 3 {
			t.Errorf("A's stale sync: %+v; want index.html, old.js and the batch deleting new.js refused", r)
		}
		for _, err := range r.errs {
			s3WantCode(t, "A's stale sync", err, http.StatusConflict, "StaleFencingToken")
		}
		if got := p.objects(ctx, t, "site"); !maps.Equal(got, v2) {
			t.Errorf("after A's stale sync versitygw holds %v, want v2 unchanged", got)
		}
	})

	t.Run("bucket per job", func(t *testing.T) {
		// Job 1 (tokens from 100) and job 2 (tokens from 5) each make sure
		// of the bucket, then write their own objects.
		for _, job := range []struct {
			token uint64
			key   string
		}{{100, "job1/out.txt"}, {5, "job2/out.txt"}} {
			_, err := path.CreateBucket(client.WithToken(ctx, job.token), &s3.CreateBucketInput{Bucket: aws.String("nightly")})
			var ae smithy.APIError
			if reason, _ := s3Refusal(err); reason != "" {
				t.Errorf("CreateBucket with %d refused by the proxy: %v", job.token, err)
			} else if err != nil && !(errors.As(err, &ae) && ae.ErrorCode() == "BucketAlreadyOwnedByYou") {
				t.Errorf("CreateBucket with %d: %v", job.token, err)
			}
			t.Logf("CreateBucket with %d: %v", job.token, err)
			if err := s3Put(ctx, path, job.token, "nightly", job.key, "from job"); err != nil {
				t.Errorf("PutObject %s with %d: %v", job.key, job.token, err)
			}
		}
		if got := p.objects(ctx, t, "nightly"); len(got) != 2 {
			t.Errorf("versitygw holds %v, want both jobs' objects", got)
		}
		if _, status := s3FenceOf(t, p.in, "nightly"); status != http.StatusNotFound {
			t.Errorf("the bucket has a fence (%d)", status)
		}
	})
}

// dialClient is an HTTP client whose connections all go to the proxy.
func (p *s3Pass) dialClient() *http.Client {
	dial := func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, p.in.Proxy)
	}
	return &http.Client{Transport: &http.Transport{DialContext: dial, DisableCompression: true, TLSClientConfig: p.tls}}
}

// s3QueryToken is an s3.Options function for a presign client: a Build
// middleware that puts token in the request's query (X-Fencing-Token), so
// that the presigned URL carries it, covered by the signature, and the
// uploader sends no header.
func s3QueryToken(token uint64) func(*s3.Options) {
	return func(o *s3.Options) {
		o.APIOptions = append(o.APIOptions, func(st *middleware.Stack) error {
			st.Build.Remove(client.TokenMiddlewareID) // no header: the URL is all the uploader has
			return st.Build.Add(middleware.BuildMiddlewareFunc("FencingTokenQuery",
				func(ctx context.Context, in middleware.BuildInput, next middleware.BuildHandler) (middleware.BuildOutput, middleware.Metadata, error) {
					if req, ok := in.Request.(*smithyhttp.Request); ok {
						q := req.URL.Query()
						q.Set("X-Fencing-Token", strconv.FormatUint(token, 10))
						req.URL.RawQuery = q.Encode()
					}
					return next.HandleBuild(ctx, in)
				}), middleware.After)
		})
	}
}

// s3SyncResult is what one sync did: the keys put and deleted, and the
// errors of the calls that failed.
type s3SyncResult struct {
	put, deleted []string
	errs         []error
}

// s3Sync makes bucket hold files as a sync tool does: it lists the bucket,
// puts each file whose object is missing or has another ETag (the MD5 of a
// single-part upload), in key order, then deletes every object that is no
// longer a file in one DeleteObjects. A failed call is recorded and the sync
// goes on, as such tools do. ctx carries the token.
func s3Sync(ctx context.Context, t *testing.T, c *s3.Client, bucket string, files map[string]string) s3SyncResult {
	t.Helper()
	var r s3SyncResult
	list, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	if err != nil {
		t.Fatalf("sync: ListObjectsV2: %v", err)
	}
	etags := map[string]string{}
	for _, o := range list.Contents {
		etags[aws.ToString(o.Key)] = strings.Trim(aws.ToString(o.ETag), `"`)
	}
	for _, k := range slices.Sorted(maps.Keys(files)) {
		sum := md5.Sum([]byte(files[k]))
		if etags[k] == hex.EncodeToString(sum[:]) {
			continue
		}
		if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(k), Body: strings.NewReader(files[k])}); err != nil {
			r.errs = append(r.errs, err)
			continue
		}
		r.put = append(r.put, k)
	}
	var gone []s3types.ObjectIdentifier
	var goneKeys []string
	for _, k := range slices.Sorted(maps.Keys(etags)) {
		if _, ok := files[k]; !ok {
			gone = append(gone, s3types.ObjectIdentifier{Key: aws.String(k)})
			goneKeys = append(goneKeys, k)
		}
	}
	if len(gone) > 0 {
		out, err := c.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: aws.String(bucket), Delete: &s3types.Delete{Objects: gone}})
		switch {
		case err != nil:
			r.errs = append(r.errs, err)
		case len(out.Errors) > 0:
			r.errs = append(r.errs, errors.New("DeleteObjects: "+aws.ToString(out.Errors[0].Code)))
		default:
			r.deleted = goneKeys
		}
	}
	return r
}
