// Package sigv4 verifies inbound AWS Signature Version 4 (AWS4-HMAC-SHA256)
// authentication of S3 requests, in the Authorization header or in a
// presigned URL's query, against the signer's own list of signed headers.
//
// A gateway verifies a worker's request with the worker's key, then signs the
// request again for the store with its own credentials. Verification decides
// from credentials found anywhere in the request (any Authorization header,
// any X-Amz-Algorithm, X-Amz-Credential, X-Amz-Signature or
// X-Amz-SignedHeaders query parameter, or SigV2's AWSAccessKeyId and
// Signature), never from the presence of Authorization alone: a request that
// carries credentials is verified or refused, never passed as anonymous.
//
// The canonical request is built from the request as received: the raw path
// bytes of the request target (S3 neither normalises nor encodes the path
// again), the query decoded and encoded again with the specification's
// encoding and sorted, the signed headers' values trimmed with inner runs of
// spaces collapsed and repeated values joined with ",".
package sigv4

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The algorithm names and payload hash values of the specification.
const (
	Algorithm = "AWS4-HMAC-SHA256"

	UnsignedPayload                 = "UNSIGNED-PAYLOAD"
	StreamingPayload                = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
	StreamingPayloadTrailer         = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"
	StreamingUnsignedPayloadTrailer = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"

	// timeFormat is X-Amz-Date's ISO 8601 basic format, always UTC.
	timeFormat = "20060102T150405Z"
	dateFormat = "20060102"
	terminator = "aws4_request"

	// DefaultMaxSkew is the largest difference between X-Amz-Date and the
	// clock that header authentication accepts (S3's own).
	DefaultMaxSkew = 15 * time.Minute
	// DefaultMaxPresignExpiry is the largest X-Amz-Expires (S3's own: 7 days,
	// 604800 seconds).
	DefaultMaxPresignExpiry = 7 * 24 * time.Hour
)

// The errors Verify returns wrap one of these; Code gives the S3 error code
// an answer to the request carries.
var (
	// ErrAnonymous: the request carries no credentials (S3 AccessDenied).
	ErrAnonymous = errors.New("sigv4: no credentials (anonymous access is off)")
	// ErrUnknownKey: the access key id is not in Secrets (InvalidAccessKeyId).
	ErrUnknownKey = errors.New("sigv4: unknown access key id")
	// ErrSignatureMismatch: the signature does not match the request as
	// received (SignatureDoesNotMatch).
	ErrSignatureMismatch = errors.New("sigv4: signature does not match")
	// ErrSkew: X-Amz-Date is more than MaxSkew from the clock, or a
	// presigned URL is dated more than MaxSkew ahead (RequestTimeTooSkewed).
	ErrSkew = errors.New("sigv4: request time too skewed")
	// ErrExpired: a presigned URL past X-Amz-Date + X-Amz-Expires
	// (AccessDenied, "Request has expired").
	ErrExpired = errors.New("sigv4: request has expired")
	// ErrMalformed: the Authorization header, or the credential scope it
	// names, is not well formed or names another date, region or service
	// (AuthorizationHeaderMalformed).
	ErrMalformed = errors.New("sigv4: authorization header malformed")
	// ErrTwoCredentials: credentials in both the Authorization header and
	// the query (AccessDenied, 403: refused as a forgery would be, since one
	// of the two was added to a signed request).
	ErrTwoCredentials = errors.New("sigv4: credentials in both the Authorization header and the query")
	// ErrMalformedQuery: the presigned URL's authentication parameters are
	// missing, repeated or not well formed (AuthorizationQueryParametersError).
	ErrMalformedQuery = errors.New("sigv4: authorization query parameters malformed")
	// ErrUnsignedHeader: the request carries an x-amz-* header (or lacks host
	// in) the signed headers (AccessDenied).
	ErrUnsignedHeader = errors.New("sigv4: header not signed")
	// ErrAlgorithm: another authentication scheme than AWS4-HMAC-SHA256:
	// SigV2, SigV4A (InvalidRequest).
	ErrAlgorithm = errors.New("sigv4: unsupported authorization mechanism, use AWS4-HMAC-SHA256")
	// ErrPayloadHash: x-amz-content-sha256 missing in header authentication,
	// or not one of the values S3 accepts (InvalidArgument).
	ErrPayloadHash = errors.New("sigv4: bad x-amz-content-sha256")
)

