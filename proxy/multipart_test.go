package proxy_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/fence"
	"github.com/fenceproxy/fenceproxy/proxy"
	"github.com/fenceproxy/fenceproxy/store/mem"
)

// mpBackend is an S3 backend as far as multipart uploads go: POST ?uploads
// creates upload u-N, DELETE ?uploadId aborts (204), POST ?uploadId completes
// with completeBody, anything else answers 200. It records every request.
type mpBackend struct {
	*httptest.Server
	mu           sync.Mutex
	seen         []string // "METHOD request-URI"
	n            int
	completeBody string
}

const mpInitiate = `<?xml version="1.0" encoding="UTF-8"?>` + "\n" +
	`<InitiateMultipartUploadResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Bucket>bkt</Bucket><Key>obj</Key><UploadId>u-%d</UploadId></InitiateMultipartUploadResult>`

func newMPBackend(t *testing.T) *mpBackend {
	b := &mpBackend{completeBody: "<CompleteMultipartUploadResult><ETag>\"e\"</ETag></CompleteMultipartUploadResult>"}
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		q := r.URL.Query()
		b.mu.Lock()
		defer b.mu.Unlock()
		b.seen = append(b.seen, r.Method+" "+r.RequestURI)
		switch {
		case r.Method == http.MethodPost && q.Has("uploads"):
			b.n++
			w.Header().Set("Content-Type", "application/xml")
			fmt.Fprintf(w, mpInitiate, b.n)
		case r.Method == http.MethodDelete && q.Has("uploadId"):
			w.WriteHeader(http.StatusNoContent)
		case r.Method == http.MethodPost && q.Has("uploadId"):
			io.WriteString(w, b.completeBody)
		default:
			io.WriteString(w, "ok")
		}
	}))
	t.Cleanup(b.Close)
	return b
}

func (b *mpBackend) take() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.seen
	b.seen = nil
	return s
}

// failingUploads is a store whose upload records cannot be written.
type failingUploads struct{ *mem.Store }

func (failingUploads) PutUpload(string, string, uint64, time.Time) error {
	return errors.New("disk full")
}

// mpRig is a proxy in S3 pass mode in front of an mpBackend, over one
// in-memory store for maxima and upload records.
type mpRig struct {
	t       *testing.T
	backend *mpBackend
	store   *mem.Store
	srv     *httptest.Server
	c       *http.Client
}

