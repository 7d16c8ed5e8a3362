package sigv4

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

const (
	testKey    = "worker1"
	testSecret = "worker1-secret/+="
	otherKey   = "worker2"
	testRegion = "eu-west-1"
)

type keys map[string]string

func (k keys) Secret(id string) (string, bool) { s, ok := k[id]; return s, ok }

var testKeys = keys{testKey: testSecret, otherKey: "worker2-secret"}

// signTime is the fixed time the table tests sign at.
var signTime = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// result is one request's verification, as the server saw it.
type result struct {
	auth *Auth
	err  error
}

// serve starts an HTTP server that verifies every request with v and reports
// the outcome on the returned channel: 200 when verified, 403 with the S3 code
// otherwise. ListObjectsV2 answers a minimal listing for SDK clients.
func serve(t *testing.T, v *Verifier) (string, <-chan result) {
	t.Helper()
	ch := make(chan result, 64)
	srv := httptest.NewServer(verifyHandler(v, ch))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String(), ch
}

// verifyHandler verifies every request with v and reports the outcome on ch
// (see serve).
func verifyHandler(v *Verifier, ch chan<- result) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, err := v.Verify(r)
		_, _ = io.Copy(io.Discard, r.Body)
		ch <- result{a, err}
		if err != nil {
			w.WriteHeader(http.StatusForbidden)
			_, _ = io.WriteString(w, kind(err))
			return
		}
		if r.URL.Query().Has("list-type") {
			w.Header().Set("Content-Type", "application/xml")
			_, _ = io.WriteString(w, `<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>bucket</Name></ListBucketResult>`)
		}
	})
}

func verifierAt(now time.Time) *Verifier {
	return &Verifier{Secrets: testKeys, Region: testRegion, Now: func() time.Time { return now }}
}

// wireReq is a request as bytes on the wire: sent over raw TCP, so that the
// path, the query and every header line arrive exactly as written here.
type wireReq struct {
	method, target, host string
	header               [][2]string
	body                 []byte
}

func (w wireReq) clone() wireReq {
	w.header = append([][2]string(nil), w.header...)
	return w
}

// set replaces the first line of the header name (case-insensitive), or adds it.
func (w *wireReq) set(name, value string) {
	for i, h := range w.header {
		if strings.EqualFold(h[0], name) {
			w.header[i][1] = value
			return
		}
	}
	w.header = append(w.header, [2]string{name, value})
}

func (w *wireReq) get(name string) string {
	for _, h := range w.header {
		if strings.EqualFold(h[0], name) {
			return h[1]
		}
	}
	return ""
}

func (w *wireReq) del(name string) {
	out := w.header[:0]
	for _, h := range w.header {
		if !strings.EqualFold(h[0], name) {
			out = append(out, h)
		}
	}
	w.header = out
}