// Secrets is the consumer's key store: the secret access key of an access key
// id, ok false when the id is unknown. It is called once per verified
// request, from many goroutines.
type Secrets interface {
	Secret(accessKeyID string) (secret string, ok bool)
}

// Verifier verifies SigV4 requests for one region and service. Its fields are
// read only; one Verifier serves concurrent requests.
type Verifier struct {
	// Secrets finds a key's secret. Required.
	Secrets Secrets
	// Region is the region every credential scope must name ("us-east-1").
	// Required.
	Region string
	// Service is the service the scope must name; "" is "s3".
	Service string
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	// MaxSkew bounds |X-Amz-Date - Now| in header authentication and how far
	// ahead a presigned URL may be dated; 0 is DefaultMaxSkew (15 min).
	MaxSkew time.Duration
	// MaxPresignExpiry bounds X-Amz-Expires; 0 is DefaultMaxPresignExpiry
	// (7 days), and no value above it is accepted.
	MaxPresignExpiry time.Duration
}

// Auth is what a verified request was signed with.
type Auth struct {
	// AccessKeyID is the verified key.
	AccessKeyID string
	// Presigned: the credentials were in the query (a presigned URL).
	Presigned bool
	// Date is X-Amz-Date, UTC, to the second.
	Date time.Time
	// Expires is a presigned URL's X-Amz-Expires (0 in header authentication).
	Expires time.Duration
	// Scope is the credential scope without the key,
	// "<yyyymmdd>/<region>/<service>/aws4_request".
	Scope string
	// SignedHeaders are the signed header names, lowercase, sorted; shared
	// between requests: read only.
	SignedHeaders []string
	// PayloadHash is the payload hash the signature covers: 64 lowercase hex
	// digits or one of the UNSIGNED-PAYLOAD and STREAMING-* values (a
	// presigned URL: UNSIGNED-PAYLOAD unless it says otherwise). A hex hash is
	// not checked against the body here.
	PayloadHash string
	// Signature is the request's signature, 64 lowercase hex digits: the seed
	// of a STREAMING-AWS4-HMAC-SHA256-PAYLOAD(-TRAILER) body's chunk
	// signatures.
	Signature string
	// SigningKey is the derived key of Scope (HMAC-SHA256 chain from the
	// secret over date, region, service and "aws4_request"), 32 bytes. It
	// signs the chunks of a streaming body (ChunkSignature); it is a secret:
	// never log it.
	SigningKey []byte
}

// ChunkSignature returns the signature of one chunk of a
// STREAMING-AWS4-HMAC-SHA256-PAYLOAD body, lowercase hex: prev is the
// previous chunk's signature (Signature, the seed, for the first chunk) and
// chunkSHA256 the SHA-256 of the chunk's data (of nothing for the final,
// empty chunk).
func (a *Auth) ChunkSignature(prev string, chunkSHA256 []byte) string {
	return a.sign("AWS4-HMAC-SHA256-PAYLOAD\n" + a.Date.Format(timeFormat) + "\n" + a.Scope + "\n" + prev + "\n" +
		emptySHA256 + "\n" + hex.EncodeToString(chunkSHA256))
}

