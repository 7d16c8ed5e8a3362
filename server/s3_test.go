package server_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/fenceproxy/fenceproxy/internal/servertest"
)

// Test credentials shared by the S3 clients and the SigV4-verifying backend.
const (
	s3TestAccessKey = "AKIAFENCEPROXYTEST"
	s3TestSecretKey = "fenceproxy/test/secret/key/0123456789abcd"
	s3TestRegion    = "us-east-1"
)

// s3FencingTokenKey carries the fencing token of one S3 call in its context.
type s3FencingTokenKey struct{}

// s3WithFencingToken makes the S3 call made with ctx send token in X-Fencing-Token.
func s3WithFencingToken(ctx context.Context, token uint64) context.Context {
	return context.WithValue(ctx, s3FencingTokenKey{}, strconv.FormatUint(token, 10))
}

// s3AddFencingTokenHeader is an S3 API option: a Build-step middleware that sets
// X-Fencing-Token from the call's context. Build runs before Finalize, where the
// SDK signs, so the header is covered by the SigV4 signature.
func s3AddFencingTokenHeader(stack *middleware.Stack) error {
	return stack.Build.Add(middleware.BuildMiddlewareFunc("FencingToken",
		func(ctx context.Context, in middleware.BuildInput, next middleware.BuildHandler) (middleware.BuildOutput, middleware.Metadata, error) {
			if tok, ok := ctx.Value(s3FencingTokenKey{}).(string); ok {
				req, ok := in.Request.(*smithyhttp.Request)
				if !ok {
					return middleware.BuildOutput{}, middleware.Metadata{}, fmt.Errorf("unexpected transport request type %T", in.Request)
				}
				req.Header.Set("X-Fencing-Token", tok)
			}
			return next.HandleBuild(ctx, in)
		}), middleware.After)
}

// s3SentRequest is what the S3 client put on the wire.
type s3SentRequest struct {
	Method, URI, Token, Authorization string
}

// s3RecordingClient is the SDK's HTTP client: it records each request as sent
// (after signing) and never uses HTTP_PROXY.
type s3RecordingClient struct {
	c    *http.Client
	mu   sync.Mutex
	sent []s3SentRequest
}

func newS3RecordingClient() *s3RecordingClient {
	return &s3RecordingClient{c: &http.Client{Transport: &http.Transport{Proxy: nil, DisableCompression: true}}}
}

func (rc *s3RecordingClient) Do(r *http.Request) (*http.Response, error) {
	rc.mu.Lock()
	rc.sent = append(rc.sent, s3SentRequest{
		Method: r.Method, URI: r.URL.RequestURI(),
		Token: r.Header.Get("X-Fencing-Token"), Authorization: r.Header.Get("Authorization"),
	})
	rc.mu.Unlock()
	return rc.c.Do(r)
}

func (rc *s3RecordingClient) requests() []s3SentRequest {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return slices.Clone(rc.sent)
}

// s3TestOptions are the options of a path-style S3 client for endpoint that
// signs with the test credentials, computes no optional checksums and never
// retries (so a 409 is seen exactly once).
func s3TestOptions(endpoint string, hc s3.HTTPClient) s3.Options {
	return s3.Options{
		Region:                     s3TestRegion,
		BaseEndpoint:               aws.String(endpoint),
		UsePathStyle:               true,
		Credentials:                credentials.NewStaticCredentialsProvider(s3TestAccessKey, s3TestSecretKey, ""),
		Retryer:                    aws.NopRetryer{},
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
		HTTPClient:                 hc,
	}
}

// newS3Client returns a test S3 client (s3TestOptions) that adds
// X-Fencing-Token from the call context.
func newS3Client(endpoint string, hc *s3RecordingClient) *s3.Client {
	o := s3TestOptions(endpoint, hc)
	o.APIOptions = []func(*middleware.Stack) error{s3AddFencingTokenHeader}
	return s3.New(o)
}

// s3SigV4Auth is a parsed "AWS4-HMAC-SHA256 Credential=..., SignedHeaders=..., Signature=..." header.
type s3SigV4Auth struct {
	AccessKey, Date, Region, Service string
	SignedHeaders                    []string
	Signature                        string
}

