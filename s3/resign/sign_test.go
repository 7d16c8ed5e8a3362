package resign_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/fenceproxy/fenceproxy/s3/resign"
)

// The differential tests of the package's SigV4 signer: on every request,
// generated or fuzzed, it signs exactly as aws-sdk-go-v2's SignHTTP (the
// reference, resign.SDKSign), or refuses with ErrHeaderCase where the SDK's
// signature is random; and Rewrite with it forwards exactly what Rewrite with
// the SDK's signer forwards, or nothing.

// signCase is one signature's input.
type signCase struct {
	req                     *http.Request
	creds                   aws.Credentials
	hash, service, region   string
	at                      time.Time
	opaque, rawPath, header string // for the failure message
}

func (c signCase) String() string {
	return fmt.Sprintf("%s %s (opaque %q, raw path %q, query %q) Host %q, headers %q, length %d, hash %q, creds %+v, %s %s at %s",
		c.req.Method, c.req.URL.String(), c.req.URL.Opaque, c.req.URL.RawPath, c.req.URL.RawQuery, c.req.Host, c.req.Header,
		c.req.ContentLength, c.hash, c.creds, c.service, c.region, c.at)
}

// compareSigners signs a copy of c.req with each signer and reports whether
// the own signer refused (ErrHeaderCase, where caseCollision says so); a
// difference in what either set fails t.
func compareSigners(t testing.TB, own *resign.OwnSigner, c signCase) (refused bool) {
	t.Helper()
	mine, ref := cloneRequest(c.req), cloneRequest(c.req)
	err := own.Sign(mine, c.creds, c.hash, c.service, c.region, c.at)
	collision := caseCollision(c.req.Header, c.creds.SessionToken != "")
	if err != nil || collision {
		if !errors.Is(err, resign.ErrHeaderCase) || !collision {
			t.Fatalf("%v: own signer: %v; header names colliding in lower case: %v", c, err, collision)
		}
		return true
	}
	if err := resign.SDKSign(ref, c.creds, c.hash, c.service, c.region, c.at); err != nil {
		t.Fatalf("%v: SDK signer: %v", c, err)
	}
	if diff := requestDiff(mine, ref); diff != "" {
		t.Fatalf("%v:\n%s", c, diff)
	}
	return false
}

// cloneRequest copies what signing changes: URL, Host, Header.
func cloneRequest(r *http.Request) *http.Request {
	c := *r
	u := *r.URL
	c.URL = &u
	c.Header = r.Header.Clone()
	return &c
}

// requestDiff describes how own differs from ref ("" when it does not) in
// what a signer or Rewrite sets: headers, Host, URL, trailers.
func requestDiff(own, ref *http.Request) string {
	var d []string
	if a, b := own.Header.Get("Authorization"), ref.Header.Get("Authorization"); a != b {
		d = append(d, fmt.Sprintf("Authorization\n own %q\n sdk %q", a, b))
	}
	if !reflect.DeepEqual(own.Header, ref.Header) {
		d = append(d, fmt.Sprintf("headers\n own %q\n sdk %q", own.Header, ref.Header))
	}
	if own.Host != ref.Host {
		d = append(d, fmt.Sprintf("Host: own %q, sdk %q", own.Host, ref.Host))
	}
	if a, b := own.URL.String(), ref.URL.String(); a != b || own.URL.RawQuery != ref.URL.RawQuery {
		d = append(d, fmt.Sprintf("URL: own %q, sdk %q", a, b))
	}
	if !reflect.DeepEqual(own.Trailer, ref.Trailer) || own.ContentLength != ref.ContentLength {
		d = append(d, fmt.Sprintf("trailers, length: own %v %d, sdk %v %d", own.Trailer, own.ContentLength, ref.Trailer, ref.ContentLength))
	}
	return strings.Join(d, "\n")
}

