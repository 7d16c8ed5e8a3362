package server_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/fenceproxy/fenceproxy/internal/servertest"
)

// s3ErrorBody is the S3 <Error> body of the proxy's answers in S3 mode.
type s3ErrorBody struct {
	XMLName   xml.Name `xml:"Error"`
	Code      string   `xml:"Code"`
	Message   string   `xml:"Message"`
	Resource  string   `xml:"Resource"`
	RequestID string   `xml:"RequestId"`
}

// startS3ErrorsProxy starts gofakes3 with bucket demo and a fenceproxy in
// front of it in mode s3 (pass: S3_DOMAINS=localhost) with extra settings; it
// returns the instance and the endpoint http://localhost:PORT.
func startS3ErrorsProxy(t *testing.T, s3 string, extra map[string]string) (*servertest.Instance, string) {
	t.Helper()
	backend := s3mem.New()
	if err := backend.CreateBucket("demo"); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gofakes3.New(backend).Server())
	t.Cleanup(srv.Close)
	env := map[string]string{"FENCEPROXY_UPSTREAM": srv.URL, "FENCEPROXY_DATA_DIR": t.TempDir(), "FENCEPROXY_S3": s3}
	if s3 == "pass" {
		env["FENCEPROXY_S3_DOMAINS"] = "localhost"
	}
	for k, v := range extra {
		env[k] = v
	}
	in := servertest.Start(t, env)
	_, port, _ := net.SplitHostPort(in.Proxy)
	return in, "http://localhost:" + port
}

// TestS3PassErrorCodesInSDK: in S3 mode aws-sdk-go-v2 reads the proxy's
// refusals as S3 errors: smithy.APIError carries StaleFencingToken (with the
// current maximum in its message) and MissingFencingToken, and the request id.
// Before S3 error bodies the SDK saw problem+json: ErrorCode "Conflict".
func TestS3PassErrorCodesInSDK(t *testing.T) {
	in, endpoint := startS3ErrorsProxy(t, "pass", nil)
	client := s3HostClient(endpoint, in.Proxy, true)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	put := func(ctx context.Context, body string) error {
		_, err := client.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("demo"), Key: aws.String("jobs/out.txt"), Body: strings.NewReader(body)})
		return err
	}
	if err := put(s3WithFencingToken(ctx, 42), "from 42"); err != nil {
		t.Fatalf("PutObject with 42: %v", err)
	}

	err := put(s3WithFencingToken(ctx, 41), "late from 41")
	s3AssertStaleRefusal(t, err, "42")
	var apiErr smithy.APIError
	if !errors.As(err, &apiErr) {
		t.Fatalf("stale PutObject: %T %v is no smithy.APIError", err, err)
	}
	t.Logf("stale PutObject: code %q, message %q", apiErr.ErrorCode(), apiErr.ErrorMessage())
	if apiErr.ErrorCode() != "StaleFencingToken" {
		t.Errorf("stale PutObject: ErrorCode %q, want StaleFencingToken", apiErr.ErrorCode())
	}
	if msg := apiErr.ErrorMessage(); !strings.Contains(msg, "current maximum is 42") || !strings.Contains(msg, "41") ||
		!strings.Contains(msg, `"demo/jobs/out.txt"`) {
		t.Errorf("stale PutObject: ErrorMessage %q, want the resource, the token 41 and the current maximum 42", msg)
	}
	var re *awshttp.ResponseError
	if errors.As(err, &re) && (re.ServiceRequestID() == "" || re.ServiceRequestID() != re.Response.Header.Get("X-Amz-Request-Id")) {
		t.Errorf("stale PutObject: request id %q, header %q", re.ServiceRequestID(), re.Response.Header.Get("X-Amz-Request-Id"))
	}

	err = put(ctx, "no token")
	if !errors.As(err, &apiErr) {
		t.Fatalf("PutObject without a token: %T %v is no smithy.APIError", err, err)
	}
	t.Logf("PutObject without a token: code %q, message %q", apiErr.ErrorCode(), apiErr.ErrorMessage())
	if apiErr.ErrorCode() != "MissingFencingToken" || !strings.Contains(apiErr.ErrorMessage(), "X-Fencing-Token") {
		t.Errorf("PutObject without a token: code %q, message %q; want MissingFencingToken naming the header", apiErr.ErrorCode(), apiErr.ErrorMessage())
	}
	if !errors.As(err, &re) || re.HTTPStatusCode() != http.StatusPreconditionRequired {
		t.Errorf("PutObject without a token: %v, want 428", err)
	}
	if got := s3GetObject(ctx, t, client, "demo", "jobs/out.txt"); got != "from 42" {
		t.Errorf("object holds %q, want from 42", got)
	}
}

