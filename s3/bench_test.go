package s3

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// BenchmarkPath is Addressing.Path per request: path style with and
// without a port in Host (a client on port 80 or 443 sends none), and
// virtual-hosted style.
func BenchmarkPath(b *testing.B) {
	a, err := NewAddressing([]string{"s3.internal", "localhost"}, true)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct{ name, host, path string }{
		{"path-style-port", "localhost:8080", "/bkt/obj-1"},
		{"path-style", "localhost", "/bkt/obj-1"},
		{"virtual-hosted", "bkt.s3.internal:8080", "/obj-1"},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := a.Path(c.host, c.path); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkClassify is the one reading of a request per request: a
// PutObject, the common fenced write, a CreateBucket, which reads the whole
// catalogue, and a CopyObject with its source.
func BenchmarkClassify(b *testing.B) {
	a, err := NewAddressing([]string{"s3.internal", "localhost"}, true)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name, method, target string
		header               http.Header
	}{
		{"PutObject", http.MethodPut, "/bkt/obj-1", http.Header{"Content-Type": {"text/plain"}, "X-Amz-Content-Sha256": {"UNSIGNED-PAYLOAD"}}},
		{"CreateBucket", http.MethodPut, "/bkt?x-id=CreateBucket", http.Header{}},
		{"CopyObject", http.MethodPut, "/bkt/obj-2", http.Header{"X-Amz-Copy-Source": {"/bkt/obj-1"}}},
	} {
		r := httptest.NewRequest(c.method, "http://localhost:8080"+c.target, nil)
		r.Header = c.header
		raw, _, _ := strings.Cut(c.target, "?")
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := a.Classify(r, raw, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