// TrailerSignature returns the signature of the trailing headers of a
// STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER body, lowercase hex: prev is the
// final (empty) chunk's signature and trailerSHA256 the SHA-256 of the
// trailer lines as sent ("name:value\n" each).
func (a *Auth) TrailerSignature(prev string, trailerSHA256 []byte) string {
	return a.sign("AWS4-HMAC-SHA256-TRAILER\n" + a.Date.Format(timeFormat) + "\n" + a.Scope + "\n" + prev + "\n" +
		hex.EncodeToString(trailerSHA256))
}

func (a *Auth) sign(s string) string {
	return hex.EncodeToString(hmacSHA256(a.SigningKey, s))
}

var emptySHA256 = hex.EncodeToString(sha256.New().Sum(nil))

// parsed holds the authentication parameters of a request before the key is
// known.
type parsed struct {
	presigned     bool
	credential    string
	signedHeaders string
	signature     string
	date          string
	expires       string
	payload       string // presigned: X-Amz-Content-Sha256 of the query, if any
	malformed     error  // ErrMalformed or ErrMalformedQuery
}

// Verify verifies the request's SigV4 credentials, from the header or the
// query, and returns what it was signed with. It reads the request target from
// r.RequestURI, as received (r.URL when RequestURI is not a path, for
// requests built in process), the headers from r.Header and r.Host; it reads
// no body and changes nothing. The error wraps one of the Err* values of this
// package (Code gives its S3 code); ErrAnonymous when the request carries no
// credentials at all.
func (v *Verifier) Verify(r *http.Request) (*Auth, error) {
	if v.Secrets == nil || v.Region == "" {
		return nil, errors.New("sigv4: Verifier needs Secrets and Region")
	}
	path, rawQuery := target(r)
	query, err := parseQuery(rawQuery)
	if err != nil {
		return nil, err
	}

	authz, hasHeader := r.Header["Authorization"]
	hasQuery := false
	for _, p := range query {
		switch strings.ToLower(p.key) {
		case "x-amz-algorithm", "x-amz-credential", "x-amz-signature", "x-amz-signedheaders":
			hasQuery = true
		case "awsaccesskeyid", "signature":
			return nil, fmt.Errorf("%w (SigV2 query authentication)", ErrAlgorithm)
		}
	}
	switch {
	case hasHeader && hasQuery:
		return nil, ErrTwoCredentials
	case !hasHeader && !hasQuery:
		return nil, ErrAnonymous
	}

	var p parsed
	if hasHeader {
		if len(authz) != 1 {
			return nil, fmt.Errorf("%w: %d Authorization headers", ErrMalformed, len(authz))
		}
		p, err = parseHeader(authz[0])
		if err != nil {
			return nil, err
		}
		dates := r.Header.Values("X-Amz-Date")
		if len(dates) != 1 {
			return nil, fmt.Errorf("%w: header authentication needs one X-Amz-Date header, found %d", ErrMalformed, len(dates))
		}
		p.date = dates[0]
	} else {
		p, err = parsePresigned(query)
		if err != nil {
			return nil, err
		}
	}
	return v.verify(r, &p, path, query)
}