func s3ParseSigV4Authorization(auth string) (s3SigV4Auth, error) {
	const alg = "AWS4-HMAC-SHA256 "
	var a s3SigV4Auth
	if !strings.HasPrefix(auth, alg) {
		return a, fmt.Errorf("authorization %q is not %s", auth, strings.TrimSpace(alg))
	}
	fields := map[string]string{}
	for part := range strings.SplitSeq(auth[len(alg):], ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return a, fmt.Errorf("authorization part %q has no '='", part)
		}
		fields[k] = v
	}
	scope := strings.Split(fields["Credential"], "/")
	if len(scope) != 5 || scope[4] != "aws4_request" {
		return a, fmt.Errorf("credential %q is not AKID/date/region/service/aws4_request", fields["Credential"])
	}
	a.AccessKey, a.Date, a.Region, a.Service = scope[0], scope[1], scope[2], scope[3]
	if fields["SignedHeaders"] == "" || fields["Signature"] == "" {
		return a, fmt.Errorf("authorization %q lacks SignedHeaders or Signature", auth)
	}
	a.SignedHeaders = strings.Split(fields["SignedHeaders"], ";")
	a.Signature = fields["Signature"]
	return a, nil
}

// s3VerifySigV4 checks the SigV4 signature of a request as a server received it:
// it rebuilds the request from the received method, path bytes, query, Host and
// signed headers, signs it again at the received X-Amz-Date with the test
// credentials, and compares. It also checks the body against a signed payload hash.
func s3VerifySigV4(r *http.Request, body []byte) (s3SigV4Auth, error) {
	a, err := s3ParseSigV4Authorization(r.Header.Get("Authorization"))
	if err != nil {
		return a, err
	}
	if a.AccessKey != s3TestAccessKey {
		return a, fmt.Errorf("unknown access key %q", a.AccessKey)
	}
	amzDate := r.Header.Get("X-Amz-Date")
	signingTime, err := time.Parse("20060102T150405Z", amzDate)
	if err != nil {
		return a, fmt.Errorf("X-Amz-Date %q: %v", amzDate, err)
	}
	if signingTime.Format("20060102") != a.Date {
		return a, fmt.Errorf("credential date %s does not match X-Amz-Date %s", a.Date, amzDate)
	}
	payloadHash := r.Header.Get("X-Amz-Content-Sha256")
	if payloadHash == "" {
		return a, errors.New("X-Amz-Content-Sha256 missing")
	}
	if payloadHash != "UNSIGNED-PAYLOAD" && !strings.HasPrefix(payloadHash, "STREAMING-") {
		sum := sha256.Sum256(body)
		if got := hex.EncodeToString(sum[:]); got != payloadHash {
			return a, fmt.Errorf("body sha256 %s does not match X-Amz-Content-Sha256 %s (body %d bytes)", got, payloadHash, len(body))
		}
	}
	if !slices.Contains(a.SignedHeaders, "host") {
		return a, errors.New("host is not a signed header")
	}

	// The path exactly as received: Opaque makes the signer use these bytes.
	rawPath, rawQuery, _ := strings.Cut(r.RequestURI, "?")
	rebuilt := &http.Request{
		Method: r.Method,
		URL:    &url.URL{Scheme: "http", Host: r.Host, Opaque: rawPath, RawQuery: rawQuery},
		Host:   r.Host,
		Header: http.Header{},
	}
	for _, h := range a.SignedHeaders {
		switch h {
		case "host":
		case "content-length":
			rebuilt.ContentLength = r.ContentLength
		default:
			vals := r.Header.Values(h)
			if len(vals) == 0 {
				return a, fmt.Errorf("signed header %s did not arrive", h)
			}
			rebuilt.Header[http.CanonicalHeaderKey(h)] = slices.Clone(vals)
		}
	}
	creds := aws.Credentials{AccessKeyID: s3TestAccessKey, SecretAccessKey: s3TestSecretKey}
	signer := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true }) // as the S3 client signs
	if err := signer.SignHTTP(r.Context(), creds, rebuilt, payloadHash, a.Service, a.Region, signingTime); err != nil {
		return a, fmt.Errorf("re-signing failed: %v", err)
	}
	want, err := s3ParseSigV4Authorization(rebuilt.Header.Get("Authorization"))
	if err != nil {
		return a, fmt.Errorf("re-signed authorization: %v", err)
	}
	if !slices.Equal(want.SignedHeaders, a.SignedHeaders) {
		return a, fmt.Errorf("signed headers differ: received %v, recomputed %v", a.SignedHeaders, want.SignedHeaders)
	}
	if want.Signature != a.Signature {
		return a, fmt.Errorf("signature mismatch for %s %s (Host %q): received %s, recomputed %s",
			r.Method, r.RequestURI, r.Host, a.Signature, want.Signature)
	}
	return a, nil
}

