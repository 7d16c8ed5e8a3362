package awschunked

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fenceproxy/fenceproxy/internal/s3backend"
)

// gateway is a versitygw with a bucket, and what signs requests to it.
type gateway struct {
	srv    *s3backend.Server
	creds  aws.Credentials
	client *http.Client
}

func startGateway(t *testing.T) *gateway {
	srv := s3backend.Start(t)
	srv.CreateBucket(t, "chunks")
	tr := &http.Transport{Proxy: nil}
	t.Cleanup(tr.CloseIdleConnections)
	return &gateway{srv: srv, creds: aws.Credentials{AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey}, client: &http.Client{Transport: tr}}
}

// put sends a PUT of key with body, its headers set and signed with
// payloadHash first; seeded builds the body from the request's signature.
func (g *gateway) put(t *testing.T, key string, header http.Header, length int64, payloadHash string, when time.Time, seeded func(seed string) io.Reader) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, g.srv.URL+"/chunks/"+key, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.ContentLength = length
	if err := v4.NewSigner().SignHTTP(context.Background(), g.creds, req, payloadHash, "s3", s3backend.Region, when); err != nil {
		t.Fatal(err)
	}
	_, seed, _ := strings.Cut(req.Header.Get("Authorization"), "Signature=")
	req.Body = io.NopCloser(seeded(seed))
	resp, err := g.client.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// get returns the object's bytes, or nil when there is none.
