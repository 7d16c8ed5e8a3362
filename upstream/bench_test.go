package upstream

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
)

// BenchmarkRoundTrip sends 1 KiB PUTs to a local sink, through the fast path
// and through a pooled http.Transport in the same run; compare their ns/op.
func BenchmarkRoundTrip(b *testing.B) {
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer sink.Close()
	u, _ := url.Parse(sink.URL)
	body := bytes.Repeat([]byte("x"), 1024)
	std := &http.Transport{Proxy: nil, DisableCompression: true, MaxIdleConnsPerHost: 512}
	for _, tc := range []struct {
		name string
		rt   http.RoundTripper
	}{{"transport", std}, {"fast", withFallback(u, std, Options{})}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(16)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					r, _ := http.NewRequest(http.MethodPut, sink.URL+"/bkt/obj", bytes.NewReader(body))
					r.Header.Set("X-Fencing-Token", "7")
					resp, err := tc.rt.RoundTrip(r)
					if err != nil {
						b.Fatal(err)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusNoContent {
						b.Fatalf("status %d", resp.StatusCode)
					}
				}
			})
		})
	}
}
