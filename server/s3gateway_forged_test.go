package server_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fenceproxy/fenceproxy/client"
	"github.com/fenceproxy/fenceproxy/internal/s3backend"
)

// countingForwarder is a TCP forwarder in front of the store that counts
// the bytes the proxy sends through it: a request refused by the proxy
// adds none (TLS passes through untouched).
type countingForwarder struct {
	URL  string // the store's URL with the forwarder's address
	sent atomic.Int64
}

func newCountingForwarder(t *testing.T, target string) *countingForwarder {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &countingForwarder{URL: u.Scheme + "://" + ln.Addr().String()}
	var mu sync.Mutex
	var conns []net.Conn
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			down, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", u.Host)
			if err != nil {
				down.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, down, up)
			mu.Unlock()
			wg.Add(2)
			go func() {
				defer wg.Done()
				buf := make([]byte, 32<<10)
				for {
					n, err := down.Read(buf)
					f.sent.Add(int64(n))
					if n > 0 {
						if _, werr := up.Write(buf[:n]); werr != nil {
							break
						}
					}
					if err != nil {
						break
					}
				}
				up.Close()
			}()
			go func() {
				defer wg.Done()
				_, _ = io.Copy(down, up)
				down.Close()
			}()
		}
	}()
	return f
}

// Sent is the number of bytes the proxy has sent to the store so far.
func (f *countingForwarder) Sent() int64 { return f.sent.Load() }

// quiet waits until no byte has gone through the forwarder for 200 ms (what
// an earlier exchange still sends: a TLS record, an HTTP/2 frame) and
// returns the count.
func (f *countingForwarder) quiet() int64 {
	n := f.Sent()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		// asserting nothing happens: 200 ms without a byte is the baseline.
		time.Sleep(200 * time.Millisecond)
		m := f.Sent()
		if m == n {
			return m
		}
		n = m
	}
	return n
}

// httpClient is a plain HTTPS client of the proxy.
func (g *gatewayRig) httpClient() *http.Client {
	return &http.Client{Transport: &http.Transport{TLSClientConfig: g.pool}, Timeout: 30 * time.Second}
}

// s3Signer is aws-sdk-go-v2's v4 signer as its S3 client configures it
// (the path is signed as sent, not escaped again).
var s3Signer = v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })

// signedRequest is a request of target (path and query) to the proxy with
// body, headers hdr, x-amz-content-sha256 payload ("" for the body's hex
// SHA-256) and X-Fencing-Token tok (0: none), signed at when with the
// worker's key by SignHTTP.
func (g *gatewayRig) signedRequest(t *testing.T, id, secret, method, target string, body []byte, hdr map[string]string, payload string, tok uint64, when time.Time) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, "https://"+g.in.Proxy+target, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	if tok != 0 {
		req.Header.Set("X-Fencing-Token", strconv.FormatUint(tok, 10))
	}
	if payload == "" {
		sum := sha256.Sum256(body)
		payload = hex.EncodeToString(sum[:])
	}
	req.Header.Set("X-Amz-Content-Sha256", payload)
	creds := aws.Credentials{AccessKeyID: id, SecretAccessKey: secret}
	if err := s3Signer.SignHTTP(context.Background(), creds, req, payload, "s3", s3backend.Region, when); err != nil {
		t.Fatal(err)
	}
	return req
}

