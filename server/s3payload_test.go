package server_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/fenceproxy/fenceproxy/client"
	"github.com/fenceproxy/fenceproxy/internal/s3backend"
)

// The payload hashes of SigV4 (x-amz-content-sha256) that are no hash.
const (
	s3UnsignedPayload          = "UNSIGNED-PAYLOAD"
	s3StreamingSigned          = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
	s3StreamingUnsignedTrailer = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
)

// s3SentHeaders records, per PutObject an SDK client sends, the headers
// that say its payload form.
type s3SentHeaders struct {
	mu   sync.Mutex
	sent []http.Header
}

func (r *s3SentHeaders) option(o *s3.Options) {
	o.APIOptions = append(o.APIOptions, func(st *middleware.Stack) error {
		return st.Finalize.Add(middleware.FinalizeMiddlewareFunc("recordPayloadForm",
			func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
				if req, ok := in.Request.(*smithyhttp.Request); ok {
					r.mu.Lock()
					r.sent = append(r.sent, req.Header.Clone())
					r.mu.Unlock()
				}
				return next.HandleFinalize(ctx, in)
			}), middleware.After)
	})
}

func (r *s3SentHeaders) last() http.Header {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.sent) == 0 {
		return http.Header{}
	}
	return r.sent[len(r.sent)-1]
}

// s3Signed is a request to the proxy signed like an S3 client signs it, for
// the backend's credentials and the proxy's Host.
type s3Signed struct {
	req   *http.Request
	seed  string // the Authorization header's signature
	date  string // X-Amz-Date
	scope string // {day}/{region}/s3/aws4_request
	key   []byte // the SigV4 signing key of the scope
}

// signedPut returns PUT /{bucket}/{key} to the proxy with token, headers,
// a body of length n (the body is set later for streaming forms) and
// payloadHash as x-amz-content-sha256, signed with aws-sdk-go-v2's v4 signer.
func (p *s3Pass) signedPut(t *testing.T, bucket, key string, token uint64, n int64, payloadHash string, header http.Header) *s3Signed {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, p.endpoint+"/"+bucket+"/"+key, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = n
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("X-Fencing-Token", strconv.FormatUint(token, 10))
	req.Header.Set("X-Amz-Content-Sha256", payloadHash)
	now := time.Now().UTC()
	// S3 signs the path as sent, escaped once (as the S3 SDKs do).
	creds := aws.Credentials{AccessKeyID: p.backend.AccessKey, SecretAccessKey: p.backend.SecretKey}
	if err := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true }).SignHTTP(context.Background(), creds, req, payloadHash, "s3", s3backend.Region, now); err != nil {
		t.Fatal(err)
	}
	auth := req.Header.Get("Authorization")
	i := strings.LastIndex(auth, "Signature=")
	if i < 0 {
		t.Fatalf("no signature in %q", auth)
	}
	day := now.Format("20060102")
	k := s3HMAC([]byte("AWS4"+p.backend.SecretKey), day)
	for _, s := range []string{s3backend.Region, "s3", "aws4_request"} {
		k = s3HMAC(k, s)
	}
	return &s3Signed{req: req, seed: auth[i+len("Signature="):], date: req.Header.Get("X-Amz-Date"),
		scope: day + "/" + s3backend.Region + "/s3/aws4_request", key: k}
}

