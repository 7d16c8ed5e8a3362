package proxy_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/fenceproxy/fenceproxy/proxy"
)

// traceBackend records the traceparent of each request it gets, by path,
// and answers a PUT 201, /fail 503, anything else 200.
type traceBackend struct {
	mu     sync.Mutex
	parent map[string][]string // path: the traceparent values of its last request (nil: none)
}

func newTraceBackend(t *testing.T) (*traceBackend, string) {
	b := &traceBackend{parent: map[string][]string{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		b.mu.Lock()
		b.parent[r.URL.Path] = r.Header.Values("Traceparent")
		b.mu.Unlock()
		switch {
		case r.URL.Path == "/fail":
			w.WriteHeader(http.StatusServiceUnavailable)
		case r.Method == http.MethodPut:
			w.WriteHeader(http.StatusCreated)
		}
	}))
	t.Cleanup(srv.Close)
	return b, srv.URL
}

func (b *traceBackend) traceparent(path string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.parent[path]
}

// newTracer is a tracer whose ended spans the recorder holds, sampling every one.
func newTracer(t *testing.T) (trace.Tracer, *tracetest.SpanRecorder) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	return tp.Tracer("test"), rec
}

// spanAttrs are a span's attributes by key.
func spanAttrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// checkAttrs fails unless s has each of want (a string, int or bool) and
// none of the keys in absent.
func checkAttrs(t *testing.T, s sdktrace.ReadOnlySpan, want map[string]any, absent ...string) {
	t.Helper()
	got := spanAttrs(s)
	for k, v := range want {
		a, ok := got[attribute.Key(k)]
		if !ok {
			t.Errorf("span %s (%s): no %s, want %v; has %v", s.Name(), s.SpanKind(), k, v, s.Attributes())
			continue
		}
		if a.AsInterface() != v {
			t.Errorf("span %s (%s): %s = %#v, want %#v", s.Name(), s.SpanKind(), k, a.AsInterface(), v)
		}
	}
	for _, k := range absent {
		if a, ok := got[attribute.Key(k)]; ok {
			t.Errorf("span %s (%s): %s = %v, want none", s.Name(), s.SpanKind(), k, a.Emit())
		}
	}
}

// ended waits until rec holds servers server spans and clients client
// spans, at most 10s: a server span ends once the handler returned, which
// may be after the client read its answer, and signals nothing a test can
// wait on.
func ended(t *testing.T, rec *tracetest.SpanRecorder, servers, clients int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if len(byKind(rec, trace.SpanKindServer)) >= servers && len(byKind(rec, trace.SpanKindClient)) >= clients {
			return
		}
	}
}

// byKind returns the ended spans of kind, in the order they ended.
func byKind(rec *tracetest.SpanRecorder, kind trace.SpanKind) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.SpanKind() == kind {
			out = append(out, s)
		}
	}
	return out
}

const (
	clientTrace  = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientSpan   = "00f067aa0ba902b7"
	clientParent = "00-" + clientTrace + "-" + clientSpan + "-01"
)