// send writes the request on a new TCP connection and returns the server's
// verification.
func (w wireReq) send(t *testing.T, addr string, results <-chan result) result {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\n", w.method, w.target, w.host)
	for _, h := range w.header {
		fmt.Fprintf(&b, "%s: %s\r\n", h[0], h[1])
	}
	if len(w.body) > 0 && w.get("Content-Length") == "" {
		fmt.Fprintf(&b, "Content-Length: %d\r\n", len(w.body))
	}
	b.WriteString("Connection: close\r\n\r\n")
	b.Write(w.body)
	if _, err := conn.Write(b.Bytes()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("%s %s: %v", w.method, w.target, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	select {
	case r := <-results:
		if (r.err == nil) != (resp.StatusCode == http.StatusOK) {
			t.Fatalf("status %d for error %v", resp.StatusCode, r.err)
		}
		return r
	case <-time.After(10 * time.Second):
		t.Fatalf("%s %s: the server did not verify (status %d)", w.method, w.target, resp.StatusCode)
	}
	return result{}
}

// fromSigned turns a request signed in process into its wire form.
func fromSigned(r *http.Request, body []byte) wireReq {
	w := wireReq{method: r.Method, target: r.URL.RequestURI(), host: r.Host, body: body}
	if w.host == "" {
		w.host = r.URL.Host
	}
	for name, values := range r.Header {
		for _, v := range values {
			w.header = append(w.header, [2]string{name, v})
		}
	}
	if r.ContentLength > 0 {
		w.header = append(w.header, [2]string{"Content-Length", fmt.Sprint(r.ContentLength)})
	}
	return w
}

var creds = aws.Credentials{AccessKeyID: testKey, SecretAccessKey: testSecret}

// sdkSign signs with aws-sdk-go-v2's v4.Signer as its S3 client does (the
// path not escaped again). target is the raw path and query.
func sdkSign(t testing.TB, addr, method, target, host string, h http.Header, body []byte, payload string, at time.Time) wireReq {
	t.Helper()
	r, err := http.NewRequest(method, "http://"+addr+target, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if r.URL.RequestURI() != target {
		t.Fatalf("the test's URL %q is sent as %q", target, r.URL.RequestURI())
	}
	r.Host = host
	for k, vs := range h {
		r.Header[k] = append([]string(nil), vs...)
	}
	if payload == "" {
		sum := sha256.Sum256(body)
		payload = fmt.Sprintf("%x", sum)
	}
	r.Header.Set("X-Amz-Content-Sha256", payload)
	err = v4.NewSigner().SignHTTP(context.Background(), creds, r, payload, "s3", testRegion, at,
		func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })
	if err != nil {
		t.Fatal(err)
	}
	return fromSigned(r, body)
}

// sdkPresign presigns with aws-sdk-go-v2's v4.Signer.PresignHTTP; the headers
// it returns are sent, plus extra (unsigned).
func sdkPresign(t testing.TB, addr, method, target, host string, h http.Header, expires string, at time.Time) wireReq {
	t.Helper()
	sep := "?"
	if strings.Contains(target, "?") {
		sep = "&"
	}
	r, err := http.NewRequest(method, "http://"+addr+target+sep+"X-Amz-Expires="+expires, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Host = host
	for k, vs := range h {
		r.Header[k] = append([]string(nil), vs...)
	}
	signed, hdr, err := v4.NewSigner().PresignHTTP(context.Background(), creds, r, UnsignedPayload, "s3", testRegion, at,
		func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })
	if err != nil {
		t.Fatal(err)
	}
	w := wireReq{method: method, target: strings.TrimPrefix(signed, "http://"+addr), host: host}
	if w.host == "" {
		w.host = addr
	}
	for k, vs := range hdr {
		if strings.EqualFold(k, "Host") {
			continue
		}
		for _, v := range vs {
			w.header = append(w.header, [2]string{k, v})
		}
	}
	return w
}

// TestSDKSignedShapesVerify: requests signed by aws-sdk-go-v2's v4.Signer, in
// the shapes S3 clients send, verify, and Verify reports what they were
// signed with.
func TestSDKSignedShapesVerify(t *testing.T) {
	addr, results := serve(t, verifierAt(signTime.Add(30*time.Second)))
	hexHash := fmt.Sprintf("%x", sha256.Sum256([]byte("hello")))
	for _, tc := range []struct {
		name, method, target, host string
		header                     http.Header
		body                       string
		payload                    string // "" is the body's hex SHA-256
		presign                    bool
	}{
		{name: "PUT hex payload", method: "PUT", target: "/bucket/dir/report.txt", body: "hello",
			header: http.Header{"Content-Type": {"text/plain"}, "X-Amz-Meta-Owner": {"w1"}}},
		{name: "PUT UNSIGNED-PAYLOAD", method: "PUT", target: "/bucket/u.bin", body: "hello", payload: UnsignedPayload},
		{name: "PUT STREAMING-AWS4-HMAC-SHA256-PAYLOAD", method: "PUT", target: "/bucket/s", body: "0;chunk-signature=x\r\n\r\n", payload: StreamingPayload,
			header: http.Header{"Content-Encoding": {"aws-chunked"}, "X-Amz-Decoded-Content-Length": {"0"}}},
		{name: "PUT STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER", method: "PUT", target: "/bucket/s", body: "0;chunk-signature=x\r\n\r\n", payload: StreamingPayloadTrailer,
			header: http.Header{"Content-Encoding": {"aws-chunked"}, "X-Amz-Decoded-Content-Length": {"0"}, "X-Amz-Trailer": {"x-amz-checksum-crc32"}}},
		{name: "PUT STREAMING-UNSIGNED-PAYLOAD-TRAILER", method: "PUT", target: "/bucket/s", body: "0\r\n\r\n", payload: StreamingUnsignedPayloadTrailer,
			header: http.Header{"Content-Encoding": {"aws-chunked"}, "X-Amz-Decoded-Content-Length": {"0"}, "X-Amz-Trailer": {"x-amz-checksum-crc32"}}},
		{name: "GET ListObjectsV2 with prefix a%20b", method: "GET", target: "/bucket?list-type=2&prefix=a%20b"},
		{name: "GET query with empty and repeated values", method: "GET", target: "/bucket/k?versionId=&tagging&z=2&z=1"},
		{name: "key with space", method: "PUT", target: "/bucket/a%20b", body: "hello"},
		{name: "key with unicode", method: "PUT", target: "/bucket/%C3%BC%E2%82%AC.txt", body: "hello"},
		{name: "key with raw +", method: "PUT", target: "/bucket/a+b", body: "hello"},
		{name: "key with %2B", method: "PUT", target: "/bucket/a%2Bb", body: "hello"},
		{name: "key with %2F", method: "PUT", target: "/bucket/dir%2Fkey", body: "hello"},
		{name: "key with a literal %2F (%252F)", method: "PUT", target: "/bucket/dir%252Fkey", body: "hello"},
		{name: "key with ~", method: "PUT", target: "/bucket/a~b", body: "hello"},
		{name: "key with dot segments, not normalised", method: "GET", target: "/bucket/a/../b/./c//d"},
		{name: "multiple header values", method: "PUT", target: "/bucket/m", body: "hello",
			header: http.Header{"X-Amz-Meta-Multi": {"a", "b"}, "X-Amz-Meta-Spaced": {"a   b  c"}}},
		{name: "virtual-hosted Host with port", method: "PUT", target: "/key%20one", host: "bucket.s3.example.test:9000", body: "hello"},
		{name: "DELETE", method: "DELETE", target: "/bucket/k?versionId=3%2B4"},
		{name: "presigned GET", method: "GET", target: "/bucket/pre%20sign/%C3%BC.txt", presign: true},
		{name: "presigned ListObjectsV2", method: "GET", target: "/bucket?list-type=2&prefix=a%20b", presign: true},
		{name: "presigned PUT with x-amz-acl and x-amz-meta-* signed as headers", method: "PUT", target: "/bucket/p", presign: true,
			header: http.Header{"X-Amz-Acl": {"private"}, "X-Amz-Meta-Owner": {"w1"}}},
		{name: "presigned with an x-amz-* header hoisted into the query", method: "GET", target: "/bucket/p", presign: true,
			header: http.Header{"X-Amz-Expected-Bucket-Owner": {"123456789012"}}},
		{name: "presigned virtual-hosted Host with port", method: "GET", target: "/key", host: "bucket.s3.example.test:9000", presign: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var w wireReq
			if tc.presign {
				w = sdkPresign(t, addr, tc.method, tc.target, tc.host, tc.header, "900", signTime)
			} else {
				w = sdkSign(t, addr, tc.method, tc.target, tc.host, tc.header, []byte(tc.body), tc.payload, signTime)
			}
			res := w.send(t, addr, results)
			if res.err != nil {
				t.Fatalf("%s %s: %v", w.method, w.target, res.err)
			}
			a := res.auth
			wantPayload := tc.payload
			switch {
			case tc.presign:
				wantPayload = UnsignedPayload
			case wantPayload == "" && tc.body == "hello":
				wantPayload = hexHash
			case wantPayload == "":
				wantPayload = fmt.Sprintf("%x", sha256.Sum256(nil))
			}
			if a.AccessKeyID != testKey || a.PayloadHash != wantPayload || a.Presigned != tc.presign || !a.Date.Equal(signTime) ||
				a.Scope != "20260301/"+testRegion+"/s3/aws4_request" || len(a.SigningKey) != 32 || a.Signature == "" {
				t.Fatalf("auth %+v", a)
			}
			if !contains(a.SignedHeaders, "host") {
				t.Fatalf("signed headers %v", a.SignedHeaders)
			}
			if tc.presign && a.Expires != 900*time.Second {
				t.Fatalf("expires %v", a.Expires)
			}
		})
	}
}

// TestForgedRequestsFail: every single change to a signed request, and every
// request outside the time window, is refused with its error.
func TestForgedRequestsFail(t *testing.T) {
	putBody := []byte("hello")
	header := func() wireReq {
		return sdkSign(t, "127.0.0.1:1", "PUT", "/bucket/dir/a%20b%C3%BC.txt?x-id=PutObject&tagging=", "s3.example.test",
			http.Header{"Content-Type": {"text/plain"}, "X-Amz-Meta-Owner": {"w1"}, "X-Amz-Meta-Note": {"a b"}}, putBody, "", signTime)
	}
	presigned := func() wireReq {
		return sdkPresign(t, "127.0.0.1:1", "GET", "/bucket?list-type=2&prefix=a%20b", "s3.example.test", nil, "900", signTime)
	}
	replaceQuery := func(w *wireReq, old, new string) {
		if !strings.Contains(w.target, old) {
			t.Fatalf("%q not in %q", old, w.target)
		}
		w.target = strings.Replace(w.target, old, new, 1)
	}
	authz := func(w *wireReq, old, new string) {
		a := w.get("Authorization")
		if !strings.Contains(a, old) {
			t.Fatalf("%q not in %q", old, a)
		}
		w.set("Authorization", strings.Replace(a, old, new, 1))
	}
	lastHexFlipped := func(s string) string {
		if s[len(s)-1] == '0' {
			return s[:len(s)-1] + "1"
		}
		return s[:len(s)-1] + "0"
	}
	querySig := func(w *wireReq) string {
		i := strings.Index(w.target, "X-Amz-Signature=")
		return w.target[i+len("X-Amz-Signature=") : i+len("X-Amz-Signature=")+64]
	}

	for _, tc := range []struct {
		name   string
		base   func() wireReq
		change func(w *wireReq)
		now    time.Duration // the clock, after signTime
		want   error         // nil: verifies
	}{
		// Controls: the unchanged requests, and changes that keep the meaning.
		{name: "header: unchanged", base: header},
		{name: "presigned: unchanged", base: presigned},
		{name: "header: query reordered", base: header, want: nil, change: func(w *wireReq) {
			replaceQuery(w, "?tagging=&x-id=PutObject", "?x-id=PutObject&tagging")
		}},
		{name: "header: inner spaces of a signed value collapsed", base: header, change: func(w *wireReq) { w.set("X-Amz-Meta-Note", "a      b") }},
		{name: "header: an unsigned non-x-amz header added", base: header, change: func(w *wireReq) { w.set("User-Agent", "other") }},
		{name: "header: clock 14 min ahead", base: header, now: 14 * time.Minute},
		{name: "header: clock 14 min behind", base: header, now: -14 * time.Minute},
		{name: "presigned: at its expiry", base: presigned, now: 900 * time.Second},

		// Single changes.
		{name: "header: signed header value changed", base: header, want: ErrSignatureMismatch, change: func(w *wireReq) { w.set("X-Amz-Meta-Owner", "w2") }},
		{name: "header: Content-Type changed", base: header, want: ErrSignatureMismatch, change: func(w *wireReq) { w.set("Content-Type", "text/html") }},
		{name: "header: Host changed", base: header, want: ErrSignatureMismatch, change: func(w *wireReq) { w.host = "other.s3.example.test" }},
		{name: "header: signed header sent twice", base: header, want: ErrSignatureMismatch, change: func(w *wireReq) {
			w.header = append(w.header, [2]string{"X-Amz-Meta-Owner", "w1"})
		}},
		{name: "header: signed header removed", base: header, want: ErrSignatureMismatch, change: func(w *wireReq) { w.del("X-Amz-Meta-Owner") }},
		{name: "header: path byte changed", base: header, want: ErrSignatureMismatch, change: func(w *wireReq) { replaceQuery(w, "a%20b", "a%20c") }},
		{name: "header: path %20 sent as +", base: header, want: ErrSignatureMismatch, change: func(w *wireReq) { replaceQuery(w, "a%20b", "a+b") }},
		{name: "header: path / sent as %2F", base: header, want: ErrSignatureMismatch, change: func(w *wireReq) { replaceQuery(w, "dir/", "dir%2F") }},
		{name: "header: path escape in lowercase hex", base: header, want: ErrSignatureMismatch, change: func(w *wireReq) { replaceQuery(w, "%C3%BC", "%c3%bc") }},
		{name: "header: path with raw UTF-8 bytes for %C3%BC (bytes as received)", base: header, want: ErrSignatureMismatch, change: func(w *wireReq) { replaceQuery(w, "%C3%BC", "\u00fc") }},
		{name: "header: path with a dot segment", base: header, want: ErrSignatureMismatch, change: func(w *wireReq) { replaceQuery(w, "/dir/", "/dir/./") }},
		{name: "header: query parameter added", base: header, want: ErrSignatureMismatch, change: func(w *wireReq) { w.target += "&acl" }},
		{name: "header: query parameter removed", base: header, want: ErrSignatureMismatch, change: func(w *wireReq) { replaceQuery(w, "tagging=&", "") }},
		{name: "header: query value changed", base: header, want: ErrSignatureMismatch, change: func(w *wireReq) { replaceQuery(w, "PutObject", "PutObjecT") }},
		{name: "header: method changed", base: header, want: ErrSignatureMismatch, change: func(w *wireReq) { w.method = "POST" }},
		{name: "header: X-Amz-Date one second later", base: header, want: ErrSignatureMismatch, change: func(w *wireReq) { w.set("X-Amz-Date", "20260301T120001Z") }},
		{name: "header: X-Amz-Date a day later (scope date differs)", base: header, want: ErrMalformed, change: func(w *wireReq) { w.set("X-Amz-Date", "20260302T120000Z") }},
		{name: "header: region changed", base: header, want: ErrMalformed, change: func(w *wireReq) { authz(w, "/"+testRegion+"/", "/us-east-1/") }},
		{name: "header: service changed", base: header, want: ErrMalformed, change: func(w *wireReq) { authz(w, "/s3/", "/s4/") }},
		{name: "header: key id changed to another key", base: header, want: ErrSignatureMismatch, change: func(w *wireReq) { authz(w, "="+testKey+"/", "="+otherKey+"/") }},
		{name: "header: key id unknown", base: header, want: ErrUnknownKey, change: func(w *wireReq) { authz(w, "="+testKey+"/", "=nobody/") }},
		{name: "header: signature changed", base: header, want: ErrSignatureMismatch, change: func(w *wireReq) {
			a := w.get("Authorization")
			w.set("Authorization", lastHexFlipped(a))
		}},
		{name: "header: signature in uppercase hex", base: header, want: ErrMalformed, change: func(w *wireReq) {
			a := w.get("Authorization")
			i := strings.Index(a, "Signature=") + len("Signature=")
			w.set("Authorization", a[:i]+strings.ToUpper(a[i:]))
		}},
		{name: "header: x-amz-acl added unsigned", base: header, want: ErrUnsignedHeader, change: func(w *wireReq) { w.set("x-amz-acl", "public-read") }},
		{name: "header: x-amz-content-sha256 changed", base: header, want: ErrSignatureMismatch, change: func(w *wireReq) { w.set("X-Amz-Content-Sha256", UnsignedPayload) }},
		{name: "header: x-amz-content-sha256 removed", base: header, want: ErrPayloadHash, change: func(w *wireReq) {
			w.del("X-Amz-Content-Sha256")
			authz(w, "x-amz-content-sha256;", "")
		}},
		{name: "header: x-amz-content-sha256 neither hash nor known value", base: header, want: ErrPayloadHash, change: func(w *wireReq) { w.set("X-Amz-Content-Sha256", "STREAMING-SOMETHING") }},
		{name: "header: SigV4A payload", base: header, want: ErrAlgorithm, change: func(w *wireReq) {
			w.set("X-Amz-Content-Sha256", "STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD")
		}},
		{name: "header: host not signed", base: header, want: ErrUnsignedHeader, change: func(w *wireReq) { authz(w, "host;", "") }},
		{name: "header: x-amz-meta-owner dropped from SignedHeaders", base: header, want: ErrUnsignedHeader, change: func(w *wireReq) { authz(w, ";x-amz-meta-owner", "") }},
		{name: "header: SignedHeaders not sorted", base: header, want: ErrMalformed, change: func(w *wireReq) { authz(w, "content-length;content-type;host", "content-type;content-length;host") }},
		{name: "header: SignedHeaders with uppercase", base: header, want: ErrMalformed, change: func(w *wireReq) { authz(w, ";host;", ";Host;") }},
		{name: "header: X-Amz-Date removed", base: header, want: ErrMalformed, change: func(w *wireReq) { w.del("X-Amz-Date") }},
		{name: "header: two X-Amz-Date headers", base: header, want: ErrMalformed, change: func(w *wireReq) {
			w.header = append(w.header, [2]string{"X-Amz-Date", w.get("X-Amz-Date")})
		}},
		{name: "header: two Authorization headers", base: header, want: ErrMalformed, change: func(w *wireReq) {
			w.header = append(w.header, [2]string{"Authorization", w.get("Authorization")})
		}},
		{name: "header: a field repeated", base: header, want: ErrMalformed, change: func(w *wireReq) { w.set("Authorization", w.get("Authorization")+", Signature=00") }},
		{name: "header: replayed 16 min later", base: header, now: 16 * time.Minute, want: ErrSkew},
		{name: "header: dated 16 min ahead of the clock", base: header, now: -16 * time.Minute, want: ErrSkew},

		// Presigned.
		{name: "presigned: query value changed", base: presigned, want: ErrSignatureMismatch, change: func(w *wireReq) { replaceQuery(w, "prefix=a%20b", "prefix=a%20c") }},
		{name: "presigned: query parameter added", base: presigned, want: ErrSignatureMismatch, change: func(w *wireReq) { w.target += "&delimiter=%2F" }},
		{name: "presigned: query parameter removed", base: presigned, want: ErrSignatureMismatch, change: func(w *wireReq) { replaceQuery(w, "list-type=2&", "") }},
		{name: "presigned: path changed", base: presigned, want: ErrSignatureMismatch, change: func(w *wireReq) { replaceQuery(w, "/bucket?", "/bucket2?") }},
		{name: "presigned: method changed", base: presigned, want: ErrSignatureMismatch, change: func(w *wireReq) { w.method = "DELETE" }},
		{name: "presigned: X-Amz-Expires changed", base: presigned, want: ErrSignatureMismatch, change: func(w *wireReq) { replaceQuery(w, "X-Amz-Expires=900", "X-Amz-Expires=901") }},
		{name: "presigned: X-Amz-Date changed", base: presigned, want: ErrSignatureMismatch, change: func(w *wireReq) { replaceQuery(w, "T120000Z", "T120001Z") }},
		{name: "presigned: key id changed", base: presigned, want: ErrSignatureMismatch, change: func(w *wireReq) { replaceQuery(w, "="+testKey+"%2F", "="+otherKey+"%2F") }},
		{name: "presigned: region changed", base: presigned, want: ErrMalformedQuery, change: func(w *wireReq) { replaceQuery(w, testRegion, "us-east-1") }},
		{name: "presigned: signature changed", base: presigned, want: ErrSignatureMismatch, change: func(w *wireReq) {
			s := querySig(w)
			replaceQuery(w, s, lastHexFlipped(s))
		}},
		{name: "presigned: X-Amz-Signature twice", base: presigned, want: ErrMalformedQuery, change: func(w *wireReq) { w.target += "&X-Amz-Signature=" + querySig(w) }},
		{name: "presigned: x-amz-signature in another case too", base: presigned, want: ErrMalformedQuery, change: func(w *wireReq) { w.target += "&x-amz-signature=" + querySig(w) }},
		{name: "presigned: X-Amz-Algorithm removed", base: presigned, want: ErrMalformedQuery, change: func(w *wireReq) { replaceQuery(w, "X-Amz-Algorithm=AWS4-HMAC-SHA256&", "") }},
		{name: "presigned: x-amz-acl added unsigned", base: presigned, want: ErrUnsignedHeader, change: func(w *wireReq) { w.set("x-amz-acl", "public-read") }},
		{name: "presigned: signed header value changed", base: presigned, want: ErrSignatureMismatch, change: func(w *wireReq) { w.host = "other.example.test" }},
		{name: "presigned: expired", base: presigned, now: 901 * time.Second, want: ErrExpired},
		{name: "presigned: dated 16 min ahead of the clock", base: presigned, now: -16 * time.Minute, want: ErrSkew},
		{name: "presigned: expiry over 7 days", want: ErrMalformedQuery, base: func() wireReq {
			return sdkPresign(t, "127.0.0.1:1", "GET", "/bucket/k", "s3.example.test", nil, "604801", signTime)
		}},
		{name: "presigned: expiry 0", want: ErrMalformedQuery, base: func() wireReq {
			return sdkPresign(t, "127.0.0.1:1", "GET", "/bucket/k", "s3.example.test", nil, "0", signTime)
		}},
		{name: "presigned: expiry +60", want: ErrMalformedQuery, base: func() wireReq {
			return sdkPresign(t, "127.0.0.1:1", "GET", "/bucket/k", "s3.example.test", nil, "%2B60", signTime)
		}},
		{name: "presigned: expiry of exactly 7 days verifies", base: func() wireReq {
			return sdkPresign(t, "127.0.0.1:1", "GET", "/bucket/k", "s3.example.test", nil, "604800", signTime)
		}, now: 604800 * time.Second},

		// Where the credentials are.
		{name: "credentials in both header and query", base: header, want: ErrTwoCredentials, change: func(w *wireReq) {
			p := presigned()
			_, q, _ := strings.Cut(p.target, "?")
			w.target += "&" + q
		}},
		{name: "header credentials plus only X-Amz-Signature in the query", base: header, want: ErrTwoCredentials, change: func(w *wireReq) { w.target += "&X-Amz-Signature=00" }},
		{name: "presigned plus an empty Authorization header", base: presigned, want: ErrTwoCredentials, change: func(w *wireReq) { w.set("Authorization", "") }},
		{name: "query credentials spelled in lowercase only", base: presigned, want: ErrMalformedQuery, change: func(w *wireReq) {
			w.target = strings.ReplaceAll(w.target, "X-Amz-", "x-amz-")
		}},
		{name: "presigned: an auth parameter's name percent-encoded reads as the name", base: presigned, change: func(w *wireReq) {
			replaceQuery(w, "X-Amz-Signature=", "%58-Amz-Signature=")
		}},
		{name: "presigned: X-Amz-Signature twice, once percent-encoded", base: presigned, want: ErrMalformedQuery, change: func(w *wireReq) {
			w.target += "&%58-Amz-Signature=" + querySig(w)
		}},
		{name: "no credentials", want: ErrAnonymous, base: func() wireReq {
			return wireReq{method: "PUT", target: "/bucket/k", host: "s3.example.test", body: putBody}
		}},
		{name: "no credentials, signature headers without Authorization", base: header, want: ErrAnonymous, change: func(w *wireReq) { w.del("Authorization") }},
		{name: "SigV2 header", base: header, want: ErrAlgorithm, change: func(w *wireReq) { w.set("Authorization", "AWS "+testKey+":frJIUN8DYpKDtOLCwo//yllqDzg=") }},
		{name: "SigV2 query", want: ErrAlgorithm, base: func() wireReq {
			return wireReq{method: "GET", target: "/bucket/k?AWSAccessKeyId=" + testKey + "&Expires=1900000000&Signature=vjbyPxybdZaNmGa%2ByT272YEAiv4%3D", host: "s3.example.test"}
		}},
		{name: "SigV4A header", base: header, want: ErrAlgorithm, change: func(w *wireReq) { authz(w, "AWS4-HMAC-SHA256 ", "AWS4-ECDSA-P256-SHA256 ") }},
		{name: "SigV4A query", base: presigned, want: ErrAlgorithm, change: func(w *wireReq) { replaceQuery(w, "=AWS4-HMAC-SHA256", "=AWS4-ECDSA-P256-SHA256") }},
		{name: "another scheme in Authorization", base: header, want: ErrMalformed, change: func(w *wireReq) { w.set("Authorization", "Bearer abc") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, results := serve(t, verifierAt(signTime.Add(tc.now)))
			w := tc.base().clone()
			if tc.change != nil {
				tc.change(&w)
			}
			res := w.send(t, addr, results)
			switch {
			case tc.want == nil && res.err != nil:
				t.Fatalf("refused: %v", res.err)
			case tc.want != nil && !errors.Is(res.err, tc.want):
				t.Fatalf("got %v, want %v", res.err, tc.want)
			case tc.want != nil && res.auth != nil:
				t.Fatalf("an Auth with the error")
			}
			if res.err != nil {
				t.Logf("%s: %v", kind(res.err), res.err)
				if strings.Contains(res.err.Error(), testSecret) {
					t.Fatalf("the error names the secret")
				}
			}
		})
	}
}

// TestAWSDocumentedStreamingExample: the chunk-signed upload of the S3
// documentation (sigv4-streaming: its seed request, sent as documented,
// verifies, and the chunk signatures follow from the returned Auth) and the
// trailer signature of its trailer example.
func TestAWSDocumentedStreamingExample(t *testing.T) {
	v := &Verifier{Secrets: keys{"AKIAIOSFODNN7EXAMPLE": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"}, Region: "us-east-1",
		Now: func() time.Time { return time.Date(2013, 5, 24, 0, 5, 0, 0, time.UTC) }}
	addr, results := serve(t, v)
	chunk := func(n int, sig string) string {
		return fmt.Sprintf("%x;chunk-signature=%s\r\n%s\r\n", n, sig, strings.Repeat("a", n))
	}
	sigs := []string{
		"ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648",
		"0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497",
		"b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9",
	}
	body := chunk(65536, sigs[0]) + chunk(1024, sigs[1]) + chunk(0, sigs[2])
	w := wireReq{method: "PUT", target: "/examplebucket/chunkObject.txt", host: "s3.amazonaws.com", body: []byte(body), header: [][2]string{
		{"x-amz-date", "20130524T000000Z"},
		{"x-amz-storage-class", "REDUCED_REDUNDANCY"},
		{"Authorization", "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,SignedHeaders=content-encoding;content-length;host;x-amz-content-sha256;x-amz-date;x-amz-decoded-content-length;x-amz-storage-class,Signature=4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9"},
		{"x-amz-content-sha256", StreamingPayload},
		{"Content-Encoding", "aws-chunked"},
		{"x-amz-decoded-content-length", "66560"},
		{"Content-Length", "66824"},
	}}
	if len(body) != 66824 {
		t.Fatalf("the documented body is 66824 bytes, built %d", len(body))
	}
	res := w.send(t, addr, results)
	if res.err != nil {
		t.Fatal(res.err)
	}
	a := res.auth
	if a.PayloadHash != StreamingPayload || a.Signature != "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9" {
		t.Fatalf("auth %+v", a)
	}
	prev := a.Signature
	for i, n := range []int{65536, 1024, 0} {
		sum := sha256.Sum256([]byte(strings.Repeat("a", n)))
		got := a.ChunkSignature(prev, sum[:])
		if got != sigs[i] {
			t.Fatalf("chunk %d: %s, the documentation says %s", i, got, sigs[i])
		}
		prev = got
	}

	// The trailer example (sigv4-streaming-trailers): its final chunk's
	// signature and trailer line give its x-amz-trailer-signature.
	ta := &Auth{Date: a.Date, Scope: a.Scope, SigningKey: a.SigningKey}
	sum := sha256.Sum256([]byte("x-amz-checksum-crc32c:sOO8/Q==\n"))
	if got, want := ta.TrailerSignature("2ca2aba2005185cf7159c6277faf83795951dd77a3a99e6e65d5c9f85863f992", sum[:]),
		"d81f82fc3505edab99d459891051a732e8730629a2e4a59689829ca17fe2e435"; got != want {
		t.Fatalf("trailer signature %s, the documentation says %s", got, want)
	}
}

// sentinels are Verify's error classes; s3.Code maps each to its S3 code.
var sentinels = []error{ErrAnonymous, ErrUnknownKey, ErrSignatureMismatch, ErrSkew, ErrExpired, ErrMalformed,
	ErrTwoCredentials, ErrMalformedQuery, ErrUnsignedHeader, ErrAlgorithm, ErrPayloadHash}

// kind names the class of an error of Verify, "" for an error of none.
func kind(err error) string {
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return s.Error()
		}
	}
	return ""
}

