package awschunked

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// captured is one request as an httptest server received it.
type captured struct {
	header http.Header
	body   []byte
}

// captureSDK sends a PutObject of data from aws-sdk-go-v2, with its default
// checksum options over TLS, to an httptest TLS server and returns what
// arrived.
func captureSDK(t *testing.T, data io.Reader, length int64, algorithm types.ChecksumAlgorithm) captured {
	t.Helper()
	var mu sync.Mutex
	var got []captured
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("server reading the body: %v", err)
		}
		mu.Lock()
		got = append(got, captured{r.Header.Clone(), b})
		mu.Unlock()
		w.Header().Set("ETag", `"0"`)
	}))
	defer srv.Close()
	c := s3.New(s3.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(srv.URL),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider("AKIDTEST", "secret", ""),
		HTTPClient:   srv.Client(),
		Retryer:      aws.NopRetryer{},
		// What config.LoadDefaultConfig resolves when nothing is set (a
		// bare Options leaves it unset, which computes nothing).
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenSupported,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	in := &s3.PutObjectInput{Bucket: aws.String("bucket"), Key: aws.String("key"), Body: data, ContentLength: aws.Int64(length)}
	if algorithm != "" {
		in.ChecksumAlgorithm = algorithm
	}
	if _, err := c.PutObject(ctx, in); err != nil {
		t.Fatalf("PutObject: %v", err)
	}
	if len(got) != 1 {
		t.Fatalf("%d requests arrived", len(got))
	}
	return got[0]
}

// optionsOf reads a Reader's options from an unsigned-trailer request's
// headers.
func optionsOf(t *testing.T, h http.Header) Options {
	t.Helper()
	n, err := strconv.ParseInt(h.Get("X-Amz-Decoded-Content-Length"), 10, 64)
	if err != nil {
		t.Fatalf("x-amz-decoded-content-length: %v", err)
	}
	return Options{Form: Form(h.Get("X-Amz-Content-Sha256")), DecodedLength: n, Trailers: strings.Split(h.Get("X-Amz-Trailer"), ",")}
}

// TestRealSDKUnsignedTrailer decodes the bodies aws-sdk-go-v2 itself sends
// over TLS: STREAMING-UNSIGNED-PAYLOAD-TRAILER with a CRC32 trailer by
// default, and each other checksum it offers (so crc32c, crc64nvme, sha1
// and sha256 are checked against its implementations); then checks that a
// changed data byte, checksum byte or size digit of the real body is
// refused. The SDK streams that form for any payload, seekable or not.
func TestRealSDKUnsignedTrailer(t *testing.T) {
	data := pattern(300_000, 5)
	for _, algo := range []types.ChecksumAlgorithm{"", types.ChecksumAlgorithmCrc32c, types.ChecksumAlgorithmCrc64nvme, types.ChecksumAlgorithmSha1, types.ChecksumAlgorithmSha256} {
		for _, seekable := range []bool{true, false} {
			var payload io.Reader = bytes.NewReader(data)
			if !seekable {
				payload = io.MultiReader(payload)
			}
			c := captureSDK(t, payload, int64(len(data)), algo)
			name := "x-amz-checksum-" + strings.ToLower(string(algo))
			if algo == "" {
				name = "x-amz-checksum-crc32"
			}
			h := c.header
			if h.Get("X-Amz-Content-Sha256") != string(UnsignedPayloadTrailer) || h.Get("Content-Encoding") != "aws-chunked" || h.Get("X-Amz-Trailer") != name {
				t.Fatalf("%s: the SDK sent x-amz-content-sha256 %q, content-encoding %q, x-amz-trailer %q",
					algo, h.Get("X-Amz-Content-Sha256"), h.Get("Content-Encoding"), h.Get("X-Amz-Trailer"))
			}
			o := optionsOf(t, h)
			got, tr, err := decode(c.body, o)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("%s: decoded %d bytes, %v", name, len(got), err)
			}
			if tr[name] != checksumOf(t, name, data) {
				t.Fatalf("trailers %v", tr)
			}
			if seekable {
				t.Logf("%s: %d-byte body, header %q, ends %q", name, len(c.body), c.body[:bytes.IndexByte(c.body, '\n')+1], c.body[len(c.body)-60:])
			}
			// Changes of the real body.
			at := bytes.Index(c.body, []byte("\r\n")) + 2 + 150_000
			flip := func(i int, x byte) []byte { b := bytes.Clone(c.body); b[i] ^= x; return b }
			for what, b := range map[string][]byte{
				"a data byte":   flip(at, 0x01),
				"the checksum":  flip(len(c.body)-8, 0x01),
				"a size digit":  flip(0, 0x01),
				"the last CRLF": c.body[:len(c.body)-1],
			} {
				if _, _, err := decode(b, o); err == nil {
					t.Fatalf("%s: %s changed, decoded cleanly", name, what)
				} else if what == "a data byte" && !errors.Is(err, ErrChecksum) {
					t.Fatalf("%s: a data byte changed: %v, want ErrChecksum", name, err)
				}
			}
		}
	}
}