func (v *Verifier) verify(r *http.Request, p *parsed, path string, query []pair) (*Auth, error) {
	bad := p.malformed
	now := time.Now
	if v.Now != nil {
		now = v.Now
	}
	maxSkew := v.MaxSkew
	if maxSkew <= 0 {
		maxSkew = DefaultMaxSkew
	}
	service := v.Service
	if service == "" {
		service = "s3"
	}

	// The credential: <key>/<yyyymmdd>/<region>/<service>/aws4_request.
	key, scope, ok1 := strings.Cut(p.credential, "/")
	scopeDate, rest, ok2 := strings.Cut(scope, "/")
	region, rest, ok3 := strings.Cut(rest, "/")
	svc, term, ok4 := strings.Cut(rest, "/")
	if !ok1 || !ok2 || !ok3 || !ok4 || key == "" || strings.Contains(term, "/") {
		return nil, fmt.Errorf("%w: credential %.80q is not <key>/<date>/<region>/%s/aws4_request", bad, p.credential, service)
	}
	date, ok := parseAmzDate(p.date)
	if !ok {
		return nil, fmt.Errorf("%w: X-Amz-Date %.80q is not yyyymmddThhmmssZ", bad, p.date)
	}
	switch {
	case scopeDate != p.date[:8]:
		return nil, fmt.Errorf("%w: the credential's date %.80q is not X-Amz-Date's %.80q", bad, scopeDate, p.date[:8])
	case region != v.Region:
		return nil, fmt.Errorf("%w: the region %.80q is wrong; expecting %.80q", bad, region, v.Region)
	case svc != service:
		return nil, fmt.Errorf("%w: the service %.80q is wrong; expecting %.80q", bad, svc, service)
	case term != terminator:
		return nil, fmt.Errorf("%w: the credential must end with %.80q", bad, terminator)
	}
	signedHeaders, err := parseSignedHeaders(p.signedHeaders)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", bad, err)
	}
	if !isHex64(p.signature) {
		return nil, fmt.Errorf("%w: the signature is not 64 lowercase hex digits", bad)
	}

	// The time window.
	t := now()
	auth := &Auth{AccessKeyID: key, Presigned: p.presigned, Date: date, SignedHeaders: signedHeaders, Signature: p.signature,
		Scope: scope}
	if p.presigned {
		maxExpiry := v.MaxPresignExpiry
		if maxExpiry <= 0 || maxExpiry > DefaultMaxPresignExpiry {
			maxExpiry = DefaultMaxPresignExpiry
		}
		secs, ok := seconds(p.expires)
		if !ok || secs < 1 || time.Duration(secs)*time.Second > maxExpiry {
			return nil, fmt.Errorf("%w: X-Amz-Expires %.80q must be a number of seconds from 1 to %d", ErrMalformedQuery, p.expires, int64(maxExpiry/time.Second))
		}
		auth.Expires = time.Duration(secs) * time.Second
		if date.Sub(t) > maxSkew {
			return nil, fmt.Errorf("%w: the URL is dated %s, the clock says %s", ErrSkew, p.date, t.UTC().Format(timeFormat))
		}
		if t.After(date.Add(auth.Expires)) {
			return nil, fmt.Errorf("%w: expired at %s", ErrExpired, date.Add(auth.Expires).Format(timeFormat))
		}
	} else if d := t.Sub(date); d > maxSkew || d < -maxSkew {
		return nil, fmt.Errorf("%w: X-Amz-Date %s, the clock says %s", ErrSkew, p.date, t.UTC().Format(timeFormat))
	}

	// Every header that must be signed is.
	if !contains(signedHeaders, "host") {
		return nil, fmt.Errorf("%w: host is not signed", ErrUnsignedHeader)
	}
	for name := range r.Header {
		if len(name) < 6 || !strings.EqualFold(name[:6], "x-amz-") {
			continue
		}
		if !slices.ContainsFunc(signedHeaders, func(s string) bool { return asciiEqualFold(s, name) }) {
			return nil, fmt.Errorf("%w: %s is not signed", ErrUnsignedHeader, strings.ToLower(name))
		}
	}

	// The payload hash.
	hashes := r.Header.Values("X-Amz-Content-Sha256")
	if len(hashes) > 1 {
		return nil, fmt.Errorf("%w: %d x-amz-content-sha256 headers", ErrPayloadHash, len(hashes))
	}
	switch {
	case p.presigned && p.payload != "":
		auth.PayloadHash = p.payload
	case len(hashes) == 1:
		auth.PayloadHash = hashes[0]
	case p.presigned:
		auth.PayloadHash = UnsignedPayload
	default:
		return nil, fmt.Errorf("%w: header authentication needs x-amz-content-sha256", ErrPayloadHash)
	}
	switch h := auth.PayloadHash; {
	case isHex64(h), h == UnsignedPayload:
	case !p.presigned && (h == StreamingPayload || h == StreamingPayloadTrailer || h == StreamingUnsignedPayloadTrailer):
	case strings.HasPrefix(h, "STREAMING-AWS4-ECDSA-P256-SHA256-"):
		return nil, fmt.Errorf("%w (SigV4A payload %s)", ErrAlgorithm, h)
	case p.presigned:
		return nil, fmt.Errorf("%w: %.80q: a presigned URL's payload is 64 lowercase hex digits or UNSIGNED-PAYLOAD", ErrPayloadHash, h)
	default:
		return nil, fmt.Errorf("%w: %.80q is not 64 lowercase hex digits, UNSIGNED-PAYLOAD or STREAMING-*", ErrPayloadHash, h)
	}

	// The key, then the signature.
	secret, ok := v.Secrets.Secret(key)
	if !ok {
		return nil, fmt.Errorf("%w: %.80q", ErrUnknownKey, key)
	}
	dk := signingKey(secret, scopeDate, region, svc)
	auth.SigningKey = dk.key
	buf := canonicalBufs.Get().(*[]byte)
	canonical := appendCanonicalRequest((*buf)[:0], r, path, query, p.presigned, p.signedHeaders, signedHeaders, auth.PayloadHash)
	sum := sha256.Sum256(canonical)
	// The string to sign, in the same buffer.
	sts := append(canonical[:0], Algorithm+"\n"...)
	sts = append(append(sts, p.date...), '\n')
	sts = append(append(sts, auth.Scope...), '\n')
	sts = hex.AppendEncode(sts, sum[:])
	mac := dk.macs.Get().(hash.Hash)
	mac.Reset()
	mac.Write(sts)
	var want, got [sha256.Size]byte
	mac.Sum(want[:0])
	dk.macs.Put(mac)
	if cap(sts) <= maxPooledCanonical {
		*buf = sts
		canonicalBufs.Put(buf)
	}
	hex.Decode(got[:], []byte(p.signature)) // isHex64 above
	if !hmac.Equal(want[:], got[:]) {
		return nil, ErrSignatureMismatch
	}
	rememberSignedHeaders(p.signedHeaders, signedHeaders)
	return auth, nil
}