// presigned is a presigned URL (PresignHTTP, UNSIGNED-PAYLOAD) of target
// for method, valid for expires seconds from when, the token tok in the
// query (signed).
func (g *gatewayRig) presigned(t *testing.T, id, secret, method, target string, tok uint64, expires int, when time.Time) string {
	t.Helper()
	sep := "?"
	if strings.Contains(target, "?") {
		sep = "&"
	}
	target += sep + "X-Amz-Expires=" + strconv.Itoa(expires)
	if tok != 0 {
		target += "&X-Fencing-Token=" + strconv.FormatUint(tok, 10)
	}
	req, err := http.NewRequest(method, "https://"+g.in.Proxy+target, nil)
	if err != nil {
		t.Fatal(err)
	}
	u, _, err := s3Signer.PresignHTTP(context.Background(), aws.Credentials{AccessKeyID: id, SecretAccessKey: secret},
		req, "UNSIGNED-PAYLOAD", "s3", s3backend.Region, when)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

var s3CodeRE = regexp.MustCompile(`<Code>([^<]*)</Code>`)

// send sends req and returns the status and the S3 code of the answer (the
// status 0 and the error's text when no answer came).
func (g *gatewayRig) send(t *testing.T, req *http.Request) (int, string) {
	t.Helper()
	res, err := g.httpClient().Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	code := ""
	if m := s3CodeRE.FindSubmatch(b); m != nil {
		code = string(m[1])
	}
	return res.StatusCode, code
}

// object returns the store's bytes of bucket/key read with the root keys,
// ok false when there is no such object.
func (g *gatewayRig) object(t *testing.T, bucket, key string) (string, bool) {
	t.Helper()
	out, err := g.backend.Client().GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		if strings.Contains(err.Error(), "NoSuchKey") {
			return "", false
		}
		t.Fatalf("GetObject %s/%s at the store: %v", bucket, key, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b), true
}

// fence returns the fence of resource as the control API reports it ("none"
// without one).
func (g *gatewayRig) fence(t *testing.T, resource string) string {
	t.Helper()
	tok, status := s3FenceOf(t, g.in, resource)
	if status == http.StatusNotFound {
		return "none"
	}
	if status != http.StatusOK {
		t.Fatalf("the fence of %s: status %d", resource, status)
	}
	return tok
}

// sigV2 is a SigV2 signature (HMAC-SHA1 over the string to sign) with secret.
func sigV2(secret, stringToSign string) string {
	m := hmac.New(sha1.New, []byte(secret))
	m.Write([]byte(stringToSign))
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// TestS3GatewayForgedRequests sends requests correctly signed with worker1's
// proxy key by aws-sdk-go-v2's v4 signer, each then changed in one way, to
// the gateway: each is refused with its S3 code, forwards nothing (no byte
// reaches the store), raises no fence and leaves the object as it was. The
// two changes the proxy cannot see before forwarding (a hex-hash PUT's body,
// a signed stream's chunk) are refused by the store or cut before the store
// has the body whole; the object stays.
func TestS3GatewayForgedRequests(t *testing.T) {
	g := startGateway(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const original = "original object of 5"
	if _, err := g.worker("worker1", gwSecret1).PutObject(client.WithToken(ctx, 5), &s3.PutObjectInput{Bucket: aws.String("jobs"),
		Key: aws.String("w1/target"), Body: strings.NewReader(original)}); err != nil {
		t.Fatalf("PutObject of the original with 5: %v", err)
	}
	now := func() time.Time { return time.Now().UTC() }
	sign := func(method, target string, body []byte, hdr map[string]string, tok uint64, when time.Time) *http.Request {
		return g.signedRequest(t, "worker1", gwSecret1, method, target, body, hdr, "", tok, when)
	}
	body := []byte("forged object of 9")

	for _, row := range []struct {
		name    string
		req     func() *http.Request
		status  int
		code    string
		reaches bool // the change is in the body: the store gets the request
	}{
		{name: "a signed header's value changed", status: 403, code: "SignatureDoesNotMatch", req: func() *http.Request {
			r := sign("PUT", "/jobs/w1/target", body, map[string]string{"X-Amz-Meta-Note": "a"}, 9, now())
			r.Header.Set("X-Amz-Meta-Note", "b")
			return r
		}},
		{name: "the signed fencing token changed", status: 403, code: "SignatureDoesNotMatch", req: func() *http.Request {
			r := sign("PUT", "/jobs/w1/target", body, nil, 9, now())
			r.Header.Set("X-Fencing-Token", "10")
			return r
		}},
		{name: "a path byte changed", status: 403, code: "SignatureDoesNotMatch", req: func() *http.Request {
			r := sign("PUT", "/jobs/w1/target", body, nil, 9, now())
			r.URL.Path = "/jobs/w1/tarGet"
			return r
		}},
		{name: "a query parameter added", status: 403, code: "SignatureDoesNotMatch", req: func() *http.Request {
			r := sign("PUT", "/jobs/w1/target", body, nil, 9, now())
			r.URL.RawQuery = "x-id=PutObject"
			return r
		}},
		{name: "a query parameter removed", status: 403, code: "SignatureDoesNotMatch", req: func() *http.Request {
			r := sign("PUT", "/jobs/w1/target?x-id=PutObject", body, nil, 9, now())
			r.URL.RawQuery = ""
			return r
		}},
		{name: "a query parameter changed (a listing's prefix)", status: 403, code: "SignatureDoesNotMatch", req: func() *http.Request {
			r := sign("GET", "/jobs?list-type=2&prefix=w1%2F", nil, nil, 0, now())
			r.URL.RawQuery = "list-type=2&prefix=w1%2Ft"
			return r
		}},
		{name: "the method changed (GET to DELETE)", status: 403, code: "SignatureDoesNotMatch", req: func() *http.Request {
			r := sign("GET", "/jobs/w1/target", nil, nil, 9, now())
			r.Method = http.MethodDelete
			return r
		}},
		{name: "replayed past the 15 min skew (signed 16 min ago)", status: 403, code: "RequestTimeTooSkewed", req: func() *http.Request {
			return sign("PUT", "/jobs/w1/target", body, nil, 9, now().Add(-16*time.Minute))
		}},
		{name: "an expired presigned URL", status: 403, code: "AccessDenied", req: func() *http.Request {
			u := g.presigned(t, "worker1", gwSecret1, "PUT", "/jobs/w1/target", 9, 60, now().Add(-2*time.Minute))
			r, _ := http.NewRequest("PUT", u, bytes.NewReader(body))
			return r
		}},
		{name: "a presigned URL valid for 7 days + 1 s", status: 400, code: "AuthorizationQueryParametersError", req: func() *http.Request {
			u := g.presigned(t, "worker1", gwSecret1, "PUT", "/jobs/w1/target", 9, 7*24*3600+1, now())
			r, _ := http.NewRequest("PUT", u, bytes.NewReader(body))
			return r
		}},
		{name: "an unsigned x-amz-acl header added", status: 403, code: "AccessDenied", req: func() *http.Request {
			r := sign("PUT", "/jobs/w1/target", body, nil, 9, now())
			r.Header.Set("X-Amz-Acl", "public-read")
			return r
		}},
		{name: "credentials in both the header and the query", status: 403, code: "AccessDenied", req: func() *http.Request {
			r := sign("PUT", "/jobs/w1/target", body, nil, 9, now())
			u, _ := url.Parse(g.presigned(t, "worker1", gwSecret1, "PUT", "/jobs/w1/target", 9, 60, now()))
			r.URL.RawQuery = u.RawQuery
			return r
		}},
		{name: "SigV2 in the header", status: 400, code: "InvalidRequest", req: func() *http.Request {
			r, _ := http.NewRequest("PUT", "https://"+g.in.Proxy+"/jobs/w1/target", bytes.NewReader(body))
			date := time.Now().UTC().Format(http.TimeFormat)
			r.Header.Set("Date", date)
			r.Header.Set("X-Fencing-Token", "9")
			r.Header.Set("Authorization", "AWS worker1:"+sigV2(gwSecret1, "PUT\n\n\n"+date+"\n/jobs/w1/target"))
			return r
		}},
		{name: "SigV2 in the query", status: 400, code: "InvalidRequest", req: func() *http.Request {
			exp := strconv.FormatInt(time.Now().Add(time.Minute).Unix(), 10)
			q := url.Values{"AWSAccessKeyId": {"worker1"}, "Expires": {exp},
				"Signature": {sigV2(gwSecret1, "PUT\n\n\n"+exp+"\n/jobs/w1/target")}, "X-Fencing-Token": {"9"}}
			r, _ := http.NewRequest("PUT", "https://"+g.in.Proxy+"/jobs/w1/target?"+q.Encode(), bytes.NewReader(body))
			return r
		}},
		// The proxy cannot see a changed body before it forwards: the store
		// checks the hex hash the worker signed (the token is the current
		// one, so that no fence moves).
		{name: "a hex-hash PUT's body changed", status: 400, code: "XAmzContentSHA256Mismatch", reaches: true, req: func() *http.Request {
			r := sign("PUT", "/jobs/w1/target", body, nil, 5, now())
			r.Body = io.NopCloser(bytes.NewReader(bytes.ToUpper(body)))
			return r
		}},
	} {
		t.Run(row.name, func(t *testing.T) {
			sent := g.fwd.quiet()
			status, code := g.send(t, row.req())
			forwarded := g.fwd.Sent() - sent
			t.Logf("%s: %d %s, %d bytes forwarded", row.name, status, code, forwarded)
			if status != row.status || code != row.code {
				t.Errorf("%d %s; want %d %s", status, code, row.status, row.code)
			}
			if !row.reaches && forwarded != 0 {
				t.Errorf("%d bytes reached the store; want none", forwarded)
			}
			if row.reaches && forwarded == 0 {
				t.Errorf("nothing reached the store; the store was to refuse this one")
			}
			if got, _ := g.object(t, "jobs", "w1/target"); got != original {
				t.Errorf("the object is now %q; want %q", got, original)
			}
			if _, ok := g.object(t, "jobs", "w1/tarGet"); ok {
				t.Errorf("jobs/w1/tarGet exists")
			}
			if f := g.fence(t, "jobs/w1/target"); f != "5" {
				t.Errorf("the fence of jobs/w1/target is %s; want 5", f)
			}
			if f := g.fence(t, "jobs/w1/tarGet"); f != "none" {
				t.Errorf("the fence of jobs/w1/tarGet is %s; want none", f)
			}
		})
	}

	// A chunk byte of a signed stream: the proxy decodes it and stops at the
	// bad chunk, before the store has the body whole.
	t.Run("a signed stream's chunk byte changed", func(t *testing.T) {
		chunks := [][]byte{bytes.Repeat([]byte("a"), 64<<10), bytes.Repeat([]byte("b"), 64<<10), bytes.Repeat([]byte("c"), 1000)}
		sent := g.fwd.quiet()
		status, code, err := g.streamPut(t, "w1/target", 5, false, chunks, func(enc []byte) {
			enc[bytes.Index(enc, bytes.Repeat([]byte("b"), 64))+100] = 'B' // in the second chunk
		})
		forwarded := g.fwd.Sent() - sent
		t.Logf("a changed chunk byte: %d %s %v, %d bytes forwarded", status, code, err, forwarded)
		if status != http.StatusBadRequest || code != "IncompleteBody" {
			t.Errorf("%d %s %v; want 400 IncompleteBody", status, code, err)
		}
		if forwarded >= 128<<10 {
			t.Errorf("%d bytes reached the store; want less than the first two chunks", forwarded)
		}
		if got, _ := g.object(t, "jobs", "w1/target"); got != original {
			t.Errorf("the object is now %d bytes; want the original", len(got))
		}
		if f := g.fence(t, "jobs/w1/target"); f != "5" {
			t.Errorf("the fence of jobs/w1/target is %s; want 5", f)
		}
	})
}

// streamPut sends chunks to jobs/key as a STREAMING-AWS4-HMAC-SHA256-PAYLOAD
// body (with a crc32 trailer: the -TRAILER form) signed with worker1's key,
// the seed by SignHTTP, the chunks by v4.StreamSigner, the trailer per the
// AWS spec; change (nil: none) alters the encoded body before it is sent.
// It returns the status and S3 code, or the client's error.
func (g *gatewayRig) streamPut(t *testing.T, key string, tok uint64, trailer bool, chunks [][]byte, change func([]byte)) (int, string, error) {
	t.Helper()
	form := "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
	if trailer {
		form += "-TRAILER"
	}
	payload := bytes.Join(chunks, nil)
	hdr := map[string]string{"Content-Encoding": "aws-chunked", "X-Amz-Decoded-Content-Length": strconv.Itoa(len(payload))}
	if trailer {
		hdr["X-Amz-Trailer"] = "x-amz-checksum-crc32"
	}
	when := time.Now().UTC().Truncate(time.Second)
	// The encoded length does not depend on the seed.
	zero := strings.Repeat("0", 64)
	n := len(encodeSignedChunks(t, zero, when, trailer, chunks))
	req, err := http.NewRequest(http.MethodPut, "https://"+g.in.Proxy+"/jobs/"+key, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	req.Header.Set("X-Fencing-Token", strconv.FormatUint(tok, 10))
	req.Header.Set("X-Amz-Content-Sha256", form)
	req.ContentLength = int64(n)
	if err := s3Signer.SignHTTP(context.Background(), aws.Credentials{AccessKeyID: "worker1", SecretAccessKey: gwSecret1}, req, form, "s3", s3backend.Region, when); err != nil {
		t.Fatal(err)
	}
	_, seed, _ := strings.Cut(req.Header.Get("Authorization"), "Signature=")
	enc := encodeSignedChunks(t, seed, when, trailer, chunks)
	if change != nil {
		change(enc)
	}
	req.Body = io.NopCloser(bytes.NewReader(enc))
	req.GetBody = nil
	res, err := g.httpClient().Do(req)
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	code := ""
	if m := s3CodeRE.FindSubmatch(b); m != nil {
		code = string(m[1])
	}
	return res.StatusCode, code, nil
}

// encodeSignedChunks frames chunks as aws-chunked with chunk signatures
// chained from seed (worker1's key, signed at when), then the final chunk,
// and with trailer a crc32 checksum trailer and its signature.
func encodeSignedChunks(t *testing.T, seed string, when time.Time, trailer bool, chunks [][]byte) []byte {
	t.Helper()
	seedBytes, err := hex.DecodeString(seed)
	if err != nil {
		t.Fatal(err)
	}
	creds := aws.Credentials{AccessKeyID: "worker1", SecretAccessKey: gwSecret1}
	ss := v4.NewStreamSigner(creds, "s3", s3backend.Region, seedBytes)
	prev := seed
	var out bytes.Buffer
	for _, c := range append(chunks, nil) {
		sig, err := ss.GetSignature(context.Background(), nil, c, when)
		if err != nil {
			t.Fatal(err)
		}
		prev = hex.EncodeToString(sig)
		fmt.Fprintf(&out, "%x;chunk-signature=%s\r\n", len(c), prev)
		if len(c) > 0 {
			out.Write(c)
			out.WriteString("\r\n")
		}
	}
	if trailer {
		line := "x-amz-checksum-crc32:" + crc32Base64(bytes.Join(chunks, nil))
		mac := func(k []byte, s string) []byte { m := hmac.New(sha256.New, k); m.Write([]byte(s)); return m.Sum(nil) }
		day := when.Format("20060102")
		k := mac(mac(mac(mac([]byte("AWS4"+gwSecret1), day), s3backend.Region), "s3"), "aws4_request")
		h := sha256.Sum256([]byte(line + "\n"))
		scope := day + "/" + s3backend.Region + "/s3/aws4_request"
		sig := mac(k, "AWS4-HMAC-SHA256-TRAILER\n"+when.Format("20060102T150405Z")+"\n"+scope+"\n"+prev+"\n"+hex.EncodeToString(h[:]))
		fmt.Fprintf(&out, "%s\r\nx-amz-trailer-signature:%s\r\n", line, hex.EncodeToString(sig))
	}
	out.WriteString("\r\n")
	return out.Bytes()
}

// crc32Base64 is the x-amz-checksum-crc32 value of data.
func crc32Base64(data []byte) string {
	return base64.StdEncoding.EncodeToString(binary.BigEndian.AppendUint32(nil, crc32.ChecksumIEEE(data)))
}
