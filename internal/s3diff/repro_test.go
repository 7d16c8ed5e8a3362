package s3diff_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fenceproxy/fenceproxy/client"
	"github.com/fenceproxy/fenceproxy/internal/s3backend"
	"github.com/fenceproxy/fenceproxy/internal/s3diff"
	"github.com/fenceproxy/fenceproxy/internal/servertest"
)

// inflight is the proxy's fenceproxy_inflight_requests gauge; -1 if absent.
func inflight(t *testing.T, in *servertest.Instance) int {
	t.Helper()
	resp, err := http.Get(in.ControlURL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for line := range strings.SplitSeq(string(body), "\n") {
		if rest, ok := strings.CutPrefix(line, "fenceproxy_inflight_requests "); ok {
			var n int
			fmt.Sscan(rest, &n)
			return n
		}
	}
	return -1
}

// reproRig is versitygw (posix, virtual-hosted style on) and the proxy in
// front of it, in pass or gateway mode; in gateway mode worker1 may read
// and write bkt/jobs/ and other/drop/.
type reproRig struct {
	store  *s3backend.Server
	in     *servertest.Instance
	ctl    *client.Control
	signer *s3diff.Signer // what a request through the proxy is signed with
	resign bool           // pass mode: sign again over the store's canonical request
	keys   string         // gateway mode: the credentials file
}

func startRepro(t *testing.T, mode, bucketWrites string, extra map[string]string) *reproRig {
	t.Helper()
	store := s3backend.StartVirtualHosted(t, "localhost")
	for _, b := range s3diff.Buckets {
		store.CreateBucket(t, b)
	}
	r := &reproRig{store: store}
	if mode == "resign" {
		r.in, r.keys = gatewayProxy(t, store.URL, store.AccessKey, store.SecretKey,
			servertest.Env(map[string]string{"FENCEPROXY_S3_BUCKET_WRITES": bucketWrites, "FENCEPROXY_S3_TOKEN_METADATA": ""}, extra))
		r.signer = workerSigner()
	} else {
		r.in = servertest.Start(t, servertest.Env(map[string]string{
			"FENCEPROXY_UPSTREAM": store.URL, "FENCEPROXY_DATA_DIR": t.TempDir(), "FENCEPROXY_ADMIN_TOKEN": adminToken,
			"FENCEPROXY_S3": mode, "FENCEPROXY_S3_DOMAINS": "localhost", "FENCEPROXY_S3_BUCKET_WRITES": bucketWrites,
		}, extra))
		r.signer = &s3diff.Signer{AccessKey: store.AccessKey, SecretKey: store.SecretKey, Region: s3backend.Region}
		r.resign = true
	}
	r.ctl = &client.Control{BaseURL: r.in.ControlURL(), AdminBearer: adminToken}
	return r
}

func (r *reproRig) do(t *testing.T, method, target, token string, body string, header ...string) s3diff.Answer {
	t.Helper()
	path, query, _ := strings.Cut(target, "?")
	s := s3diff.Spec{Method: method, Host: "localhost" + r.in.Proxy[strings.LastIndexByte(r.in.Proxy, ':'):], Path: path, Query: query, Body: []byte(body)}
	if token != "" {
		s.Header = append(s.Header, [2]string{"X-Fencing-Token", token})
	}
	for _, h := range header {
		k, v, _ := strings.Cut(h, ": ")
		s.Header = append(s.Header, [2]string{k, v})
	}
	return s3diff.Do(t, r.in.Proxy, s, r.signer, r.resign)
}

func (r *reproRig) snapshot(t *testing.T) s3diff.Snapshot {
	return s3diff.PosixSnapshot(t, r.store.Dir)
}

// unchanged fails t if the store changed between before and now.
func (r *reproRig) unchanged(t *testing.T, what string, before s3diff.Snapshot, ans s3diff.Answer) {
	t.Helper()
	if changed := before.Changed(r.snapshot(t)); len(changed) > 0 {
		t.Errorf("%s: the store changed %q (answer %d %s %.200s)", what, changed, ans.Status, ans.Header.Get("Fencing-Refused"), ans.Body)
	}
	if ans.Status != 400 && ans.Status != 409 && ans.Status != 403 && ans.Status != 428 {
		t.Errorf("%s: %d %s %.300s; want a refusal", what, ans.Status, ans.Header.Get("Fencing-Refused"), ans.Body)
	}
}

// TestReproductions: the first three bypasses, against versitygw,
// in pass and gateway mode and under every FENCEPROXY_S3_BUCKET_WRITES: a
// stale holder (41, after 42 wrote and tagged the object) or one without a
// token changes nothing, and gets a refusal.
func TestReproductions(t *testing.T) {
	for _, mode := range []string{"pass", "resign"} {
		for _, bw := range []string{"refuse", "pass", "fence"} {
			t.Run(mode+"/"+bw, func(t *testing.T) {
				r := startRepro(t, mode, bw, nil)
				key := "obj"
				if mode == "resign" {
					key = "jobs/obj"
				}
				path := "/bkt/" + key
				if a := r.do(t, "PUT", path, "42", "from 42"); a.Status != 200 {
					t.Fatalf("42's write: %d %s", a.Status, a.Body)
				}
				if a := r.do(t, "PUT", path+"?tagging", "42", `<Tagging><TagSet><Tag><Key>k</Key><Value>42</Value></Tag></TagSet></Tagging>`); a.Status != 200 {
					t.Fatalf("42's tags: %d %s", a.Status, a.Body)
				}
				encoded := "/bkt%2F" + strings.ReplaceAll(key, "/", "%2F")
				form := "--b\r\nContent-Disposition: form-data; name=\"key\"\r\n\r\n" + key + "\r\n--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f\"\r\n\r\nfrom 41\r\n--b--\r\n"
				for _, token := range []string{"41", ""} {
					for _, c := range []struct {
						name, method, target, body string
						header                     []string
					}{
						{"1: %2F in the bucket, PutObject", "PUT", encoded, "from 41", nil},
						{"1: %2F in the bucket, CopyObject", "PUT", encoded, "", []string{"X-Amz-Copy-Source: bkt/" + key}},
						{"1: %2F in the bucket, DeleteObject", "DELETE", encoded, "", nil},
						{"1: %2F in the bucket, tagging", "PUT", encoded + "?tagging", `<Tagging><TagSet><Tag><Key>k</Key><Value>41</Value></Tag></TagSet></Tagging>`, nil},
						{"2: a trailing /, PutObjectTagging", "PUT", path + "/?tagging", `<Tagging><TagSet><Tag><Key>k</Key><Value>41</Value></Tag></TagSet></Tagging>`, nil},
						{"2: a trailing /, DeleteObjectTagging", "DELETE", path + "/?tagging", "", nil},
						{"2: a trailing %2F, DeleteObject", "DELETE", path + "%2F", "", nil},
						{"2: a trailing /, PutObject", "PUT", path + "/", "from 41", nil},
						{"3: two Content-Types on POST /bkt", "POST", "/bkt", form, []string{"Content-Type: text/plain", "Content-Type: multipart/form-data; boundary=b"}},
						{"3: a form upload", "POST", "/bkt", form, []string{"Content-Type: multipart/form-data; boundary=b"}},
						{"3: Content_Type", "POST", "/bkt", form, []string{"Content_Type: multipart/form-data; boundary=b"}},
					} {
						before := r.snapshot(t)
						a := r.do(t, c.method, c.target, token, c.body, c.header...)
						r.unchanged(t, fmt.Sprintf("%s, token %q", c.name, token), before, a)
					}
				}
				if f, err := r.ctl.GetFence(context.Background(), "bkt/"+key); err != nil || f.Token != 42 {
					t.Errorf("fence of bkt/%s: %+v, %v; want 42", key, f, err)
				}
			})
		}
	}
}

// TestReproductionsMultipart: with the bucket's writes passed unfenced, a
// CompleteMultipartUpload of the stale holder's upload through an encoded
// "/" in the bucket changes nothing.
func TestReproductionsMultipart(t *testing.T) {
	r := startRepro(t, "pass", "pass", nil)
	ctx := context.Background()
	c := r.store.Client()
	up, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("bkt"), Key: aws.String("obj")})
	if err != nil {
		t.Fatal(err)
	}
	part, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("bkt"), Key: aws.String("obj"), UploadId: up.UploadId,
		PartNumber: aws.Int32(1), Body: strings.NewReader("part of 41")})
	if err != nil {
		t.Fatal(err)
	}
	if a := r.do(t, "PUT", "/bkt/obj", "42", "from 42"); a.Status != 200 {
		t.Fatalf("42's write: %d %s", a.Status, a.Body)
	}
	body := `<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>` + aws.ToString(part.ETag) + `</ETag></Part></CompleteMultipartUpload>`
	for _, target := range []string{"/bkt%2Fobj?uploadId=" + aws.ToString(up.UploadId), "/bkt/obj/?uploadId=" + aws.ToString(up.UploadId)} {
		before := r.snapshot(t)
		a := r.do(t, "POST", target, "41", body)
		r.unchanged(t, "stale Complete "+target, before, a)
	}
}

