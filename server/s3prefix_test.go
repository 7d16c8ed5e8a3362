package server_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/fenceproxy/fenceproxy/client"
	"github.com/fenceproxy/fenceproxy/internal/s3backend"
	"github.com/fenceproxy/fenceproxy/internal/servertest"
)

const (
	s3pBucket = "jobs"
	s3pPrefix = "out/part-7/"               // of the keys
	s3pFence  = s3pBucket + "/" + s3pPrefix // the prefix fence: S3 resources start with the bucket
	s3pAdmin  = "pfx-adm1n"
)

// TestS3PrefixFenceEveryWritePath: a fenceproxy in S3 pass mode in front of
// versitygw, with the prefix fence jobs/out/part-7/ raised to 2 by an admin
// after holder 1 wrote below it. Every S3 write path of 1 below the prefix
// is refused (409 StaleFencingToken naming the prefix fence) and versitygw,
// read directly, is unchanged: PutObject of a new key, DeleteObject of 1's
// own object, a DeleteObjects batch with one key below (the whole batch),
// CopyObject into the prefix, CreateMultipartUpload, UploadPart and
// CompleteMultipartUpload of 1's upload (its abort goes through and leaves
// no upload), other spellings of a key below the prefix (runs of "/", a
// leading "/", "%2F"), and the object at the prefix's own name (the
// directory marker out/part-7/, also spelt out/part-7). A copy out of the
// prefix is a read of it and passes; PostObject is refused as unsupported
// whatever the token. With 2 the same writes pass.
//
// The marker spelt out/part-7 is the resource jobs/out/part-7, beside the
// prefix fence until fence.Options.PrefixOwnName (set in S3 mode): before
// it, 1's PutObjectTagging of out/part-7 was admitted and versitygw set the
// tags of the marker out/part-7/.
//
// Its teeth: built with -tags fenceteeth and run with
// FENCEPROXY_TEST_FENCE_UNPROTECTED=prefix-admission, 1's PutObject of a
// new key below the prefix is applied in versitygw.
func TestS3PrefixFenceEveryWritePath(t *testing.T) {
	backend := s3backend.Start(t)
	backend.CreateBucket(t, s3pBucket)
	in := servertest.Start(t, map[string]string{"FENCEPROXY_UPSTREAM": backend.URL, "FENCEPROXY_DATA_DIR": t.TempDir(),
		"FENCEPROXY_S3": "pass", "FENCEPROXY_S3_DOMAINS": "127.0.0.1", "FENCEPROXY_ADMIN_TOKEN": s3pAdmin})
	rec := &s3pRecorder{rt: &http.Transport{Proxy: nil}}
	opts := backend.Options(in.ProxyURL())
	opts.HTTPClient = &http.Client{Transport: rec}
	c := s3.New(opts, client.S3Fencing(client.ContextToken))
	direct := backend.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	at := func(tok uint64) context.Context { return client.WithToken(ctx, tok) }
	put := func(tok uint64, key, body string) error {
		_, err := c.PutObject(at(tok), &s3.PutObjectInput{Bucket: aws.String(s3pBucket), Key: aws.String(key), Body: strings.NewReader(body)})
		return err
	}
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}

	// 1's work before the raise.
	for _, key := range []string{"out/part-7/existing", "out/part-7/batch", "other/a", "other/b", "src/copy-src", "out/part-7/copy-src"} {
		must("PutObject "+key+" with 1", put(1, key, "1's "+key))
	}
	must("PutObject of the directory marker out/part-7/ with 1", put(1, s3pPrefix, ""))
	created, err := c.CreateMultipartUpload(at(1), &s3.CreateMultipartUploadInput{Bucket: aws.String(s3pBucket), Key: aws.String("out/part-7/mp")})
	must("CreateMultipartUpload out/part-7/mp with 1", err)
	upload := created.UploadId
	part1, err := c.UploadPart(at(1), &s3.UploadPartInput{Bucket: aws.String(s3pBucket), Key: aws.String("out/part-7/mp"), UploadId: upload,
		PartNumber: aws.Int32(1), Body: strings.NewReader("part 1 of 1")})
	must("UploadPart 1 with 1", err)

	ctl := &client.Control{BaseURL: in.ControlURL(), AdminBearer: s3pAdmin}
	if f, err := ctl.RaiseFence(ctx, s3pFence, 2); err != nil || f.Resource != s3pFence {
		t.Fatalf("admin raise of %s to 2: %+v %v", s3pFence, f, err)
	}
	if tok, status := s3FenceOf(t, in, s3pFence); tok != "2" {
		t.Fatalf("GET /v1/fences/%s: %d, token %q; want 2", s3pFence, status, tok)
	}

	if fenceUnprotected("prefix-admission") {
		// Teeth: without the prefix check 1's write of a new key lands.
		err := put(1, "out/part-7/new", "stale 1")
		got, found := s3pObject(ctx, t, direct, "out/part-7/new")
		if err != nil || !found || got != "stale 1" {
			t.Fatalf("teeth: with the prefix check off, 1's PutObject of a new key got %v and versitygw holds %q (found %v); want it applied", err, got, found)
		}
		t.Logf("teeth: with the prefix check off, 1's stale PutObject of out/part-7/new was applied in versitygw")
		return
	}

	// stale runs a write of 1 that must be refused naming the prefix fence,
	// with versitygw unchanged.
	stale := func(what string, write func() error) {
		t.Helper()
		before := s3pSnapshot(ctx, t, direct)
		rec.take()
		err := write()
		s3pAssertPrefixRefusal(t, what, err, rec.take())
		if after := s3pSnapshot(ctx, t, direct); !slices.Equal(before, after) {
			t.Errorf("%s: versitygw changed:\nbefore %q\nafter  %q", what, before, after)
		}
	}
	stale("PutObject of a new key", func() error { return put(1, "out/part-7/new", "stale 1") })
	stale("PutObject deeper below", func() error { return put(1, "out/part-7/deeper/new", "stale 1") })
	stale("DeleteObject of 1's object", func() error {
		_, err := c.DeleteObject(at(1), &s3.DeleteObjectInput{Bucket: aws.String(s3pBucket), Key: aws.String("out/part-7/existing")})
		return err
	})
	batch := func(tok uint64) (*s3.DeleteObjectsOutput, error) {
		var objs []s3types.ObjectIdentifier
		for _, k := range []string{"other/a", "out/part-7/batch", "other/b"} {
			objs = append(objs, s3types.ObjectIdentifier{Key: aws.String(k)})
		}
		return c.DeleteObjects(at(tok), &s3.DeleteObjectsInput{Bucket: aws.String(s3pBucket), Delete: &s3types.Delete{Objects: objs}})
	}
	stale("DeleteObjects of other/a, out/part-7/batch, other/b", func() error { _, err := batch(1); return err })
	copyTo := func(tok uint64, src, dst string) error {
		_, err := c.CopyObject(at(tok), &s3.CopyObjectInput{Bucket: aws.String(s3pBucket), Key: aws.String(dst),
			CopySource: aws.String(s3pBucket + "/" + src)})
		return err
	}
	stale("CopyObject into the prefix", func() error { return copyTo(1, "src/copy-src", "out/part-7/copied") })
	stale("CreateMultipartUpload below the prefix", func() error {
		_, err := c.CreateMultipartUpload(at(1), &s3.CreateMultipartUploadInput{Bucket: aws.String(s3pBucket), Key: aws.String("out/part-7/mp-new")})
		return err
	})
	stale("UploadPart of 1's upload", func() error {
		_, err := c.UploadPart(at(1), &s3.UploadPartInput{Bucket: aws.String(s3pBucket), Key: aws.String("out/part-7/mp"), UploadId: upload,
			PartNumber: aws.Int32(2), Body: strings.NewReader("part 2 of 1")})
		return err
	})
	stale("CompleteMultipartUpload of 1's upload", func() error {
		_, err := c.CompleteMultipartUpload(at(1), &s3.CompleteMultipartUploadInput{Bucket: aws.String(s3pBucket), Key: aws.String("out/part-7/mp"),
			UploadId: upload, MultipartUpload: &s3types.CompletedMultipartUpload{Parts: []s3types.CompletedPart{{ETag: part1.ETag, PartNumber: aws.Int32(1)}}}})
		return err
	})
	// The object at the prefix's own name: the directory marker out/part-7/
	// is one object with out/part-7 to versitygw (whose posix backend opens
	// both as the directory), and it is below the prefix.
	tagging := &s3types.Tagging{TagSet: []s3types.Tag{{Key: aws.String("who"), Value: aws.String("stale 1")}}}
	for _, key := range []string{"out/part-7/", "out/part-7"} {
		stale("PutObjectTagging of "+key, func() error {
			_, err := c.PutObjectTagging(at(1), &s3.PutObjectTaggingInput{Bucket: aws.String(s3pBucket), Key: aws.String(key), Tagging: tagging})
			return err
		})
		stale("DeleteObject of "+key, func() error {
			_, err := c.DeleteObject(at(1), &s3.DeleteObjectInput{Bucket: aws.String(s3pBucket), Key: aws.String(key)})
			return err
		})
	}
	// Other spellings of out/part-7/alias, which versitygw reads as that
	// key (checked with 2 below): each is that key's resource, below the
	// prefix.
	aliases := []string{"/jobs/out//part-7/alias", "/jobs//out/part-7/alias", "/jobs/out%2Fpart-7%2Falias", "/jobs/%2Fout/part-7//alias"}
	for _, path := range aliases {
		stale("PUT "+path, func() error {
			a := s3pRaw(t, backend, in.ProxyURL(), http.MethodPut, path, 1, "stale 1", nil)
			rec.put(a.body)
			return a.err()
		})
	}

	// 1's abort of its own upload goes through (its creator), and leaves none.
	if _, err := c.AbortMultipartUpload(at(1), &s3.AbortMultipartUploadInput{Bucket: aws.String(s3pBucket), Key: aws.String("out/part-7/mp"), UploadId: upload}); err != nil {
		t.Errorf("AbortMultipartUpload of its own upload by 1 after the raise: %v", err)
	}
	if ups := s3pUploads(ctx, t, direct); len(ups) != 0 {
		t.Errorf("after 1's abort versitygw lists the uploads %q, want none", ups)
	}

	// A copy out of the prefix reads it: not fenced by it.
	if err := copyTo(1, "out/part-7/copy-src", "other/copied"); err != nil {
		t.Errorf("CopyObject of out/part-7/copy-src to other/copied with 1: %v, want it applied (reads are not fenced)", err)
	} else if got, _ := s3pObject(ctx, t, direct, "other/copied"); got != "1's out/part-7/copy-src" {
		t.Errorf("versitygw holds %q at other/copied after the copy out of the prefix", got)
	}

	// PostObject (a browser form upload) names its key in the form: the
	// proxy refuses it as unsupported whatever the token, to the bucket or
	// to an object's path, and forwards nothing.
	for _, tok := range []uint64{1, 2} {
		for _, path := range []string{"/jobs", "/jobs/out/part-7/post"} {
			before := s3pSnapshot(ctx, t, direct)
			body, ctype := s3pForm(t, "out/part-7/post", fmt.Sprintf("posted by %d", tok))
			r := s3pRaw(t, backend, in.ProxyURL(), http.MethodPost, path, tok, body, map[string]string{"Content-Type": ctype})
			if r.status != http.StatusBadRequest || r.refused != "unsupported" || !strings.Contains(r.body, "<Code>NotImplemented</Code>") {
				t.Errorf("PostObject to %s with %d: %d %q %s; want 400 unsupported, NotImplemented", path, tok, r.status, r.refused, r.body)
			}
			if after := s3pSnapshot(ctx, t, direct); !slices.Equal(before, after) {
				t.Errorf("PostObject to %s with %d: versitygw changed:\nbefore %q\nafter  %q", path, tok, before, after)
			}
		}
	}

	// With 2 the same writes pass.
	must("PutObject of a new key with 2", put(2, "out/part-7/new", "2's new"))
	_, err = c.DeleteObject(at(2), &s3.DeleteObjectInput{Bucket: aws.String(s3pBucket), Key: aws.String("out/part-7/existing")})
	must("DeleteObject of out/part-7/existing with 2", err)
	out, err := batch(2)
	must("DeleteObjects with 2", err)
	if len(out.Errors) != 0 || len(out.Deleted) != 3 {
		t.Errorf("DeleteObjects with 2: deleted %d, errors %v; want 3 deleted", len(out.Deleted), out.Errors)
	}
	must("CopyObject into the prefix with 2", copyTo(2, "src/copy-src", "out/part-7/copied"))
	created2, err := c.CreateMultipartUpload(at(2), &s3.CreateMultipartUploadInput{Bucket: aws.String(s3pBucket), Key: aws.String("out/part-7/mp")})
	must("CreateMultipartUpload with 2", err)
	part, err := c.UploadPart(at(2), &s3.UploadPartInput{Bucket: aws.String(s3pBucket), Key: aws.String("out/part-7/mp"), UploadId: created2.UploadId,
		PartNumber: aws.Int32(1), Body: strings.NewReader("part 1 of 2")})
	must("UploadPart with 2", err)
	_, err = c.CompleteMultipartUpload(at(2), &s3.CompleteMultipartUploadInput{Bucket: aws.String(s3pBucket), Key: aws.String("out/part-7/mp"),
		UploadId: created2.UploadId, MultipartUpload: &s3types.CompletedMultipartUpload{Parts: []s3types.CompletedPart{{ETag: part.ETag, PartNumber: aws.Int32(1)}}}})
	must("CompleteMultipartUpload with 2", err)
	_, err = c.PutObjectTagging(at(2), &s3.PutObjectTaggingInput{Bucket: aws.String(s3pBucket), Key: aws.String("out/part-7"), Tagging: &s3types.Tagging{
		TagSet: []s3types.Tag{{Key: aws.String("who"), Value: aws.String("2")}}}})
	must("PutObjectTagging of out/part-7 with 2", err)
	if r := s3pRaw(t, backend, in.ProxyURL(), http.MethodPut, aliases[0], 2, "2's alias", nil); r.status != http.StatusOK {
		t.Errorf("PUT %s with 2: %d %s", aliases[0], r.status, r.body)
	}
	for key, want := range map[string]string{"out/part-7/new": "2's new", "out/part-7/copied": "1's src/copy-src",
		"out/part-7/mp": "part 1 of 2", "out/part-7/alias": "2's alias"} {
		if got, found := s3pObject(ctx, t, direct, key); got != want {
			t.Errorf("versitygw holds %q (found %v) at %s after 2's writes, want %q", got, found, key, want)
		}
	}
	for _, key := range []string{"out/part-7/existing", "out/part-7/batch", "other/a", "other/b"} {
		if _, found := s3pObject(ctx, t, direct, key); found {
			t.Errorf("versitygw still holds %s after 2's deletes", key)
		}
	}
	if tags := s3pTags(ctx, t, direct, s3pPrefix); tags != "who=2" {
		t.Errorf("the marker out/part-7/ has the tags %q at versitygw, want 2's", tags)
	}
	if ups := s3pUploads(ctx, t, direct); len(ups) != 0 {
		t.Errorf("versitygw lists the uploads %q after 2's Complete, want none", ups)
	}
}