// s3ErrorCase is one refusal made over raw HTTP: the request (a raw
// HTTP/1.1 request for addr's Host), its status, reason and S3 code.
type s3ErrorCase struct {
	name   string
	env    map[string]string // extra settings; cases with the same env share an instance
	raw    func(host string) string
	half   bool // close the write side after sending (a body that ends early)
	s3Only bool // off mode forwards it
	status int
	reason string // Fencing-Refused; "" for answers that are no refusal
	code   string
}

func s3RawReq(method, target, host string, headers ...string) string {
	var b strings.Builder
	b.WriteString(method + " " + target + " HTTP/1.1\r\nHost: " + host + "\r\n")
	for _, h := range headers {
		b.WriteString(h + "\r\n")
	}
	return b.String() + "\r\n"
}

var s3ErrorCases = []s3ErrorCase{
	{name: "missing", raw: func(h string) string { return s3RawReq("PUT", "/demo/a", h, "Content-Length: 0") },
		status: 428, reason: "missing", code: "MissingFencingToken"},
	{name: "malformed", raw: func(h string) string {
		return s3RawReq("PUT", "/demo/a", h, "X-Fencing-Token: 0x10", "Content-Length: 0")
	}, status: 400, reason: "malformed", code: "InvalidFencingToken"},
	{name: "stale", raw: func(h string) string {
		return s3RawReq("PUT", "/demo/seeded", h, "X-Fencing-Token: 3", "Content-Length: 0")
	}, status: 409, reason: "stale", code: "StaleFencingToken"},
	{name: "bad_resource host", raw: func(h string) string {
		return s3RawReq("GET", "/demo/a", "other.example")
	}, s3Only: true, status: 400, reason: "bad_resource", code: "InvalidURI"},
	{name: "bad_resource absolute-form", raw: func(h string) string {
		return s3RawReq("PUT", "http://"+h+"/demo/a", h, "X-Fencing-Token: 1", "Content-Length: 0")
	}, status: 400, reason: "bad_resource", code: "InvalidURI"},
	{name: "hop_by_hop", raw: func(h string) string {
		return s3RawReq("PUT", "/demo/a", h, "X-Fencing-Token: 1", "Connection: X-Fencing-Token", "Content-Length: 0")
	}, status: 400, reason: "hop_by_hop", code: "InvalidRequest"},
	{name: "unsupported form upload", raw: func(h string) string {
		return s3RawReq("POST", "/demo", h, "X-Fencing-Token: 1", "Content-Type: multipart/form-data; boundary=x", "Content-Length: 0")
	}, status: 400, reason: "unsupported", code: "NotImplemented"},
	{name: "bad_body", raw: func(h string) string {
		return s3RawReq("PUT", "/demo/a", h, "X-Fencing-Token: 5", "Content-Length: 10") + "abc"
	}, half: true, status: 400, reason: "bad_body", code: "IncompleteBody"},
	{name: "jump", env: map[string]string{"FENCEPROXY_MAX_TOKEN_JUMP": "10"}, raw: func(h string) string {
		return s3RawReq("PUT", "/demo/a", h, "X-Fencing-Token: 1000", "Content-Length: 0")
	}, status: 403, reason: "jump", code: "FencingTokenTooFarAhead"},
	{name: "signature", env: map[string]string{"FENCEPROXY_TOKEN_KEY": base64.StdEncoding.EncodeToString([]byte("fenceproxy-test-key-of-32-bytes!!"))},
		raw: func(h string) string {
			return s3RawReq("PUT", "/demo/a", h, "X-Fencing-Token: 1", "Content-Length: 0")
		}, status: 403, reason: "signature", code: "InvalidFencingTokenSignature"},
	{name: "upload idle", env: map[string]string{"FENCEPROXY_UPLOAD_IDLE_TIMEOUT": "200ms"}, raw: func(h string) string {
		return s3RawReq("PUT", "/demo/slow", h, "X-Fencing-Token: 5", "Content-Length: 10") + "abc"
	}, status: 408, code: "RequestTimeout"},
}