// target returns the raw path and raw query of the request as received.
func target(r *http.Request) (path, rawQuery string) {
	if u := r.RequestURI; strings.HasPrefix(u, "/") {
		path, rawQuery, _ = strings.Cut(u, "?")
		return path, rawQuery
	}
	path = r.URL.EscapedPath()
	if r.URL.Opaque != "" {
		path = r.URL.Opaque
	}
	if path == "" {
		path = "/"
	}
	return path, r.URL.RawQuery
}

// pair is one query parameter, decoded.
type pair struct{ key, value string }

// parseQuery splits a raw query on "&" (empty parameters skipped) and decodes
// each key and value ("+" is a space, as url.ParseQuery and the SDKs read it).
func parseQuery(raw string) ([]pair, error) {
	var out []pair
	for s := range strings.SplitSeq(raw, "&") {
		if s == "" {
			continue
		}
		k, val, _ := strings.Cut(s, "=")
		dk, err1 := url.QueryUnescape(k)
		dv, err2 := url.QueryUnescape(val)
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("%w: query parameter %.80q: %v", ErrMalformedQuery, s, err)
		}
		out = append(out, pair{dk, dv})
	}
	return out, nil
}

// parseHeader reads "AWS4-HMAC-SHA256 Credential=..., SignedHeaders=...,
// Signature=...".
func parseHeader(h string) (parsed, error) {
	p := parsed{malformed: ErrMalformed}
	alg, rest, _ := strings.Cut(strings.TrimLeft(h, " "), " ")
	switch {
	case alg == Algorithm:
	case alg == "AWS":
		return p, fmt.Errorf("%w (SigV2 header authentication)", ErrAlgorithm)
	case strings.HasPrefix(alg, "AWS4-"):
		return p, fmt.Errorf("%w (%.40q)", ErrAlgorithm, alg)
	default:
		return p, fmt.Errorf("%w: %.40q is no AWS4-HMAC-SHA256 authorization", ErrMalformed, h)
	}
	var seen uint8 // a bit per field
	for field := range strings.SplitSeq(rest, ",") {
		k, val, ok := strings.Cut(strings.Trim(field, " "), "=")
		var bit uint8
		switch k {
		case "Credential":
			bit, p.credential = 1, val
		case "SignedHeaders":
			bit, p.signedHeaders = 2, val
		case "Signature":
			bit, p.signature = 4, val
		}
		switch {
		case !ok || seen&bit != 0:
			return p, fmt.Errorf("%w: field %.60q repeated or not name=value", ErrMalformed, field)
		case bit == 0:
			return p, fmt.Errorf("%w: unknown field %.40q", ErrMalformed, k)
		}
		seen |= bit
	}
	if seen != 7 {
		return p, fmt.Errorf("%w: needs Credential, SignedHeaders and Signature", ErrMalformed)
	}
	return p, nil
}

