package s3

import (
	"errors"
	"testing"
)

func TestAddressingPath(t *testing.T) {
	a, err := NewAddressing([]string{"localhost", "s3.Internal", "127.0.0.1", "s3.localhost"}, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		host, raw, want string // want "" for ErrHost
	}{
		{"localhost:8080", "/demo/vh/x", "/demo/vh/x"},
		{"demo.localhost:8080", "/vh/x", "/demo/vh/x"}, // the bypass: one path
		{"DEMO.LocalHost", "/vh/x", "/demo/vh/x"},
		{"demo.localhost.", "/vh/x", "/demo/vh/x"},
		{"localhost", "/demo/", "/demo"}, // the bucket, either way
		{"localhost", "/demo", "/demo"},
		{"demo.localhost", "/", "/demo"},
		{"demo.localhost", "/a%2Fb", "/demo/a%2Fb"},
		{"my.bucket.s3.internal", "/k", "/my.bucket/k"},
		{"demo.s3.localhost", "/k", "/demo/k"}, // the longest domain wins
		{"s3.localhost", "/demo/k", "/demo/k"},
		{"127.0.0.1:9000", "/demo/k", "/demo/k"},
		{"demo.127.0.0.1:9000", "/k", ""},  // an IP address has no virtual-hosted buckets
		{"demo.127.0.0.1", "/other/k", ""}, // (a store reads this as bucket other)
		{"localhost", "/", "/"},
		{"other.example", "/demo/k", ""},
		{"", "/demo/k", ""},
		{"evil-localhost", "/k", ""},
		{"ab.localhost", "/k", ""},          // a bucket has 3 characters at least
		{"-ab.localhost", "/k", ""},         // and starts with a letter or digit
		{"a_b.localhost", "/k", ""},         // no underscore
		{"x.demo.localhost.evil", "/k", ""}, // a suffix of the host is not a domain
		// A bucket holding ".{domain}": a store that cuts the host at the
		// first ".{domain}" (versitygw --virtual-domain) reads another bucket.
		{"aaa.localhost.localhost", "/k", ""},
		{"aaa.localhostx.localhost", "/k", ""},
		{"aaa.s3.internal.localhost", "/k", ""},
		{"localhost.aaa.localhost", "/k", "/localhost.aaa/k"},
	} {
		got, err := a.Path(tc.host, tc.raw)
		if tc.want == "" {
			if !errors.Is(err, ErrHost) {
				t.Errorf("Path(%q, %q) = %q, %v; want ErrHost", tc.host, tc.raw, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Path(%q, %q) = %q, %v; want %q", tc.host, tc.raw, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "http://localhost", "localhost:8080", "a..b", "-a.b", "a b"} {
		if _, err := NewAddressing([]string{bad}, true); err == nil {
			t.Errorf("NewAddressing(%q): no error", bad)
		}
	}
}

// TestAddressingPathStyleOnly: with virtual-hosted style off, a domain is
// path style as before and {bucket}.{domain} is ErrHost.
func TestAddressingPathStyleOnly(t *testing.T) {
	a, err := NewAddressing([]string{"localhost", "s3.internal"}, false)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := a.Path("s3.internal:9000", "/bkt/k"); err != nil || p != "/bkt/k" {
		t.Errorf("path style: %q, %v; want /bkt/k", p, err)
	}
	for _, host := range []string{"bkt.localhost", "bkt.s3.internal:9000", "s3.internal.localhost"} {
		if p, err := a.Path(host, "/k"); !errors.Is(err, ErrHost) {
			t.Errorf("Path(%q, /k) = %q, %v; want ErrHost", host, p, err)
		}
	}
}

// TestPathAllocs: mapping a path-style request, the common case, allocates
// nothing per request, with or without a port in Host (a client on port 80
// or 443 sends none).
func TestPathAllocs(t *testing.T) {
	a, err := NewAddressing([]string{"s3.internal", "localhost"}, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"localhost:8080", "localhost", "s3.internal."} { // capitals cost one (ToLower)
		if n := testing.AllocsPerRun(100, func() { _, _ = a.Path(host, "/bkt/obj-1") }); n != 0 {
			t.Errorf("Path(%q, /bkt/obj-1): %v allocations, want 0", host, n)
		}
	}
}