// s3pAssertPrefixRefusal checks that err is the proxy's 409 for token 1
// at 2, and that its S3 error body names the prefix fence.
func s3pAssertPrefixRefusal(t *testing.T, what string, err error, body string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s with 1: applied; want 409 StaleFencingToken naming %s", what, s3pFence)
		return
	}
	var re *smithyhttp.ResponseError
	var api smithy.APIError
	if !errors.As(err, &re) || !errors.As(err, &api) {
		t.Errorf("%s with 1: %T %v; want the proxy's 409", what, err, err)
		return
	}
	if re.HTTPStatusCode() != http.StatusConflict || re.Response.Header.Get("Fencing-Refused") != "stale" ||
		re.Response.Header.Get("Fencing-Current-Token") != "2" || api.ErrorCode() != "StaleFencingToken" {
		t.Errorf("%s with 1: %d, Fencing-Refused %q, current %q, code %q; want 409 stale at 2, StaleFencingToken",
			what, re.HTTPStatusCode(), re.Response.Header.Get("Fencing-Refused"), re.Response.Header.Get("Fencing-Current-Token"), api.ErrorCode())
	}
	if !strings.Contains(body, "<Code>StaleFencingToken</Code>") || !strings.Contains(body, fmt.Sprintf("resource &#34;%s&#34;", s3pFence)) {
		t.Errorf("%s with 1: the proxy's answer %q; want a StaleFencingToken naming the resource %q", what, body, s3pFence)
	}
}