// parsePresigned reads the X-Amz-* authentication parameters of a presigned
// URL: each exactly once, under its exact name.
func parsePresigned(query []pair) (parsed, error) {
	p := parsed{presigned: true, malformed: ErrMalformedQuery}
	fields := map[string]*string{
		"X-Amz-Algorithm": new(string), "X-Amz-Credential": &p.credential, "X-Amz-Date": &p.date,
		"X-Amz-Expires": &p.expires, "X-Amz-SignedHeaders": &p.signedHeaders, "X-Amz-Signature": &p.signature,
		"X-Amz-Content-Sha256": &p.payload,
	}
	seen := map[string]bool{}
	for _, q := range query {
		dst, ok := fields[q.key]
		if !ok {
			if strings.HasPrefix(strings.ToLower(q.key), "x-amz-") && fields[canonicalParam(q.key)] != nil {
				return p, fmt.Errorf("%w: %q must be spelled %s", ErrMalformedQuery, q.key, canonicalParam(q.key))
			}
			continue
		}
		if seen[q.key] {
			return p, fmt.Errorf("%w: %s repeated", ErrMalformedQuery, q.key)
		}
		seen[q.key] = true
		*dst = q.value
	}
	for _, k := range []string{"X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires", "X-Amz-SignedHeaders", "X-Amz-Signature"} {
		if !seen[k] {
			return p, fmt.Errorf("%w: %s missing", ErrMalformedQuery, k)
		}
	}
	if alg := *fields["X-Amz-Algorithm"]; alg != Algorithm {
		return p, fmt.Errorf("%w (X-Amz-Algorithm %.40q)", ErrAlgorithm, alg)
	}
	return p, nil
}

// canonicalParam returns the spelling of an authentication parameter that
// matches k case-insensitively, or "".
func canonicalParam(k string) string {
	for _, c := range []string{"X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires", "X-Amz-SignedHeaders", "X-Amz-Signature", "X-Amz-Content-Sha256"} {
		if strings.EqualFold(c, k) {
			return c
		}
	}
	return ""
}

// parseSignedHeaders checks "a;b;c": lowercase header names, sorted, each
// once. The list returned may be shared with other requests: never
// modified.
func parseSignedHeaders(s string) ([]string, error) {
	signedLists.Lock()
	names, ok := signedLists.m[s]
	signedLists.Unlock()
	if ok {
		return names, nil
	}
	return checkSignedHeaders(s)
}

// rememberSignedHeaders caches a verified request's parsed SignedHeaders
// list s: only then (anyone can send a list), and only a short one.
func rememberSignedHeaders(s string, names []string) {
	if len(s) > maxSignedListLen {
		return
	}
	signedLists.Lock()
	defer signedLists.Unlock()
	if _, ok := signedLists.m[s]; ok {
		return
	}
	if len(signedLists.m) >= maxSignedLists {
		clear(signedLists.m)
	}
	signedLists.m[strings.Clone(s)] = names
}