// s3SigV4Record is one request seen by the SigV4-verifying backend.
type s3SigV4Record struct {
	Method, RequestURI, Path, Host string
	Token, Authorization           string
	SignedHeaders                  []string
	Verified                       bool
	Problem                        string
}

// s3SigV4Backend is an S3 stand-in that accepts only correctly signed requests.
type s3SigV4Backend struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []s3SigV4Record
}

func newS3SigV4Backend(t *testing.T) *s3SigV4Backend {
	b := &s3SigV4Backend{}
	b.srv = httptest.NewServer(http.HandlerFunc(b.serve))
	t.Cleanup(b.srv.Close)
	return b
}

func (b *s3SigV4Backend) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	rec := s3SigV4Record{
		Method: r.Method, RequestURI: r.RequestURI, Path: r.URL.Path, Host: r.Host,
		Token: r.Header.Get("X-Fencing-Token"), Authorization: r.Header.Get("Authorization"),
	}
	var a s3SigV4Auth
	if err == nil {
		a, err = s3VerifySigV4(r, body)
	}
	rec.SignedHeaders = a.SignedHeaders
	rec.Verified = err == nil
	if err != nil {
		rec.Problem = err.Error()
	}
	b.mu.Lock()
	b.got = append(b.got, rec)
	b.mu.Unlock()

	if err != nil {
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprintf(w, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>SignatureDoesNotMatch</Code><Message>%s</Message></Error>",
			s3XMLEscape(err.Error()))
		return
	}
	const object = "hello from the sigv4 backend"
	switch r.Method {
	case http.MethodPut:
		sum := sha256.Sum256(body)
		w.Header().Set("ETag", `"`+hex.EncodeToString(sum[:16])+`"`)
		w.WriteHeader(http.StatusOK)
	case http.MethodDelete:
		w.WriteHeader(http.StatusNoContent)
	case http.MethodGet, http.MethodHead:
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Content-Length", strconv.Itoa(len(object)))
		w.Header().Set("ETag", `"0123456789abcdef0123456789abcdef"`)
		w.WriteHeader(http.StatusOK)
		if r.Method == http.MethodGet {
			io.WriteString(w, object)
		}
	default:
		w.WriteHeader(http.StatusOK)
	}
}

func (b *s3SigV4Backend) records() []s3SigV4Record {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.got)
}

func s3XMLEscape(s string) string {
	var buf bytes.Buffer
	for _, r := range s {
		switch r {
		case '<':
			buf.WriteString("&lt;")
		case '>':
			buf.WriteString("&gt;")
		case '&':
			buf.WriteString("&amp;")
		default:
			buf.WriteRune(r)
		}
	}
	return buf.String()
}