// s3pSnapshot reads versitygw's bucket directly: every object with its
// body and tags, and every multipart upload with its parts, sorted.
func s3pSnapshot(ctx context.Context, t *testing.T, c *s3.Client) []string {
	t.Helper()
	var state []string
	list, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(s3pBucket)})
	if err != nil || aws.ToBool(list.IsTruncated) {
		t.Fatalf("ListObjectsV2 at versitygw: truncated %v, %v", list != nil && aws.ToBool(list.IsTruncated), err)
	}
	for _, o := range list.Contents {
		key := aws.ToString(o.Key)
		body, _ := s3pObject(ctx, t, c, key)
		state = append(state, fmt.Sprintf("object %s: %q tags %q", key, body, s3pTags(ctx, t, c, key)))
	}
	state = append(state, s3pUploads(ctx, t, c)...)
	slices.Sort(state)
	return state
}

// s3pUploads lists versitygw's multipart uploads in the bucket, each with
// its parts.
func s3pUploads(ctx context.Context, t *testing.T, c *s3.Client) []string {
	t.Helper()
	ups, err := c.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String(s3pBucket)})
	if err != nil {
		t.Fatalf("ListMultipartUploads at versitygw: %v", err)
	}
	var out []string
	for _, u := range ups.Uploads {
		parts, err := c.ListParts(ctx, &s3.ListPartsInput{Bucket: aws.String(s3pBucket), Key: u.Key, UploadId: u.UploadId})
		if err != nil {
			t.Fatalf("ListParts at versitygw: %v", err)
		}
		var ps []string
		for _, p := range parts.Parts {
			ps = append(ps, fmt.Sprintf("%d:%d:%s", aws.ToInt32(p.PartNumber), aws.ToInt64(p.Size), aws.ToString(p.ETag)))
		}
		out = append(out, fmt.Sprintf("upload %s %s: %v", aws.ToString(u.Key), aws.ToString(u.UploadId), ps))
	}
	return out
}