// TestGatewayCopySource: the fourth bypass: in gateway mode a copy
// source that stores parse differently (a raw "?", dot segments, "+", an
// encoded "?versionId=") reads nothing outside the worker's grants, through
// CopyObject, UploadPartCopy, with REPLACE and across buckets.
func TestGatewayCopySource(t *testing.T) {
	r := startRepro(t, "resign", "refuse", nil)
	ctx := context.Background()
	c := r.store.Client()
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bkt"), Key: aws.String("private/p.txt"), Body: strings.NewReader("secret")}); err != nil {
		t.Fatal(err)
	}
	up, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("bkt"), Key: aws.String("jobs/mp")})
	if err != nil {
		t.Fatal(err)
	}
	// A key with an encoded "?" copies (boto3 escapes it so): every store
	// reads it as a key byte.
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bkt"), Key: aws.String("jobs/report?v=2.csv"), Body: strings.NewReader("v2")}); err != nil {
		t.Fatal(err)
	}
	if a := r.do(t, "PUT", "/bkt/jobs/copy-of-report", "40", "", "X-Amz-Copy-Source: bkt/jobs/report%3Fv%3D2.csv"); a.Status != 200 {
		t.Errorf("copy of a key with an encoded \"?\": %d %s, want 200", a.Status, a.Body)
	}
	for _, src := range []string{
		"bkt/jobs/?/../../private/p.txt", "/bkt/jobs/?/../../private/p.txt", "bkt/jobs/%3F/../../private/p.txt",
		"bkt/jobs/../private/p.txt", "bkt/jobs/%2E%2E/private/p.txt", "bkt/jobs/x%3FversionId=1/../../private/p.txt",
		"bkt/private/p.txt", "bkt/jobs/+/../../private/p.txt", "bkt/jobs//../private/p.txt",
	} {
		for _, c := range []struct {
			name, target string
			header       []string
		}{
			{"CopyObject", "/bkt/jobs/copy", nil},
			{"CopyObject, REPLACE", "/bkt/jobs/copy", []string{"X-Amz-Metadata-Directive: REPLACE"}},
			{"UploadPartCopy", "/bkt/jobs/mp?partNumber=1&uploadId=" + aws.ToString(up.UploadId), nil},
			{"CopyObject across buckets", "/other/drop/copy", nil},
		} {
			before := r.snapshot(t)
			a := r.do(t, "PUT", c.target, "50", "", append([]string{"X-Amz-Copy-Source: " + src}, c.header...)...)
			r.unchanged(t, c.name+" from "+src, before, a)
			if strings.Contains(string(a.Body), "secret") {
				t.Errorf("%s from %s: the answer holds the private object", c.name, src)
			}
		}
	}
}