func TestVerifierNeedsSecretsAndRegion(t *testing.T) {
	r := httptest.NewRequest("GET", "/bucket/k", nil)
	for _, v := range []*Verifier{{Region: testRegion}, {Secrets: testKeys}} {
		if _, err := v.Verify(r); err == nil || kind(err) != "" {
			t.Fatalf("%+v: %v", v, err)
		}
	}
}

// FuzzVerify: arbitrary Authorization headers, queries and dates never panic
// and never verify.
func FuzzVerify(f *testing.F) {
	w := sdkSign(f, "127.0.0.1:1", "GET", "/bucket/k?list-type=2", "s3.example.test", nil, nil, "", signTime)
	p := sdkPresign(f, "127.0.0.1:1", "GET", "/bucket/k?list-type=2", "s3.example.test", nil, "900", signTime)
	_, pq, _ := strings.Cut(p.target, "?")
	f.Add(w.get("Authorization"), "list-type=2", w.get("X-Amz-Date"), w.get("X-Amz-Content-Sha256"))
	f.Add("", pq, "", "")
	f.Add(w.get("Authorization"), pq, "20260301T120000Z", UnsignedPayload)
	f.Add("AWS4-HMAC-SHA256 Credential=worker1/20260301/eu-west-1/s3/aws4_request,SignedHeaders=host,Signature=", "X-Amz-Signature=%zz", "2026", "")
	f.Add("AWS worker1:abc", "AWSAccessKeyId=a&Signature=b", "", "")
	v := verifierAt(signTime)
	f.Fuzz(func(t *testing.T, authz, rawQuery, date, payload string) {
		r := &http.Request{Method: "GET", Host: "s3.example.test", RequestURI: "/bucket/fuzz?" + rawQuery,
			URL: &url.URL{Path: "/bucket/fuzz", RawQuery: rawQuery}, Header: http.Header{}}
		if authz != "" {
			r.Header.Set("Authorization", authz)
		}
		if date != "" {
			r.Header.Set("X-Amz-Date", date)
		}
		if payload != "" {
			r.Header.Set("X-Amz-Content-Sha256", payload)
		}
		a, err := v.Verify(r)
		if err == nil || a != nil {
			t.Fatalf("verified: %+v", a)
		}
		if kind(err) == "" || strings.Contains(err.Error(), testSecret) {
			t.Fatalf("error %v", err)
		}
	})
}