// s3pObject reads key at versitygw directly; found false when it is absent.
func s3pObject(ctx context.Context, t *testing.T, c *s3.Client, key string) (string, bool) {
	t.Helper()
	out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s3pBucket), Key: aws.String(key)})
	var nsk *s3types.NoSuchKey
	if errors.As(err, &nsk) {
		return "", false
	}
	if err != nil {
		t.Fatalf("GetObject %s at versitygw: %v", key, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		t.Fatalf("GetObject %s at versitygw: %v", key, err)
	}
	return string(b), true
}

// s3pTags reads key's tags at versitygw directly, as "k=v,...".
func s3pTags(ctx context.Context, t *testing.T, c *s3.Client, key string) string {
	t.Helper()
	out, err := c.GetObjectTagging(ctx, &s3.GetObjectTaggingInput{Bucket: aws.String(s3pBucket), Key: aws.String(key)})
	if err != nil {
		t.Fatalf("GetObjectTagging %s at versitygw: %v", key, err)
	}
	var tags []string
	for _, tag := range out.TagSet {
		tags = append(tags, aws.ToString(tag.Key)+"="+aws.ToString(tag.Value))
	}
	slices.Sort(tags)
	return strings.Join(tags, ",")
}

// s3pRecorder is an SDK client's transport that keeps the body of the
// last refusal of the proxy (the SDK consumes it).
type s3pRecorder struct {
	rt   http.RoundTripper
	mu   sync.Mutex
	last string
}

