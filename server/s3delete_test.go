package server_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/fenceproxy/fenceproxy/internal/servertest"
)

// s3BodyDigests are the body checksum headers a verifying backend checks,
// with their hash.
var s3BodyDigests = map[string]func() hash.Hash{
	"Content-Md5":           md5.New,
	"X-Amz-Checksum-Sha256": sha256.New,
	"X-Amz-Checksum-Sha1":   sha1.New,
	"X-Amz-Checksum-Crc32":  func() hash.Hash { return crc32.NewIEEE() },
	"X-Amz-Checksum-Crc32c": func() hash.Hash { return crc32.New(crc32.MakeTable(crc32.Castagnoli)) },
}

// s3DeleteBackend is gofakes3 behind a check of every DeleteObjects it gets:
// the SigV4 signature with the payload hash, and each body checksum header
// the request carries (400 BadDigest otherwise, as S3 answers). It records
// the DeleteObjects requests that reached it and the checksum headers each had.
type s3DeleteBackend struct {
	mu      sync.Mutex
	deletes [][]string // per DeleteObjects received, the checksum headers verified
	bad     []string   // what failed verification
}

func (b *s3DeleteBackend) received() ([][]string, []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.deletes), slices.Clone(b.bad)
}

func (b *s3DeleteBackend) wrap(fake http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || !r.URL.Query().Has("delete") {
			fake.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var verified []string
		var problem error
		if _, err := s3VerifySigV4(r, body); err != nil {
			problem = fmt.Errorf("signature: %w", err)
		}
		for name, h := range s3BodyDigests {
			want := r.Header.Get(name)
			if want == "" {
				continue
			}
			d := h()
			d.Write(body)
			if got := base64.StdEncoding.EncodeToString(d.Sum(nil)); got != want {
				problem = errors.Join(problem, fmt.Errorf("%s %s, body's %s", name, want, got))
			}
			verified = append(verified, name)
		}
		b.mu.Lock()
		b.deletes = append(b.deletes, verified)
		if problem != nil {
			b.bad = append(b.bad, problem.Error())
		}
		b.mu.Unlock()
		if problem != nil {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, "<Error><Code>BadDigest</Code><Message>%s</Message></Error>", s3XMLEscape(problem.Error()))
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		fake.ServeHTTP(w, r)
	})
}