func newMPRig(t *testing.T, ttl time.Duration, uploads func(*mem.Store) proxy.MultipartRecords) *mpRig {
	r := &mpRig{t: t, backend: newMPBackend(t), store: newForwardStore(), c: newFwdClient(t)}
	opts := fwdOptions()
	opts.S3, opts.S3Domains, opts.S3UploadRecordTTL = "pass", []string{"127.0.0.1"}, ttl
	opts.Upstream, _ = url.Parse(r.backend.URL)
	opts.MultipartRecords = r.store
	if uploads != nil {
		opts.MultipartRecords = uploads(r.store)
	}
	b, err := fence.New(r.store, fence.Options{DrainTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	p, err := proxy.New(b, opts)
	if err != nil {
		t.Fatal(err)
	}
	r.srv = httptest.NewServer(p)
	t.Cleanup(r.srv.Close)
	return r
}

// do sends method target with token (none when 0) and body; it returns the
// status and body.
func (r *mpRig) do(method, target string, token uint64, body string, header ...string) (int, string) {
	r.t.Helper()
	req, err := http.NewRequest(method, r.srv.URL+target, strings.NewReader(body))
	if err != nil {
		r.t.Fatal(err)
	}
	if body == "" {
		req.Body, req.ContentLength = http.NoBody, 0
	}
	if token != 0 {
		req.Header.Set("X-Fencing-Token", fmt.Sprint(token))
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := r.c.Do(req)
	if err != nil {
		r.t.Fatalf("%s %s: %v", method, target, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// want checks one exchange's status and what reached the backend.
func (r *mpRig) want(what string, status, wantStatus int, forwarded ...string) {
	r.t.Helper()
	got := r.backend.take()
	if status != wantStatus || strings.Join(got, "|") != strings.Join(forwarded, "|") {
		r.t.Errorf("%s: status %d, backend got %q; want %d, %q", what, status, got, wantStatus, forwarded)
	}
}

// record returns the upload record of bkt/obj's upload id.
func (r *mpRig) record(id string) (uint64, bool) {
	r.t.Helper()
	tok, found, err := r.store.Upload("bkt/obj", id)
	if err != nil {
		r.t.Fatal(err)
	}
	return tok, found
}

// TestS3MultipartAbortByCreator: in S3 pass mode the proxy records which
// token created each multipart upload (from CreateMultipartUpload's answer,
// passed on unchanged). After a takeover the stale holder's parts and
// Complete are refused, but its AbortMultipartUpload of its own upload is
// forwarded, and the record goes. An abort below the creator's token, and
// every request that is not an abort in its strict shape (another query
// parameter, another spelling, ";", a body, a method override, another
// object, a DeleteObject), stays fenced and reaches nothing. A current
// holder's Complete removes the record only when the backend reports
// success; an abort by the current holder goes through the barrier.
func TestS3MultipartAbortByCreator(t *testing.T) {
	r := newMPRig(t, time.Hour, nil)

	status, body := r.do(http.MethodPost, "/bkt/obj?uploads", 41, "")
	r.want("create by 41", status, 200, "POST /bkt/obj?uploads")
	if want := fmt.Sprintf(mpInitiate, 1); body != want {
		t.Errorf("create's answer reached the client as %q, want %q", body, want)
	}
	status, _ = r.do(http.MethodPost, "/bkt/obj?uploads", 41, "")
	r.want("second create by 41", status, 200, "POST /bkt/obj?uploads")
	for _, id := range []string{"u-1", "u-2"} {
		if tok, found := r.record(id); !found || tok != 41 {
			t.Fatalf("record of %s: %d, %v; want 41", id, tok, found)
		}
	}

	// The takeover: 42 writes the object.
	status, _ = r.do(http.MethodPut, "/bkt/obj", 42, "data of 42")
	r.want("takeover by 42", status, 200, "PUT /bkt/obj")
	status, _ = r.do(http.MethodPut, "/bkt/other", 42, "data of 42")
	r.want("42 writes another object", status, 200, "PUT /bkt/other")
	status, _ = r.do(http.MethodPut, "/bkt/obj?partNumber=2&uploadId=u-1", 41, "part of 41")
	r.want("stale part", status, 409)
	status, _ = r.do(http.MethodPost, "/bkt/obj?uploadId=u-1", 41, "<CompleteMultipartUpload/>")
	r.want("stale complete", status, 409)

	// Shapes that are not an abort in the strict form: fenced, refused.
	for _, c := range []struct {
		method, target, body string
		header               []string
	}{
		{http.MethodDelete, "/bkt/obj?uploadId=u-2&versionId=v1", "", nil},
		{http.MethodDelete, "/bkt/obj?uploadId=u-2&partNumber=1", "", nil},
		{http.MethodDelete, "/bkt/obj?uploadId=u-2&x-id=DeleteObject", "", nil},
		{http.MethodDelete, "/bkt/obj?uploadId=", "", nil},
		{http.MethodDelete, "/bkt/obj?uploadId=u-2", "a body", nil},
		{http.MethodDelete, "/bkt/other?uploadId=u-2", "", nil},
		{http.MethodDelete, "/bkt/obj", "", nil},
		{http.MethodDelete, "/bkt/obj?uploadId=u-9", "", nil}, // no record
	} {
		status, _ := r.do(c.method, c.target, 41, c.body, c.header...)
		r.want(fmt.Sprintf("stale %s %s (body %q, %q)", c.method, c.target, c.body, c.header), status, 409)
	}
	// Shapes that stores read differently are refused before the fence.
	for _, c := range []struct {
		method, target string
		header         []string
	}{
		// Read on "&" alone this is 41's abort of its own u-2 (the first
		// parameter a presign one); a store that splits on ";" too reads
		// uploadId u-9 first: another upload than the record admitted.
		{http.MethodDelete, "/bkt/obj?X-Amz-Expires=60;uploadId=u-9&uploadId=u-2", nil},
		{http.MethodDelete, "/bkt/obj?uploadId=u-2&uploadId=u-2", nil},
		{http.MethodDelete, "/bkt/obj?uploadid=u-2", nil},
		{http.MethodDelete, "/bkt/obj?UploadId=u-2", nil},
		{http.MethodPost, "/bkt/obj?uploadId=u-2", []string{"X-HTTP-Method-Override", "DELETE"}},
	} {
		status, _ := r.do(c.method, c.target, 41, "", c.header...)
		r.want(fmt.Sprintf("stale %s %s (%q)", c.method, c.target, c.header), status, 400)
	}
	if _, found := r.record("u-2"); !found {
		t.Fatalf("a refused request removed u-2's record")
	}

	// The stale holder aborts its own uploads: forwarded, records gone.
	status, _ = r.do(http.MethodDelete, "/bkt/obj?uploadId=u-1", 41, "")
	r.want("stale holder's abort of its own upload", status, 204, "DELETE /bkt/obj?uploadId=u-1")
	status, _ = r.do(http.MethodDelete, "/bkt/obj?uploadId=u-2&x-id=AbortMultipartUpload&X-Amz-Expires=60", 41, "")
	r.want("stale holder's abort in the SDK's shape", status, 204, "DELETE /bkt/obj?uploadId=u-2&x-id=AbortMultipartUpload&X-Amz-Expires=60")
	for _, id := range []string{"u-1", "u-2"} {
		if tok, found := r.record(id); found {
			t.Errorf("record of %s after its abort: %d", id, tok)
		}
	}
	if m, _ := r.store.Max("bkt/obj"); m != 42 {
		t.Errorf("maximum after the stale aborts: %d, want 42 (an abort by its creator raises nothing)", m)
	}

	// 42's upload: 41 is below its creator, refused.
	status, _ = r.do(http.MethodPost, "/bkt/obj?uploads", 42, "")
	r.want("create by 42", status, 200, "POST /bkt/obj?uploads")
	status, _ = r.do(http.MethodDelete, "/bkt/obj?uploadId=u-3", 41, "")
	r.want("41 aborts 42's upload", status, 409)
	if tok, found := r.record("u-3"); !found || tok != 42 {
		t.Fatalf("record of u-3: %d, %v; want 42", tok, found)
	}

	// Complete: a 200 carrying an Error keeps the record, a result removes it.
	r.backend.mu.Lock()
	r.backend.completeBody = "   <Error><Code>InternalError</Code></Error>"
	r.backend.mu.Unlock()
	status, _ = r.do(http.MethodPost, "/bkt/obj?uploadId=u-3", 42, "<CompleteMultipartUpload/>")
	r.want("complete answered with an Error", status, 200, "POST /bkt/obj?uploadId=u-3")
	if _, found := r.record("u-3"); !found {
		t.Errorf("a Complete answered 200 with an Error removed the record")
	}
	r.backend.mu.Lock()
	r.backend.completeBody = "  <CompleteMultipartUploadResult><ETag>\"e\"</ETag></CompleteMultipartUploadResult>"
	r.backend.mu.Unlock()
	status, _ = r.do(http.MethodPost, "/bkt/obj?uploadId=u-3", 42, "<CompleteMultipartUpload/>")
	r.want("complete", status, 200, "POST /bkt/obj?uploadId=u-3")
	if _, found := r.record("u-3"); found {
		t.Errorf("record of u-3 after its Complete")
	}

	// The current holder's abort: the barrier's, and the record goes.
	status, _ = r.do(http.MethodPost, "/bkt/obj?uploads", 43, "")
	r.want("create by 43", status, 200, "POST /bkt/obj?uploads")
	status, _ = r.do(http.MethodDelete, "/bkt/obj?uploadId=u-4", 43, "")
	r.want("current holder's abort", status, 204, "DELETE /bkt/obj?uploadId=u-4")
	if _, found := r.record("u-4"); found {
		t.Errorf("record of u-4 after its abort")
	}
}

// TestS3MultipartRecordAge: a record past S3UploadRecordTTL is gone, so the
// stale holder's abort is fenced again.
func TestS3MultipartRecordAge(t *testing.T) {
	r := newMPRig(t, time.Second, nil)
	status, _ := r.do(http.MethodPost, "/bkt/obj?uploads", 41, "")
	r.want("create by 41", status, 200, "POST /bkt/obj?uploads")
	status, _ = r.do(http.MethodPut, "/bkt/obj", 42, "data of 42")
	r.want("takeover by 42", status, 200, "PUT /bkt/obj")
	// A record ages by the wall clock (whole seconds), which signals no
	// event: polled.
	fwdEventually(t, "the record of u-1 is gone (1s TTL)", func() bool {
		_, found := r.record("u-1")
		return !found
	})
	status, _ = r.do(http.MethodDelete, "/bkt/obj?uploadId=u-1", 41, "")
	r.want("stale abort after the record's age", status, 409)
}

// TestS3MultipartRecordFails: a record that cannot be written leaves the
// create's answer as the backend gave it (the upload exists), and the stale
// holder's abort is fenced as any write.
func TestS3MultipartRecordFails(t *testing.T) {
	r := newMPRig(t, time.Hour, func(s *mem.Store) proxy.MultipartRecords { return failingUploads{s} })
	status, body := r.do(http.MethodPost, "/bkt/obj?uploads", 41, "")
	r.want("create by 41", status, 200, "POST /bkt/obj?uploads")
	if want := fmt.Sprintf(mpInitiate, 1); body != want {
		t.Errorf("create's answer %q, want %q", body, want)
	}
	status, _ = r.do(http.MethodPut, "/bkt/obj", 42, "data of 42")
	r.want("takeover by 42", status, 200, "PUT /bkt/obj")
	status, _ = r.do(http.MethodDelete, "/bkt/obj?uploadId=u-1", 41, "")
	r.want("stale abort without a record", status, 409)
}

// rawExchange sends one raw HTTP/1.1 request line (and a Content-Length
// body) to the rig's proxy over TCP, as no Go client would: net/url strips a
// fragment. It returns the answer's status line.
func (r *mpRig) rawExchange(method, target string, token uint64, body string) string {
	r.t.Helper()
	c, err := net.Dial("tcp", r.srv.Listener.Addr().String())
	if err != nil {
		r.t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: %s\r\nX-Fencing-Token: %d\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		method, target, r.srv.Listener.Addr(), token, len(body), body)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		r.t.Fatalf("%s %s: %v", method, target, err)
	}
	return strings.TrimSpace(line)
}

// TestS3FragmentInQuery: a raw "#" in a write's query is refused (400),
// nothing forwarded. Stores built on fasthttp (versitygw) cut the query at
// "#" as a fragment, so the proxy and the store would read two requests: a
// stale holder's DELETE ?X-Amz-Foo=1#&uploadId=ID passed as the abort of
// its own upload and versitygw ran it as DeleteObject of the next holder's
// object; PUT /bkt?policy# passed as CreateBucket and versitygw set the
// bucket's policy past S3_BUCKET_WRITES=refuse.
func TestS3FragmentInQuery(t *testing.T) {
	r := newMPRig(t, time.Hour, nil)
	status, _ := r.do(http.MethodPost, "/bkt/obj?uploads", 41, "")
	r.want("create by 41", status, 200, "POST /bkt/obj?uploads")
	status, _ = r.do(http.MethodPut, "/bkt/obj", 42, "data of 42")
	r.want("takeover by 42", status, 200, "PUT /bkt/obj")
	for _, c := range []struct{ method, target, body string }{
		{http.MethodDelete, "/bkt/obj?X-Amz-Foo=1#&uploadId=u-1", ""},
		{http.MethodDelete, "/bkt/obj?x-id=AbortMultipartUpload&X-Amz-Foo=#&uploadId=u-1", ""},
		{http.MethodPut, "/bkt?policy#", `{"Statement":[]}`},
		{http.MethodPut, "/bkt?lifecycle#x", "<LifecycleConfiguration/>"},
		{http.MethodPost, "/bkt?delete#", "<Delete><Object><Key>obj</Key></Object></Delete>"},
	} {
		line := r.rawExchange(c.method, c.target, 41, c.body)
		got := r.backend.take()
		if !strings.Contains(line, " 400 ") || len(got) != 0 {
			t.Errorf("stale %s %s: %q, backend got %q; want 400, nothing forwarded", c.method, c.target, line, got)
		}
	}
	if _, found := r.record("u-1"); !found {
		t.Errorf("a refused request removed u-1's record")
	}
	status, _ = r.do(http.MethodDelete, "/bkt/obj?uploadId=u-1", 41, "")
	r.want("stale holder's abort of its own upload", status, 204, "DELETE /bkt/obj?uploadId=u-1")
}

// TestS3EmptySegments: in S3 mode a run of slashes in a write's key is one
// slash for the fence, and a trailing one none, as for versitygw (fasthttp
// merges them, its posix backend opens "obj/" as "obj", and a DeleteObjects
// key "/obj" deletes bkt/obj): a stale PUT /bkt//obj, /bkt/obj/ and a stale
// DeleteObjects of "/obj" or "obj/" are refused after 42's write of bkt/obj.
func TestS3EmptySegments(t *testing.T) {
	r := newMPRig(t, time.Hour, nil)
	status, _ := r.do(http.MethodPut, "/bkt/obj", 42, "data of 42")
	r.want("42 writes", status, 200, "PUT /bkt/obj")
	for _, target := range []string{"/bkt//obj", "/bkt/%2Fobj", "/bkt/obj/", "/bkt/obj%2F", "/bkt///obj//"} {
		line := r.rawExchange(http.MethodPut, target, 41, "stale")
		if got := r.backend.take(); !strings.Contains(line, " 409 ") || len(got) != 0 {
			t.Errorf("stale PUT %s: %q, backend got %q; want 409, nothing forwarded", target, line, got)
		}
	}
	// An empty bucket segment: merged away by some stores, no bucket to
	// others; refused whatever the token.
	for _, target := range []string{"//bkt/obj", "/bkt%2Fobj"} {
		line := r.rawExchange(http.MethodPut, target, 41, "stale")
		if got := r.backend.take(); !strings.Contains(line, " 400 ") || len(got) != 0 {
			t.Errorf("stale PUT %s: %q, backend got %q; want 400, nothing forwarded", target, line, got)
		}
	}
	for _, key := range []string{"/obj", "//obj", "obj/"} {
		status, _ = r.do(http.MethodPost, "/bkt?delete", 41, "<Delete><Object><Key>"+key+"</Key></Object></Delete>")
		r.want("stale DeleteObjects of "+key, status, 409)
	}
}