// send sends the request with body through the proxy and returns the
// status and the answer's body.
func (p *s3Pass) send(t *testing.T, s *s3Signed, body []byte) (int, string) {
	t.Helper()
	if int64(len(body)) != s.req.ContentLength {
		t.Fatalf("body of %d bytes for a Content-Length of %d", len(body), s.req.ContentLength)
	}
	s.req.Body = io.NopCloser(bytes.NewReader(body))
	resp, err := p.dialClient().Do(s.req)
	if err != nil {
		t.Fatalf("PUT %s: %v", s.req.URL, err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(answer)
}

func s3HMAC(key []byte, data string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(data))
	return h.Sum(nil)
}

func s3SHA256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// s3ChunkSize is the data size of every chunk of a streaming body but the
// last (S3's minimum is 8 KiB).
const s3ChunkSize = 64 << 10

// s3Chunks splits body into s3ChunkSize chunks followed by the empty one.
func s3Chunks(body []byte) [][]byte {
	var chunks [][]byte
	for len(body) > 0 {
		n := min(len(body), s3ChunkSize)
		chunks = append(chunks, body[:n])
		body = body[n:]
	}
	return append(chunks, nil)
}

// s3SignedChunkedLength is the length of body in STREAMING-AWS4-HMAC-SHA256-PAYLOAD
// encoding: per chunk "{hex size};chunk-signature={64 hex}\r\n{data}\r\n".
func s3SignedChunkedLength(body []byte) int64 {
	var n int64
	for _, c := range s3Chunks(body) {
		n += int64(len(strconv.FormatInt(int64(len(c)), 16)) + len(";chunk-signature=") + 64 + 2 + len(c) + 2)
	}
	return n
}

// s3SignedChunked encodes body as aws-chunked with chunk signatures, as the
// SigV4 streaming spec defines them: each chunk's signature signs
// "AWS4-HMAC-SHA256-PAYLOAD\n{date}\n{scope}\n{previous signature}\n{SHA-256
// of the empty string}\n{SHA-256 of the chunk's data}" with the signing key,
// the first one's previous signature being the seed (the Authorization
// header's). The signature of chunk number corrupt (-1: none) is computed
// over other data, as a body altered on the way would be.
func s3SignedChunked(s *s3Signed, body []byte, corrupt int) []byte {
	var out bytes.Buffer
	prev := s.seed
	empty := s3SHA256Hex(nil)
	for i, c := range s3Chunks(body) {
		signed := c
		if i == corrupt {
			signed = append(slices.Clone(c), '!')
		}
		sts := strings.Join([]string{"AWS4-HMAC-SHA256-PAYLOAD", s.date, s.scope, prev, empty, s3SHA256Hex(signed)}, "\n")
		prev = hex.EncodeToString(s3HMAC(s.key, sts))
		fmt.Fprintf(&out, "%x;chunk-signature=%s\r\n", len(c), prev)
		out.Write(c)
		out.WriteString("\r\n")
	}
	return out.Bytes()
}

// s3UnsignedTrailer encodes body as aws-chunked without signatures, with
// the trailer x-amz-checksum-crc32 (STREAMING-UNSIGNED-PAYLOAD-TRAILER).
func s3UnsignedTrailer(body []byte, crc string) []byte {
	var out bytes.Buffer
	for _, c := range s3Chunks(body) {
		fmt.Fprintf(&out, "%x\r\n", len(c))
		out.Write(c)
		if len(c) > 0 {
			out.WriteString("\r\n")
		}
	}
	fmt.Fprintf(&out, "x-amz-checksum-crc32:%s\r\n\r\n", crc)
	return out.Bytes()
}

func s3CRC32(b []byte) string {
	return base64.StdEncoding.EncodeToString(binary.BigEndian.AppendUint32(nil, crc32.ChecksumIEEE(b)))
}

// stored returns the object's bytes read straight from versitygw, or
// "" when it has none.
func (p *s3Pass) stored(ctx context.Context, t *testing.T, bucket, key string) string {
	t.Helper()
	out, err := p.backend.Client().GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	var nsk *s3types.NoSuchKey
	if errors.As(err, &nsk) {
		return ""
	}
	if err != nil {
		t.Fatalf("versitygw: GetObject %s/%s: %v", bucket, key, err)
	}
	defer out.Body.Close()
	b, _ := io.ReadAll(out.Body)
	return string(b)
}

// TestS3PassRealPayloadForms: every payload form of SigV4 and S3 passes
// through a whole fenceproxy in pass mode unchanged, and versitygw verifies
// it: a hex SHA-256 payload hash, UNSIGNED-PAYLOAD,
// STREAMING-AWS4-HMAC-SHA256-PAYLOAD (chunk signatures built here per the
// spec over the v4 signer's seed signature; a wrong one refused by
// versitygw), STREAMING-UNSIGNED-PAYLOAD-TRAILER over plain HTTP (a wrong
// trailing CRC32 refused), x-amz-checksum-crc32 and -sha256 (a wrong one
// refused), Content-MD5 (a wrong one refused), each for a body the proxy
// reads ahead and one past its 64 KiB read-ahead that it streams.
// (TestS3RealSDKDefaultsOverTLS sends the trailer form as the SDK does over
// TLS; TestS3PassRealExpectContinue has Expect: 100-continue.)
func TestS3PassRealPayloadForms(t *testing.T) {
	p := startS3Pass(t, nil, "forms")
	var rec s3SentHeaders
	c := p.client(true, rec.option)
	unsigned := p.client(true, rec.option, func(o *s3.Options) {
		o.APIOptions = append(o.APIOptions, v4.SwapComputePayloadSHA256ForUnsignedPayloadMiddleware)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	sizes := map[string][]byte{
		"small":   []byte("a small body"),
		"200 KiB": bytes.Repeat([]byte("0123456789abcdef"), 200<<10/16), // streamed, several chunks
	}
	var token uint64 = 10
	next := func() uint64 { token++; return token }
	want := func(t *testing.T, key, body string) {
		t.Helper()
		if got := p.stored(ctx, t, "forms", key); got != body {
			t.Errorf("versitygw holds %d bytes for %s, want the %d sent", len(got), key, len(body))
		}
	}

	for name, body := range sizes {
		t.Run("hex SHA-256/"+name, func(t *testing.T) {
			key := "hex/" + name
			if _, err := c.PutObject(client.WithToken(ctx, next()), &s3.PutObjectInput{Bucket: aws.String("forms"), Key: aws.String(key), Body: bytes.NewReader(body)}); err != nil {
				t.Fatalf("PutObject: %v", err)
			}
			if h := rec.last().Get("X-Amz-Content-Sha256"); h != s3SHA256Hex(body) {
				t.Errorf("sent x-amz-content-sha256 %q, not the body's hash", h)
			}
			want(t, key, string(body))
		})
		t.Run("UNSIGNED-PAYLOAD/"+name, func(t *testing.T) {
			key := "unsigned/" + name
			if _, err := unsigned.PutObject(client.WithToken(ctx, next()), &s3.PutObjectInput{Bucket: aws.String("forms"), Key: aws.String(key), Body: bytes.NewReader(body)}); err != nil {
				t.Fatalf("PutObject: %v", err)
			}
			if h := rec.last().Get("X-Amz-Content-Sha256"); h != s3UnsignedPayload {
				t.Errorf("sent x-amz-content-sha256 %q", h)
			}
			want(t, key, string(body))
		})
		t.Run(s3StreamingSigned+"/"+name, func(t *testing.T) {
			key := "streaming/" + name
			header := http.Header{"Content-Encoding": {"aws-chunked"}, "X-Amz-Decoded-Content-Length": {strconv.Itoa(len(body))}}
			s := p.signedPut(t, "forms", key, next(), s3SignedChunkedLength(body), s3StreamingSigned, header)
			if status, answer := p.send(t, s, s3SignedChunked(s, body, -1)); status != http.StatusOK {
				t.Fatalf("signed chunks: %d %s", status, answer)
			}
			want(t, key, string(body))
			// The same with the last data chunk's signature wrong: versitygw refuses it.
			s = p.signedPut(t, "forms", key, token, s3SignedChunkedLength(body), s3StreamingSigned, header)
			status, answer := p.send(t, s, s3SignedChunked(s, []byte(strings.ToUpper(string(body))), len(s3Chunks(body))-2))
			t.Logf("a wrong chunk signature: versitygw answered %d %s", status, answer)
			if status != http.StatusForbidden || !strings.Contains(answer, "<Code>SignatureDoesNotMatch</Code>") {
				t.Errorf("a wrong chunk signature: %d %s; want versitygw's 403 SignatureDoesNotMatch", status, answer)
			}
			want(t, key, string(body))
		})
		t.Run(s3StreamingUnsignedTrailer+" over HTTP/"+name, func(t *testing.T) {
			key := "trailer/" + name
			header := http.Header{"Content-Encoding": {"aws-chunked"}, "X-Amz-Decoded-Content-Length": {strconv.Itoa(len(body))},
				"X-Amz-Trailer": {"x-amz-checksum-crc32"}}
			enc := s3UnsignedTrailer(body, s3CRC32(body))
			s := p.signedPut(t, "forms", key, next(), int64(len(enc)), s3StreamingUnsignedTrailer, header)
			if status, answer := p.send(t, s, enc); status != http.StatusOK {
				t.Fatalf("unsigned chunks with a trailer: %d %s", status, answer)
			}
			want(t, key, string(body))
			enc = s3UnsignedTrailer([]byte(strings.ToUpper(string(body))), s3CRC32(body))
			s = p.signedPut(t, "forms", key, token, int64(len(enc)), s3StreamingUnsignedTrailer, header)
			status, answer := p.send(t, s, enc)
			t.Logf("a wrong trailing CRC32: versitygw answered %d %s", status, answer)
			if status != http.StatusBadRequest || !strings.Contains(answer, "<Code>BadDigest</Code>") {
				t.Errorf("a wrong trailing CRC32: %d %s; want versitygw's 400 BadDigest", status, answer)
			}
			want(t, key, string(body))
		})
		for _, alg := range []s3types.ChecksumAlgorithm{s3types.ChecksumAlgorithmCrc32, s3types.ChecksumAlgorithmSha256} {
			t.Run("x-amz-checksum-"+strings.ToLower(string(alg))+"/"+name, func(t *testing.T) {
				key := "checksum-" + string(alg) + "/" + name
				header := "X-Amz-Checksum-" + string(alg)
				if _, err := c.PutObject(client.WithToken(ctx, next()), &s3.PutObjectInput{Bucket: aws.String("forms"), Key: aws.String(key),
					Body: bytes.NewReader(body), ChecksumAlgorithm: alg}); err != nil {
					t.Fatalf("PutObject: %v", err)
				}
				if rec.last().Get(header) == "" {
					t.Errorf("sent no %s: %v", header, rec.last())
				}
				want(t, key, string(body))
				in := &s3.PutObjectInput{Bucket: aws.String("forms"), Key: aws.String(key), Body: bytes.NewReader([]byte(strings.ToUpper(string(body))))}
				if alg == s3types.ChecksumAlgorithmCrc32 {
					in.ChecksumCRC32 = aws.String(rec.last().Get(header)) // the original body's: wrong for this one
				} else {
					in.ChecksumSHA256 = aws.String(rec.last().Get(header))
				}
				_, err := c.PutObject(client.WithToken(ctx, token), in)
				t.Logf("a wrong %s: %v", header, err)
				s3WantCode(t, "a wrong "+header, err, http.StatusBadRequest, "BadDigest")
				want(t, key, string(body))
			})
		}
		t.Run("Content-MD5/"+name, func(t *testing.T) {
			key := "md5/" + name
			sum := md5.Sum(body)
			md := base64.StdEncoding.EncodeToString(sum[:])
			if _, err := c.PutObject(client.WithToken(ctx, next()), &s3.PutObjectInput{Bucket: aws.String("forms"), Key: aws.String(key),
				Body: bytes.NewReader(body), ContentMD5: aws.String(md)}); err != nil {
				t.Fatalf("PutObject with Content-MD5: %v", err)
			}
			if rec.last().Get("Content-Md5") != md {
				t.Errorf("sent Content-MD5 %q", rec.last().Get("Content-Md5"))
			}
			want(t, key, string(body))
			_, err := c.PutObject(client.WithToken(ctx, token), &s3.PutObjectInput{Bucket: aws.String("forms"), Key: aws.String(key),
				Body: bytes.NewReader([]byte(strings.ToUpper(string(body)))), ContentMD5: aws.String(md)})
			t.Logf("a wrong Content-MD5: %v", err)
			s3WantCode(t, "a wrong Content-MD5", err, http.StatusBadRequest, "BadDigest")
			want(t, key, string(body))
		})
	}
}

// expectPut writes the head of s (with Expect: 100-continue) on a new
// connection to the proxy and returns the connection and its reader.
func (p *s3Pass) expectPut(t *testing.T, s *s3Signed) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", p.in.Proxy, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	var head bytes.Buffer
	fmt.Fprintf(&head, "PUT %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\nExpect: 100-continue\r\n", s.req.URL.RequestURI(), s.req.Host, s.req.ContentLength)
	if err := s.req.Header.Write(&head); err != nil {
		t.Fatal(err)
	}
	head.WriteString("\r\n")
	if _, err := conn.Write(head.Bytes()); err != nil {
		t.Fatal(err)
	}
	return conn, bufio.NewReader(conn)
}

// TestS3PassRealExpectContinue: in pass mode with versitygw behind, a
// current holder that sends Expect: 100-continue gets 100 Continue, sends
// its body, and versitygw stores it (signature verified), for a body the
// proxy reads ahead and one it streams; a stale holder announcing 1 GiB gets
// the 409 with the S3 error StaleFencingToken at once, no 100, and sends no
// byte of it. aws-sdk-go-v2 itself sends Expect: 100-continue for bodies of
// 2 MiB and more: such a PutObject goes through too.
func TestS3PassRealExpectContinue(t *testing.T) {
	p := startS3Pass(t, nil, "big")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	for i, body := range [][]byte{[]byte("from 10, small"), bytes.Repeat([]byte("from 10 "), 200<<10/8)} {
		key := "obj-" + strconv.Itoa(i)
		s := p.signedPut(t, "big", key, 10, int64(len(body)), s3SHA256Hex(body), nil)
		conn, br := p.expectPut(t, s)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != http.StatusContinue {
			t.Fatalf("%d bytes with token 10: first answer %v %v, want 100 Continue", len(body), resp, err)
		}
		if _, err := conn.Write(body); err != nil {
			t.Fatal(err)
		}
		for resp.StatusCode == http.StatusContinue {
			if resp, err = http.ReadResponse(br, nil); err != nil {
				t.Fatal(err)
			}
		}
		answer, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%d bytes with token 10: %d %s", len(body), resp.StatusCode, answer)
		}
		if got := p.stored(ctx, t, "big", key); got != string(body) {
			t.Errorf("versitygw holds %d bytes, want %d", len(got), len(body))
		}
	}

	s := p.signedPut(t, "big", "obj-0", 9, 1<<30, s3UnsignedPayload, nil)
	start := time.Now()
	_, br := p.expectPut(t, s)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("stale PUT: no answer before its body: %v", err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict || !strings.Contains(string(answer), "<Code>StaleFencingToken</Code>") || resp.Header.Get("Fencing-Current-Token") != "10" {
		t.Fatalf("stale PUT with Expect: %d %v %s; want 409 StaleFencingToken, current 10, and no 100 Continue", resp.StatusCode, resp.Header, answer)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the refusal took %v", d)
	}
	if got := p.stored(ctx, t, "big", "obj-0"); got != "from 10, small" {
		t.Errorf("after the stale PUT versitygw holds %q", got)
	}

	// The SDK's own Expect: 100-continue, through a transport that waits for the 100.
	var rec s3SentHeaders
	c := p.client(true, rec.option, func(o *s3.Options) {
		dial := func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, p.in.Proxy)
		}
		o.HTTPClient = &http.Client{Transport: &http.Transport{DialContext: dial, ExpectContinueTimeout: 5 * time.Second}}
	})
	big := bytes.Repeat([]byte("11"), 3<<20/2)
	if _, err := c.PutObject(client.WithToken(ctx, 11), &s3.PutObjectInput{Bucket: aws.String("big"), Key: aws.String("sdk"), Body: bytes.NewReader(big)}); err != nil {
		t.Fatalf("SDK PutObject of 3 MiB with 11: %v", err)
	}
	if rec.last().Get("Expect") != "100-continue" {
		t.Errorf("the SDK sent no Expect: 100-continue: %v", rec.last())
	}
	_, err = c.PutObject(client.WithToken(ctx, 10), &s3.PutObjectInput{Bucket: aws.String("big"), Key: aws.String("sdk"), Body: bytes.NewReader(big)})
	s3WantCode(t, "SDK PutObject of 3 MiB with 10 after 11", err, http.StatusConflict, "StaleFencingToken")
	if got := p.stored(ctx, t, "big", "sdk"); got != string(big) {
		t.Errorf("versitygw holds %d bytes of the SDK's object, want %d", len(got), len(big))
	}
}
