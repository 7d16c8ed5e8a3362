package server_test

import (
	"compress/gzip"
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/fenceproxy/fenceproxy/client"
	"github.com/fenceproxy/fenceproxy/internal/s3backend"
	"github.com/fenceproxy/fenceproxy/internal/servertest"
)

// collector is a stand-in for an OpenTelemetry collector: it takes OTLP
// exports (over HTTP, protobuf POSTs on /v1/traces; or over gRPC) and keeps
// every span with its resource's attributes.
type collector struct {
	coltracepb.UnimplementedTraceServiceServer
	mu      sync.Mutex
	exports int
	spans   []gotSpan
	bad     []string // what the stand-in refused, for the test to report
}

// gotSpan is a span as the collector got it.
type gotSpan struct {
	*tracepb.Span
	resource map[string]string
}

func (c *collector) take(req *coltracepb.ExportTraceServiceRequest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.exports++
	for _, rs := range req.ResourceSpans {
		res := attrMap(rs.Resource.GetAttributes())
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				c.spans = append(c.spans, gotSpan{s, res})
			}
		}
	}
}

// Export is the gRPC service's.
func (c *collector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	c.take(req)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// ServeHTTP is OTLP/HTTP's binary protobuf encoding.
func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	refuse := func(why string) {
		c.mu.Lock()
		c.bad = append(c.bad, why)
		c.mu.Unlock()
		http.Error(w, why, http.StatusBadRequest)
	}
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" {
		refuse(r.Method + " " + r.URL.Path)
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		refuse("Content-Type " + ct)
		return
	}
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			refuse(err.Error())
			return
		}
		body = zr
	}
	raw, err := io.ReadAll(body)
	if err != nil {
		refuse(err.Error())
		return
	}
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(raw, &req); err != nil {
		refuse("not an ExportTraceServiceRequest: " + err.Error())
		return
	}
	c.take(&req)
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

// got returns the exports and the spans so far, failing the test if the
// stand-in refused anything.
func (c *collector) got(t *testing.T) (int, []gotSpan) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.bad) > 0 {
		t.Errorf("the collector refused: %q", c.bad)
	}
	return c.exports, append([]gotSpan(nil), c.spans...)
}

func attrMap(kvs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		switch v := kv.Value.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.Key] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.Key] = strconv.FormatInt(v.IntValue, 10)
		case *commonpb.AnyValue_BoolValue:
			m[kv.Key] = strconv.FormatBool(v.BoolValue)
		}
	}
	return m
}

// newHTTPCollector serves a collector over OTLP/HTTP on a loopback port
// and points the OTLP exporter's variables at it.
func newHTTPCollector(t *testing.T) *collector {
	c := &collector{}
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	otelEnv(t, "OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	return c
}

// otelEnv sets the OTEL_* variables the SDK reads from the process's
// environment (the test may not run in parallel), the others that could
// change what these tests see cleared, and kv's set.
func otelEnv(t *testing.T, kv ...string) {
	for _, name := range []string{"OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG",
		"OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
		"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_COMPRESSION", "OTEL_BSP_SCHEDULE_DELAY"} {
		t.Setenv(name, "")
	}
	for i := 0; i+1 < len(kv); i += 2 {
		t.Setenv(kv[i], kv[i+1])
	}
}

// traceBackend answers PUT 201 and GET 200, and records the traceparent
// headers of each request by path.
type traceBackend struct {
	mu     sync.Mutex
	parent map[string][]string
}

func newTraceBackend(t *testing.T) (*traceBackend, string) {
	b := &traceBackend{parent: map[string][]string{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		b.mu.Lock()
		b.parent[r.Method+" "+r.URL.Path] = r.Header.Values("Traceparent")
		b.mu.Unlock()
		if r.Method == http.MethodPut {
			w.WriteHeader(http.StatusCreated)
		}
	}))
	t.Cleanup(srv.Close)
	return b, srv.URL
}

