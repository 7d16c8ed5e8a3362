package proxy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestBulkDeleteQuery(t *testing.T) {
	for q, want := range map[string]bool{
		"delete": true, "delete=": true, "x=1&delete": true, "x=1;delete": true, "%64elete": true,
		"": false, "uploads": false, "uploadId=1&partNumber=2": false, "deleted": false, "x=delete": false,
		"prefix=100%&delete": true, "prefix=100%": false,
	} {
		if got := bulkDelete(q); got != want {
			t.Errorf("bulkDelete(%q) = %v, want %v", q, got, want)
		}
	}
}

// A multi-object delete is refused whatever its token; a POST of another kind
// on the same path is fenced as usual.
func TestBulkDeleteRefused(t *testing.T) {
	store := newMemStore()
	backend := newGateBackend(t)
	srv := newTestProxy(t, store, backend.URL, nil)
	ctx := context.Background()
	for _, path := range []string{"/bkt?delete", "/bkt?delete=", "/bkt?x-id=DeleteObjects&delete"} {
		r := send(ctx, "POST", srv.URL+path, "7", "bulk")
		if r.status != 400 || r.header.Get(HeaderRefused) != ReasonUnsupported {
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