// caseCollision reports header names that the SDK signs and that are one
// name in lower case (strings.ToLower), the ones it sets included.
func caseCollision(h http.Header, token bool) bool {
	seen := map[string]string{"x-amz-date": "X-Amz-Date"}
	if token {
		seen["x-amz-security-token"] = "X-Amz-Security-Token"
	}
	for k := range h {
		switch k {
		case "Authorization", "User-Agent", "X-Amzn-Trace-Id", "Expect", "Transfer-Encoding":
			continue
		}
		l := strings.ToLower(k)
		if strings.EqualFold(k, "content-length") || l == "host" {
			continue
		}
		if other, ok := seen[l]; ok && other != k {
			return true
		}
		seen[l] = k
	}
	return false
}

// Pools the generator draws from.
var (
	methods = []string{"GET", "PUT", "POST", "DELETE", "HEAD", "PATCH", "get", ""}
	hosts   = []string{"s3.example.com", "s3.example.com:80", "s3.example.com:443", "S3.Example.com:9000", "localhost:",
		"[::1]:443", "[::1]:80", "[::1]", "[fe80::1%25en0]:443", "bkt.s3.example.com", "a  b", " host\t", "",
		"xn--bcher-kva.example:8443", "127.0.0.1:80", "h:80:80", "]:80"}
	schemes     = []string{"http", "https", "HTTPS", "", "ftp"}
	headerNames = []string{"Content-Type", "content-type", "X-Amz-Meta-Owner", "x-amz-meta-owner", "X-Amz-Content-Sha256",
		"X-Amz-Date", "x-amz-date", "X-Amz-Security-Token", "x-amz-security-token", "Authorization", "authorization",
		"User-Agent", "user-agent", "X-Amzn-Trace-Id", "Expect", "expect", "Transfer-Encoding", "Content-Length",
		"content-length", "CONTENT-LENGTH", "Host", "host", "HOST", "Content-Encoding", "X-Amz-Decoded-Content-Length",
		"X-Amz-Trailer", "Accept-Encoding", "X-Fencing-Token", "Range", "If-Match", "X-Amz-Meta-Ünï", "X-Amz-Meta-\u212a",
		"X-Amz-Meta-K", "x-amz-meta-k", "X-Bad\xff", "X-Amz-Meta-Fencing-Token", "X-Amz-Checksum-Crc32", "Cache-Control",
		"X-Amz-Storage-Class", "a", "Z", "-", "X-Amz-Meta-a_b", "Content-Md5"}
	valueBits = []string{"a", "b", "Z", "0", " ", " ", "  ", "\t", ",", ";", "=", "\"", "ü", "\u00a0", "\u3000", "\u0085",
		"\n", "\r", "\v", "\f", "text/plain", "gzip", "aws-chunked", "\x00", "\xff", "%20", "+", "x y"}
	keyBits = []string{"a", "B", "0", "dir/", "/", "//", " ", "+", "%", "%41", "~", "-", ".", "..", "_", "ü", "日本",
		"?", "#", "=", "&", ";", "\t", "!", "(", ")", "'", "*", "@", ":", ",", "$", "\x7f", "\xff", "%2F"}
	queryKeys = []string{"prefix", "list-type", "uploadId", "partNumber", "versionId", "a b", "a+b", "x-id", "", "ü",
		"a%", "k;v", "delimiter", "~", "A", "a{", "aa", "Z", "X-Amz-Foo", "%zz", "max-keys", "a=b"}
	payloadHashes = []string{"UNSIGNED-PAYLOAD", "STREAMING-UNSIGNED-PAYLOAD-TRAILER", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
		"STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", ""}
	regions  = []string{"us-east-1", "auto", "eu-central-1", "", "us east"}
	services = []string{"s3", "s3", "s3", "execute-api"}
)

func pick[T any](rng *rand.Rand, s []T) T { return s[rng.IntN(len(s))] }

// randString joins up to max bits.
func randString(rng *rand.Rand, bits []string, max int) string {
	var b strings.Builder
	for n := rng.IntN(max + 1); n > 0; n-- {
		b.WriteString(pick(rng, bits))
	}
	return b.String()
}

// randQuery is a raw query in one of the spellings a client or Rewrite
// writes (or a broken one): repeated and empty parameters, bad escapes.
func randQuery(rng *rand.Rand) string {
	var parts []string
	for n := rng.IntN(6); n > 0; n-- {
		k, v := pick(rng, queryKeys), randString(rng, keyBits, 3)
		switch rng.IntN(6) {
		case 0: // as Rewrite writes it
			k, v = url.QueryEscape(k), strings.ReplaceAll(url.QueryEscape(v), "+", "%20")
		case 1:
			k, v = url.PathEscape(k), url.PathEscape(v)
		case 2: // lower-case escapes
			k, v = strings.ToLower(url.QueryEscape(k)), strings.ToLower(url.QueryEscape(v))
		case 3: // as they are
		case 4:
			parts = append(parts, url.QueryEscape(k))
			continue
		case 5:
			parts = append(parts, "")
		}
		parts = append(parts, k+"="+v)
	}
	return strings.Join(parts, "&")
}

func randHeader(rng *rand.Rand) http.Header {
	h := http.Header{}
	for n := rng.IntN(10); n > 0; n-- {
		name := pick(rng, headerNames)
		for m := rng.IntN(4); m > 0; m-- {
			h[name] = append(h[name], randString(rng, valueBits, 5))
		}
		if h[name] == nil {
			h[name] = []string{}
		}
	}
	return h
}

func randTime(rng *rand.Rand) time.Time {
	t := time.Unix(rng.Int64N(4e9), rng.Int64N(1e9))
	switch rng.IntN(20) {
	case 0:
		t = time.Date(10000+rng.IntN(3), 1, 2, 3, 4, 5, 0, time.UTC)
	case 1:
		t = time.Date(rng.IntN(3)-1, 12, 31, 23, 59, 59, 0, time.UTC)
	case 2:
		t = t.In(time.FixedZone("IST", 5*3600+1800))
	}
	return t
}