// send sends method path with body and token ("": none) and the extra
// headers through the proxy at base, and returns the status.
func send(t *testing.T, base, method, path, body, token string, hdr ...string) int {
	t.Helper()
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body == "" {
		req.Body = nil
	}
	if token != "" {
		req.Header.Set("X-Fencing-Token", token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := newFwdClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// With a Tracer, each request is a server span with the access log's
// fields, its parent the client's traceparent; the call to the backend is
// a client span below it, and the backend gets that span's traceparent.
func TestTracingSpans(t *testing.T) {
	backend, url := newTraceBackend(t)
	tracer, rec := newTracer(t)
	opts := fwdOptions()
	opts.Tracer = tracer
	_, srv := newFwdProxy(t, url, opts)

	// An admitted write, the client's trace continued.
	if status := send(t, srv.URL, http.MethodPut, "/bkt/a", "data", "6", "Traceparent", clientParent); status != http.StatusCreated {
		t.Fatalf("PUT token 6: %d, want 201", status)
	}
	ended(t, rec, 1, 1)
	servers, clients := byKind(rec, trace.SpanKindServer), byKind(rec, trace.SpanKindClient)
	if len(servers) != 1 || len(clients) != 1 {
		t.Fatalf("%d server and %d client spans, want 1 and 1", len(servers), len(clients))
	}
	srvSpan, cliSpan := servers[0], clients[0]
	if srvSpan.Name() != "PUT" || srvSpan.SpanContext().TraceID().String() != clientTrace || srvSpan.Parent().SpanID().String() != clientSpan ||
		!srvSpan.Parent().IsRemote() {
		t.Errorf("server span %q in trace %s, parent %s; want PUT in %s below the client's %s", srvSpan.Name(),
			srvSpan.SpanContext().TraceID(), srvSpan.Parent().SpanID(), clientTrace, clientSpan)
	}
	checkAttrs(t, srvSpan, map[string]any{"http.request.method": "PUT", "url.path": "/bkt/a", "url.scheme": "http",
		"http.response.status_code": int64(201), "fenceproxy.decision": "admitted", "fenceproxy.resource": "bkt/a",
		"fenceproxy.resource_count": int64(1), "fenceproxy.token": "6", "fenceproxy.upstream_status": int64(201),
		"http.request.body.size": int64(4)}, "fenceproxy.reason", "fenceproxy.aborted")
	if srvSpan.Status().Code != codes.Unset {
		t.Errorf("server span status %v, want unset", srvSpan.Status())
	}
	if cliSpan.Name() != "PUT" || cliSpan.Parent().SpanID() != srvSpan.SpanContext().SpanID() {
		t.Errorf("client span %q, parent %s; want PUT below the server span %s", cliSpan.Name(), cliSpan.Parent().SpanID(), srvSpan.SpanContext().SpanID())
	}
	checkAttrs(t, cliSpan, map[string]any{"http.request.method": "PUT", "http.response.status_code": int64(201), "server.address": "127.0.0.1"})
	if port := spanAttrs(cliSpan)["server.port"].AsInt64(); !strings.HasSuffix(url, fmt.Sprintf(":%d", port)) {
		t.Errorf("client span: server.port %d, want the backend's (%s)", port, url)
	}
	want := "00-" + clientTrace + "-" + cliSpan.SpanContext().SpanID().String() + "-01"
	if got := backend.traceparent("/bkt/a"); len(got) != 1 || got[0] != want {
		t.Errorf("the backend got traceparent %q, want %q (the client span's)", got, want)
	}

	// A stale write: refused, nothing forwarded, no client span.
	rec.Reset()
	if status := send(t, srv.URL, http.MethodPut, "/bkt/a", "data", "5"); status != http.StatusConflict {
		t.Fatalf("PUT token 5: %d, want 409", status)
	}
	ended(t, rec, 1, 0)
	if servers, clients = byKind(rec, trace.SpanKindServer), byKind(rec, trace.SpanKindClient); len(servers) != 1 || len(clients) != 0 {
		t.Fatalf("stale write: %d server and %d client spans, want 1 and 0", len(servers), len(clients))
	}
	checkAttrs(t, servers[0], map[string]any{"http.response.status_code": int64(409), "fenceproxy.decision": "refused",
		"fenceproxy.reason": "stale", "fenceproxy.resource": "bkt/a", "fenceproxy.token": "5"}, "fenceproxy.upstream_status")
	if servers[0].Parent().IsValid() || servers[0].Status().Code != codes.Unset {
		t.Errorf("stale write's span: parent %v, status %v; want a root span, status unset (a 4xx is no server error)",
			servers[0].Parent().SpanID(), servers[0].Status())
	}

	// A read: the path without its query; a 5xx from the backend is an error.
	rec.Reset()
	if status := send(t, srv.URL, http.MethodGet, "/fail?X-Amz-Signature=s3cret", "", ""); status != http.StatusServiceUnavailable {
		t.Fatalf("GET /fail: %d, want 503", status)
	}
	ended(t, rec, 1, 1)
	servers, clients = byKind(rec, trace.SpanKindServer), byKind(rec, trace.SpanKindClient)
	if len(servers) != 1 || len(clients) != 1 {
		t.Fatalf("read: %d server and %d client spans, want 1 and 1", len(servers), len(clients))
	}
	checkAttrs(t, servers[0], map[string]any{"url.path": "/fail", "fenceproxy.decision": "unfenced", "http.response.status_code": int64(503),
		"fenceproxy.upstream_status": int64(503), "error.type": "503"}, "fenceproxy.resource", "fenceproxy.token")
	if servers[0].Status().Code != codes.Error || clients[0].Status().Code != codes.Error {
		t.Errorf("a 503: server span status %v, client span status %v; want Error both", servers[0].Status(), clients[0].Status())
	}
	if got := backend.traceparent("/fail"); len(got) != 1 || !strings.Contains(got[0], clients[0].SpanContext().SpanID().String()) {
		t.Errorf("the backend got traceparent %q, want the client span's %s", got, clients[0].SpanContext().SpanID())
	}

	// A method HTTP does not define: named HTTP, so that clients cannot make names up.
	rec.Reset()
	send(t, srv.URL, "FROB", "/bkt/b", "", "1")
	ended(t, rec, 1, 1)
	if servers = byKind(rec, trace.SpanKindServer); len(servers) != 1 || servers[0].Name() != "HTTP" {
		t.Fatalf("FROB: server spans %v, want one named HTTP", servers)
	}
	checkAttrs(t, servers[0], map[string]any{"http.request.method": "_OTHER", "http.request.method_original": "FROB"})
}

// A client whose AWS signature covers its traceparent keeps it: another
// value would break the signature (S3 pass mode sends it to the store as
// signed). One that did not sign it gets the proxy's.
func TestTracingSignedTraceparentKept(t *testing.T) {
	backend, url := newTraceBackend(t)
	tracer, rec := newTracer(t)
	opts := fwdOptions()
	opts.Tracer = tracer
	_, srv := newFwdProxy(t, url, opts)
	const auth = "AWS4-HMAC-SHA256 Credential=AKID/20260101/us-east-1/s3/aws4_request, SignedHeaders=host;%s;x-amz-date, Signature=abc"
	send(t, srv.URL, http.MethodPut, "/bkt/signed", "data", "1", "Traceparent", clientParent,
		"Authorization", strings.Replace(auth, "%s", "traceparent", 1))
	if got := backend.traceparent("/bkt/signed"); len(got) != 1 || got[0] != clientParent {
		t.Errorf("signed traceparent: the backend got %q, want the client's %q", got, clientParent)
	}
	send(t, srv.URL, http.MethodPut, "/bkt/presigned?X-Amz-SignedHeaders=host%3Btraceparent&X-Amz-Signature=abc", "data", "1",
		"Traceparent", clientParent)
	if got := backend.traceparent("/bkt/presigned"); len(got) != 1 || got[0] != clientParent {
		t.Errorf("presigned with traceparent signed: the backend got %q, want the client's %q", got, clientParent)
	}
	rec.Reset()
	send(t, srv.URL, http.MethodPut, "/bkt/unsigned", "data", "1", "Traceparent", clientParent,
		"Authorization", strings.Replace(auth, "%s", "content-type", 1))
	ended(t, rec, 1, 1)
	clients := byKind(rec, trace.SpanKindClient)
	if len(clients) != 1 {
		t.Fatalf("%d client spans, want 1", len(clients))
	}
	want := "00-" + clientTrace + "-" + clients[0].SpanContext().SpanID().String() + "-01"
	if got := backend.traceparent("/bkt/unsigned"); len(got) != 1 || got[0] != want {
		t.Errorf("unsigned traceparent: the backend got %q, want the proxy's %q", got, want)
	}
}

// Without a Tracer the backend gets the client's traceparent as it was
// sent, and none when it sent none.
func TestTracingOffPassesTraceparent(t *testing.T) {
	backend, url := newTraceBackend(t)
	_, srv := newFwdProxy(t, url, fwdOptions())
	send(t, srv.URL, http.MethodPut, "/bkt/a", "data", "1", "Traceparent", clientParent)
	if got := backend.traceparent("/bkt/a"); len(got) != 1 || got[0] != clientParent {
		t.Errorf("the backend got %q, want the client's %q", got, clientParent)
	}
	send(t, srv.URL, http.MethodPut, "/bkt/b", "data", "1")
	send(t, srv.URL, http.MethodGet, "/bkt/c", "", "")
	for _, path := range []string{"/bkt/b", "/bkt/c"} {
		if got := backend.traceparent(path); got != nil {
			t.Errorf("%s: the backend got traceparent %q, which the client did not send", path, got)
		}
	}
}

// Cluster mode: a write sent to the owner replica carries the trace
// context of a client span (fenceproxy.forward=owner) below the server
// span; a write this replica owns keeps its backend call in the trace,
// although the ownership's context replaces the client's.
func TestTracingToOwner(t *testing.T) {
	backend, url := newTraceBackend(t)
	tracer, rec := newTracer(t)
	var ownerSaw []string
	owner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ownerSaw = r.Header.Values("Traceparent")
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusCreated)
	})
	opts := fwdOptions()
	opts.Tracer = tracer
	opts.Owner = func(r *http.Request, _ []string) (proxy.Ownership, error) {
		if strings.HasPrefix(r.URL.Path, "/remote/") {
			return proxy.Ownership{Forward: owner}, nil
		}
		return proxy.Ownership{Context: context.Background()}, nil
	}
	_, srv := newFwdProxy(t, url, opts)

	if status := send(t, srv.URL, http.MethodPut, "/remote/a", "data", "3", "Traceparent", clientParent); status != http.StatusCreated {
		t.Fatalf("PUT to the owner: %d, want 201", status)
	}
	ended(t, rec, 1, 1)
	servers, clients := byKind(rec, trace.SpanKindServer), byKind(rec, trace.SpanKindClient)
	if len(servers) != 1 || len(clients) != 1 {
		t.Fatalf("%d server and %d client spans, want 1 and 1", len(servers), len(clients))
	}
	checkAttrs(t, servers[0], map[string]any{"fenceproxy.decision": "to_owner", "fenceproxy.resource": "remote/a", "http.response.status_code": int64(201)})
	checkAttrs(t, clients[0], map[string]any{"fenceproxy.forward": "owner", "http.response.status_code": int64(201)})
	if clients[0].Parent().SpanID() != servers[0].SpanContext().SpanID() {
		t.Errorf("the forward's span is not below the server span")
	}
	want := "00-" + clientTrace + "-" + clients[0].SpanContext().SpanID().String() + "-01"
	if len(ownerSaw) != 1 || ownerSaw[0] != want {
		t.Errorf("the owner got traceparent %q, want %q", ownerSaw, want)
	}

	rec.Reset()
	if status := send(t, srv.URL, http.MethodPut, "/local/a", "data", "3", "Traceparent", clientParent); status != http.StatusCreated {
		t.Fatalf("PUT owned here: %d, want 201", status)
	}
	ended(t, rec, 1, 1)
	servers, clients = byKind(rec, trace.SpanKindServer), byKind(rec, trace.SpanKindClient)
	if len(servers) != 1 || len(clients) != 1 || clients[0].Parent().SpanID() != servers[0].SpanContext().SpanID() ||
		clients[0].SpanContext().TraceID().String() != clientTrace {
		t.Fatalf("owned write: %d server and %d client spans, want 1 and 1, the client span below the server span in the client's trace", len(servers), len(clients))
	}
	if got := backend.traceparent("/local/a"); len(got) != 1 || !strings.Contains(got[0], clients[0].SpanContext().SpanID().String()) {
		t.Errorf("the backend got traceparent %q, want the client span's", got)
	}
}