// TestGatewayAuditToken: the fifth: with FENCEPROXY_S3_TOKEN_METADATA
// every PutObject's audit metadata is the proxy's, whatever query it
// carries and whatever fencing-token metadata the worker signed; and the
// sixth: an unsigned Content-Encoding aws-chunked on a payload that is no
// stream does not reach the store.
func TestGatewayAuditToken(t *testing.T) {
	r := startRepro(t, "resign", "refuse", map[string]string{"FENCEPROXY_S3_TOKEN_METADATA": "true"})
	ctx := context.Background()
	for i, c := range []struct {
		target string
		header []string
	}{
		{"/bkt/jobs/m1.txt", nil},
		{"/bkt/jobs/m2.txt?foo=1", []string{"X-Amz-Meta-Fencing-Token: 999"}},
		{"/bkt/jobs/m3.txt?x-id=PutObject", []string{"X-Amz-Meta-Fencing-Token: 999"}},
		{"/bkt/jobs/m4.txt?versionId=1&foo", nil},
		// Sub-resources of other methods: a PutObject to both stores.
		{"/bkt/jobs/m5.txt?torrent", []string{"X-Amz-Meta-Fencing-Token: 999"}},
		{"/bkt/jobs/m6.txt?attributes", nil},
	} {
		token := fmt.Sprint(60 + i)
		if a := r.do(t, "PUT", c.target, token, "data", c.header...); a.Status != 200 {
			t.Fatalf("PUT %s: %d %s", c.target, a.Status, a.Body)
		}
		key, _, _ := strings.Cut(strings.TrimPrefix(c.target, "/bkt/"), "?")
		head, err := r.store.Client().HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("bkt"), Key: aws.String(key)})
		if err != nil {
			t.Fatal(err)
		}
		if got := head.Metadata["fencing-token"]; got != token {
			t.Errorf("PUT %s %q: stored fencing-token %q, want the proxy's %s", c.target, c.header, got, token)
		}
	}
	// A tagging write carries no audit metadata, and a worker's own is dropped.
	if a := r.do(t, "PUT", "/bkt/jobs/m1.txt?tagging", "70", `<Tagging><TagSet/></Tagging>`, "X-Amz-Meta-Fencing-Token: 999"); a.Status != 200 {
		t.Fatalf("tagging: %d %s", a.Status, a.Body)
	}
	for _, ce := range []string{"gzip, aws-chunked", "aws-chunked"} {
		// Unsigned: added after signing, as a man in the middle would.
		s := s3diff.Spec{Method: "PUT", Host: "localhost" + r.in.Proxy[strings.LastIndexByte(r.in.Proxy, ':'):], Path: "/bkt/jobs/ce.txt",
			Header: [][2]string{{"X-Fencing-Token", "80"}}, Body: []byte("plain")}
		a := s3diff.DoThen(t, r.in.Proxy, s, r.signer, [2]string{"Content-Encoding", ce})
		if a.Status != 200 {
			t.Fatalf("PUT with Content-Encoding %q: %d %s", ce, a.Status, a.Body)
		}
		head, err := r.store.Client().HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("bkt"), Key: aws.String("jobs/ce.txt")})
		if err != nil {
			t.Fatal(err)
		}
		if got := aws.ToString(head.ContentEncoding); got != "" {
			t.Errorf("unsigned Content-Encoding %q on a hex payload: stored %q, want none", ce, got)
		}
	}
}