func (g *gateway) get(t *testing.T, key string) []byte {
	t.Helper()
	out, err := g.srv.Client().GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String("chunks"), Key: aws.String(key)})
	if err != nil {
		if strings.Contains(err.Error(), "NoSuchKey") {
			return nil
		}
		t.Fatal(err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// putSigned sends chunks as a signed aws-chunked body of form, the body
// changed by change (nil: unchanged), and decodes the same bytes with a
// Reader: it returns versitygw's status and the Reader's error.
func (g *gateway) putSigned(t *testing.T, key string, form Form, trailer string, chunks [][]byte, change func([]byte)) (int, string, error) {
	t.Helper()
	b := newBody(form, trailer)
	b.creds, b.region, b.when = g.creds, s3backend.Region, time.Now().UTC().Truncate(time.Second)
	n := int64(len(bytes.Join(chunks, nil)))
	h := http.Header{
		"Content-Encoding":             {"aws-chunked"},
		"X-Amz-Decoded-Content-Length": {strconv.FormatInt(n, 10)},
		"X-Amz-Content-Sha256":         {string(form)},
	}
	if b.trailer != "" {
		h.Set("X-Amz-Trailer", b.trailer)
	}
	var enc []byte
	status, msg := g.put(t, key, h, int64(len(b.encode(t, chunks, ""))), string(form), b.when, func(seed string) io.Reader {
		b.seed = seed
		enc = b.encode(t, chunks, "")
		if change != nil {
			change(enc)
		}
		return bytes.NewReader(enc)
	})
	_, _, err := decode(enc, b.options(n))
	return status, msg, err
}

// TestVersitygwSignedForms sends bodies of both signed forms built by the
// test signer (aws-sdk-go-v2's seed and chunk signatures) to versitygw,
// which verifies every chunk and the trailer with its own code: each is
// stored. Then one byte changed (a data byte, a chunk signature digit, the
// trailer value, the trailer signature): versitygw refuses it, stores
// nothing, and so does the Reader.
func TestVersitygwSignedForms(t *testing.T) {
	g := startGateway(t)
	chunks := [][]byte{pattern(65536, 1), pattern(65536, 2), pattern(1000, 3)}
	want := bytes.Join(chunks, nil)
	for _, form := range []Form{SignedPayload, SignedPayloadTrailer} {
		for _, trailer := range []string{"x-amz-checksum-crc32", "x-amz-checksum-crc32c", "x-amz-checksum-crc64nvme", "x-amz-checksum-sha1", "x-amz-checksum-sha256"} {
			if form == SignedPayload && trailer != "x-amz-checksum-crc32" {
				continue
			}
			key := "ok-" + strings.ToLower(string(form)) + "-" + trailer
			status, msg, err := g.putSigned(t, key, form, trailer, chunks, nil)
			if status != http.StatusOK || err != nil {
				t.Fatalf("%s %s: versitygw %d %s; Reader %v", form, trailer, status, msg, err)
			}
			if got := g.get(t, key); !bytes.Equal(got, want) {
				t.Fatalf("%s: versitygw stored %d bytes, want %d", form, len(got), len(want))
			}
		}
		changes := map[string]func([]byte){
			"a data byte of chunk 2": func(b []byte) { b[bytes.Index(b[100:], []byte("chunk-signature="))+100+90+30000] ^= 1 },
			"a chunk signature digit": func(b []byte) {
				at := bytes.Index(b[100:], []byte("chunk-signature=")) + 100 + 16 + 10
				b[at] = map[bool]byte{true: '1', false: '0'}[b[at] == '0']
			},
		}
		if form == SignedPayloadTrailer {
			changes["the trailer value"] = func(b []byte) { b[bytes.Index(b, []byte("x-amz-checksum-crc32:"))+22] ^= 1 }
			changes["the trailer signature"] = func(b []byte) {
				at := bytes.Index(b, []byte("x-amz-trailer-signature:")) + 24 + 5
				b[at] = map[bool]byte{true: '1', false: '0'}[b[at] == '0']
			}
		}
		for what, change := range changes {
			key := "bad-" + strings.ReplaceAll(what, " ", "-") + "-" + strings.ToLower(string(form))
			status, msg, err := g.putSigned(t, key, form, "x-amz-checksum-crc32", chunks, change)
			if status == http.StatusOK || err == nil {
				t.Fatalf("%s, %s changed: versitygw %d %s; Reader %v", form, what, status, msg, err)
			}
			if got := g.get(t, key); got != nil {
				t.Fatalf("%s, %s changed: versitygw stored %d bytes", form, what, len(got))
			}
			t.Logf("%s, %s changed: versitygw %d %.80s; Reader: %v", form, what, status, msg, err)
		}
	}
}

// TestVersitygwEncoder sends the Encoder's bodies to versitygw as
// STREAMING-UNSIGNED-PAYLOAD-TRAILER, which checks the checksum trailer:
// stored; a changed data byte refused. Then the gateway's path whole: a
// signed body through a Reader into an Encoder to versitygw is stored, and
// one whose final chunk's signature is bad is not, though every data byte
// was sent (the Encoder never frames the final chunk, so the request fails
// and the store sees a body cut short).
func TestVersitygwEncoder(t *testing.T) {
	g := startGateway(t)
	data := pattern(200_000, 7)
	send := func(key string, payload io.Reader, n int64, trailer string, change func([]byte)) (int, string) {
		e, err := NewUnsignedTrailerEncoder(payload, n, trailer, 64<<10)
		if err != nil {
			t.Fatal(err)
		}
		return g.put(t, key, e.Header(), e.ContentLength(), string(UnsignedPayloadTrailer), time.Now().UTC(), func(string) io.Reader {
			if change == nil {
				return e
			}
			b, err := io.ReadAll(e)
			if err != nil {
				t.Fatal(err)
			}
			change(b)
			return bytes.NewReader(b)
		})
	}
	for name := range checksums {
		if status, msg := send("enc-"+name, bytes.NewReader(data), int64(len(data)), name, nil); status != http.StatusOK {
			t.Fatalf("%s: versitygw %d %s", name, status, msg)
		}
		if got := g.get(t, "enc-"+name); !bytes.Equal(got, data) {
			t.Fatalf("%s: stored %d bytes", name, len(got))
		}
	}
	status, msg := send("enc-bad", bytes.NewReader(data), int64(len(data)), "x-amz-checksum-crc32", func(b []byte) { b[100_000] ^= 1 })
	if status == http.StatusOK || g.get(t, "enc-bad") != nil {
		t.Fatalf("a changed data byte: versitygw %d %s", status, msg)
	}
	t.Logf("the Encoder's body with a changed data byte: versitygw %d %.100s", status, msg)

	// Reader into Encoder.
	chunks := [][]byte{pattern(65536, 1), pattern(65536, 2), pattern(1000, 3)}
	n := int64(len(bytes.Join(chunks, nil)))
	b := newBody(SignedPayloadTrailer, "x-amz-checksum-sha256")
	for _, bad := range []bool{false, true} {
		enc := b.encode(t, chunks, "")
		if bad {
			at := bytes.Index(enc, []byte("\r\n0;chunk-signature=")) + 30
			enc[at] = map[bool]byte{true: '1', false: '0'}[enc[at] == '0']
		}
		key := "path-" + strconv.FormatBool(bad)
		status, msg := send(key, NewReader(bytes.NewReader(enc), b.options(n)), n, "x-amz-checksum-crc32", nil)
		got := g.get(t, key)
		switch {
		case !bad && (status != http.StatusOK || !bytes.Equal(got, bytes.Join(chunks, nil))):
			t.Fatalf("Reader into Encoder: versitygw %d %s, stored %d bytes", status, msg, len(got))
		case bad && (status == http.StatusOK || got != nil):
			t.Fatalf("Reader into Encoder, a bad final chunk signature: versitygw %d %s, stored %d bytes", status, msg, len(got))
		}
		if bad {
			t.Logf("Reader into Encoder, a bad final chunk signature: the request ended %d %q, nothing stored", status, msg)
		}
	}
}

// TestEncoder: its output decodes, its ContentLength is its length, and a
// payload shorter or longer than declared, or failing, fails it without a
// final chunk.
func TestEncoder(t *testing.T) {
	for _, n := range []int{0, 1, 8191, 8192, 8193, 3*8192 + 5} {
		data := pattern(n, 3)
		e, err := NewUnsignedTrailerEncoder(bytes.NewReader(data), int64(n), "x-amz-checksum-crc64nvme", 8192)
		if err != nil {
			t.Fatal(err)
		}
		enc, err := io.ReadAll(e)
		if err != nil || int64(len(enc)) != e.ContentLength() {
			t.Fatalf("%d bytes: encoded %d, ContentLength %d, %v", n, len(enc), e.ContentLength(), err)
		}
		o := Options{Form: UnsignedPayloadTrailer, DecodedLength: int64(n), Trailers: []string{"x-amz-checksum-crc64nvme"}}
		if got, _, err := decode(enc, o); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%d bytes: decoded %d, %v", n, len(got), err)
		}
	}
	boom := errors.New("client body failed")
	for name, c := range map[string]struct {
		payload io.Reader
		want    error
	}{
		"short":   {bytes.NewReader(pattern(9999, 1)), ErrPayloadLength},
		"long":    {bytes.NewReader(pattern(10001, 1)), ErrPayloadLength},
		"failing": {io.MultiReader(bytes.NewReader(pattern(5000, 1)), errReader{boom}), boom},
	} {
		e, _ := NewUnsignedTrailerEncoder(c.payload, 10000, "x-amz-checksum-crc32", 8192)
		enc, err := io.ReadAll(e)
		if !errors.Is(err, c.want) || bytes.Contains(enc, []byte("\r\n0\r\n")) {
			t.Fatalf("%s: %v, %q at the end; want %v and no final chunk", name, err, enc[max(0, len(enc)-20):], c.want)
		}
	}
	for _, bad := range []struct {
		trailer string
		n       int64
		chunk   int
	}{{"x-amz-checksum-md5", 1, 0}, {"x-amz-checksum-crc32", -1, 0}, {"x-amz-checksum-crc32", 1, 100}} {
		if _, err := NewUnsignedTrailerEncoder(nil, bad.n, bad.trailer, bad.chunk); err == nil {
			t.Fatalf("%+v accepted", bad)
		}
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }
