package resign

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// The outbound SigV4 signer. It signs exactly as aws-sdk-go-v2's
// v4.Signer.SignHTTP (aws/signer/v4 and aws/signer/internal/v4, v1.48.0)
// with DisableURIPathEscaping, byte for byte (sign_test.go compares the two
// on generated and fuzzed requests), without that signer's per-request maps,
// header copies and string joins: about a tenth of its allocations.

// ErrHeaderCase: the request carries two header names that are one in lower
// case ("X-Foo" and "x-foo"). The SDK signer joins their values in the map's
// random order, and net/http sends them sorted by name: such a request is
// never signed.
var ErrHeaderCase = errors.New("resign: two header names differ only in case")

const (
	sigAlgorithm  = "AWS4-HMAC-SHA256"
	amzDateFormat = "20060102T150405Z"
	// amzTimeLen is the length of X-Amz-Date's time of day, "T150405Z": what
	// follows the date (whose year may have more than 4 digits).
	amzTimeLen = len("T150405Z")
)

// v4Signer signs requests in place. Its zero value is ready; safe for
// concurrent use.
type v4Signer struct {
	key  atomic.Pointer[signingKey]  // the last derived key
	date atomic.Pointer[signingDate] // the last X-Amz-Date formatted
}

// signingKey is a derived signing key with its HMAC states: deriving it is
// four HMACs and setting up an HMAC hashes the key, together more than half
// of a signature.
type signingKey struct {
	secret, day, region, service string
	macs                         sync.Pool // of hash.Hash, HMAC-SHA256 keyed with the key
}

type signingDate struct {
	unix int64  // seconds
	amz  string // X-Amz-Date of unix
}

// scratch is one signature's working memory, pooled.
type scratch struct {
	sig   [sha256.Size]byte // not on the stack: Sum's argument escapes
	buf   []byte
	hdrs  []signedHeader
	order []int // of hdrs, sorted: no pointers moved (write barriers)
	pairs []queryPair
}

type signedHeader struct {
	name   string // as keyed, or lower case when it is not ASCII
	kind   uint8  // hdrValues, hdrHost, hdrLength
	values []string
}

const (
	hdrValues = iota
	hdrHost
	hdrLength
)

type queryPair struct{ key, value string } // encoded

var scratches = sync.Pool{New: func() any { return &scratch{buf: make([]byte, 0, 1024)} }}

// maxPooledScratch: a scratch buffer grown past it (huge header values) is
// left to the collector.
const maxPooledScratch = 64 << 10