// signedLists are the SignedHeaders lists of verified requests, parsed: a
// worker signs the same few lists again and again.
var signedLists = struct {
	sync.Mutex
	m map[string][]string
}{m: map[string][]string{}}

// Bounds of signedLists: at most 1024 lists of at most 512 bytes.
const (
	maxSignedLists   = 1024
	maxSignedListLen = 512
)

func checkSignedHeaders(s string) ([]string, error) {
	names := strings.Split(strings.Clone(s), ";")
	for i, n := range names {
		if !lowerToken(n) {
			return nil, fmt.Errorf("SignedHeaders %.80q: %.80q is no lowercase header name", s, n)
		}
		if i > 0 && names[i-1] >= n {
			return nil, fmt.Errorf("SignedHeaders %.80q is not sorted or repeats a name", s)
		}
	}
	return names, nil
}

// lowerToken reports a non-empty header name of token characters without
// upper-case letters.
func lowerToken(n string) bool {
	for i := 0; i < len(n); i++ {
		if c := n[i]; !tokenChar[c] || 'A' <= c && c <= 'Z' {
			return false
		}
	}
	return n != ""
}

// tokenChar holds the bytes of an HTTP token (RFC 9110): visible ASCII but
// the separators.
var tokenChar = func() (t [256]bool) {
	for c := '!'; c < 0x7f; c++ {
		t[c] = !strings.ContainsRune(`"(),/:;<=>?@[\]{}`, c)
	}
	return t
}()

// asciiEqualFold is strings.EqualFold for ASCII only: no other letter (the
// Kelvin sign) folds into a header name.
func asciiEqualFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// canonicalBufs are the buffers canonical requests are built in, one per
// verification at a time; one larger than maxPooledCanonical (huge header
// values) is left to the collector.
var canonicalBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

const maxPooledCanonical = 64 << 10

// appendCanonicalRequest appends the request's canonical request to b.
func appendCanonicalRequest(b []byte, r *http.Request, path string, query []pair, presigned bool, signedHeadersStr string, signed []string, payload string) []byte {
	b = append(b, r.Method...)
	b = append(b, '\n')
	b = append(b, path...)
	b = append(b, '\n')

	if len(query) > 0 {
		enc := make([]pair, 0, len(query))
		for _, q := range query {
			if presigned && q.key == "X-Amz-Signature" {
				continue
			}
			enc = append(enc, pair{encode(q.key), encode(q.value)})
		}
		sort.Slice(enc, func(i, j int) bool {
			if enc[i].key != enc[j].key {
				return enc[i].key < enc[j].key
			}
			return enc[i].value < enc[j].value
		})
		for i, q := range enc {
			if i > 0 {
				b = append(b, '&')
			}
			b = append(b, q.key...)
			b = append(b, '=')
			b = append(b, q.value...)
		}
	}
	b = append(b, '\n')

	var keyBuf [64]byte
	for _, name := range signed {
		b = append(b, name...)
		b = append(b, ':')
		switch name {
		case "host":
			b = appendCollapsed(b, r.Host)
		case "transfer-encoding":
			// net/http moves it out of r.Header.
			for i, te := range r.TransferEncoding {
				if i > 0 {
					b = append(b, ',')
				}
				b = appendCollapsed(b, te)
			}
		default:
			values := r.Header[string(canonicalKey(keyBuf[:0], name))] // no copy for a map index
			if name == "content-length" && len(values) == 0 && r.ContentLength > 0 {
				b = strconv.AppendInt(b, r.ContentLength, 10)
			}
			for i, val := range values {
				if i > 0 {
					b = append(b, ',')
				}
				b = appendCollapsed(b, val)
			}
		}
		b = append(b, '\n')
	}
	b = append(b, '\n')
	b = append(b, signedHeadersStr...)
	b = append(b, '\n')
	b = append(b, payload...)
	return b
}

