package awschunked

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
	"hash/crc64"
	"io"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// The test signer: chunk signatures come from aws-sdk-go-v2's StreamSigner
// (its string to sign is the S3 chunk's, with no headers), the trailer
// signature is built per the AWS spec (no SDK in Go signs one).
var (
	testCreds  = aws.Credentials{AccessKeyID: "AKIDTEST", SecretAccessKey: "secret/test+key"}
	testRegion = "us-east-1"
	testTime   = time.Date(2026, 5, 1, 12, 30, 0, 0, time.UTC)
	testSeed   = "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9"
)

// checksumOf is the trailer value of data, with the stdlib directly.
func checksumOf(t testing.TB, name string, data []byte) string {
	t.Helper()
	var sum []byte
	switch name {
	case "x-amz-checksum-crc32":
		sum = binary.BigEndian.AppendUint32(nil, crc32.ChecksumIEEE(data))
	case "x-amz-checksum-crc32c":
		sum = binary.BigEndian.AppendUint32(nil, crc32.Checksum(data, crc32.MakeTable(crc32.Castagnoli)))
	case "x-amz-checksum-crc64nvme":
		h := crc64.New(crc64.MakeTable(0x9a6c9329ac4bc9b5))
		h.Write(data)
		sum = h.Sum(nil)
	case "x-amz-checksum-sha1":
		s := sha1.Sum(data)
		sum = s[:]
	case "x-amz-checksum-sha256":
		s := sha256.Sum256(data)
		sum = s[:]
	default:
		t.Fatalf("no checksum %q", name)
	}
	return base64.StdEncoding.EncodeToString(sum)
}

// body is an aws-chunked body under construction.
type body struct {
	form    Form
	seed    string
	creds   aws.Credentials
	region  string
	when    time.Time
	trailer string // checksum trailer name; "" for SignedPayload
}

func newBody(form Form, trailer string) body {
	if form == SignedPayload {
		trailer = ""
	}
	return body{form: form, seed: testSeed, creds: testCreds, region: testRegion, when: testTime, trailer: trailer}
}

func (b body) scope() string {
	return b.when.Format("20060102") + "/" + b.region + "/s3/aws4_request"
}

// options are the Reader's options for a body of decoded length n.
func (b body) options(n int64) Options {
	o := Options{Form: b.form, DecodedLength: n}
	if b.trailer != "" {
		o.Trailers = []string{b.trailer}
	}
	if b.form != UnsignedPayloadTrailer {
		o.SigningKey = SigningKey(b.creds.SecretAccessKey, b.when.Format("20060102"), b.region)
		o.Date = b.when.Format("20060102T150405Z")
		o.Scope = b.scope()
		o.Seed = b.seed
	}
	return o
}

// encode frames chunks (each non-empty) in b's form with trailer value
// value ("" for the checksum of the chunks).
func (b body) encode(t testing.TB, chunks [][]byte, value string) []byte {
	t.Helper()
	var out bytes.Buffer
	seed, err := hex.DecodeString(b.seed)
	if err != nil {
		t.Fatal(err)
	}
	ss := v4.NewStreamSigner(b.creds, "s3", b.region, seed)
	prev := b.seed
	sign := func(data []byte) string {
		sig, err := ss.GetSignature(context.Background(), nil, data, b.when)
		if err != nil {
			t.Fatal(err)
		}
		prev = hex.EncodeToString(sig)
		return prev
	}
	var all []byte
	for _, c := range append(chunks, nil) {
		all = append(all, c...)
		if b.form == UnsignedPayloadTrailer {
			fmt.Fprintf(&out, "%x\r\n", len(c))
		} else {
			fmt.Fprintf(&out, "%x;chunk-signature=%s\r\n", len(c), sign(c))
		}
		if len(c) > 0 {
			out.Write(c)
			out.WriteString("\r\n")
		}
	}
	if b.trailer != "" {
		if value == "" {
			value = checksumOf(t, b.trailer, all)
		}
		fmt.Fprintf(&out, "%s:%s\r\n", b.trailer, value)
		if b.form == SignedPayloadTrailer {
			fmt.Fprintf(&out, "x-amz-trailer-signature:%s\r\n", b.trailerSignature(prev, b.trailer+":"+value+"\n"))
		}
	}
	out.WriteString("\r\n")
	return out.Bytes()
}

// trailerSignature signs canonical trailers per the AWS spec, with a signing
// key derived here (not by SigningKey).
func (b body) trailerSignature(prev, canonical string) string {
	mac := func(k []byte, s string) []byte { m := hmac.New(sha256.New, k); m.Write([]byte(s)); return m.Sum(nil) }
	k := mac([]byte("AWS4"+b.creds.SecretAccessKey), b.when.Format("20060102"))
	k = mac(mac(mac(k, b.region), "s3"), "aws4_request")
	h := sha256.Sum256([]byte(canonical))
	return hex.EncodeToString(mac(k, "AWS4-HMAC-SHA256-TRAILER\n"+b.when.Format("20060102T150405Z")+"\n"+b.scope()+"\n"+prev+"\n"+hex.EncodeToString(h[:])))
}

// decode reads all of a Reader of enc.
func decode(enc []byte, o Options) ([]byte, map[string]string, error) {
	r := NewReader(bytes.NewReader(enc), o)
	got, err := io.ReadAll(r)
	return got, r.Trailers(), err
}

// pattern is n bytes that differ from chunk to chunk.
func pattern(n int, seed byte) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(i*7) + seed
	}
	return p
}

var allForms = []Form{SignedPayload, SignedPayloadTrailer, UnsignedPayloadTrailer}