// s3FenceOf returns the token the control API reports for resource key (the
// decoded key, escaped here into the URL), or the HTTP status if not 200.
func s3FenceOf(t *testing.T, in *servertest.Instance, key string) (string, int) {
	t.Helper()
	u := in.ControlURL() + (&url.URL{Path: "/v1/fences/" + key}).EscapedPath()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", resp.StatusCode
	}
	var body struct {
		Resource string `json:"resource"`
		Token    string `json:"token"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("GET %s: decoding body: %v", u, err)
	}
	if body.Resource != key {
		t.Errorf("GET %s: resource %q, want %q", u, body.Resource, key)
	}
	return body.Token, resp.StatusCode
}

// s3AssertStaleRefusal checks that err is the proxy's own 409 for a stale token.
func s3AssertStaleRefusal(t *testing.T, err error, current string) {
	t.Helper()
	if err == nil {
		t.Fatalf("stale write succeeded; want 409 from the proxy")
	}
	var re *awshttp.ResponseError
	if !errors.As(err, &re) {
		t.Fatalf("stale write: error %T %v is not an HTTP response error", err, err)
	}
	if re.HTTPStatusCode() != http.StatusConflict {
		t.Fatalf("stale write: HTTP %d, want 409 (error: %v)", re.HTTPStatusCode(), err)
	}
	if got := re.Response.Header.Get("Fencing-Refused"); got != "stale" {
		t.Errorf("stale write: Fencing-Refused = %q, want \"stale\"", got)
	}
	if got := re.Response.Header.Get("Fencing-Current-Token"); got != current {
		t.Errorf("stale write: Fencing-Current-Token = %q, want %q", got, current)
	}
	var sre *smithyhttp.ResponseError
	if !errors.As(err, &sre) || sre.HTTPStatusCode() != http.StatusConflict {
		t.Errorf("stale write: error is not a smithy-go ResponseError with 409: %v", err)
	}
}

func TestS3TakeoverThroughProxy(t *testing.T) {
	const bucket, key = "jobs", "reports/daily.txt"
	_, upstream := startS3Gofakes3(t, bucket)
	in := servertest.Start(t, map[string]string{
		"FENCEPROXY_UPSTREAM": upstream,
		"FENCEPROXY_DATA_DIR": t.TempDir(),
	})
	hc := newS3RecordingClient()
	client := newS3Client(in.ProxyURL(), hc)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()

	put := func(token uint64, body string) error {
		_, err := client.PutObject(s3WithFencingToken(ctx, token), &s3.PutObjectInput{
			Bucket: aws.String(bucket), Key: aws.String(key), Body: strings.NewReader(body),
		})
		return err
	}
	// Worker A holds the lease with token 41; then B takes over with 42.
	if err := put(41, "from A (41)"); err != nil {
		t.Fatalf("PutObject with token 41: %v", err)
	}
	if err := put(42, "from B (42)"); err != nil {
		t.Fatalf("PutObject with token 42: %v", err)
	}
	// A wakes up and writes late.
	s3AssertStaleRefusal(t, put(41, "late from A (41)"), "42")

	out, err := client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		t.Fatalf("GetObject: %v", err)
	}
	data, err := io.ReadAll(out.Body)
	out.Body.Close()
	if err != nil {
		t.Fatalf("GetObject body: %v", err)
	}
	if string(data) != "from B (42)" {
		t.Errorf("object holds %q, want B's %q", data, "from B (42)")
	}

	if tok, status := s3FenceOf(t, in, bucket+"/"+key); status != http.StatusOK || tok != "42" {
		t.Errorf("control fence of %s/%s: token %q status %d, want \"42\" 200", bucket, key, tok, status)
	}

	// The token header was sent on every write and covered by the signature.
	var writes int
	for _, s := range hc.requests() {
		if s.Method != http.MethodPut {
			continue
		}
		writes++
		a, err := s3ParseSigV4Authorization(s.Authorization)
		if err != nil {
			t.Errorf("%s %s: %v", s.Method, s.URI, err)
			continue
		}
		if s.Token == "" || !slices.Contains(a.SignedHeaders, "x-fencing-token") {
			t.Errorf("%s %s: token %q, SignedHeaders %v; want x-fencing-token sent and signed", s.Method, s.URI, s.Token, a.SignedHeaders)
		}
	}
	if writes != 3 {
		t.Errorf("client sent %d PUTs, want 3 (retries must be off)", writes)
	}
}

func TestS3SigV4SurvivesProxy(t *testing.T) {
	const bucket = "sigbkt"
	const keyEsc = "dir/a b+c%~(x).txt"
	const keyUni = "ünïcødé/日本語 ファイル (1).txt"
	backend := newS3SigV4Backend(t)
	in := servertest.Start(t, map[string]string{
		"FENCEPROXY_UPSTREAM": backend.srv.URL,
		"FENCEPROXY_DATA_DIR": t.TempDir(),
	})
	hc := newS3RecordingClient()
	client := newS3Client(in.ProxyURL(), hc)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()

	put := func(token uint64, key, body string) error {
		_, err := client.PutObject(s3WithFencingToken(ctx, token), &s3.PutObjectInput{
			Bucket: aws.String(bucket), Key: aws.String(key), Body: strings.NewReader(body),
			ContentType: aws.String("text/plain; charset=utf-8"),
			Metadata:    map[string]string{"worker": "w-1"},
		})
		return err
	}
	if err := put(5, keyEsc, "escaped key, token 5"); err != nil {
		t.Fatalf("PutObject %q with token 5: %v", keyEsc, err)
	}
	if err := put(5, keyUni, "unicode key, token 5"); err != nil {
		t.Fatalf("PutObject %q with token 5: %v", keyUni, err)
	}
	s3AssertStaleRefusal(t, put(3, keyEsc, "stale, token 3"), "5")
	if _, err := client.DeleteObject(s3WithFencingToken(ctx, 9), &s3.DeleteObjectInput{
		Bucket: aws.String(bucket), Key: aws.String(keyEsc),
	}); err != nil {
		t.Fatalf("DeleteObject %q with token 9: %v", keyEsc, err)
	}
	out, err := client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(keyUni)})
	if err != nil {
		t.Fatalf("GetObject %q: %v", keyUni, err)
	}
	io.Copy(io.Discard, out.Body)
	out.Body.Close()
	if _, err := client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String(keyUni)}); err != nil {
		t.Fatalf("HeadObject %q: %v", keyUni, err)
	}

	type want struct {
		method, key, token string
	}
	wants := []want{
		{http.MethodPut, keyEsc, "5"},
		{http.MethodPut, keyUni, "5"},
		{http.MethodDelete, keyEsc, "9"},
		{http.MethodGet, keyUni, ""},
		{http.MethodHead, keyUni, ""},
	}
	recs := backend.records()
	sent := hc.requests()
	for _, r := range recs {
		t.Logf("backend got %s %s Host=%s token=%q verified=%v %s", r.Method, r.RequestURI, r.Host, r.Token, r.Verified, r.Problem)
	}
	if len(recs) != len(wants) {
		t.Fatalf("backend got %d requests, want %d (the stale PUT must not arrive)", len(recs), len(wants))
	}
	backendHost := strings.TrimPrefix(backend.srv.URL, "http://")
	for i, w := range wants {
		r := recs[i]
		name := fmt.Sprintf("request %d (%s %q)", i, w.method, w.key)
		if r.Method != w.method || r.Path != "/"+bucket+"/"+w.key {
			t.Errorf("%s: backend got %s %q (decoded %q)", name, r.Method, r.RequestURI, r.Path)
			continue
		}
		if !r.Verified {
			t.Errorf("%s: SigV4 verification failed at the backend: %s", name, r.Problem)
		}
		if r.Token != w.token {
			t.Errorf("%s: backend saw X-Fencing-Token %q, want %q", name, r.Token, w.token)
		}
		if w.token != "" && !slices.Contains(r.SignedHeaders, "x-fencing-token") {
			t.Errorf("%s: x-fencing-token not among SignedHeaders %v", name, r.SignedHeaders)
		}
		if r.Host != in.Proxy || r.Host == backendHost {
			t.Errorf("%s: backend saw Host %q, want the signed %q (not the backend's own %q)", name, r.Host, in.Proxy, backendHost)
		}
		// The request line and the Authorization header arrive exactly as the client sent them.
		var match *s3SentRequest
		for j := range sent {
			if sent[j].Authorization == r.Authorization {
				match = &sent[j]
				break
			}
		}
		if match == nil {
			t.Errorf("%s: the backend's Authorization header matches no request the client sent", name)
		} else if match.URI != r.RequestURI {
			t.Errorf("%s: request target changed on the way: client sent %q, backend got %q", name, match.URI, r.RequestURI)
		}
	}
	for _, r := range recs {
		if r.Token == "3" {
			t.Errorf("the stale PUT with token 3 reached the backend: %s %s", r.Method, r.RequestURI)
		}
	}
	if tok, status := s3FenceOf(t, in, bucket+"/"+keyEsc); status != http.StatusOK || tok != "9" {
		t.Errorf("control fence of %q: token %q status %d, want \"9\" 200", keyEsc, tok, status)
	}
	if tok, status := s3FenceOf(t, in, bucket+"/"+keyUni); status != http.StatusOK || tok != "5" {
		t.Errorf("control fence of %q: token %q status %d, want \"5\" 200", keyUni, tok, status)
	}
}

// s3RawPut writes the head of a PUT with Expect: 100-continue on a new
// connection to addr and returns the connection and a reader of its responses.
func s3RawPut(t *testing.T, addr, path, token string, contentLength int64) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	head := "PUT " + path + " HTTP/1.1\r\n" +
		"Host: " + addr + "\r\n" +
		"X-Fencing-Token: " + token + "\r\n" +
		"Content-Type: application/octet-stream\r\n" +
		"Content-Length: " + strconv.FormatInt(contentLength, 10) + "\r\n" +
		"Expect: 100-continue\r\n" +
		"\r\n"
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatalf("write request head: %v", err)
	}
	return conn, bufio.NewReader(conn)
}

func TestS3ExpectContinueStaleNeverUploads(t *testing.T) {
	const path, resource = "/bkt/big.bin", "bkt/big.bin"
	var mu sync.Mutex
	type seen struct {
		token string
		n     int64
	}
	var got []seen
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		mu.Lock()
		got = append(got, seen{r.Header.Get("X-Fencing-Token"), n})
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(backend.Close)
	in := servertest.Start(t, map[string]string{
		"FENCEPROXY_UPSTREAM": backend.URL,
		"FENCEPROXY_DATA_DIR": t.TempDir(),
	})

	// The current holder (token 10) uploads with Expect: 100-continue: it gets
	// 100 Continue, sends its body, and the backend receives all of it. This
	// also shows that this raw client sees a 100 Continue when one is sent.
	const okBody = 64 << 10
	conn, br := s3RawPut(t, in.Proxy, path, "10", okBody)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("admitted PUT: reading the first response: %v", err)
	}
	if resp.StatusCode != http.StatusContinue {
		t.Fatalf("admitted PUT with Expect: 100-continue: first response %d, want 100 Continue", resp.StatusCode)
	}
	if _, err := conn.Write(bytes.Repeat([]byte{'x'}, okBody)); err != nil {
		t.Fatalf("admitted PUT: writing body: %v", err)
	}
	// More 1xx responses may follow (the backend's own 100 Continue, passed
	// on by the proxy); HTTP clients skip them.
	for resp.StatusCode == http.StatusContinue {
		if resp, err = http.ReadResponse(br, nil); err != nil {
			t.Fatalf("admitted PUT: reading the final response: %v", err)
		}
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("admitted PUT: status %d, want 200", resp.StatusCode)
	}

	// A stale writer (token 9) announces 1 GiB: the 409 must come before any
	// body byte is sent, without a 100 Continue.
	const bigBody = 1 << 30
	start := time.Now()
	_, br = s3RawPut(t, in.Proxy, path, "9", bigBody)
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("stale PUT: no response before the body was sent: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusContinue {
		t.Fatalf("stale PUT: the proxy answered 100 Continue: it asked for the body of a stale write")
	}
	if resp.StatusCode != http.StatusConflict {
		t.Fatalf("stale PUT: status %d, want 409", resp.StatusCode)
	}
	if got := resp.Header.Get("Fencing-Refused"); got != "stale" {
		t.Errorf("stale PUT: Fencing-Refused = %q, want \"stale\"", got)
	}
	if got := resp.Header.Get("Fencing-Current-Token"); got != "10" {
		t.Errorf("stale PUT: Fencing-Current-Token = %q, want \"10\"", got)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
		t.Errorf("stale PUT: Content-Type %q, want application/problem+json", ct)
	}
	var pb struct {
		Status       int    `json:"status"`
		Resource     string `json:"resource"`
		Token        string `json:"token"`
		CurrentToken string `json:"current_token"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&pb); err != nil {
		t.Fatalf("stale PUT: decoding the problem body: %v", err)
	}
	if pb.Status != 409 || pb.Resource != resource || pb.Token != "9" || pb.CurrentToken != "10" {
		t.Errorf("stale PUT: problem %+v, want status 409, resource %q, token \"9\", current_token \"10\"", pb, resource)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("stale PUT: the refusal took %v", d)
	}

	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0].token != "10" || got[0].n != okBody {
		t.Errorf("backend received %+v, want only the admitted PUT with token 10 and %d body bytes", got, okBody)
	}
}

