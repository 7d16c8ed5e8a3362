// Package awschunked decodes and verifies S3 aws-chunked request bodies as
// they stream, and re-frames a decoded payload for a store.
//
// The three forms are named by the request's x-amz-content-sha256 value:
//
//	STREAMING-AWS4-HMAC-SHA256-PAYLOAD          hex-size;chunk-signature=sig\r\n data \r\n ... 0;chunk-signature=sig\r\n \r\n
//	STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER  the same, then name:value\r\n x-amz-trailer-signature:sig\r\n \r\n
//	STREAMING-UNSIGNED-PAYLOAD-TRAILER          hex-size\r\n data \r\n ... 0\r\n name:value\r\n \r\n
//
// A [Reader] returns a signed chunk's bytes only after its signature, chained
// from the request's seed signature, verified; it holds at most one chunk.
// An [Encoder] writes the unsigned-trailer form with a checksum computed as
// the payload streams through it.
package awschunked

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"strings"
	"time"
)

// Form is an aws-chunked body form: the value of x-amz-content-sha256.
type Form string

// The forms a Reader decodes.
const (
	SignedPayload          Form = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
	SignedPayloadTrailer   Form = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"
	UnsignedPayloadTrailer Form = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
)

// Limits of the framing.
const (
	// DefaultMaxChunkSize bounds a signed chunk, in bytes: a signed chunk is
	// held whole until its signature verified, so this is the Reader's memory
	// per request. The AWS examples sign 64 KiB chunks; 16 MiB leaves room
	// for much larger ones and still keeps one upload's buffer well under
	// the gateway's 64 MiB peak-RSS target. An unsigned chunk streams
	// through and is bounded only by the decoded length.
	DefaultMaxChunkSize = 16 << 20
	// MaxChunkLine bounds a chunk's size line in bytes, CRLF included: 15
	// hex digits, ";chunk-signature=", 64 hex digits and CRLF are 98.
	MaxChunkLine = 128
	// MaxTrailerSize bounds the trailer section after the final chunk in
	// bytes: one checksum line and the trailer signature line are under 200.
	MaxTrailerSize = 1024
)

// Errors of a Reader (and of an Encoder reading a payload). Each is wrapped
// with detail; test with errors.Is.
var (
	// ErrMalformed: the body breaks the framing (a bad size line, a missing
	// CRLF, a chunk over the limit, an undeclared or repeated trailer, bytes
	// after the end) or ends before its final chunk and trailers; a body
	// that ends early also matches io.ErrUnexpectedEOF.
	ErrMalformed = errors.New("awschunked: malformed aws-chunked body")
	// ErrChunkSignature: a chunk's signature does not verify; no byte of
	// that chunk was returned.
	ErrChunkSignature = errors.New("awschunked: chunk signature does not match")
	// ErrTrailerSignature: the trailer signature does not verify.
	ErrTrailerSignature = errors.New("awschunked: trailer signature does not match")
	// ErrChecksum: the checksum trailer is not the checksum of the decoded
	// bytes (base64 of the digest, compared exactly).
	ErrChecksum = errors.New("awschunked: checksum trailer does not match the payload")
	// ErrDecodedLength: the chunks do not add up to Options.DecodedLength
	// (reported at the first chunk that goes past it, or at the final chunk).
	ErrDecodedLength = errors.New("awschunked: payload length is not x-amz-decoded-content-length")
	// ErrOptions: the Options cannot decode any body (the caller's error,
	// not the client's); every Read returns it.
	ErrOptions = errors.New("awschunked: invalid options")
)

// Options describe the body a Reader decodes, from the request's headers
// and its verified Authorization.
type Options struct {
	// Form is the request's x-amz-content-sha256.
	Form Form
	// SigningKey is the SigV4 signing key of the request's scope (see
	// SigningKey); signed forms only.
	SigningKey []byte
	// Date is the request's X-Amz-Date, 20060102T150405Z; signed forms only.
	Date string
	// Scope is the credential scope, date/region/s3/aws4_request; signed
	// forms only.
	Scope string
	// Seed is the request's own signature (64 lower-case hex digits), which
	// the first chunk's signature chains from; signed forms only.
	Seed string
	// DecodedLength is x-amz-decoded-content-length: the payload's length
	// in bytes, at least 0.
	DecodedLength int64
	// Trailers are the names in x-amz-trailer, lower case: none for
	// SignedPayload, exactly one checksum trailer (x-amz-checksum-crc32,
	// -crc32c, -crc64nvme, -sha1 or -sha256) for the trailer forms.
	Trailers []string
	// MaxChunkSize bounds a signed chunk in bytes; 0 is DefaultMaxChunkSize.
	MaxChunkSize int
}