// TestS3PassDeleteObjectsFencedPerKey: with FENCEPROXY_S3=pass, DeleteObjects
// is fenced on the resource of every key in its body, all or nothing: a batch
// with one stale key is refused with 409 and reaches no backend (every object
// stays, no fence moves); a current batch deletes every object and raises
// each key's fence. The body arrives byte for byte: the backend verifies the
// SDK's signature and body checksum. A body that is not a Delete of 1 to
// 1,000 keys within the byte limit is 400 malformed_xml, a key the fence
// cannot name 400 bad_resource, and neither is forwarded.
func TestS3PassDeleteObjectsFencedPerKey(t *testing.T) {
	const bucket = "jobs"
	mem := s3mem.New()
	if err := mem.CreateBucket(bucket); err != nil {
		t.Fatal(err)
	}
	backend := &s3DeleteBackend{}
	srv := httptest.NewServer(backend.wrap(gofakes3.New(mem).Server()))
	t.Cleanup(srv.Close)
	in := servertest.Start(t, map[string]string{"FENCEPROXY_UPSTREAM": srv.URL, "FENCEPROXY_DATA_DIR": t.TempDir(),
		"FENCEPROXY_S3": "pass", "FENCEPROXY_S3_DOMAINS": "localhost"})
	_, port, _ := net.SplitHostPort(in.Proxy)
	endpoint := "http://localhost:" + port
	client := s3HostClient(endpoint, in.Proxy, true)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	keys := map[string]uint64{"a/1": 5, "b/2": 7, "c/3 ü;x&y": 5}
	for k, tok := range keys {
		if _, err := client.PutObject(s3WithFencingToken(ctx, tok), &s3.PutObjectInput{
			Bucket: aws.String(bucket), Key: aws.String(k), Body: strings.NewReader("from " + k),
		}); err != nil {
			t.Fatalf("PutObject %s with token %d: %v", k, tok, err)
		}
	}
	deleteAll := func(tok uint64) (*s3.DeleteObjectsOutput, error) {
		var objs []s3types.ObjectIdentifier
		for _, k := range []string{"c/3 ü;x&y", "a/1", "b/2", "a/1"} {
			objs = append(objs, s3types.ObjectIdentifier{Key: aws.String(k)})
		}
		return client.DeleteObjects(s3WithFencingToken(ctx, tok), &s3.DeleteObjectsInput{
			Bucket: aws.String(bucket), Delete: &s3types.Delete{Objects: objs},
		})
	}
	fences := func() map[string]string {
		got := map[string]string{}
		for k := range keys {
			got[k], _ = s3FenceOf(t, in, bucket+"/"+k)
		}
		return got
	}

	// 6 is current for a/1 and c/3 but stale for b/2: the whole batch is refused.
	_, err := deleteAll(6)
	s3AssertStaleRefusal(t, err, "7")
	if dels, _ := backend.received(); len(dels) != 0 {
		t.Fatalf("the stale batch reached the backend: %v", dels)
	}
	for k := range keys {
		if got := s3GetObject(ctx, t, client, bucket, k); got != "from "+k {
			t.Errorf("after the stale batch, %s holds %q", k, got)
		}
	}
	if got, want := fences(), map[string]string{"a/1": "5", "b/2": "7", "c/3 ü;x&y": "5"}; !maps.Equal(got, want) {
		t.Errorf("after the stale batch, fences %v, want %v (unchanged)", got, want)
	}

	// 8 is current for every key: all are deleted, every fence is 8.
	out, err := deleteAll(8)
	if err != nil {
		t.Fatalf("DeleteObjects with token 8: %v", err)
	}
	if len(out.Errors) != 0 || len(out.Deleted) < len(keys) {
		t.Errorf("DeleteObjects with token 8: deleted %d, errors %v", len(out.Deleted), out.Errors)
	}
	dels, bad := backend.received()
	if len(dels) != 1 || len(dels[0]) == 0 || len(bad) != 0 {
		t.Fatalf("backend got DeleteObjects with checksum headers %v, failed checks %q; want one, with a body checksum, all verified", dels, bad)
	}
	t.Logf("the SDK's DeleteObjects carried %v, verified by the backend", dels[0])
	for k := range keys {
		if _, err := client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String(k)}); err == nil {
			t.Errorf("after the batch with 8, %s still exists", k)
		}
	}
	if got, want := fences(), map[string]string{"a/1": "8", "b/2": "8", "c/3 ü;x&y": "8"}; !maps.Equal(got, want) {
		t.Errorf("after the batch with 8, fences %v, want %v", got, want)
	}
	if _, status := s3FenceOf(t, in, bucket); status != http.StatusNotFound {
		t.Errorf("the bucket's own resource has a fence (status %d): a batch fences its keys only", status)
	}

	// Bodies the proxy refuses itself; none reaches the backend.
	objects := func(n int, key string) string {
		return "<Delete>" + strings.Repeat("<Object><Key>"+key+"</Key></Object>", n) + "</Delete>"
	}
	for _, c := range []struct {
		name, body string
		chunked    bool
		reason     string
		path       string // "" is the bucket's
	}{
		{"no object", "<Delete><Quiet>true</Quiet></Delete>", false, "malformed_xml", ""},
		{"not XML", "{}", false, "malformed_xml", ""},
		{"1,001 keys", objects(1001, "k"), false, "malformed_xml", ""},
		{"over the byte limit, Content-Length", objects(1, strings.Repeat("k", 2<<20)), false, "malformed_xml", ""},
		{"over the byte limit, chunked", objects(1, strings.Repeat("k", 2<<20)), true, "malformed_xml", ""},
		{"a dot segment", objects(1, "a/../b/2"), false, "bad_resource", ""},
		{"a control byte", objects(1, "a&#x1;"), false, "malformed_xml", ""},
		{"a newline", objects(1, "a&#xA;b"), false, "bad_resource", ""},
		{"sent to an object", objects(1, "a/1"), false, "unsupported", "/" + bucket + "/a/1"},
	} {
		var body io.Reader = strings.NewReader(c.body)
		if c.chunked {
			body = io.MultiReader(body) // no length: sent chunked
		}
		if c.path == "" {
			c.path = "/" + bucket
		}
		req, _ := http.NewRequest(http.MethodPost, in.ProxyURL()+c.path+"?delete", body)
		req.Host = "localhost:" + port
		req.Header.Set("X-Fencing-Token", "9")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		msg, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Fencing-Refused") != c.reason {
			t.Errorf("%s: %d %q %s, want 400 %s", c.name, resp.StatusCode, resp.Header.Get("Fencing-Refused"), msg, c.reason)
		}
	}
	if dels, _ := backend.received(); len(dels) != 1 {
		t.Errorf("refused bodies reached the backend: %d DeleteObjects in all", len(dels))
	}
}