// TestGatewayRevokedKey: the seventh: a key removed from the
// credentials file ends its upload in flight within the reload interval (5
// s), with 403 AccessDenied, and the store never gets the object.
func TestGatewayRevokedKey(t *testing.T) {
	for name, keys := range map[string]string{
		"key removed": "keys: []\n",
		// The key stays, but no longer grants bkt/jobs/.
		"grant narrowed": strings.Replace(workerKeys, `{bucket: bkt, prefix: "jobs/"`, `{bucket: bkt, prefix: "elsewhere/"`, 1),
	} {
		t.Run(name, func(t *testing.T) { revokedUpload(t, keys) })
	}
}

// revokedUpload runs a slow upload of worker1 and writes newKeys as the
// credentials file during it.
func revokedUpload(t *testing.T, newKeys string) {
	r := startRepro(t, "resign", "refuse", nil)
	const size = 64 << 10
	s := s3diff.Spec{Method: "PUT", Host: "localhost" + r.in.Proxy[strings.LastIndexByte(r.in.Proxy, ':'):], Path: "/bkt/jobs/slow.bin",
		Header: [][2]string{{"X-Fencing-Token", "90"}}, Body: []byte(strings.Repeat("x", size))}
	conn, err := net.Dial("tcp", r.in.Proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hd, body := s3diff.Wire(t, s, r.signer)
	if _, err := conn.Write(hd); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write(body[:1024]); err != nil {
		t.Fatal(err)
	}
	// The admission shows only in the in-flight gauge.
	servertest.Eventually(t, 10*time.Second, "the proxy admits the upload", func() bool {
		return inflight(t, r.in) == 1
	})
	if err := os.WriteFile(r.keys+".new", []byte(newKeys), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(r.keys+".new", r.keys); err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	// Keep sending slowly, under the idle timeout, until the proxy answers.
	answered := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(conn)
		answered <- string(b)
	}()
	sent := 1024
	var answer string
loop:
	for sent < size {
		select {
		case answer = <-answered:
			break loop
		case <-time.After(200 * time.Millisecond):
		}
		if _, err := conn.Write(body[sent : sent+256]); err != nil {
			answer = <-answered
			break
		}
		sent += 256
	}
	if answer == "" {
		answer = <-answered
	}
	took := time.Since(revoked)
	if !strings.Contains(answer, " 403 ") || !strings.Contains(answer, "AccessDenied") {
		t.Fatalf("after the key's removal the upload got %.300q; want 403 AccessDenied", answer)
	}
	if took > 8*time.Second {
		t.Errorf("the upload ended %v after the key's removal, want within the 5 s reload and a read", took)
	}
	if _, err := r.store.Client().HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: aws.String("bkt"), Key: aws.String("jobs/slow.bin")}); err == nil {
		t.Errorf("the store has the object of the revoked key's upload")
	}
	t.Logf("upload ended %v after the key's removal, %d of %d bytes sent", took.Round(time.Millisecond), sent, size)
}

