package s3

import (
	"net/http"
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

// BenchmarkLookup is the catalogue's lookup of a PutObject, the common
// fenced write, and of a CreateBucket, which reads the whole table.
func BenchmarkLookup(b *testing.B) {
	h := http.Header{}
	for _, c := range []struct{ name, method, path, query string }{
		{"PutObject", http.MethodPut, "/bkt/obj-1", ""},
		{"CreateBucket", http.MethodPut, "/bkt", "x-id=CreateBucket"},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				Lookup(c.method, c.path, c.query, h)
			}
		})
	}
}
