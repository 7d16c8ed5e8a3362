package proxy

import (
	"net/http"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Tracing (Options.Tracer): each request on the proxy listener is a server
// span, named by its method as HTTP's semantic conventions name spans, whose
// parent is the client's W3C trace context (traceparent, tracestate). The
// span begins in ServeHTTP (startSpan) and ends in answered (endSpan), with
// the fields the access log writes, computed once for both (outcome). The
// call to the backend is a client span around the Transport's round trip
// (tracingTransport), and the backend gets its traceparent; so does the
// owner replica of a write forwarded in cluster mode (toOwner), which
// traces the write as its own server span. With no Tracer, none of it
// runs: an exchange's span stays nil.

// traceContext is the W3C Trace Context propagator: traceparent and
// tracestate, read from the client and written to the backend.
var traceContext propagation.TraceContext

// Attribute keys of the spans: HTTP's semantic conventions, and the
// proxy's own under fenceproxy.
const (
	attrMethod         = attribute.Key("http.request.method")
	attrMethodOriginal = attribute.Key("http.request.method_original")
	attrStatus         = attribute.Key("http.response.status_code")
	attrPath           = attribute.Key("url.path")
	attrScheme         = attribute.Key("url.scheme")
	attrServerAddress  = attribute.Key("server.address")
	attrServerPort     = attribute.Key("server.port")
	attrErrorType      = attribute.Key("error.type")
	attrBodyIn         = attribute.Key("http.request.body.size")
	attrBodyOut        = attribute.Key("http.response.body.size")

	attrDecision       = attribute.Key("fenceproxy.decision")
	attrReason         = attribute.Key("fenceproxy.reason")
	attrResource       = attribute.Key("fenceproxy.resource")
	attrResourceCount  = attribute.Key("fenceproxy.resource_count")
	attrPrefix         = attribute.Key("fenceproxy.prefix")
	attrToken          = attribute.Key("fenceproxy.token")
	attrUpstreamStatus = attribute.Key("fenceproxy.upstream_status")
	attrS3Op           = attribute.Key("fenceproxy.s3_op")
	attrKeyID          = attribute.Key("fenceproxy.key_id")
	attrAborted        = attribute.Key("fenceproxy.aborted")
	attrForward        = attribute.Key("fenceproxy.forward")
)

// spanMethod is a request method as a span names it and as
// http.request.method says it: one of Methods but "other", else "HTTP" and
// "_OTHER" (the method itself then goes in http.request.method_original,
// clipped), so that clients cannot make span names up.
func spanMethod(method string) (name, value string) {
	if i := methodIndex(method); i < len(Methods)-1 {
		return Methods[i], Methods[i]
	}
	return "HTTP", "_OTHER"
}

// startSpan begins the exchange's server span, its parent the client's
// trace context if it sent one, and makes ex.r and ex.client carry it, so
// that every later step and the request to the backend are in it.
func (p *Proxy) startSpan(ex *exchange) {
	r := ex.r
	ctx := traceContext.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	name, method := spanMethod(r.Method)
	path, _, _ := strings.Cut(r.RequestURI, "?") // never the query: it may carry credentials
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	attrs := []attribute.KeyValue{attrMethod.String(method), attrPath.String(clip(path, logPathMax)), attrScheme.String(scheme)}
	if method == "_OTHER" {
		attrs = append(attrs, attrMethodOriginal.String(clip(r.Method, logMethodMax)))
	}
	ctx, ex.span = p.opts.Tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
	ex.r = r.WithContext(ctx)
	ex.client = ctx
}

// endSpan ends the exchange's server span with what the exchange came to,
// the access log's fields (outcome): 5xx is an error, as for any server span.
func (p *Proxy) endSpan(ex *exchange, o outcome) {
	span := ex.span
	if span.IsRecording() {
		var buf [16]attribute.KeyValue
		a := append(buf[:0], attrStatus.Int(o.status), attrDecision.String(decisionNames[ex.decision]))
		if n := len(ex.resources); n > 0 {
			a = append(a, attrResource.String(ex.resources[0]), attrResourceCount.Int(n))
		}
		if ex.prefix != "" {
			a = append(a, attrPrefix.String(ex.prefix))
		}
		if ex.tokenText != "" {
			a = append(a, attrToken.String(ex.tokenText))
		}
		if o.reason != "" {
			a = append(a, attrReason.String(o.reason))
		}
		if o.upstream != 0 {
			a = append(a, attrUpstreamStatus.Int(o.upstream))
		}
		if ex.s3.Op.Name != "" {
			a = append(a, attrS3Op.String(ex.s3.Op.Name))
		}
		if ex.keyID != "" {
			a = append(a, attrKeyID.String(ex.keyID))
		}
		a = append(a, attrBodyIn.Int64(ex.in.n.Load()), attrBodyOut.Int64(ex.rw.written))
		if !ex.done {
			a = append(a, attrAborted.Bool(true))
		}
		if o.status >= 500 {
			a = append(a, attrErrorType.String(strconv.Itoa(o.status)))
			desc := o.reason
			if desc == "" {
				desc = http.StatusText(o.status)
			}
			span.SetStatus(codes.Error, desc)
		}
		span.SetAttributes(a...)
	}
	span.End()
}

// tracingTransport makes each round trip to the backend a client span, a
// child of the request's server span, and sends the backend its trace
// context (traceparent, tracestate) unless the request's signature covers
// those headers (signsTraceContext). In S3 gateway mode it runs after the
// proxy signed the request (gatewayTransport is outside it). The span ends
// with the backend's response headers.
type tracingTransport struct {
	next   http.RoundTripper
	tracer trace.Tracer
}

func (t tracingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	name, method := spanMethod(r.Method)
	ctx, span := t.tracer.Start(r.Context(), name, trace.WithSpanKind(trace.SpanKindClient))
	if span.IsRecording() {
		span.SetAttributes(attrMethod.String(method), attrServerAddress.String(r.URL.Hostname()))
		if port, err := strconv.Atoi(r.URL.Port()); err == nil {
			span.SetAttributes(attrServerPort.Int(port))
		}
	}
	if !signsTraceContext(r) {
		// r is ReverseProxy's outbound copy: its header map is its own.
		traceContext.Inject(ctx, propagation.HeaderCarrier(r.Header))
	}
	res, err := t.next.RoundTrip(r)
	if span.IsRecording() {
		switch {
		case err != nil:
			span.SetAttributes(attrErrorType.String("request_failed"))
			span.SetStatus(codes.Error, err.Error())
		default:
			span.SetAttributes(attrStatus.Int(res.StatusCode))
			if res.StatusCode >= 400 {
				span.SetAttributes(attrErrorType.String(strconv.Itoa(res.StatusCode)))
				span.SetStatus(codes.Error, "")
			}
		}
	}
	span.End()
	return res, err
}

// toOwnerSpan begins the client span of a write sent whole to the replica
// that owns its shard (cluster mode), and returns the request to send,
// carrying the span's trace context (unless its signature covers it), and
// the function that ends the span with the owner's answer.
func (p *Proxy) toOwnerSpan(ex *exchange, r *http.Request) (*http.Request, func()) {
	name, method := spanMethod(r.Method)
	ctx, span := p.opts.Tracer.Start(r.Context(), name, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attrMethod.String(method), attrForward.String("owner")))
	r = r.WithContext(ctx)
	if !signsTraceContext(r) {
		r.Header = r.Header.Clone() // the client's request keeps its own
		traceContext.Inject(ctx, propagation.HeaderCarrier(r.Header))
	}
	return r, func() {
		if status := ex.rw.status; status != 0 && span.IsRecording() {
			span.SetAttributes(attrStatus.Int(status))
			if status >= 500 {
				span.SetStatus(codes.Error, "")
			}
		}
		span.End()
	}
}

// signsTraceContext reports whether r's AWS signature (SigV4: the
// Authorization header's SignedHeaders, or a presigned URL's
// X-Amz-SignedHeaders) covers traceparent or tracestate: a client that
// signed its own trace context keeps it, since another value would break
// the signature (in S3 pass mode the client's, reaching the store
// unchanged; in gateway mode the proxy's, over the headers the worker
// signed). Unsigned, the headers are the proxy's to set.
func signsTraceContext(r *http.Request) bool {
	var list string
	if auth := r.Header.Get("Authorization"); auth != "" {
		if _, rest, ok := strings.Cut(auth, "SignedHeaders="); ok {
			list, _, _ = strings.Cut(rest, ",")
		}
	}
	if list == "" && strings.Contains(r.URL.RawQuery, "SignedHeaders") {
		list = r.URL.Query().Get("X-Amz-SignedHeaders")
	}
	for h := range strings.SplitSeq(list, ";") {
		if h = strings.TrimSpace(h); strings.EqualFold(h, "traceparent") || strings.EqualFold(h, "tracestate") {
			return true
		}
	}
	return false
}
