package proxy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/fence"
	"github.com/fenceproxy/fenceproxy/wire"
)

// A multi-object delete is refused whatever its token; a POST of another kind
// on the same path is fenced as usual.
func TestBulkDeleteRefused(t *testing.T) {
	store := newMemStore()
	backend := newGateBackend(t)
	srv := newTestProxy(t, store, backend.URL, nil)
	ctx := context.Background()
	for _, path := range []string{"/bkt?delete", "/bkt?delete=", "/bkt?x-id=DeleteObjects&delete"} {
		r := send(ctx, "POST", srv.URL+path, "7", "bulk")
		if r.status != 400 || r.header.Get(wire.HeaderRefused) != wire.ReasonUnsupported {
			t.Errorf("POST %s: %d %v", path, r.status, r.header)
		}
	}
	if got := backend.got(); len(got) != 0 {
		t.Fatalf("forwarded: %v", got)
	}
	if r := send(ctx, "POST", srv.URL+"/bkt/obj?uploads", "7", "uploads"); r.status != 204 {
		t.Fatalf("POST ?uploads: %d", r.status)
	}
}

// The backend's response reaches the client as sent: no Content-Type is
// sniffed and added when the backend sent none.
func TestNoContentTypeAdded(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Content-Type"] = nil // send none, sniff none
		w.Write([]byte("<html>not sniffed</html>"))
	}))
	defer backend.Close()
	srv := newTestProxy(t, newMemStore(), backend.URL, nil)
	for _, method := range []string{"GET", "PUT"} {
		r := send(context.Background(), method, srv.URL+"/bkt/obj", "1", "ct")
		if r.status != 200 || r.body != "<html>not sniffed</html>" {
			t.Fatalf("%s: %d %q", method, r.status, r.body)
		}
		if v, ok := r.header["Content-Type"]; ok {
			t.Errorf("%s: Content-Type %q added", method, v)
		}
	}
}

func TestCheckRawPath(t *testing.T) {
	for raw, ok := range map[string]bool{
		"/bkt/obj": true, "/bkt/a%20b": true, "/bkt/a{b}": true, "/bkt/%E2%82%AC": true, "/bkt/a;v=1": true,
		"/bkt/a%7Bb": true, "/bkt/%41": true,
		"/bkt\\obj": false, "/bkt/x/..\\obj": false, "/bkt/obj#x": false, "/bkt/a b": false, "/bkt/a\tb": false,
		"/bkt/obj%00": false, "/bkt/obj%0a": false, "/bkt/obj%1F": false, "/bkt/obj%7f": false, "/bkt/\x7f": false,
	} {
		if err := fence.CheckRawPath(raw); (err == nil) != ok {
			t.Errorf("fence.CheckRawPath(%q) = %v, want ok=%v", raw, err, ok)
		}
	}
}