// TestGatewayRevokedKeyAtBarrier: a bodyless write of a key removed while
// the write waited at the barrier (behind a smaller token's write still in
// flight at the store) is refused with 403 when the barrier lets it go, and
// the store keeps the object.
func TestGatewayRevokedKeyAtBarrier(t *testing.T) {
	store := s3backend.Start(t)
	for _, b := range s3diff.Buckets {
		store.CreateBucket(t, b)
	}
	// In front of the store: a forwarder that holds the second write of
	// jobs/slow (60's) until the credentials file's reload.
	target, _ := url.Parse(store.URL)
	rp := httputil.NewSingleHostReverseProxy(target)
	director := rp.Director
	rp.Director = func(r *http.Request) { host := r.Host; director(r); r.Host = host }
	var puts atomic.Int32
	arrived, release := make(chan struct{}), make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/jobs/slow") && puts.Add(1) == 2 {
			close(arrived)
			<-release
		}
		rp.ServeHTTP(w, r)
	}))
	defer close(release)
	t.Cleanup(slow.Close)
	in, keys := gatewayProxy(t, slow.URL, store.AccessKey, store.SecretKey, nil)
	r := &reproRig{store: store, in: in, keys: keys, signer: workerSigner()}
	if a := r.do(t, "PUT", "/bkt/jobs/slow", "50", "from 50"); a.Status != 200 {
		t.Fatalf("first write: %d %s", a.Status, a.Body)
	}
	done := make(chan s3diff.Answer, 2)
	go func() { done <- r.do(t, "PUT", "/bkt/jobs/slow", "60", "from 60") }()
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("60's write did not reach the store")
	}
	go func() { done <- r.do(t, "DELETE", "/bkt/jobs/slow", "61", "") }() // waits for 60 at the barrier
	time.Sleep(300 * time.Millisecond)                                    // no event: the DELETE reaches the barrier
	if err := os.WriteFile(r.keys+".new", []byte("keys: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(r.keys+".new", r.keys); err != nil {
		t.Fatal(err)
	}
	if !in.Logs.WaitFor("s3 credentials reloaded", 10*time.Second) {
		t.Fatal("the credentials file was not reloaded within 10s")
	}
	release <- struct{}{} // 60's write goes on; release's close ends nothing more
	var statuses []int
	for range 2 {
		a := <-done
		statuses = append(statuses, a.Status)
		if a.Status == http.StatusForbidden && !strings.Contains(string(a.Body), "AccessDenied") {
			t.Errorf("403 without AccessDenied: %s", a.Body)
		}
	}
	got, err := store.Client().GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String("bkt"), Key: aws.String("jobs/slow")})
	if err != nil {
		t.Fatalf("the object is gone (answers %v): %v", statuses, err)
	}
	body, _ := io.ReadAll(got.Body)
	got.Body.Close()
	// 60 was in flight at the store when the key went; the DELETE of 61
	// waited and must not follow.
	if string(body) != "from 60" || !slices.Contains(statuses, http.StatusForbidden) {
		t.Errorf("the object holds %q after answers %v; want from 60, and the DELETE refused with 403", body, statuses)
	}
}

