package s3backend

import (
	"context"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// One weed serves every subtest, each in its own bucket: starting one takes
// seconds.
func TestSeaweed(t *testing.T) {
	// weed would make these an admin identity and turn authentication on;
	// StartSeaweed keeps them from it.
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDFROMTHEENVIRONMENT")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret-from-the-environment")
	s := StartSeaweed(t)

	t.Run("fresh", func(t *testing.T) { testSeaweedFresh(t, s) })
	t.Run("objects", func(t *testing.T) { testSeaweedObjects(t, s) })
	t.Run("auth off", func(t *testing.T) { testSeaweedAuthOff(t, s) })
	t.Run("multipart", func(t *testing.T) { testSeaweedMultipart(t, s) })
	t.Run("pages", func(t *testing.T) { testSeaweedPages(t, s) })
	t.Run("keys", func(t *testing.T) { testSeaweedKeys(t, s) })
}

// A fresh store holds only SeaweedFS's own entries: the readiness probe's
// bucket is gone.
func testSeaweedFresh(t *testing.T, s *Seaweed) {
	entries := s.Entries(t)
	if !entries[".system"].Dir {
		t.Errorf("no .system directory in %v", keys(entries))
	}
	for p := range entries {
		if !strings.HasPrefix(p, ".system") {
			t.Errorf("fresh store has %q", p)
		}
	}
}

// Entries shows an object with its size, hash, metadata and tags; reads
// change no entry; an overwrite changes the object's entry alone; a delete
// removes it and leaves its directory.
func testSeaweedObjects(t *testing.T, s *Seaweed) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := s.Client()
	s.CreateBucket(t, "objects")
	before := s.Entries(t)
	if !before["objects"].Dir {
		t.Fatalf("bucket entry %+v, want a directory", before["objects"])
	}

	put := func(body string, in *s3.PutObjectInput) {
		t.Helper()
		in.Bucket, in.Key, in.Body = aws.String("objects"), aws.String("dir/a.txt"), strings.NewReader(body)
		if _, err := c.PutObject(ctx, in); err != nil {
			t.Fatalf("PutObject: %v", err)
		}
	}
	put("hello world", &s3.PutObjectInput{
		ContentType: aws.String("text/plain"),
		Metadata:    map[string]string{"color": "blue"},
		Tagging:     aws.String("k1=v1&k2=v2"),
	})
	written := s.Entries(t)
	if d := diff(before, written); !slices.Equal(d, []string{"objects/dir", "objects/dir/a.txt"}) {
		t.Errorf("PutObject changed %v, want the object and its directory", d)
	}
	if !written["objects/dir"].Dir {
		t.Errorf("objects/dir is %+v, want a directory", written["objects/dir"])
	}
	a := written["objects/dir/a.txt"]
	if a.Dir || a.Size != 11 || a.MD5 != md5Hex([]byte("hello world")) || a.Mime != "text/plain" {
		t.Errorf("object entry %+v, want a file of 11 bytes, MD5 of %q, text/plain", a, "hello world")
	}
	if age := time.Since(a.Mtime); age < -time.Minute || age > time.Minute {
		t.Errorf("object Mtime %v is not about now", a.Mtime)
	}
	for k, want := range map[string]string{"X-Amz-Meta-Color": "blue", "X-Amz-Tagging-k1": "v1", "X-Amz-Tagging-k2": "v2"} {
		if got, ok := a.Extended[k]; !ok || got != want {
			t.Errorf("Extended[%q] = %q, %v; want %q (all: %v)", k, got, ok, want, a.Extended)
		}
	}
	if !strings.Contains(a.Raw, `"FullPath":"/buckets/objects/dir/a.txt"`) {
		t.Errorf("Raw %s lacks the full path", a.Raw)
	}

	// Reads leave every entry as it was, so Raw tells changes apart.
	out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("objects"), Key: aws.String("dir/a.txt")})
	if err != nil {
		t.Fatalf("GetObject: %v", err)
	}
	_, _ = io.Copy(io.Discard, out.Body)
	out.Body.Close()
	if _, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("objects"), Key: aws.String("dir/a.txt")}); err != nil {
		t.Fatalf("HeadObject: %v", err)
	}
	if _, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("objects")}); err != nil {
		t.Fatalf("ListObjectsV2: %v", err)
	}
	if _, err := c.GetObjectTagging(ctx, &s3.GetObjectTaggingInput{Bucket: aws.String("objects"), Key: aws.String("dir/a.txt")}); err != nil {
		t.Fatalf("GetObjectTagging: %v", err)
	}
	if _, err := c.GetObjectAcl(ctx, &s3.GetObjectAclInput{Bucket: aws.String("objects"), Key: aws.String("dir/a.txt")}); err != nil {
		t.Fatalf("GetObjectAcl: %v", err)
	}
	if d := diff(written, s.Entries(t)); len(d) != 0 {
		t.Errorf("reads changed %v", d)
	}

	put("goodbye", &s3.PutObjectInput{})
	rewritten := s.Entries(t)
	if d := diff(written, rewritten); !slices.Equal(d, []string{"objects/dir/a.txt"}) {
		t.Errorf("overwrite changed %v, want the object alone", d)
	}
	b := rewritten["objects/dir/a.txt"]
	if b.Size != 7 || b.MD5 != md5Hex([]byte("goodbye")) {
		t.Errorf("overwritten entry %+v, want 7 bytes with MD5 of %q", b, "goodbye")
	}
	if _, ok := b.Extended["X-Amz-Meta-Color"]; ok {
		t.Errorf("overwrite without metadata kept it: %v", b.Extended)
	}

	if _, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("objects"), Key: aws.String("dir/a.txt")}); err != nil {
		t.Fatalf("DeleteObject: %v", err)
	}
	deleted := s.Entries(t)
	if d := diff(rewritten, deleted); !slices.Equal(d, []string{"objects/dir/a.txt"}) {
		t.Errorf("delete changed %v, want the object alone", d)
	}
	if _, ok := deleted["objects/dir/a.txt"]; ok {
		t.Errorf("deleted object still listed")
	}
	if !deleted["objects/dir"].Dir {
		t.Errorf("the emptied directory is gone: StartSeaweed keeps it")
	}
}