func randCreds(rng *rand.Rand) aws.Credentials {
	c := aws.Credentials{AccessKeyID: pick(rng, []string{"AKIDEXAMPLE", "STORE", "k"}),
		SecretAccessKey: pick(rng, []string{"wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "store-secret", ""})}
	if rng.IntN(2) == 0 {
		c.SessionToken = pick(rng, []string{"session-token", "FwoGZXIvYXdzE//+/token==", " spaced  token "})
	}
	return c
}

func randHash(rng *rand.Rand) string {
	if rng.IntN(3) == 0 {
		sum := sha256.Sum256([]byte(randString(rng, keyBits, 4)))
		return hex.EncodeToString(sum[:])
	}
	return pick(rng, payloadHashes)
}

// randSignCase is any request a caller could hand a signer.
func randSignCase(rng *rand.Rand) signCase {
	key := randString(rng, keyBits, 6)
	u := &url.URL{Scheme: pick(rng, schemes), Host: pick(rng, hosts), RawQuery: randQuery(rng)}
	switch rng.IntN(5) {
	case 0: // as Rewrite sets it
		u.RawPath = "/bkt/" + escapeKey(key)
		u.Path, _ = url.PathUnescape(u.RawPath)
	case 1:
		u.Path = "/" + key
	case 2: // a raw path in another spelling than net/http's
		u.RawPath = "/" + strings.ReplaceAll(url.PathEscape(key), "%2F", "%2f")
		u.Path, _ = url.PathUnescape(u.RawPath)
	case 3:
		u.Opaque = pick(rng, []string{"//", "//h", "/"}) + pick(rng, []string{"/", "", "/a%20b", "/x?y"}) + escapeKey(key)
	case 4: // a raw path that does not match Path
		u.Path, u.RawPath = "/"+key, "/other"
	}
	r := &http.Request{Method: pick(rng, methods), URL: u, Header: randHeader(rng)}
	if rng.IntN(2) == 0 {
		r.Host = pick(rng, hosts)
	}
	r.ContentLength = pick(rng, []int64{-1, 0, 0, 1, 1024, rng.Int64N(1 << 40)})
	return signCase{req: r, creds: randCreds(rng), hash: randHash(rng), service: pick(rng, services),
		region: pick(rng, regions), at: randTime(rng)}
}

// escapeKey is Rewrite's escaping of a key (every byte but A-Z a-z 0-9 - . _
// ~ and "/").
func escapeKey(k string) string {
	var b strings.Builder
	for i := 0; i < len(k); i++ {
		c := k[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-._~/", c) >= 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// TestSignerMatchesSDK: on 10000 generated requests (methods, hosts with and
// without default ports, IPv6 literals, escaped and opaque paths, queries
// with repeated, empty and badly escaped parameters, headers in mixed case,
// repeated, empty, with spaces, tabs and Unicode white space, lengths, payload
// hashes, session tokens, dates and regions) the own signer sets exactly
// what aws-sdk-go-v2's sets, or refuses two header names one in lower case.
func TestSignerMatchesSDK(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var own resign.OwnSigner
	n, refused := 10000, 0
	if testing.Short() {
		n = 2000
	}
	var prev signCase
	for range n {
		c := randSignCase(rng)
		if rng.IntN(4) == 0 && prev.req != nil {
			// The same day, region and service as before: the keys cached
			// go by the secret too.
			c.at, c.region, c.service = prev.at, prev.region, prev.service
		}
		if compareSigners(t, &own, c) {
			refused++
		}
		prev = c
	}
	t.Logf("%d requests signed alike, %d refused (header names colliding in lower case)", n-refused, refused)
	if refused == 0 || refused > n/2 {
		t.Errorf("%d of %d refused: the generator no longer makes both kinds", refused, n)
	}
}

// TestSignerConcurrent: one signer shared by goroutines that sign with two
// secrets on two days, as a store's credentials rotate at midnight, signs
// each as the SDK does (its cached key and date are the right ones).
func TestSignerConcurrent(t *testing.T) {
	var own resign.OwnSigner
	midnight := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	newCase := func(g, i int) signCase {
		c := signCase{creds: aws.Credentials{AccessKeyID: "STORE", SecretAccessKey: fmt.Sprint("secret-", (g+i)%2)},
			hash: "UNSIGNED-PAYLOAD", service: "s3", region: "us-east-1", at: midnight.Add(time.Duration(i%3-1) * time.Second)}
		c.req, _ = http.NewRequest(http.MethodPut, "http://s3.example.com/bkt/k", nil)
		c.req.Header.Set("Content-Type", "text/plain")
		return c
	}
	const goroutines, n = 4, 200
	var signed [goroutines][n]*http.Request
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range n {
				c := newCase(g, i)
				if err := own.Sign(c.req, c.creds, c.hash, c.service, c.region, c.at); err != nil {
					panic(err)
				}
				signed[g][i] = c.req
			}
		})
	}
	wg.Wait()
	for g := range goroutines {
		for i := range n {
			c := newCase(g, i)
			if err := resign.SDKSign(c.req, c.creds, c.hash, c.service, c.region, c.at); err != nil {
				t.Fatal(err)
			}
			if diff := requestDiff(signed[g][i], c.req); diff != "" {
				t.Fatalf("%v:\n%s", c, diff)
			}
		}
	}
}

// rewriteCase is one Rewrite's input.
type rewriteCase struct {
	endpoint string
	virtual  bool
	region   string
	in       resign.Request
	worker   *http.Request
	creds    aws.Credentials
	at       time.Time
}

func (c rewriteCase) String() string {
	return fmt.Sprintf("endpoint %s (virtual %v, region %q), %+v, worker %s %s headers %q length %d, creds %+v at %s",
		c.endpoint, c.virtual, c.region, c.in, c.worker.Method, c.worker.URL, c.worker.Header, c.worker.ContentLength, c.creds, c.at)
}

func randRewriteCase(rng *rand.Rand) rewriteCase {
	c := rewriteCase{
		endpoint: pick(rng, []string{"http://s3.example.com", "https://s3.example.com:443", "http://localhost:9000",
			"http://[::1]:80/prefix", "https://store.example/base/", "http://127.0.0.1:80"}),
		virtual: rng.IntN(3) == 0,
		region:  pick(rng, regions),
		creds:   randCreds(rng),
		at:      randTime(rng),
	}
	c.in = resign.Request{Bucket: pick(rng, []string{"jobs", "bkt.with.dots", "Caps", "a", "b-1"}),
		Key: randString(rng, keyBits, 6), PayloadHash: randHash(rng)}
	c.worker = &http.Request{Method: pick(rng, methods), Header: randHeader(rng),
		URL: &url.URL{Scheme: "http", Host: "proxy.internal:8080", Path: "/x", RawQuery: randQuery(rng)}}
	c.worker.ContentLength = pick(rng, []int64{-1, 0, 1, 1024})
	if rng.IntN(8) == 0 {
		c.worker.Trailer = http.Header{"X-Amz-Checksum-Crc32": nil}
	}
	signed := []string{"host"}
	for k := range c.worker.Header {
		if rng.IntN(3) > 0 {
			signed = append(signed, strings.ToLower(k))
		}
	}
	if rng.IntN(4) == 0 {
		signed = append(signed, pick(rng, []string{"content-md5", "x-amz-meta-absent", "expect", "user-agent"}))
	}
	c.in.SignedHeaders = signed
	if rng.IntN(2) == 0 {
		c.in.Header = http.Header{"X-Amz-Meta-Fencing-Token": {"41"}}
	}
	return c
}

// The outcomes of compareRewrites.
const (
	rewritten = iota
	refusedByBoth
	refusedByOwn // ErrHeaderCase
)

// compareRewrites runs Rewrite with each signer on a copy of c.worker and
// reports the outcome; a difference in the outbound requests, or in which
// errors, fails t.
func compareRewrites(t testing.TB, c rewriteCase) (outcome int) {
	t.Helper()
	endpoint, err := url.Parse(c.endpoint)
	if err != nil {
		t.Fatal(err)
	}
	creds := aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) { return c.creds, nil })
	dropped := func(name string) bool { return name == "x-fencing-token" }
	now := func() time.Time { return c.at }
	own := &resign.Signer{Endpoint: endpoint, Region: c.region, VirtualHosted: c.virtual, Credentials: creds,
		Dropped: dropped, Now: now}
	sdk := &resign.Signer{Endpoint: endpoint, Region: c.region, VirtualHosted: c.virtual, Credentials: creds,
		Dropped: dropped, Now: now}
	resign.UseSDKSigner(sdk)
	mine, ref := c.worker.Clone(context.Background()), c.worker.Clone(context.Background())
	ownErr := own.Rewrite(context.Background(), mine, c.in)
	sdkErr := sdk.Rewrite(context.Background(), ref, c.in)
	switch {
	case errors.Is(ownErr, resign.ErrHeaderCase):
		if sdkErr != nil || !caseCollision(ref.Header, c.creds.SessionToken != "") {
			t.Fatalf("%v: own signer refused (%v), the SDK's: %v, headers %q", c, ownErr, sdkErr, ref.Header)
		}
		return refusedByOwn
	case ownErr != nil || sdkErr != nil:
		if ownErr == nil || sdkErr == nil || errClass(ownErr) != errClass(sdkErr) {
			t.Fatalf("%v: own signer: %v; the SDK's: %v", c, ownErr, sdkErr)
		}
		return refusedByBoth
	}
	if diff := requestDiff(mine, ref); diff != "" {
		t.Fatalf("%v:\n%s", c, diff)
	}
	return rewritten
}

// errClass is the sentinel err wraps, else its text (Rewrite's messages name
// one parameter of a map's).
func errClass(err error) string {
	for _, e := range []error{resign.ErrQuery, resign.ErrBucket} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	return err.Error()
}

// TestRewriteMatchesSDK: Rewrite with the own signer forwards exactly what
// it forwarded with aws-sdk-go-v2's, on 4000 generated worker requests
// (endpoints with and without default ports and paths, both styles, keys
// with escapes and Unicode, queries, headers signed or not by the worker,
// session tokens, dates, regions), or nothing.
func TestRewriteMatchesSDK(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	n := 4000
	if testing.Short() {
		n = 500
	}
	var outcomes [3]int
	for range n {
		outcomes[compareRewrites(t, randRewriteCase(rng))]++
	}
	t.Logf("%d rewrites alike, %d refused by both (bad query or bucket), %d refused by the own signer (header names colliding in lower case)",
		outcomes[rewritten], outcomes[refusedByBoth], outcomes[refusedByOwn])
	if outcomes[rewritten] < n/2 {
		t.Errorf("%d of %d rewritten: the generator makes too few good requests", outcomes[rewritten], n)
	}
}

// FuzzSignerMatchesSDK: the differential test of the signer and of Rewrite
// on fuzzed requests. headers holds "Name: value" lines, names kept as
// written.
func FuzzSignerMatchesSDK(f *testing.F) {
	f.Add("PUT", "http", "s3.example.com", "", "/bkt/dir/a%20b%2Bc~%25.txt", false, "", "Content-Type: text/plain\nX-Amz-Meta-Owner:  a  b \n",
		int64(1024), "UNSIGNED-PAYLOAD", "", int64(1796083200), "us-east-1")
	f.Add("GET", "https", "s3.example.com:443", "", "/bkt", false, "list-type=2&prefix=dir%2Fa%20b&delimiter=", "X-Amz-Content-Sha256: UNSIGNED-PAYLOAD\n",
		int64(0), "UNSIGNED-PAYLOAD", "token", int64(1796083200), "auto")
	f.Add("PUT", "http", "[::1]:80", "", "/bkt/%C3%BC//x", false, "uploadId=a+b&partNumber=1", "Content-Encoding: aws-chunked\nX-Amz-Decoded-Content-Length: 5\nX-Amz-Trailer: x-amz-checksum-crc32\nExpect: 100-continue\n",
		int64(-1), "STREAMING-UNSIGNED-PAYLOAD-TRAILER", "", int64(0), "eu-west-2")
	f.Add("DELETE", "http", "h", "h:80", "//h/bkt/k", true, "a=1;b=2&c=%zz&=x&k", "x-foo: a\t b\nX-Foo: c\nUser-Agent: x\nuser-agent: y\n",
		int64(5), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", " t ", int64(-62135596800), "")
	f.Add("POST", "HTTPS", "", "bkt.s3.example.com:443", "", false, "delete=", "Content-Md5: \u00a0x\u3000\nHost: other\nX-Amz-Meta-\u212a: 1\n",
		int64(3), "STREAMING-AWS4-HMAC-SHA256-PAYLOAD", "", int64(253402300800), "us east")
	var own resign.OwnSigner
	f.Fuzz(func(t *testing.T, method, scheme, host, reqHost, rawPath string, opaque bool, rawQuery, headers string,
		length int64, hash, token string, unix int64, region string) {
		h := http.Header{}
		for line := range strings.SplitSeq(headers, "\n") {
			if name, value, ok := strings.Cut(line, ":"); ok {
				h[name] = append(h[name], value)
			}
		}
		u := &url.URL{Scheme: scheme, Host: host, RawQuery: rawQuery}
		if opaque {
			u.Opaque = rawPath
		} else {
			u.RawPath = rawPath
			if p, err := url.PathUnescape(rawPath); err == nil {
				u.Path = p
			} else {
				u.Path = rawPath
			}
		}
		at := time.Unix(unix, 0)
		creds := aws.Credentials{AccessKeyID: "AKID", SecretAccessKey: "secret", SessionToken: token}
		r := &http.Request{Method: method, URL: u, Host: reqHost, Header: h, ContentLength: length}
		compareSigners(t, &own, signCase{req: r, creds: creds, hash: hash, service: "s3", region: region, at: at})

		// The same as a worker's request to Rewrite, every header signed.
		worker := &http.Request{Method: method, URL: &url.URL{Scheme: "http", Host: "proxy", Path: "/x", RawQuery: rawQuery},
			Host: reqHost, Header: h, ContentLength: length}
		signed := []string{"host"}
		for k := range h {
			signed = append(signed, strings.ToLower(k))
		}
		key, _ := url.PathUnescape(rawPath)
		endpoint := "http://" + host
		if _, err := url.Parse(endpoint); err != nil || strings.ContainsAny(host, "/?#") {
			endpoint = "https://s3.example.com:443"
		}
		compareRewrites(t, rewriteCase{endpoint: endpoint, virtual: opaque, region: region, worker: worker, creds: creds, at: at,
			in: resign.Request{Bucket: "bkt", Key: key, SignedHeaders: signed, PayloadHash: hash}})
	})
}