// canonicalKey appends to buf the canonical form of a lowercase header name
// (as net/http keys r.Header: X-Amz-Date).
func canonicalKey(buf []byte, name string) []byte {
	upper := true
	for i := 0; i < len(name); i++ {
		c := name[i]
		if upper && 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		buf = append(buf, c)
		upper = c == '-'
	}
	return buf
}

// encode is the specification's URI encoding: every byte but A-Z a-z 0-9 - _
// . ~ as %XY, uppercase.
func encode(s string) string {
	return strings.ReplaceAll(url.QueryEscape(s), "+", "%20")
}

// appendCollapsed appends a header value trimmed, each inner run of spaces
// turned into one.
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

// derivedKey is a signing key with its HMACs, kept for reuse: setting up an
// HMAC hashes the key, a tenth of a verification.
type derivedKey struct {
	key  []byte    // never modified
	macs sync.Pool // of hash.Hash, HMAC-SHA256 keyed with key
}

func signingKey(secret, date, region, service string) *derivedKey {
	id := keyID{secret, date, region, service}
	keyCache.Lock()
	dk, ok := keyCache.m[id]
	keyCache.Unlock()
	if ok {
		return dk
	}
	k := hmacSHA256([]byte("AWS4"+secret), date)
	k = hmacSHA256(k, region)
	k = hmacSHA256(k, service)
	k = hmacSHA256(k, terminator)
	dk = &derivedKey{key: k}
	dk.macs.New = func() any { return hmac.New(sha256.New, k) }
	keyCache.Lock()
	if len(keyCache.m) >= maxCachedKeys {
		clear(keyCache.m) // a new day, or keys rotated: start over
	}
	keyCache.m[id] = dk
	keyCache.Unlock()
	return dk
}

// keyCache holds derived signing keys by secret, date, region and service:
// one key serves a worker for a day, and deriving it is four HMACs, a third
// of a verification.
var keyCache = struct {
	sync.Mutex
	m map[keyID]*derivedKey
}{m: map[keyID]*derivedKey{}}

type keyID struct{ secret, date, region, service string }

// maxCachedKeys bounds keyCache (a few per worker key and day).
const maxCachedKeys = 4096

func hmacSHA256(key []byte, data string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(data))
	return h.Sum(nil)
}

func isHex64(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// parseAmzDate parses X-Amz-Date's yyyymmddThhmmssZ, UTC (time.Parse's
// layout matching is a tenth of a verification).
func parseAmzDate(s string) (time.Time, bool) {
	if len(s) != len(timeFormat) || s[8] != 'T' || s[15] != 'Z' {
		return time.Time{}, false
	}
	var n [6]int
	for i, f := range [6][2]int{{0, 4}, {4, 6}, {6, 8}, {9, 11}, {11, 13}, {13, 15}} {
		for j := f[0]; j < f[1]; j++ {
			c := s[j]
			if c < '0' || c > '9' {
				return time.Time{}, false
			}
			n[i] = n[i]*10 + int(c-'0')
		}
	}
	t := time.Date(n[0], time.Month(n[1]), n[2], n[3], n[4], n[5], 0, time.UTC)
	// time.Date normalises (month 13, hour 24): a date that moved is not one.
	if t.Year() != n[0] || int(t.Month()) != n[1] || t.Day() != n[2] || t.Hour() != n[3] || t.Minute() != n[4] || t.Second() != n[5] {
		return time.Time{}, false
	}
	return t, true
}

// seconds parses a decimal number of seconds: digits only, at most 7.
func seconds(s string) (int64, bool) {
	if s == "" || len(s) > 7 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = n*10 + int64(s[i]-'0')
	}
	return n, true
}

func contains(sorted []string, s string) bool {
	i := sort.SearchStrings(sorted, s)
	return i < len(sorted) && sorted[i] == s
}