// TestRotatedSecret: a key whose secret changed (same id) no longer
// verifies a request signed with the old secret, nor does the old one with
// the new: the cached signing keys are the secret's, not the id's.
func TestRotatedSecret(t *testing.T) {
	now := time.Now().UTC()
	sign := func(secret string) *http.Request {
		r, _ := http.NewRequest(http.MethodGet, "http://bkt.example.com/key", nil)
		r.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
		if err := v4.NewSigner().SignHTTP(t.Context(), aws.Credentials{AccessKeyID: "rot", SecretAccessKey: secret}, r, "UNSIGNED-PAYLOAD", "s3", testRegion, now); err != nil {
			t.Fatal(err)
		}
		r.RequestURI = "/key"
		return r
	}
	for _, c := range []struct {
		current, signedWith string
		ok                  bool
	}{{"old-secret-0123456789", "old-secret-0123456789", true}, {"new-secret-0123456789", "old-secret-0123456789", false},
		{"new-secret-0123456789", "new-secret-0123456789", true}, {"old-secret-0123456789", "new-secret-0123456789", false}} {
		v := &Verifier{Secrets: keys{"rot": c.current}, Region: testRegion, Now: func() time.Time { return now }}
		_, err := v.Verify(sign(c.signedWith))
		if (err == nil) != c.ok {
			t.Errorf("secret now %q, signed with %q: %v; want ok=%v", c.current, c.signedWith, err, c.ok)
		}
	}
}