func (b *traceBackend) traceparent(key string) ([]string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	v, ok := b.parent[key]
	return v, ok
}

// sendTraced sends method path with body and token through the proxy, with
// traceparent when it is not "", and returns the status.
func sendTraced(t *testing.T, in *servertest.Instance, method, path, body, token, traceparent string) int {
	t.Helper()
	req, err := http.NewRequest(method, in.ProxyURL()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body == "" {
		req.Body = nil
	}
	if token != "" {
		req.Header.Set("X-Fencing-Token", token)
	}
	if traceparent != "" {
		req.Header.Set("Traceparent", traceparent)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

const (
	incomingTrace  = "4bf92f3577b34da6a3ce929d0e0e4736"
	incomingSpan   = "00f067aa0ba902b7"
	incomingParent = "00-" + incomingTrace + "-" + incomingSpan + "-01"
)

// spansOf returns the spans of kind.
func spansOf(spans []gotSpan, kind tracepb.Span_SpanKind) []gotSpan {
	var out []gotSpan
	for _, s := range spans {
		if s.Kind == kind {
			out = append(out, s)
		}
	}
	return out
}

// checkSpan fails unless s has each attribute of want.
func checkSpan(t *testing.T, what string, s gotSpan, want map[string]string, absent ...string) {
	t.Helper()
	got := attrMap(s.Attributes)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %s = %q, want %q (attributes %v)", what, k, got[k], v, got)
		}
	}
	for _, k := range absent {
		if v, ok := got[k]; ok {
			t.Errorf("%s: %s = %q, want none", what, k, v)
		}
	}
}

// With FENCEPROXY_TRACING=true a real server exports, by OTLP/HTTP to the
// endpoint of OTEL_EXPORTER_OTLP_ENDPOINT, a server span per request with
// the decision, resource, token and status, the client's traceparent its
// parent, and a client span around the call to the backend, whose
// traceparent the backend gets; the stop flushes them (the batch's delay,
// 5s by default, has not passed when the test stops the server).
func TestTracingOTLP(t *testing.T) {
	coll := newHTTPCollector(t)
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=test")
	backend, url := newTraceBackend(t)
	in := servertest.Start(t, map[string]string{"FENCEPROXY_UPSTREAM": url, "FENCEPROXY_DATA_DIR": t.TempDir(),
		"FENCEPROXY_TRACING": "true", "FENCEPROXY_ACCESS_LOG": "true"})
	if status := sendTraced(t, in, http.MethodPut, "/bkt/a", "data", "6", incomingParent); status != http.StatusCreated {
		t.Fatalf("PUT token 6: %d, want 201", status)
	}
	if status := sendTraced(t, in, http.MethodPut, "/bkt/a", "data", "5", ""); status != http.StatusConflict {
		t.Fatalf("PUT token 5: %d, want 409", status)
	}
	if err := in.Stop(); err != nil {
		t.Fatal(err)
	}
	_, spans := coll.got(t)
	servers, clients := spansOf(spans, tracepb.Span_SPAN_KIND_SERVER), spansOf(spans, tracepb.Span_SPAN_KIND_CLIENT)
	if len(servers) != 2 || len(clients) != 1 {
		t.Fatalf("the collector got %d server and %d client spans, want 2 and 1 (%d in all)", len(servers), len(clients), len(spans))
	}
	admitted, stale := servers[0], servers[1]
	if attrMap(admitted.Attributes)["fenceproxy.token"] != "6" {
		admitted, stale = stale, admitted
	}

	// The admitted write: in the client's trace, below its span.
	if hex.EncodeToString(admitted.TraceId) != incomingTrace || hex.EncodeToString(admitted.ParentSpanId) != incomingSpan || admitted.Name != "PUT" {
		t.Errorf("admitted write's span %q: trace %x, parent %x; want PUT in trace %s below %s",
			admitted.Name, admitted.TraceId, admitted.ParentSpanId, incomingTrace, incomingSpan)
	}
	checkSpan(t, "admitted write", admitted, map[string]string{"http.request.method": "PUT", "url.path": "/bkt/a",
		"http.response.status_code": "201", "fenceproxy.decision": "admitted", "fenceproxy.resource": "bkt/a",
		"fenceproxy.resource_count": "1", "fenceproxy.token": "6", "fenceproxy.upstream_status": "201"}, "fenceproxy.reason")
	for k, v := range map[string]string{"service.name": "fenceproxy", "deployment.environment.name": "test", "telemetry.sdk.language": "go"} {
		if admitted.resource[k] != v {
			t.Errorf("resource %s = %q, want %q (resource %v)", k, admitted.resource[k], v, admitted.resource)
		}
	}
	client := clients[0]
	if string(client.TraceId) != string(admitted.TraceId) || string(client.ParentSpanId) != string(admitted.SpanId) || client.Name != "PUT" {
		t.Errorf("client span %q: trace %x, parent %x; want PUT below the server span %x", client.Name, client.TraceId, client.ParentSpanId, admitted.SpanId)
	}
	checkSpan(t, "the backend's call", client, map[string]string{"http.response.status_code": "201"})
	want := "00-" + incomingTrace + "-" + hex.EncodeToString(client.SpanId) + "-01"
	if got, _ := backend.traceparent("PUT /bkt/a"); len(got) != 1 || got[0] != want {
		t.Errorf("the backend got traceparent %q, want %q (the client span's)", got, want)
	}

	// The stale write: a trace of its own, refused, nothing forwarded.
	if len(stale.ParentSpanId) != 0 || string(stale.TraceId) == string(admitted.TraceId) {
		t.Errorf("stale write's span: trace %x, parent %x; want a new trace's root", stale.TraceId, stale.ParentSpanId)
	}
	checkSpan(t, "stale write", stale, map[string]string{"http.request.method": "PUT", "http.response.status_code": "409",
		"fenceproxy.decision": "refused", "fenceproxy.reason": "stale", "fenceproxy.resource": "bkt/a", "fenceproxy.token": "5"},
		"fenceproxy.upstream_status")

	// The access line names the trace.
	lines := accessLines(t, in.Logs.String())
	if len(lines) != 2 || lines[0]["trace_id"] != incomingTrace {
		t.Errorf("access lines %v: want 2, the first with trace_id %s", lines, incomingTrace)
	}
	if !in.Logs.Contains(`"otlp_protocol":"http/protobuf"`) {
		t.Errorf("no start-up line on tracing:\n%s", in.Logs)
	}
}

// Off by default: nothing reaches the collector, even with the OTLP
// variables set, and the backend gets no traceparent the client did not
// send (and the client's as it sent it).
func TestTracingOffByDefault(t *testing.T) {
	coll := newHTTPCollector(t)
	backend, url := newTraceBackend(t)
	in := servertest.Start(t, map[string]string{"FENCEPROXY_UPSTREAM": url, "FENCEPROXY_DATA_DIR": t.TempDir()})
	sendTraced(t, in, http.MethodPut, "/bkt/a", "data", "6", "")
	sendTraced(t, in, http.MethodGet, "/bkt/a", "", "", "")
	sendTraced(t, in, http.MethodPut, "/bkt/b", "data", "6", incomingParent)
	if err := in.Stop(); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string][]string{"PUT /bkt/a": nil, "GET /bkt/a": nil, "PUT /bkt/b": {incomingParent}} {
		got, ok := backend.traceparent(key)
		if !ok {
			t.Errorf("%s never reached the backend", key)
		} else if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("%s: the backend got traceparent %q, want %q", key, got, want)
		}
	}
	if exports, _ := coll.got(t); exports != 0 {
		t.Errorf("the collector got %d exports with tracing off", exports)
	}
	if !in.Logs.Contains(`"tracing":false`) {
		t.Errorf("the start-up line does not say tracing false:\n%s", in.Logs)
	}
}