// startS3Gofakes3 starts an in-memory S3 backend with bucket and returns it and its URL.
func startS3Gofakes3(t *testing.T, bucket string) (*s3mem.Backend, string) {
	t.Helper()
	backend := s3mem.New()
	if err := backend.CreateBucket(bucket); err != nil {
		t.Fatalf("create bucket: %v", err)
	}
	srv := httptest.NewServer(gofakes3.New(backend).Server())
	t.Cleanup(srv.Close)
	return backend, srv.URL
}

// startS3Fenced starts gofakes3 with bucket, fenceproxy in front of it, and
// a path-style S3 client (newS3Client) pointed at the proxy.
func startS3Fenced(t *testing.T, bucket string) (*servertest.Instance, *s3.Client) {
	t.Helper()
	_, upstream := startS3Gofakes3(t, bucket)
	in := servertest.Start(t, map[string]string{
		"FENCEPROXY_UPSTREAM": upstream,
		"FENCEPROXY_DATA_DIR": t.TempDir(),
	})
	return in, newS3Client(in.ProxyURL(), newS3RecordingClient())
}

// s3GetObject returns the object's bytes through client.
func s3GetObject(ctx context.Context, t *testing.T, client *s3.Client, bucket, key string) string {
	t.Helper()
	out, err := client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		t.Fatalf("GetObject %s/%s: %v", bucket, key, err)
	}
	defer out.Body.Close()
	data, err := io.ReadAll(out.Body)
	if err != nil {
		t.Fatalf("GetObject %s/%s body: %v", bucket, key, err)
	}
	return string(data)
}