// TestParseAmzDate checks the X-Amz-Date parser against time.Parse.
func TestParseAmzDate(t *testing.T) {
	for _, s := range []string{"20261201T120000Z", "20240229T235959Z", "00010101T000000Z", "99991231T235959Z",
		"20230229T120000Z", "20261301T120000Z", "20261200T120000Z", "20261201T240000Z", "20261201T126000Z", "20261201T120060Z",
		"20261201 120000Z", "20261201T120000z", "2026120AT120000Z", "20261201T1200000", "20261201T12000Z", "", "+0261201T120000Z"} {
		want, err := time.Parse(timeFormat, s)
		got, ok := parseAmzDate(s)
		if ok != (err == nil) || ok && !got.Equal(want) {
			t.Errorf("parseAmzDate(%q) = %v, %v; time.Parse: %v, %v", s, got, ok, want, err)
		}
	}
}

// TestSignedListsCachedOnlyWhenVerified: the cache of parsed SignedHeaders
// lists takes a list only from a request whose signature verified, and only
// a short one: requests refused for their signature, each with its own list,
// leave it as it was (anyone can send a list).
func TestSignedListsCachedOnlyWhenVerified(t *testing.T) {
	size := func() int {
		signedLists.Lock()
		defer signedLists.Unlock()
		return len(signedLists.m)
	}
	signedLists.Lock()
	clear(signedLists.m)
	signedLists.Unlock()
	v := verifierAt(signTime)
	date := signTime.Format(timeFormat)
	for i := range 50 {
		r := httptest.NewRequest("GET", "/bucket/key", nil)
		r.Header.Set("X-Amz-Date", date)
		r.Header.Set("X-Amz-Content-Sha256", UnsignedPayload)
		r.Header.Set("Authorization", fmt.Sprintf("AWS4-HMAC-SHA256 Credential=%s/%s/%s/s3/aws4_request, "+
			"SignedHeaders=host;x-amz-content-sha256;x-amz-date;x-list-%03d, Signature=%s", testKey, date[:8], testRegion, i, strings.Repeat("0", 64)))
		if _, err := v.Verify(r); !errors.Is(err, ErrSignatureMismatch) {
			t.Fatalf("a request with a zero signature: %v; want ErrSignatureMismatch", err)
		}
	}
	if n := size(); n != 0 {
		t.Fatalf("%d SignedHeaders lists cached from refused requests; want none", n)
	}
	for _, long := range []bool{false, true} {
		r := httptest.NewRequest("GET", "/bucket/key", nil)
		if long {
			r.Header.Set("X-Long", strings.Repeat("v", 10))
			for i := range 100 {
				r.Header.Set(fmt.Sprintf("X-Long-%03d", i), "v")
			}
		}
		r.Header.Set("X-Amz-Content-Sha256", UnsignedPayload)
		if err := v4.NewSigner().SignHTTP(context.Background(), creds, r, UnsignedPayload, "s3", testRegion, signTime); err != nil {
			t.Fatal(err)
		}
		if _, err := v.Verify(r); err != nil {
			t.Fatalf("a request signed by the SDK (long list %v): %v", long, err)
		}
	}
	if n := size(); n != 1 {
		t.Fatalf("%d lists cached after a verified request with a short list and one with a long list; want 1", n)
	}
}
