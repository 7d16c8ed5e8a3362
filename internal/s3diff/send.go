package s3diff

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/fenceproxy/fenceproxy/wire"
)

// Spec is one request as it goes on the wire: the method, the Host, the
// target's path and query exactly as sent, the header lines in order
// (repeats allowed), and the body.
type Spec struct {
	Method, Host, Path, Query string
	Header                    [][2]string
	Body                      []byte
}

// Target is the request target as sent.
func (s Spec) Target() string {
	if s.Query == "" {
		return s.Path
	}
	return s.Path + "?" + s.Query
}

// String is the request line and headers, for logs.
func (s Spec) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s Host:%s", s.Method, s.Target(), s.Host)
	for _, h := range s.Header {
		if h[0] == "Authorization" || h[0] == "X-Amz-Date" || h[0] == "X-Amz-Content-Sha256" {
			continue
		}
		fmt.Fprintf(&b, " [%s: %.60s]", h[0], h[1])
	}
	if len(s.Body) > 0 {
		fmt.Fprintf(&b, " body %.80q", s.Body)
	}
	return b.String()
}

// Answer is what came back.
type Answer struct {
	Status  int
	Header  http.Header
	Body    []byte
	Resent  bool // signed again with the canonical request the store computed
	WireErr error
}

// Signer signs a Spec with SigV4 for region and service s3, with the
// aws-sdk-go-v2 signer over the raw path as sent (S3 does not escape it
// again) and a hex payload hash.
type Signer struct {
	AccessKey, SecretKey, Region string
	Now                          func() time.Time
}

// sign adds X-Amz-Date, X-Amz-Content-Sha256 and Authorization to s, the
// signature over every header s carries.
func (g Signer) sign(s *Spec) error {
	sum := sha256.Sum256(s.Body)
	hash := hex.EncodeToString(sum[:])
	r := &http.Request{Method: s.Method, Host: s.Host, Header: http.Header{},
		URL: &url.URL{Scheme: "http", Host: s.Host, Opaque: "//" + s.Host + s.Path, RawQuery: s.Query}}
	for _, h := range s.Header {
		r.Header[h[0]] = append(r.Header[h[0]], h[1])
	}
	r.Header.Set("X-Amz-Content-Sha256", hash)
	r.ContentLength = int64(len(s.Body))
	now := time.Now
	if g.Now != nil {
		now = g.Now
	}
	signer := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })
	err := signer.SignHTTP(context.Background(), aws.Credentials{AccessKeyID: g.AccessKey, SecretAccessKey: g.SecretKey}, r, hash, "s3", g.Region, now())
	if err != nil {
		return err
	}
	s.Header = append(s.Header, [2]string{"X-Amz-Content-Sha256", hash}, [2]string{"X-Amz-Date", r.Header.Get("X-Amz-Date")},
		[2]string{"Authorization", r.Header.Get("Authorization")})
	return nil
}

// resign replaces s's signature with one over canonical, the canonical
// request a store reported in its SignatureDoesNotMatch answer, keeping the
// date: what the store then computes again is what was signed.
func (g Signer) resign(s *Spec, canonical string) {
	var date, authz string
	for _, h := range s.Header {
		switch h[0] {
		case "X-Amz-Date":
			date = h[1]
		case "Authorization":
			authz = h[1]
		}
	}
	scope := date[:8] + "/" + g.Region + "/s3/aws4_request"
	sum := sha256.Sum256([]byte(canonical))
	toSign := "AWS4-HMAC-SHA256\n" + date + "\n" + scope + "\n" + hex.EncodeToString(sum[:])
	key := []byte("AWS4" + g.SecretKey)
	for _, part := range []string{date[:8], g.Region, "s3", "aws4_request"} {
		key = hmacSHA256(key, part)
	}
	sig := hex.EncodeToString(hmacSHA256(key, toSign))
	i := strings.Index(authz, "Signature=")
	for n, h := range s.Header {
		if h[0] == "Authorization" {
			s.Header[n][1] = authz[:i] + "Signature=" + sig
		}
	}
}

func hmacSHA256(key []byte, data string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(data))
	return m.Sum(nil)
}

// head is s's request line and header section, with Content-Length and
// Connection: close.
func head(s Spec) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\n", s.Method, s.Target(), s.Host)
	for _, h := range s.Header {
		fmt.Fprintf(&b, "%s: %s\r\n", h[0], h[1])
	}
	fmt.Fprintf(&b, "Content-Length: %d\r\nConnection: close\r\n\r\n", len(s.Body))
	return b.Bytes()
}

// Wire returns s signed with g (nil: unsigned) as bytes to send: the head
// and the body, for a test that sends them itself.
func Wire(t testing.TB, s Spec, g *Signer) (headBytes, body []byte) {
	t.Helper()
	if g != nil {
		if err := g.sign(&s); err != nil {
			t.Fatalf("signing: %v", err)
		}
	}
	return head(s), s.Body
}

// DoThen is Do without the re-signing, with the headers unsigned added
// after signing, as a man in the middle would.
func DoThen(t testing.TB, addr string, s Spec, g *Signer, unsigned ...[2]string) Answer {
	t.Helper()
	if g != nil {
		if err := g.sign(&s); err != nil {
			t.Fatalf("signing: %v", err)
		}
	}
	s.Header = append(s.Header, unsigned...)
	return send(addr, s)
}

// send writes s as raw HTTP/1.1 to addr on a new connection (Connection:
// close) and reads the answer.
func send(addr string, s Spec) Answer {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return Answer{WireErr: err}
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	b := bytes.NewBuffer(head(s))
	b.Write(s.Body)
	if _, err := conn.Write(b.Bytes()); err != nil {
		return Answer{WireErr: err}
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: s.Method})
	if err != nil {
		return Answer{WireErr: err}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return Answer{Status: resp.StatusCode, Header: resp.Header, Body: body, WireErr: err}
}

// Do signs s with g (nil: unsigned), sends it to addr and reads the
// answer. With resign, a SignatureDoesNotMatch that reports the store's
// canonical request (not a refusal of the proxy's own) is answered by
// signing again over that canonical request and sending once more: the
// store then acts on the request as it reads it.
func Do(t testing.TB, addr string, s Spec, g *Signer, resign bool) Answer {
	t.Helper()
	if g != nil {
		if err := g.sign(&s); err != nil {
			t.Fatalf("signing: %v", err)
		}
	}
	ans := send(addr, s)
	if ans.WireErr == nil && ans.Status == http.StatusForbidden && resign && g != nil && ans.Header.Get(wire.HeaderRefused) == "" {
		if canonical := canonicalRequest(ans.Body); canonical != "" {
			g.resign(&s, canonical)
			ans = send(addr, s)
			ans.Resent = true
		}
	}
	return ans
}

// canonicalRequest is the CanonicalRequest of a store's SignatureDoesNotMatch
// answer (versitygw reports it, as AWS S3 does), "" if it has none.
func canonicalRequest(body []byte) string {
	var e struct {
		Code             string `xml:"Code"`
		CanonicalRequest string `xml:"CanonicalRequest"`
	}
	if xml.Unmarshal(body, &e) != nil || e.Code != "SignatureDoesNotMatch" {
		return ""
	}
	return e.CanonicalRequest
}