// sign signs r in place as SignHTTP(ctx, creds, r, payloadHash, service,
// region, t) with DisableURIPathEscaping does: it sets X-Amz-Date (and
// X-Amz-Security-Token when creds carries a session token) and Authorization
// in r.Header, strips a default port from r.Host, and sets r.URL.RawQuery to
// the canonical query. Signed: host, content-length when r.ContentLength > 0,
// and every header of r.Header but Authorization, User-Agent,
// X-Amzn-Trace-Id, Expect and Transfer-Encoding (keyed exactly so) and
// Content-Length (any case). The canonical URI is r.URL's escaped path as it
// is. Errors: ErrHeaderCase (r is left with the date and token set, unsigned).
func (s *v4Signer) sign(r *http.Request, creds aws.Credentials, payloadHash, service, region string, t time.Time) error {
	amzDate := s.amzDate(t)
	day := amzDate[:len(amzDate)-amzTimeLen]

	h := r.Header
	if h == nil {
		h = http.Header{}
		r.Header = h
	}
	// As the SDK sets them: the first value's slot reused.
	h["X-Amz-Date"] = append(h["X-Amz-Date"][:0], amzDate)
	if creds.SessionToken != "" {
		h["X-Amz-Security-Token"] = append(h["X-Amz-Security-Token"][:0], creds.SessionToken)
	}
	sanitizeHost(r)
	host := r.URL.Host
	if r.Host != "" {
		host = r.Host
	}

	sc := scratches.Get().(*scratch)
	defer sc.release()

	// The signed headers, sorted by lower-case name.
	hdrs := append(sc.hdrs[:0], signedHeader{name: "host", kind: hdrHost})
	if r.ContentLength > 0 {
		hdrs = append(hdrs, signedHeader{name: "content-length", kind: hdrLength})
	}
	for k, v := range h {
		switch k {
		case "Authorization", "User-Agent", "X-Amzn-Trace-Id", "Expect", "Transfer-Encoding":
			continue
		}
		if strings.EqualFold(k, "content-length") {
			continue
		}
		name := k
		if !isASCII(k) {
			name = strings.ToLower(k) // as the SDK does: invalid UTF-8 becomes U+FFFD
		}
		if asciiEqualFold(name, "host") {
			continue // the SDK signs the request's host only
		}
		hdrs = append(hdrs, signedHeader{name: name, values: v})
	}
	sc.hdrs = hdrs
	order := sc.order[:0]
	for i := range hdrs {
		order = append(order, i)
	}
	sc.order = order
	slices.SortFunc(order, func(a, b int) int { return compareLower(hdrs[a].name, hdrs[b].name) })
	for i := 1; i < len(order); i++ {
		if a, b := hdrs[order[i-1]].name, hdrs[order[i]].name; compareLower(a, b) == 0 {
			return fmt.Errorf("%w: %.60q and %.60q", ErrHeaderCase, a, b)
		}
	}

	// The canonical request.
	b := append(sc.buf[:0], r.Method...)
	b = append(b, '\n')
	b = append(b, uriPath(r.URL)...)
	b = append(b, '\n')
	qStart := len(b)
	if r.URL.RawQuery != "" {
		b = sc.appendQuery(b, r.URL.RawQuery)
	}
	qEnd := len(b)
	b = append(b, '\n')
	for _, i := range order {
		e := &hdrs[i]
		b = appendLower(b, e.name)
		b = append(b, ':')
		switch e.kind {
		case hdrHost:
			b = appendCollapsed(b, host)
		case hdrLength:
			b = strconv.AppendInt(b, r.ContentLength, 10)
		default:
			for i, v := range e.values {
				if i > 0 {
					b = append(b, ',')
				}
				start := len(b)
				b = appendCollapsed(b, v)
				// Then trimmed of Unicode white space (strings.TrimSpace).
				n := copy(b[start:], bytes.TrimSpace(b[start:]))
				b = b[:start+n]
			}
		}
		b = append(b, '\n')
	}
	b = append(b, '\n')
	signedStart := len(b)
	for j, i := range order {
		if j > 0 {
			b = append(b, ';')
		}
		b = appendLower(b, hdrs[i].name)
	}
	signedEnd := len(b)
	b = append(b, '\n')
	b = append(b, payloadHash...)
	sum := sha256.Sum256(b)

	// The string to sign, after the canonical request (whose query and
	// signed headers are still needed).
	scopeStart := len(b)
	b = append(b, day...)
	b = append(b, '/')
	b = append(b, region...)
	b = append(b, '/')
	b = append(b, service...)
	b = append(b, "/aws4_request"...)
	scopeEnd := len(b)
	stsStart := len(b)
	b = append(b, sigAlgorithm+"\n"...)
	b = append(b, amzDate...)
	b = append(b, '\n')
	b = append(b, b[scopeStart:scopeEnd]...)
	b = append(b, '\n')
	b = hex.AppendEncode(b, sum[:])
	k := s.signingKey(creds.SecretAccessKey, day, region, service)
	mac := k.macs.Get().(hash.Hash)
	mac.Reset()
	mac.Write(b[stsStart:])
	sig := mac.Sum(sc.sig[:0])
	k.macs.Put(mac)

	// The Authorization header, in place of the string to sign.
	b = append(b[:stsStart], sigAlgorithm+" Credential="...)
	b = append(b, creds.AccessKeyID...)
	b = append(b, '/')
	b = append(b, b[scopeStart:scopeEnd]...)
	b = append(b, ", SignedHeaders="...)
	b = append(b, b[signedStart:signedEnd]...)
	b = append(b, ", Signature="...)
	b = hex.AppendEncode(b, sig)
	h["Authorization"] = append(h["Authorization"][:0], string(b[stsStart:]))
	if q := b[qStart:qEnd]; string(q) != r.URL.RawQuery {
		r.URL.RawQuery = string(q)
	}
	sc.buf = b
	return nil
}

func (sc *scratch) release() {
	clear(sc.hdrs) // no request's header values kept alive
	clear(sc.pairs)
	if cap(sc.buf) > maxPooledScratch {
		return
	}
	scratches.Put(sc)
}

// amzDate returns t as X-Amz-Date (UTC, "20060102T150405Z"), the last one
// kept: requests signed in the same second share it.
func (s *v4Signer) amzDate(t time.Time) string {
	unix := t.Unix()
	if d := s.date.Load(); d != nil && d.unix == unix {
		return d.amz
	}
	d := &signingDate{unix: unix, amz: t.UTC().Format(amzDateFormat)}
	s.date.Store(d)
	return d.amz
}

// signingKey returns the derived key of secret for day (yyyymmdd), region
// and service: the last one, or derived anew.
func (s *v4Signer) signingKey(secret, day, region, service string) *signingKey {
	if k := s.key.Load(); k != nil && k.secret == secret && k.day == day && k.region == region && k.service == service {
		return k
	}
	dk := hmacSum([]byte("AWS4"+secret), day)
	dk = hmacSum(dk, region)
	dk = hmacSum(dk, service)
	dk = hmacSum(dk, "aws4_request")
	k := &signingKey{secret: secret, day: day, region: region, service: service}
	k.macs.New = func() any { return hmac.New(sha256.New, dk) }
	s.key.Store(k)
	return k
}