// TestS3MultipartHolderAndStaleParts: every call of a multipart upload
// (create, parts, complete) is a write on the object's resource; the holder's
// equal token passes each time, and once a larger token is admitted the old
// holder's remaining calls are refused and never complete its upload.
func TestS3MultipartHolderAndStaleParts(t *testing.T) {
	const bucket, key = "jobs", "shard-7/output.bin"
	in, client := startS3Fenced(t, bucket)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()

	// create, part and complete are the three multipart calls, each sent with token.
	create := func(token uint64) string {
		t.Helper()
		out, err := client.CreateMultipartUpload(s3WithFencingToken(ctx, token), &s3.CreateMultipartUploadInput{
			Bucket: aws.String(bucket), Key: aws.String(key),
		})
		if err != nil {
			t.Fatalf("CreateMultipartUpload with token %d: %v", token, err)
		}
		return aws.ToString(out.UploadId)
	}
	part := func(token uint64, id string, n int32, body []byte) (string, error) {
		out, err := client.UploadPart(s3WithFencingToken(ctx, token), &s3.UploadPartInput{
			Bucket: aws.String(bucket), Key: aws.String(key), UploadId: aws.String(id),
			PartNumber: aws.Int32(n), Body: bytes.NewReader(body),
		})
		if err != nil {
			return "", err
		}
		return aws.ToString(out.ETag), nil
	}
	complete := func(token uint64, id string, etags ...string) error {
		parts := make([]s3types.CompletedPart, len(etags))
		for i, e := range etags {
			parts[i] = s3types.CompletedPart{ETag: aws.String(e), PartNumber: aws.Int32(int32(i + 1))}
		}
		_, err := client.CompleteMultipartUpload(s3WithFencingToken(ctx, token), &s3.CompleteMultipartUploadInput{
			Bucket: aws.String(bucket), Key: aws.String(key), UploadId: aws.String(id),
			MultipartUpload: &s3types.CompletedMultipartUpload{Parts: parts},
		})
		return err
	}

	// Holder 7 starts an upload and sends its first part (5 MiB: S3's minimum
	// for all parts but the last).
	partA := bytes.Repeat([]byte("7"), 5<<20)
	oldID := create(7)
	etagA, err := part(7, oldID, 1, partA)
	if err != nil {
		t.Fatalf("UploadPart 1 with the holder's token 7: %v", err)
	}

	// Holder 8 takes over and completes its own upload.
	newID := create(8)
	etag1, err := part(8, newID, 1, bytes.Repeat([]byte("8"), 5<<20))
	if err != nil {
		t.Fatalf("UploadPart 1 with token 8: %v", err)
	}
	etag2, err := part(8, newID, 2, []byte("tail of 8"))
	if err != nil {
		t.Fatalf("UploadPart 2 with token 8: %v", err)
	}
	if err := complete(8, newID, etag1, etag2); err != nil {
		t.Fatalf("CompleteMultipartUpload with token 8: %v", err)
	}

	// Holder 7 wakes up: its next part and its completion are refused.
	_, err = part(7, oldID, 2, []byte("tail of 7"))
	s3AssertStaleRefusal(t, err, "8")
	s3AssertStaleRefusal(t, complete(7, oldID, etagA), "8")

	got := s3GetObject(ctx, t, client, bucket, key)
	want := strings.Repeat("8", 5<<20) + "tail of 8"
	if got != want {
		t.Errorf("object holds %d bytes starting %q, want holder 8's %d bytes", len(got), got[:min(len(got), 16)], len(want))
	}
	if tok, status := s3FenceOf(t, in, bucket+"/"+key); status != http.StatusOK || tok != "8" {
		t.Errorf("control fence of %s/%s: token %q status %d, want \"8\" 200", bucket, key, tok, status)
	}
}