func (r *s3pRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := r.rt.RoundTrip(req)
	if err != nil || res.Header.Get("Fencing-Refused") == "" {
		return res, err
	}
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	res.Body = io.NopCloser(bytes.NewReader(b))
	r.put(string(b))
	return res, err
}

func (r *s3pRecorder) put(body string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.last = body
}

// take returns the last refusal's body and forgets it.
func (r *s3pRecorder) take() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.last
	r.last = ""
	return b
}

// s3pAnswer is what a raw request got.
type s3pAnswer struct {
	status        int
	refused, body string
	current       string
}

// err is the answer as an SDK error for s3pAssertPrefixRefusal (nil for a 2xx).
func (a s3pAnswer) err() error {
	if a.status < 300 {
		return nil
	}
	h := http.Header{}
	h.Set("Fencing-Refused", a.refused)
	h.Set("Fencing-Current-Token", a.current)
	field := func(name string) string {
		_, v, _ := strings.Cut(a.body, "<"+name+">")
		v, _, _ = strings.Cut(v, "<")
		return strings.ReplaceAll(v, "&#34;", `"`)
	}
	code, msg := field("Code"), field("Message")
	return &smithy.OperationError{ServiceID: "S3", OperationName: "raw", Err: &smithyhttp.ResponseError{
		Response: &smithyhttp.Response{Response: &http.Response{StatusCode: a.status, Header: h}},
		Err:      &smithy.GenericAPIError{Code: code, Message: msg},
	}}
}