// TestGatewayRevokedKeyDownload: a download in flight ends too when its key
// is removed: the client gets no more of the answer.
func TestGatewayRevokedKeyDownload(t *testing.T) {
	r := startRepro(t, "resign", "refuse", nil)
	const size = 32 << 20
	if _, err := r.store.Client().PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String("bkt"),
		Key: aws.String("jobs/big.bin"), Body: strings.NewReader(strings.Repeat("y", size))}); err != nil {
		t.Fatal(err)
	}
	s := s3diff.Spec{Method: "GET", Host: "localhost" + r.in.Proxy[strings.LastIndexByte(r.in.Proxy, ':'):], Path: "/bkt/jobs/big.bin"}
	conn, err := net.Dial("tcp", r.in.Proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hd, _ := s3diff.Wire(t, s, r.signer)
	if _, err := conn.Write(hd); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16<<10)
	read := 0
	revoked := time.Time{}
	for {
		if read > 1<<20 && revoked.IsZero() {
			if err := os.WriteFile(r.keys+".new", []byte("keys: []\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(r.keys+".new", r.keys); err != nil {
				t.Fatal(err)
			}
			revoked = time.Now()
		}
		_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
		n, err := conn.Read(buf)
		read += n
		if err != nil {
			break
		}
		time.Sleep(5 * time.Millisecond) // paces the download: about 3 MB/s
	}
	took := time.Since(revoked)
	if read >= size {
		t.Fatalf("the whole object (%d bytes) came back after the key's removal", read)
	}
	if took > 8*time.Second {
		t.Errorf("the download ended %v after the key's removal, want within the 5 s reload", took)
	}
	t.Logf("download ended %v after the key's removal, %d of %d bytes read", took.Round(time.Millisecond), read, size)
}