// A COPY or MOVE writes its Destination: the write is fenced on the
// destination's resource too, and refused when stale there. A Destination
// is an absolute URL or an absolute path (whatever its host, the path
// names the resource); a relative one is refused.
func TestDestinationFenced(t *testing.T) {
	store := newMemStore()
	store.seed(t, "dav/report", 10)
	backend := newGateBackend(t)
	srv := newTestProxy(t, store, backend.URL, nil)
	ctx := context.Background()
	for _, tc := range []struct {
		method, dest, token string
		status              int
		resource            string // in the 409 body
	}{
		{"COPY", srv.URL + "/dav/report", "5", 409, "dav/report"},
		{"MOVE", "/dav/report", "5", 409, "dav/report"},
		{"COPY", "http://elsewhere.example/dav/report", "9", 409, "dav/report"},
		{"COPY", "/dav/%2e%2e/report", "11", 400, ""},
		{"COPY", "/dav\\report", "5", 400, ""},
		{"COPY", "http://x/dav\\report", "5", 400, ""},
		{"COPY", "/dav/re%00port", "11", 400, ""},
		// RFC 4918 10.3: an absolute URI or an absolute path; no relative one.
		{"COPY", "//elsewhere.example/dav/report", "9", 409, "dav/report"},
		{"COPY", "dav/report", "11", 400, ""},
		{"COPY", "../dav/report", "11", 400, ""},
		{"COPY", "http://elsewhere.example", "11", 400, ""},
		{"COPY", "", "11", 400, ""},
		{"COPY", srv.URL + "/dav/report", "10", 204, ""},
		{"MOVE", srv.URL + "/dav/new", "12", 204, ""},
	} {
		r := send(ctx, tc.method, srv.URL+"/dav/scratch", tc.token, tc.method+tc.token, "Destination", tc.dest)
		if r.status != tc.status {
			t.Fatalf("%s to %s with %s: %d %s", tc.method, tc.dest, tc.token, r.status, r.body)
		}
		if tc.status == 409 && !strings.Contains(r.body, `"resource":"`+tc.resource+`"`) {
			t.Errorf("409 body %s does not name %s", r.body, tc.resource)
		}
	}
	if got := strings.Join(backend.got(), ","); got != "COPY10,MOVE12" {
		t.Fatalf("forwarded %s, want COPY10,MOVE12", got)
	}
	// Both source and destination were raised by the admitted writes.
	for res, want := range map[string]uint64{"dav/scratch": 12, "dav/report": 10, "dav/new": 12} {
		if got := store.get(res); got != want {
			t.Errorf("%s max %d, want %d", res, got, want)
		}
	}
}

// An S3 browser upload (POST Object) names its key in the form: refused.
func TestFormUploadRefused(t *testing.T) {
	backend := newGateBackend(t)
	srv := newTestProxy(t, newMemStore(), backend.URL, nil)
	ctx := context.Background()
	for _, path := range []string{"/bkt", "/bkt/"} {
		r := send(ctx, "POST", srv.URL+path, "41", "form", "Content-Type", "multipart/form-data; boundary=x")
		if r.status != 400 || r.header.Get(wire.HeaderRefused) != wire.ReasonUnsupported {
			t.Errorf("form POST %s: %d %v", path, r.status, r.header)
		}
	}
	if got := backend.got(); len(got) != 0 {
		t.Fatalf("forwarded: %v", got)
	}
	// A form POSTed to a deeper path names its resource in the path.
	if r := send(ctx, "POST", srv.URL+"/api/items", "41", "form2", "Content-Type", "multipart/form-data; boundary=x"); r.status != 204 {
		t.Fatalf("form POST to /api/items: %d", r.status)
	}
}

func TestLogTargetRedactsCredentials(t *testing.T) {
	for _, tc := range []struct{ target, want string }{
		{"/bkt/k", "/bkt/k"},
		{"/bkt/k?uploadId=7&partNumber=2", "/bkt/k?uploadId=7&partNumber=2"},
		{"/bkt/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIA%2F2026&X-Amz-Signature=abc123&X-Amz-Security-Token=tok",
			"/bkt/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=REDACTED&X-Amz-Signature=REDACTED&X-Amz-Security-Token=REDACTED"},
		{"/bkt/k?AWSAccessKeyId=AKIA&Signature=s%2Bg&Expires=1", "/bkt/k?AWSAccessKeyId=REDACTED&Signature=REDACTED&Expires=1"},
		{"/bkt/k?x-amz-signature=abc", "/bkt/k?x-amz-signature=REDACTED"},
		{"/bkt/k?X%2DAmz%2DSignature=abc", "/bkt/k?X%2DAmz%2DSignature=REDACTED"},
		{"/bkt/k?Signature", "/bkt/k?Signature"},
	} {
		t.Run(tc.target, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPut, tc.target, nil)
			if got := logTarget(r); got != tc.want {
				t.Fatalf("logTarget(%q) = %q, want %q", tc.target, got, tc.want)
			}
		})
	}
}
