package proxy

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/fenceproxy/fenceproxy/fence"
	"github.com/fenceproxy/fenceproxy/store/badger"
)

// okTransport answers every request at once, so the benchmark measures the
// proxy's own work, not a backend's.
type okTransport struct{}

func (okTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody, Request: r, ContentLength: 0}, nil
}

// deadlineRecorder is an httptest.ResponseRecorder whose read deadlines
// are set, as a server connection's are: the recorder's own answer
// http.ErrNotSupported, which net/http allocates anew on every call.
type deadlineRecorder struct{ *httptest.ResponseRecorder }

func (deadlineRecorder) SetReadDeadline(time.Time) error { return nil }

// BenchmarkProxyPut compares a fenced 1 KiB PUT (same token, 1,000
// resources) with the same request on the unfenced path, and with the
// fenced PUT in S3 pass mode (path style), in one run: the ratios of their
// ns/op are what fencing, and S3 mode on top of it, cost in the proxy itself.
func BenchmarkProxyPut(b *testing.B) {
	body := strings.Repeat("x", 1024)
	for _, mode := range []string{"unfenced", "fenced", "fenced-s3"} {
		b.Run(mode, func(b *testing.B) {
			s, err := badger.Open(b.TempDir(), badger.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			for i := range 1000 { // the holder's token is durable already
				if _, err := s.Raise(fmt.Sprintf("bkt/obj-%d", i), 7); err != nil {
					b.Fatal(err)
				}
			}
			opts := testOptions(b, "http://backend.invalid")
			opts.Transport = okTransport{}
			switch mode {
			case "unfenced":
				opts.UnfencedMethods = []string{"GET", "HEAD", "OPTIONS", "PUT"}
			case "fenced-s3":
				opts.S3, opts.S3Domains = "pass", []string{"example.com"} // httptest.NewRequest's Host
			}
			p, _ := newProxy(b, s, opts, fence.Options{DrainTimeout: time.Second})
			var n atomic.Uint64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					r := httptest.NewRequest(http.MethodPut, fmt.Sprintf("/bkt/obj-%d", n.Add(1)%1000), strings.NewReader(body))
					r.Header.Set("X-Fencing-Token", "7")
					w := httptest.NewRecorder()
					p.ServeHTTP(deadlineRecorder{w}, r)
					if w.Code != http.StatusOK {
						b.Fatalf("status %d: %s", w.Code, w.Body)
					}
				}
			})
		})
	}
}

// BenchmarkProxyAccessLog measures an unfenced GET and a fenced 1 KiB PUT
// with the metrics registered and a JSON logger, with the access log off
// (the default: it must add no allocation) and on.
func BenchmarkProxyAccessLog(b *testing.B) {
	body := strings.Repeat("x", 1024)
	for _, method := range []string{http.MethodGet, http.MethodPut} {
		for _, on := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/access-log=%v", method, on), func(b *testing.B) {
				s, err := badger.Open(b.TempDir(), badger.Options{})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				for i := range 1000 {
					if _, err := s.Raise(fmt.Sprintf("bkt/obj-%d", i), 7); err != nil {
						b.Fatal(err)
					}
				}
				opts := testOptions(b, "http://backend.invalid")
				opts.Transport = okTransport{}
				opts.Metrics = NewMetrics(prometheus.NewRegistry())
				opts.Logger = slog.New(slog.NewJSONHandler(io.Discard, nil))
				opts.AccessLog = on
				p, _ := newProxy(b, s, opts, fence.Options{DrainTimeout: time.Second})
				var n atomic.Uint64
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						var rd io.Reader
						if method == http.MethodPut {
							rd = strings.NewReader(body)
						}
						r := httptest.NewRequest(method, fmt.Sprintf("/bkt/obj-%d", n.Add(1)%1000), rd)
						r.Header.Set("X-Fencing-Token", "7")
						w := httptest.NewRecorder()
						p.ServeHTTP(w, r)
						if w.Code != http.StatusOK {
							b.Fatalf("status %d: %s", w.Code, w.Body)
						}
					}
				})
			})
		}
	}
}

// discardSpans is a span exporter that drops what it is given: the
// benchmark measures the proxy's spans and the SDK's batching, not a
// collector.
type discardSpans struct{}

func (discardSpans) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardSpans) Shutdown(context.Context) error                             { return nil }

// BenchmarkProxyTracing measures an unfenced GET and a fenced 1 KiB PUT
// with the metrics registered and a JSON logger (the access log off), with
// tracing off (the default: it must add no allocation; the same requests
// as BenchmarkProxyAccessLog's access-log=false) and on (every request
// sampled, its spans batched by the SDK to an exporter that drops them).
func BenchmarkProxyTracing(b *testing.B) {
	body := strings.Repeat("x", 1024)
	for _, method := range []string{http.MethodGet, http.MethodPut} {
		for _, on := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/tracing=%v", method, on), func(b *testing.B) {
				s, err := badger.Open(b.TempDir(), badger.Options{})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				for i := range 1000 {
					if _, err := s.Raise(fmt.Sprintf("bkt/obj-%d", i), 7); err != nil {
						b.Fatal(err)
					}
				}
				opts := testOptions(b, "http://backend.invalid")
				opts.Transport = okTransport{}
				opts.Metrics = NewMetrics(prometheus.NewRegistry())
				opts.Logger = slog.New(slog.NewJSONHandler(io.Discard, nil))
				if on {
					tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardSpans{}), sdktrace.WithSampler(sdktrace.AlwaysSample()))
					defer tp.Shutdown(context.Background())
					opts.Tracer = tp.Tracer("bench")
				}
				p, _ := newProxy(b, s, opts, fence.Options{DrainTimeout: time.Second})
				var n atomic.Uint64
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						var rd io.Reader
						if method == http.MethodPut {
							rd = strings.NewReader(body)
						}
						r := httptest.NewRequest(method, fmt.Sprintf("/bkt/obj-%d", n.Add(1)%1000), rd)
						r.Header.Set("X-Fencing-Token", "7")
						w := httptest.NewRecorder()
						p.ServeHTTP(w, r)
						if w.Code != http.StatusOK {
							b.Fatalf("status %d: %s", w.Code, w.Body)
						}
					}
				})
			})
		}
	}
}