// TestS3DeleteObjectsStaleKeysRefused: an S3 multi-object delete
// (POST /bucket?delete) names its keys in the body, so the request target
// alone (the bucket) does not say which objects it writes. A stale holder must
// not be able to delete an object whose fence is above its token this way.
func TestS3DeleteObjectsStaleKeysRefused(t *testing.T) {
	const bucket, key = "jobs", "reports/final.txt"
	_, client := startS3Fenced(t, bucket)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()

	if _, err := client.PutObject(s3WithFencingToken(ctx, 5), &s3.PutObjectInput{
		Bucket: aws.String(bucket), Key: aws.String(key), Body: strings.NewReader("from 5"),
	}); err != nil {
		t.Fatalf("PutObject with token 5: %v", err)
	}
	// The single-object form is refused, as expected.
	_, err := client.DeleteObject(s3WithFencingToken(ctx, 4), &s3.DeleteObjectInput{
		Bucket: aws.String(bucket), Key: aws.String(key),
	})
	s3AssertStaleRefusal(t, err, "5")

	// The multi-object form names its keys in the body, which the proxy does
	// not fence: it refuses it (400, Fencing-Refused: unsupported) whatever
	// the token, so a stale holder cannot delete through it.
	for _, tok := range []uint64{4, 5} {
		_, err = client.DeleteObjects(s3WithFencingToken(ctx, tok), &s3.DeleteObjectsInput{
			Bucket: aws.String(bucket),
			Delete: &s3types.Delete{Objects: []s3types.ObjectIdentifier{{Key: aws.String(key)}}},
		})
		var re *awshttp.ResponseError
		if !errors.As(err, &re) || re.HTTPStatusCode() != http.StatusBadRequest || re.Response.Header.Get("Fencing-Refused") != "unsupported" {
			t.Errorf("DeleteObjects with token %d: %v; want 400 with Fencing-Refused: unsupported", tok, err)
		}
	}
	out, err := client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		t.Errorf("after the stale DeleteObjects, HeadObject %s/%s: %v (the stale holder deleted the object)", bucket, key, err)
	} else if aws.ToInt64(out.ContentLength) != int64(len("from 5")) {
		t.Errorf("after the stale DeleteObjects, the object has %d bytes, want %d", aws.ToInt64(out.ContentLength), len("from 5"))
	}
}