// TestS3PassErrorBodies: every refusal that a request can provoke over raw
// HTTP answers, in S3 mode, an S3 <Error> body with the reason's code, the
// request path as Resource, a request id also in X-Amz-Request-Id, and the
// same status and Fencing-* headers as in off mode, where the body stays
// problem+json.
func TestS3PassErrorBodies(t *testing.T) {
	for _, mode := range []string{"pass", "off"} {
		t.Run(mode, func(t *testing.T) {
			instances := map[string]*servertest.Instance{}
			for _, c := range s3ErrorCases {
				if c.s3Only && mode == "off" {
					continue
				}
				key, _ := json.Marshal(c.env)
				in := instances[string(key)]
				if in == nil {
					in, _ = startS3ErrorsProxy(t, mode, c.env)
					instances[string(key)] = in
					// The stale case's fence.
					raw := s3RawReq("PUT", "/demo/seeded", s3ErrorsHost(in), "X-Fencing-Token: 7", "Content-Length: 0")
					if resp, _ := s3RawExchange(t, in, raw, false); resp.StatusCode != 200 && c.env == nil {
						t.Fatalf("seeding /demo/seeded: %d", resp.StatusCode)
					}
				}
				t.Run(c.name, func(t *testing.T) { s3CheckErrorCase(t, in, mode, c) })
			}
		})
	}
}

func s3ErrorsHost(in *servertest.Instance) string {
	_, port, _ := net.SplitHostPort(in.Proxy)
	return "localhost:" + port
}

// s3RawExchange sends raw to the proxy and reads one response.
func s3RawExchange(t *testing.T, in *servertest.Instance, raw string, half bool) (*http.Response, []byte) {
	t.Helper()
	conn, err := net.Dial("tcp", in.Proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, raw); err != nil {
		t.Fatal(err)
	}
	if half {
		conn.(*net.TCPConn).CloseWrite()
	}
	method, _, _ := strings.Cut(raw, " ")
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: method})
	if err != nil {
		t.Fatalf("reading the answer to %q: %v", raw, err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the body of the answer to %q: %v", raw, err)
	}
	return resp, body
}

func s3CheckErrorCase(t *testing.T, in *servertest.Instance, mode string, c s3ErrorCase) {
	raw := c.raw(s3ErrorsHost(in))
	resp, body := s3RawExchange(t, in, raw, c.half)
	if resp.StatusCode != c.status || resp.Header.Get("Fencing-Refused") != c.reason {
		t.Fatalf("%d Fencing-Refused %q (body %s), want %d %q", resp.StatusCode, resp.Header.Get("Fencing-Refused"), body, c.status, c.reason)
	}
	if c.reason == "stale" && resp.Header.Get("Fencing-Current-Token") != "7" {
		t.Errorf("Fencing-Current-Token %q, want 7", resp.Header.Get("Fencing-Current-Token"))
	}
	if mode == "off" {
		var pb struct {
			Status int    `json:"status"`
			Reason string `json:"reason"`
		}
		if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" || json.Unmarshal(body, &pb) != nil ||
			pb.Status != c.status || pb.Reason != c.reason {
			t.Errorf("off mode: Content-Type %q, body %s; want problem+json with status %d, reason %q", ct, body, c.status, c.reason)
		}
		return
	}
	t.Logf("%s", body)
	if ct := resp.Header.Get("Content-Type"); ct != "application/xml" {
		t.Errorf("Content-Type %q, want application/xml", ct)
	}
	const decl = `<?xml version="1.0" encoding="UTF-8"?><Error>`
	if !strings.HasPrefix(string(body), decl) {
		t.Errorf("body %s does not start with %s", body, decl)
	}
	var e s3ErrorBody
	dec := xml.NewDecoder(strings.NewReader(string(body)))
	if err := dec.Decode(&e); err != nil {
		t.Fatalf("body %s: %v", body, err)
	}
	if e.Code != c.code || e.Message == "" || e.RequestID == "" || e.RequestID != resp.Header.Get("X-Amz-Request-Id") {
		t.Errorf("error %+v, X-Amz-Request-Id %q; want code %s, a message, the request id in both", e, resp.Header.Get("X-Amz-Request-Id"), c.code)
	}
	if want, _ := url0Path(raw); e.Resource != want {
		t.Errorf("Resource %q, want the request path %q", e.Resource, want)
	}
	if c.reason == "stale" && (!strings.Contains(e.Message, "current maximum is 7") || !strings.Contains(e.Message, "token 3") ||
		!strings.Contains(e.Message, `"demo/seeded"`)) {
		t.Errorf("stale Message %q: want the resource, the token and the current maximum", e.Message)
	}
}

// url0Path is the path of raw's request target.
func url0Path(raw string) (string, error) {
	req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
	if err != nil {
		return "", err
	}
	return req.URL.Path, nil
}