// s3pRaw sends method rawPath (sent as written) through the proxy with
// token, signed with versitygw's key as aws-sdk-go-v2 signs for S3 (the
// path not escaped again), UNSIGNED-PAYLOAD.
func s3pRaw(t *testing.T, backend *s3backend.Server, proxyURL, method, rawPath string, token uint64, body string, header map[string]string) s3pAnswer {
	t.Helper()
	req, err := http.NewRequest(method, proxyURL+rawPath, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Fencing-Token", fmt.Sprint(token))
	req.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	creds := aws.Credentials{AccessKeyID: backend.AccessKey, SecretAccessKey: backend.SecretKey}
	signer := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })
	if err := signer.SignHTTP(context.Background(), creds, req, "UNSIGNED-PAYLOAD", "s3", s3backend.Region, time.Now()); err != nil {
		t.Fatal(err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, rawPath, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return s3pAnswer{status: res.StatusCode, refused: res.Header.Get("Fencing-Refused"), body: string(b),
		current: res.Header.Get("Fencing-Current-Token")}
}

// s3pForm is a PostObject form naming key, with file as its content.
func s3pForm(t *testing.T, key, file string) (body, contentType string) {
	t.Helper()
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	w.WriteField("key", key)
	fw, err := w.CreateFormFile("file", "f.txt")
	if err != nil {
		t.Fatal(err)
	}
	fw.Write([]byte(file))
	w.Close()
	return b.String(), w.FormDataContentType()
}