// Authentication is off: an unsigned request and one signed with a key
// weed never heard of (nor the one in the environment) are both served.
func testSeaweedAuthOff(t *testing.T, s *Seaweed) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hc := &http.Client{Transport: s.transport}
	do := func(method, path, body string) string {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, s.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if body == "" {
			req.Body, req.ContentLength = nil, 0
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("unsigned %s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		got, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("unsigned %s %s: %s %s", method, path, resp.Status, got)
		}
		return string(got)
	}
	do(http.MethodPut, "/authoff", "")
	do(http.MethodPut, "/authoff/unsigned", "by nobody")
	if got := do(http.MethodGet, "/authoff/unsigned", ""); got != "by nobody" {
		t.Errorf("unsigned GET = %q, want %q", got, "by nobody")
	}

	stranger := s.Client(func(o *s3.Options) {
		o.Credentials = credentials.NewStaticCredentialsProvider("AKID"+randomHex(t, 8), randomHex(t, 20), "")
	})
	if _, err := stranger.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String("authoff"), Key: aws.String("signed"), Body: strings.NewReader("by a stranger"),
	}); err != nil {
		t.Fatalf("PutObject signed with a random key: %v", err)
	}
	out, err := stranger.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("authoff"), Key: aws.String("unsigned")})
	if err != nil {
		t.Fatalf("GetObject signed with a random key: %v", err)
	}
	got, _ := io.ReadAll(out.Body)
	out.Body.Close()
	if string(got) != "by nobody" {
		t.Errorf("signed GET = %q, want %q", got, "by nobody")
	}
	entries := s.Entries(t)
	if entries["authoff/unsigned"].MD5 != md5Hex([]byte("by nobody")) || entries["authoff/signed"].MD5 != md5Hex([]byte("by a stranger")) {
		t.Errorf("entries %+v and %+v do not hold what was written", entries["authoff/unsigned"], entries["authoff/signed"])
	}
}

// A multipart upload stages in the bucket's .uploads/ID directory, which
// Entries shows; completing it makes the object (whose MD5 Entries computes
// from the content: the filer has none for it) and removes the staging.
func testSeaweedMultipart(t *testing.T, s *Seaweed) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := s.Client()
	s.CreateBucket(t, "multi")
	up, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("multi"), Key: aws.String("big/obj")})
	if err != nil {
		t.Fatalf("CreateMultipartUpload: %v", err)
	}
	staging := "multi/.uploads/" + aws.ToString(up.UploadId)
	if e := s.Entries(t)[staging]; !e.Dir {
		t.Fatalf("no staging directory %q: %+v", staging, e)
	}
	content := strings.Repeat("part one ", 100)
	part, err := c.UploadPart(ctx, &s3.UploadPartInput{
		Bucket: aws.String("multi"), Key: aws.String("big/obj"), UploadId: up.UploadId,
		PartNumber: aws.Int32(1), Body: strings.NewReader(content),
	})
	if err != nil {
		t.Fatalf("UploadPart: %v", err)
	}
	var parts []string
	for p, e := range s.Entries(t) {
		if strings.HasPrefix(p, staging+"/") && !e.Dir {
			parts = append(parts, p)
		}
	}
	if len(parts) != 1 {
		t.Errorf("staged parts %v, want one", parts)
	}
	if _, err := c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{
		Bucket: aws.String("multi"), Key: aws.String("big/obj"), UploadId: up.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{{ETag: part.ETag, PartNumber: aws.Int32(1)}}},
	}); err != nil {
		t.Fatalf("CompleteMultipartUpload: %v", err)
	}
	entries := s.Entries(t)
	obj := entries["multi/big/obj"]
	if obj.Dir || obj.Size != int64(len(content)) || obj.MD5 != md5Hex([]byte(content)) {
		t.Errorf("completed object %+v, want a file of %d bytes with the content's MD5", obj, len(content))
	}
	for p := range entries {
		if strings.HasPrefix(p, staging) {
			t.Errorf("staging entry %q left after completion", p)
		}
	}
}

// Listings are paged: with two entries a page Entries still finds them all,
// the same as in one page.
func testSeaweedPages(t *testing.T, s *Seaweed) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := s.Client()
	s.CreateBucket(t, "pages")
	for _, k := range []string{"p/0", "p/1", "p/2", "p/3", "p/4", "p/sub/5", "p/sub/6"} {
		if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("pages"), Key: aws.String(k), Body: strings.NewReader(k)}); err != nil {
			t.Fatalf("PutObject %s: %v", k, err)
		}
	}
	whole := s.Entries(t)
	s.pageSize = 2
	defer func() { s.pageSize = defaultPageSize }()
	paged := s.Entries(t)
	if d := diff(whole, paged); len(d) != 0 {
		t.Errorf("paged listing differs in %v", d)
	}
	for _, k := range []string{"pages/p", "pages/p/0", "pages/p/4", "pages/p/sub", "pages/p/sub/6"} {
		if _, ok := paged[k]; !ok {
			t.Errorf("paged listing lacks %q: %v", k, keys(paged))
		}
	}
}

// How S3 keys become filer paths, as sent on the wire: "//" collapses, an
// escaped slash is a separator, a "dir/" key with a body is a directory that
// holds the body, and "%" stays literal.
func testSeaweedKeys(t *testing.T, s *Seaweed) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hc := &http.Client{Transport: s.transport}
	for _, r := range []struct{ path, body string }{
		{"/keys", ""},
		{"/keys/a//b", "ab"},
		{"/keys/x%2Fy", "xy"},
		{"/keys/o/", "marker"},
		{"/keys/p%25q", "pq"},
	} {
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, s.URL+r.path, strings.NewReader(r.body))
		if err != nil {
			t.Fatal(err)
		}
		if r.body == "" {
			req.Body, req.ContentLength = nil, 0
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("PUT %s: %v", r.path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("PUT %s: %s", r.path, resp.Status)
		}
	}
	entries := s.Entries(t)
	var got []string
	for p, e := range entries {
		if strings.HasPrefix(p, "keys/") {
			got = append(got, p+" "+map[bool]string{true: "dir", false: "file"}[e.Dir]+" "+e.MD5)
		}
	}
	slices.Sort(got)
	want := []string{
		"keys/a dir ",
		"keys/a/b file " + md5Hex([]byte("ab")),
		"keys/o dir " + md5Hex([]byte("marker")),
		"keys/p%q file " + md5Hex([]byte("pq")),
		"keys/x dir ",
		"keys/x/y file " + md5Hex([]byte("xy")),
	}
	if !slices.Equal(got, want) {
		t.Errorf("entries\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if o := entries["keys/o"]; o.Size != int64(len("marker")) {
		t.Errorf("keys/o is %+v, want the marker's %d bytes", o, len("marker"))
	}
}

// The environment weed gets has nothing that configures it.
func TestSeaweedEnv(t *testing.T) {
	got := seaweedEnv([]string{
		"PATH=/bin", "HOME=/home/x", "AWS_ACCESS_KEY_ID=a", "AWS_SECRET_ACCESS_KEY=b", "AWS_REGION=r",
		"S3_BUCKET=b", "WEED_MASTER_VOLUME_GROWTH_COPY_1=7", "SENTRY_DSN=x", "CI=1",
	})
	if want := []string{"PATH=/bin", "CI=1"}; !slices.Equal(got, want) {
		t.Errorf("seaweedEnv = %v, want %v", got, want)
	}
}

// A binary of another module or version is refused: here the test binary.
func TestCheckSeaweedVersion(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Skip(err)
	}
	err = checkVersion(exe, SeaweedModule, SeaweedVersion)
	if err == nil || !strings.Contains(err.Error(), "want "+SeaweedModule+" "+SeaweedVersion) {
		t.Errorf("checkVersion(test binary) = %v, want a mismatch", err)
	}
}

// diff is the sorted paths present in one of a and b only, or in both with
// another Raw.
func diff(a, b map[string]Entry) []string {
	var d []string
	for p, e := range a {
		if f, ok := b[p]; !ok || f.Raw != e.Raw {
			d = append(d, p)
		}
	}
	for p := range b {
		if _, ok := a[p]; !ok {
			d = append(d, p)
		}
	}
	slices.Sort(d)
	return d
}

func keys(m map[string]Entry) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