// TestS3CopyObjectFencesDestination: CopyObject names its source in
// x-amz-copy-source and writes the request path, so it is fenced on the
// destination: a stale copy never overwrites the new holder's object, and the
// holder's copy goes through. The source is only read.
func TestS3CopyObjectFencesDestination(t *testing.T) {
	const bucket = "jobs"
	in, client := startS3Fenced(t, bucket)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	put := func(token uint64, key, body string) {
		t.Helper()
		if _, err := client.PutObject(s3WithFencingToken(ctx, token), &s3.PutObjectInput{
			Bucket: aws.String(bucket), Key: aws.String(key), Body: strings.NewReader(body),
		}); err != nil {
			t.Fatalf("PutObject %s with %d: %v", key, token, err)
		}
	}
	copyTo := func(token uint64, src, dst string) error {
		_, err := client.CopyObject(s3WithFencingToken(ctx, token), &s3.CopyObjectInput{
			Bucket: aws.String(bucket), Key: aws.String(dst), CopySource: aws.String(bucket + "/" + src),
		})
		return err
	}
	put(1, "staging/a.txt", "old draft from A")
	put(42, "final/report.txt", "from B (42)")

	// A (41) copies its draft over the report B (42) now owns.
	s3AssertStaleRefusal(t, copyTo(41, "staging/a.txt", "final/report.txt"), "42")
	if got := s3GetObject(ctx, t, client, bucket, "final/report.txt"); got != "from B (42)" {
		t.Fatalf("report holds %q after a stale copy, want B's", got)
	}
	// The source's own maximum is untouched by copies from it.
	if tok, _ := s3FenceOf(t, in, bucket+"/staging/a.txt"); tok != "1" {
		t.Errorf("source fence %q, want 1", tok)
	}
	// B copies with its own token: applied.
	put(42, "staging/b.txt", "new draft from B")
	if err := copyTo(42, "staging/b.txt", "final/report.txt"); err != nil {
		t.Fatalf("CopyObject with the holder's token: %v", err)
	}
	if got := s3GetObject(ctx, t, client, bucket, "final/report.txt"); got != "new draft from B" {
		t.Fatalf("report holds %q, want B's copied draft", got)
	}
}