func hmacSum(key []byte, data string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(data))
	return m.Sum(nil)
}

// appendQuery appends the canonical form of rawQuery: the parameters as
// url.ParseQuery reads them (so dropping a pair with a ";" or a bad escape,
// or all past its limit on their number), each key and value escaped (every
// byte but A-Z a-z 0-9 - _ . ~ as %XX), sorted by key, then value.
func (sc *scratch) appendQuery(b []byte, rawQuery string) []byte {
	values, _ := url.ParseQuery(rawQuery)
	pairs := sc.pairs[:0]
	for k, vs := range values {
		ek := queryEscape(k)
		for _, v := range vs {
			pairs = append(pairs, queryPair{ek, queryEscape(v)})
		}
	}
	sc.pairs = pairs
	slices.SortFunc(pairs, func(a, b queryPair) int {
		if c := strings.Compare(a.key, b.key); c != 0 {
			return c
		}
		return strings.Compare(a.value, b.value)
	})
	for i, p := range pairs {
		if i > 0 {
			b = append(b, '&')
		}
		b = append(b, p.key...)
		b = append(b, '=')
		b = append(b, p.value...)
	}
	return b
}

// queryEscape is url.QueryEscape with a space as %20: s itself when nothing
// needs escaping.
func queryEscape(s string) string {
	i := 0
	for i < len(s) && unreserved(rune(s[i])) && s[i] != '/' {
		i++
	}
	if i == len(s) {
		return s
	}
	const hexDigits = "0123456789ABCDEF"
	b := make([]byte, i, len(s)+2*(len(s)-i))
	copy(b, s)
	for ; i < len(s); i++ {
		if c := s[i]; unreserved(rune(c)) && c != '/' {
			b = append(b, c)
		} else {
			b = append(b, '%', hexDigits[c>>4], hexDigits[c&15])
		}
	}
	return string(b)
}

// uriPath is the SDK's canonical URI (v4Internal.GetURIPath): the path of
// u.Opaque ("//host/path") when set, else u.EscapedPath(), "/" when empty.
func uriPath(u *url.URL) string {
	var p string
	if u.Opaque != "" {
		opaque := u.Opaque
		if i := strings.Index(opaque, "?"); i >= 0 {
			opaque = opaque[:i]
		}
		opaque = strings.TrimPrefix(opaque, "//")
		if i := strings.Index(opaque, "/"); i >= 0 {
			p = opaque[i:]
		}
	} else {
		p = u.EscapedPath()
	}
	if p == "" {
		return "/"
	}
	return p
}

// sanitizeHost is the SDK's v4Internal.SanitizeHostForHeader: a port that
// is the scheme's default (80 for http, 443 for https) is stripped from the
// host (r.Host, else r.URL.Host) into r.Host; of an IPv6 literal, the
// brackets go too.
func sanitizeHost(r *http.Request) {
	host := r.Host
	if host == "" {
		host = r.URL.Host
	}
	port := portOnly(host)
	if port == "" {
		return
	}
	scheme := strings.ToLower(r.URL.Scheme)
	if scheme == "http" && port == "80" || scheme == "https" && port == "443" {
		r.Host = stripPort(host)
	}
}

func stripPort(hostport string) string {
	colon := strings.IndexByte(hostport, ':')
	if colon == -1 {
		return hostport
	}
	if i := strings.IndexByte(hostport, ']'); i != -1 {
		return strings.TrimPrefix(hostport[:i], "[")
	}
	return hostport[:colon]
}

func portOnly(hostport string) string {
	colon := strings.IndexByte(hostport, ':')
	if colon == -1 {
		return ""
	}
	if i := strings.Index(hostport, "]:"); i != -1 {
		return hostport[i+len("]:"):]
	}
	if strings.Contains(hostport, "]") {
		return ""
	}
	return hostport[colon+len(":"):]
}

// appendCollapsed appends s without leading and trailing spaces, each inner
// run of spaces one (the SDK's StripExcessSpaces: spaces only, not tabs).
func appendCollapsed(b []byte, s string) []byte {
	s = strings.Trim(s, " ")
	for i := 0; i < len(s); i++ {
		if s[i] == ' ' && s[i-1] == ' ' {
			continue
		}
		b = append(b, s[i])
	}
	return b
}

// appendLower appends s with A-Z in lower case.
func appendLower(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		b = append(b, c)
	}
	return b
}

// compareLower compares a and b as appendLower writes them.
func compareLower(a, b string) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return int(x) - int(y)
		}
	}
	return len(a) - len(b)
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}