// A collector that is down costs requests nothing: every one is answered
// at once, the failed exports are logged (and their spans dropped), and
// the stop's flush gives up within its bound.
func TestTracingCollectorDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now: connections are refused
	otelEnv(t, "OTEL_EXPORTER_OTLP_ENDPOINT", down, "OTEL_BSP_SCHEDULE_DELAY", "10", "OTEL_EXPORTER_OTLP_TIMEOUT", "500")
	_, url := newTraceBackend(t)
	in := servertest.Start(t, map[string]string{"FENCEPROXY_UPSTREAM": url, "FENCEPROXY_DATA_DIR": t.TempDir(), "FENCEPROXY_TRACING": "true"})
	start := time.Now()
	for i := range 20 {
		if status := sendTraced(t, in, http.MethodPut, "/bkt/a", "data", strconv.Itoa(i+1), incomingParent); status != http.StatusCreated {
			t.Fatalf("PUT %d: %d, want 201", i, status)
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("20 writes took %v with the collector down", d)
	}
	if !in.Logs.WaitFor("tracing: exporting spans failed", 10*time.Second) {
		t.Errorf("no warning of the failed exports:\n%s", in.Logs)
	}
	start = time.Now()
	if err := in.Stop(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("the stop took %v with the collector down", d)
	}
}