// SigningKey derives the SigV4 signing key for S3 from a secret access key,
// the scope's date (20060102) and region.
func SigningKey(secret, date, region string) []byte {
	k := hmacSHA256([]byte("AWS4"+secret), date)
	k = hmacSHA256(k, region)
	k = hmacSHA256(k, "s3")
	return hmacSHA256(k, "aws4_request")
}

func hmacSHA256(key []byte, data string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(data))
	return m.Sum(nil)
}

// emptySHA256 is the hex SHA-256 of no bytes, the chunk string to sign's
// fifth line (the hash of the chunk's headers, which S3 chunks have none of).
const emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// Reader decodes one aws-chunked request body; see NewReader.
type Reader struct {
	br      *bufio.Reader
	opts    Options
	signed  bool
	prevSig string
	mac     hash.Hash // HMAC-SHA256 with the signing key, reused
	digest  hash.Hash // SHA-256 of a chunk, reused

	buf     []byte // signed: the current chunk, verified
	pending []byte // verified bytes of buf not yet returned
	left    int64  // unsigned: bytes of the current chunk not yet read
	crlf    bool   // unsigned: a chunk's data was read, its CRLF not yet
	total   int64  // the sum of the chunk sizes so far

	sum      hash.Hash // the declared checksum trailer's digest, or nil
	trailers map[string]string
	err      error // sticky; io.EOF once the body verified whole
}

// NewReader returns a Reader of the payload of body, the whole request body
// in the form opts.Form. Read returns the payload's bytes: of a signed chunk
// only once its signature verified, of an unsigned chunk as they arrive. It
// returns io.EOF only after the final chunk, the trailers, their signature,
// the checksum and the decoded length all verified and body itself ended;
// any other end is an error (ErrMalformed, ErrChunkSignature,
// ErrTrailerSignature, ErrChecksum, ErrDecodedLength, or body's own read
// error), returned again by every later Read. So a consumer that forwards
// the bytes must treat anything but io.EOF as a failed body: the unsigned
// form's bytes, and every form's checksum, are verified only at the end.
// Memory: one signed chunk (at most MaxChunkSize) and a 4 KiB buffer.
func NewReader(body io.Reader, opts Options) *Reader {
	r := &Reader{br: bufio.NewReader(body), opts: opts, prevSig: opts.Seed, digest: sha256.New()}
	if r.opts.MaxChunkSize == 0 {
		r.opts.MaxChunkSize = DefaultMaxChunkSize
	}
	r.signed = opts.Form == SignedPayload || opts.Form == SignedPayloadTrailer
	if err := r.check(); err != nil {
		r.err = fmt.Errorf("%w: %s", ErrOptions, err)
		return r
	}
	if r.signed {
		r.mac = hmac.New(sha256.New, opts.SigningKey)
	}
	if len(opts.Trailers) == 1 {
		r.sum = checksums[opts.Trailers[0]]()
	}
	return r
}

func (r *Reader) check() error {
	o := r.opts
	switch o.Form {
	case SignedPayload:
		if len(o.Trailers) != 0 {
			return fmt.Errorf("%s declares no trailer, got %q", o.Form, o.Trailers)
		}
	case SignedPayloadTrailer, UnsignedPayloadTrailer:
		if len(o.Trailers) != 1 || checksums[o.Trailers[0]] == nil {
			return fmt.Errorf("%s needs exactly one checksum trailer, got %q", o.Form, o.Trailers)
		}
	default:
		return fmt.Errorf("form %q is not aws-chunked", o.Form)
	}
	if o.DecodedLength < 0 {
		return fmt.Errorf("decoded length %d", o.DecodedLength)
	}
	if o.MaxChunkSize < 0 {
		return fmt.Errorf("maximum chunk size %d", o.MaxChunkSize)
	}
	if !r.signed {
		return nil
	}
	if len(o.SigningKey) == 0 || o.Scope == "" {
		return errors.New("a signed form needs the signing key and scope")
	}
	if _, err := time.Parse("20060102T150405Z", o.Date); err != nil {
		return fmt.Errorf("date %q is not an X-Amz-Date", o.Date)
	}
	if !isSignature(o.Seed) {
		return fmt.Errorf("seed %q is not 64 lower-case hex digits", o.Seed)
	}
	return nil
}

// Trailers returns the trailers read (name to value), once Read returned
// io.EOF; nil before.
func (r *Reader) Trailers() map[string]string {
	if r.err != io.EOF {
		return nil
	}
	return r.trailers
}

// Read reads decoded payload bytes into p; see NewReader.
func (r *Reader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	for {
		if len(r.pending) > 0 {
			n := copy(p, r.pending)
			r.pending = r.pending[n:]
			return n, nil
		}
		if r.left > 0 {
			n, err := r.br.Read(p[:min(int64(len(p)), r.left)])
			r.left -= int64(n)
			r.sum.Write(p[:n])
			r.crlf = r.left == 0
			if err != nil {
				r.err = r.readErr(err, "chunk data")
			}
			if n == 0 && r.err != nil {
				return 0, r.err
			}
			return n, nil
		}
		if err := r.next(); err != nil {
			r.err = err
			return 0, err
		}
	}
}

// next reads the next chunk's size line and, of a signed chunk, its data and
// CRLF, verified; after the final chunk it reads and verifies the end.
func (r *Reader) next() error {
	if r.crlf {
		if err := r.expect("\r\n", "after chunk data"); err != nil {
			return err
		}
		r.crlf = false
	}
	line, err := r.line(MaxChunkLine, "chunk size line")
	if err != nil {
		return err
	}
	hexSize, sig := line, ""
	if r.signed {
		var ok bool
		hexSize, sig, ok = strings.Cut(line, ";chunk-signature=")
		if !ok || !isSignature(sig) {
			return fmt.Errorf("%w: chunk line %q is not size;chunk-signature=<64 hex>", ErrMalformed, line)
		}
	}
	size, ok := parseSize(hexSize)
	if !ok {
		return fmt.Errorf("%w: chunk size %q is not lower-case hex without leading zeros", ErrMalformed, hexSize)
	}
	if size > r.opts.DecodedLength-r.total {
		return fmt.Errorf("%w: a chunk of %d bytes after %d, %d declared", ErrDecodedLength, size, r.total, r.opts.DecodedLength)
	}
	r.total += size
	if !r.signed {
		if size == 0 {
			return r.finish()
		}
		r.left = size
		return nil
	}
	if size > int64(r.opts.MaxChunkSize) {
		return fmt.Errorf("%w: a signed chunk of %d bytes, at most %d", ErrMalformed, size, r.opts.MaxChunkSize)
	}
	if int64(cap(r.buf)) < size {
		r.buf = make([]byte, size)
	}
	data := r.buf[:size]
	if _, err := io.ReadFull(r.br, data); err != nil {
		return r.readErr(err, "chunk data")
	}
	if size > 0 {
		if err := r.expect("\r\n", "after chunk data"); err != nil {
			return err
		}
	}
	r.digest.Reset()
	r.digest.Write(data)
	want := r.sign("AWS4-HMAC-SHA256-PAYLOAD", r.prevSig, emptySHA256, hex.EncodeToString(r.digest.Sum(nil)))
	if subtle.ConstantTimeCompare([]byte(want), []byte(sig)) != 1 {
		return fmt.Errorf("%w: chunk %d bytes at payload offset %d", ErrChunkSignature, size, r.total-size)
	}
	r.prevSig = sig
	if size == 0 {
		return r.finish()
	}
	if r.sum != nil {
		r.sum.Write(data)
	}
	r.pending = data
	return nil
}

// sign is the hex HMAC of a string to sign with the request's date and scope.
func (r *Reader) sign(algorithm string, lines ...string) string {
	r.mac.Reset()
	io.WriteString(r.mac, algorithm+"\n"+r.opts.Date+"\n"+r.opts.Scope)
	for _, l := range lines {
		io.WriteString(r.mac, "\n"+l)
	}
	return hex.EncodeToString(r.mac.Sum(nil))
}

// finish reads what follows the final chunk's line: the trailers and their
// signature, and the empty line; then body's end.
func (r *Reader) finish() error {
	if r.total != r.opts.DecodedLength {
		return fmt.Errorf("%w: %d bytes, %d declared", ErrDecodedLength, r.total, r.opts.DecodedLength)
	}
	r.trailers = map[string]string{}
	var canonical strings.Builder // name:value\n per trailer, as signed
	trailerSig := ""
	budget := MaxTrailerSize
	for {
		line, bareLF, err := r.lineLF(budget, "trailers")
		if err != nil {
			return err
		}
		budget -= len(line) + 2
		if bareLF {
			// minio-go ends a signed trailer with "\n\r\n"; what is signed
			// ("name:value\n") is the same, so the shape is accepted there,
			// and nowhere else.
			if r.opts.Form != SignedPayloadTrailer || line == "" || strings.HasPrefix(line, "x-amz-trailer-signature:") {
				return fmt.Errorf("%w: trailers %q do not end in CRLF", ErrMalformed, line+"\n")
			}
			if next, err := r.line(budget, "trailers"); err != nil || next != "" {
				return fmt.Errorf("%w: trailer %q ends in LF without an empty CRLF line after it", ErrMalformed, line)
			}
			budget -= 2
		}
		if line == "" {
			break
		}
		if trailerSig != "" {
			return fmt.Errorf("%w: %q after the trailer signature", ErrMalformed, line)
		}
		name, value, ok := strings.Cut(line, ":")
		if r.opts.Form == SignedPayloadTrailer && name == "x-amz-trailer-signature" {
			if !isSignature(value) {
				return fmt.Errorf("%w: trailer signature %q", ErrMalformed, value)
			}
			trailerSig = value
			continue
		}
		if !ok || len(r.opts.Trailers) == 0 || name != r.opts.Trailers[0] {
			return fmt.Errorf("%w: trailer line %q, declared %q", ErrMalformed, line, r.opts.Trailers)
		}
		if _, seen := r.trailers[name]; seen {
			return fmt.Errorf("%w: trailer %q repeated", ErrMalformed, name)
		}
		r.trailers[name] = value
		canonical.WriteString(name + ":" + value + "\n")
	}
	for _, name := range r.opts.Trailers {
		if _, ok := r.trailers[name]; !ok {
			return fmt.Errorf("%w: declared trailer %q missing", ErrMalformed, name)
		}
	}
	if r.opts.Form == SignedPayloadTrailer {
		if trailerSig == "" {
			return fmt.Errorf("%w: no trailer signature", ErrMalformed)
		}
		h := sha256.Sum256([]byte(canonical.String()))
		want := r.sign("AWS4-HMAC-SHA256-TRAILER", r.prevSig, hex.EncodeToString(h[:]))
		if subtle.ConstantTimeCompare([]byte(want), []byte(trailerSig)) != 1 {
			return ErrTrailerSignature
		}
	}
	if r.sum != nil {
		name := r.opts.Trailers[0]
		if got := base64.StdEncoding.EncodeToString(r.sum.Sum(nil)); got != r.trailers[name] {
			return fmt.Errorf("%w: %s is %q, the payload's is %q", ErrChecksum, name, r.trailers[name], got)
		}
	}
	switch _, err := r.br.ReadByte(); err {
	case io.EOF:
		return io.EOF
	case nil:
		return fmt.Errorf("%w: bytes after the end of the aws-chunked body", ErrMalformed)
	default:
		return err
	}
}

// line reads one CRLF-terminated line of at most limit bytes (CRLF
// included) and returns it without the CRLF.
func (r *Reader) line(limit int, what string) (string, error) {
	b, err := r.br.ReadSlice('\n')
	switch {
	case err == bufio.ErrBufferFull || len(b) > limit:
		return "", fmt.Errorf("%w: %s longer than %d bytes", ErrMalformed, what, limit)
	case err != nil:
		return "", r.readErr(err, what)
	case len(b) < 2 || b[len(b)-2] != '\r' || bytes.IndexByte(b[:len(b)-2], '\r') >= 0:
		return "", fmt.Errorf("%w: %s %q does not end in CRLF", ErrMalformed, what, b)
	}
	return string(b[:len(b)-2]), nil
}

// lineLF is line that also takes a line ending in a bare LF, and says so.
func (r *Reader) lineLF(limit int, what string) (line string, bareLF bool, err error) {
	b, err := r.br.ReadSlice('\n')
	switch {
	case err == bufio.ErrBufferFull || len(b) > limit:
		return "", false, fmt.Errorf("%w: %s longer than %d bytes", ErrMalformed, what, limit)
	case err != nil:
		return "", false, r.readErr(err, what)
	case len(b) >= 2 && b[len(b)-2] == '\r' && bytes.IndexByte(b[:len(b)-2], '\r') < 0:
		return string(b[:len(b)-2]), false, nil
	case bytes.IndexByte(b, '\r') >= 0:
		return "", false, fmt.Errorf("%w: %s %q does not end in CRLF", ErrMalformed, what, b)
	}
	return string(b[:len(b)-1]), true, nil
}

func (r *Reader) expect(s, what string) error {
	for i := 0; i < len(s); i++ {
		c, err := r.br.ReadByte()
		if err != nil {
			return r.readErr(err, what)
		}
		if c != s[i] {
			return fmt.Errorf("%w: %q where %q belongs %s", ErrMalformed, c, s, what)
		}
	}
	return nil
}

// readErr turns an end of body into ErrMalformed (and io.ErrUnexpectedEOF);
// any other read error is body's own.
func (r *Reader) readErr(err error, what string) error {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return fmt.Errorf("%w: body ends in the %s: %w", ErrMalformed, what, io.ErrUnexpectedEOF)
	}
	return err
}

// parseSize parses a chunk size: 1 to 15 lower-case hex digits (no
// overflow of int64), no leading
// zero but "0" itself, as every signer writes it (strconv's, %x), so that
// each size has one spelling.
func parseSize(s string) (int64, bool) {
	if s == "" || len(s) > 15 || (s[0] == '0' && len(s) > 1) {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case '0' <= c && c <= '9':
			n = n<<4 | int64(c-'0')
		case 'a' <= c && c <= 'f':
			n = n<<4 | int64(c-'a'+10)
		default:
			return 0, false
		}
	}
	return n, true
}

func isSignature(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