// OTEL_EXPORTER_OTLP_PROTOCOL=grpc: the same spans by OTLP over gRPC.
func TestTracingOTLPGRPC(t *testing.T) {
	coll := &collector{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(gs, coll)
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	otelEnv(t, "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+ln.Addr().String())
	_, url := newTraceBackend(t)
	in := servertest.Start(t, map[string]string{"FENCEPROXY_UPSTREAM": url, "FENCEPROXY_DATA_DIR": t.TempDir(), "FENCEPROXY_TRACING": "true"})
	if status := sendTraced(t, in, http.MethodPut, "/bkt/a", "data", "6", incomingParent); status != http.StatusCreated {
		t.Fatalf("PUT token 6: %d, want 201", status)
	}
	if err := in.Stop(); err != nil {
		t.Fatal(err)
	}
	_, spans := coll.got(t)
	servers := spansOf(spans, tracepb.Span_SPAN_KIND_SERVER)
	if len(servers) != 1 || len(spansOf(spans, tracepb.Span_SPAN_KIND_CLIENT)) != 1 {
		t.Fatalf("the collector got %d spans, want a server and a client span", len(spans))
	}
	if hex.EncodeToString(servers[0].TraceId) != incomingTrace {
		t.Errorf("server span in trace %x, want %s", servers[0].TraceId, incomingTrace)
	}
	checkSpan(t, "admitted write", servers[0], map[string]string{"fenceproxy.decision": "admitted", "fenceproxy.token": "6",
		"http.response.status_code": "201"})
	if !in.Logs.Contains(`"otlp_protocol":"grpc"`) {
		t.Errorf("no start-up line on tracing over grpc:\n%s", in.Logs)
	}
}

// signTraceparent is an S3 client option that sets the client's
// traceparent in the Build step, before the SDK signs: its SigV4
// signature then covers the header.
func signTraceparent(o *s3.Options) {
	o.APIOptions = append(o.APIOptions, func(stack *middleware.Stack) error {
		return stack.Build.Add(middleware.BuildMiddlewareFunc("Traceparent",
			func(ctx context.Context, in middleware.BuildInput, next middleware.BuildHandler) (middleware.BuildOutput, middleware.Metadata, error) {
				if req, ok := in.Request.(*smithyhttp.Request); ok {
					req.Header.Set("Traceparent", incomingParent)
				}
				return next.HandleBuild(ctx, in)
			}), middleware.After)
	})
}

// Tracing against a store that verifies signatures (versitygw), in S3
// pass mode (the worker's signature reaches the store) and gateway mode
// (the proxy signs): the traceparent the proxy adds is not signed, which
// SigV4 allows, and one the worker signed is kept as it is, so every write
// verifies at the store, each in its trace.
func TestTracingS3Signatures(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	checkTraces := func(t *testing.T, coll *collector) {
		t.Helper()
		_, spans := coll.got(t)
		servers, clients := spansOf(spans, tracepb.Span_SPAN_KIND_SERVER), spansOf(spans, tracepb.Span_SPAN_KIND_CLIENT)
		if len(servers) != 2 || len(clients) != 2 {
			t.Fatalf("the collector got %d server and %d client spans, want 2 and 2", len(servers), len(clients))
		}
		inTrace := 0
		for _, s := range servers {
			checkSpan(t, "write", s, map[string]string{"fenceproxy.decision": "admitted", "http.response.status_code": "200"})
			if op := attrMap(s.Attributes)["fenceproxy.s3_op"]; !strings.HasPrefix(op, "PutObject") {
				t.Errorf("write: fenceproxy.s3_op = %q, want PutObject", op)
			}
			if hex.EncodeToString(s.TraceId) == incomingTrace {
				inTrace++
			}
		}
		if inTrace != 1 {
			t.Errorf("%d server spans in the worker's trace, want 1 (the write that sent it)", inTrace)
		}
		for _, c := range clients {
			checkSpan(t, "the store's call", c, map[string]string{"http.response.status_code": "200"})
		}
	}

	t.Run("pass", func(t *testing.T) {
		coll := newHTTPCollector(t)
		backend := s3backend.Start(t)
		backend.CreateBucket(t, "jobs")
		in := servertest.Start(t, map[string]string{"FENCEPROXY_UPSTREAM": backend.URL, "FENCEPROXY_DATA_DIR": t.TempDir(),
			"FENCEPROXY_S3": "pass", "FENCEPROXY_S3_DOMAINS": "127.0.0.1", "FENCEPROXY_TRACING": "true"})
		for i, c := range []*s3.Client{
			s3.New(backend.Options(in.ProxyURL()), client.S3Fencing(client.ContextToken)),
			s3.New(backend.Options(in.ProxyURL()), client.S3Fencing(client.ContextToken), signTraceparent),
		} {
			key := "a/" + strconv.Itoa(i)
			if _, err := c.PutObject(client.WithToken(ctx, 5), &s3.PutObjectInput{Bucket: aws.String("jobs"), Key: aws.String(key),
				Body: strings.NewReader("data")}); err != nil {
				t.Fatalf("PutObject %s (traceparent signed: %v): %v", key, i == 1, err)
			}
		}
		if err := in.Stop(); err != nil {
			t.Fatal(err)
		}
		checkTraces(t, coll)
	})

	t.Run("gateway", func(t *testing.T) {
		coll := newHTTPCollector(t)
		g := startGateway(t, map[string]string{"FENCEPROXY_TRACING": "true"})
		for i, signed := range []bool{false, true} {
			opts := []func(*s3.Options){client.S3Fencing(client.ContextToken)}
			if signed {
				opts = append(opts, signTraceparent)
			}
			c := s3.New(s3.Options{Region: s3backend.Region, BaseEndpoint: aws.String("https://" + g.in.Proxy), UsePathStyle: true,
				Credentials: credentials.NewStaticCredentialsProvider("worker1", gwSecret1, ""), Retryer: aws.NopRetryer{},
				HTTPClient: &http.Client{Transport: &http.Transport{TLSClientConfig: g.pool}}}, opts...)
			key := "w1/" + strconv.Itoa(i)
			if _, err := c.PutObject(client.WithToken(ctx, 5), &s3.PutObjectInput{Bucket: aws.String("jobs"), Key: aws.String(key),
				Body: strings.NewReader("data")}); err != nil {
				t.Fatalf("PutObject %s through the gateway (traceparent signed: %v): %v", key, signed, err)
			}
		}
		if err := g.in.Stop(); err != nil {
			t.Fatal(err)
		}
		checkTraces(t, coll)
	})
}
